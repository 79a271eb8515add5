"""The outage and risk metrics in Prometheus' text exposition format (0.0.4), served by the
api-server plugin at ``/exports/metrics`` (ADR 0020): computed on each scrape from the
timetables and the ledger, so they keep counting while the scheduler is down.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from export_lib.views.risk import Tally

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GAUGES = {
    "export_slots_expected": ("expected",
                              "slots the timetable made due in the horizon (per schedule)"),
    "export_slots_missing": ("missing", "due slots with no run in the ledger (an outage shows "
                                        "here before any run exists)"),
    "export_slots_missed": ("missed", "due slots whose deadline passed with nothing delivered "
                                      "(not those due before the schedule was first deployed)"),
    "export_runs_at_risk": ("at_risk", "slots not delivered past their risk point, deadline "
                                       "still ahead"),
}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(tallies: Iterable[Tally], horizon: timedelta) -> str:
    """One gauge family per figure, one sample per schedule, plus the horizon they cover."""
    tallies = list(tallies)
    lines = ["# HELP export_metrics_horizon_seconds how far back the export_slots_* gauges "
             "count due slots", "# TYPE export_metrics_horizon_seconds gauge",
             f"export_metrics_horizon_seconds {int(horizon.total_seconds())}"]
    for name, (attr, text) in GAUGES.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for t in tallies:
            value = getattr(t, attr)
            value = len(value) if isinstance(value, tuple) else value
            lines.append(f'{name}{{company="{_label(t.company)}",schedule="'
                         f'{_label(t.schedule_id)}"}} {value}')
    return "\n".join(lines) + "\n"


__all__ = ["CONTENT_TYPE", "GAUGES", "prometheus_text"]
