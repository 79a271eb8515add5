"""Start decisions: late start, paused companies, missed slots (applied by pipeline.start_run).

Pure functions (``now`` passed in). ``pipeline.start_run`` applies the decisions: it records them in
the ledger with the reason (the Airflow task is skipped or failed with it), so an analyst reading
the run sees why, whether it ran in Airflow or from `exportctl run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from export_lib.periods.slots import slots_between

Action = Literal["run", "skip", "hold"]
# How a held run's reason starts (the obligations page finds held runs by it).
HOLD_REASON_PREFIX = "late_start=hold:"


@dataclass(frozen=True)
class StartDecision:
    action: Action
    reason: str = ""


def start_decision(*, company_status: str, late_start: str, deadline: datetime | None,
                   now: datetime, released: bool = False) -> StartDecision:
    """What to do with a run that starts at ``now``.

    * a paused company: skip (its DAGs are paused too; this covers runs already queued);
    * started after the deadline: ``finish`` runs anyway (the ledger shows it late),
      ``skip`` records it skipped, ``hold`` waits for an operator decision
      (``exportctl release RUN_KEY``, then clear the task).
    """
    if company_status == "paused":
        return StartDecision("skip", "company is paused; resume it in its config file to export")
    if deadline is None or now <= deadline:
        return StartDecision("run")
    late = f"started {_minutes(now - deadline)} after its deadline {deadline:%Y-%m-%dT%H:%MZ}"
    if late_start == "skip":
        return StartDecision("skip", f"late_start=skip: {late}; the period is not exported")
    if late_start == "hold" and not released:
        return StartDecision("hold", f"{HOLD_REASON_PREFIX} {late}; an operator must decide: "
                                     "run 'exportctl release <run key>' and clear this task")
    return StartDecision("run", f"late_start={late_start}: {late}; exporting anyway")


def _minutes(delta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def missed_slots(timing, *, previous: datetime | None, current: datetime) -> tuple[datetime, ...]:
    """Slots strictly between the previous registered slot and ``current`` (recovery bookkeeping
    for ``latest``/``none``: these periods are recorded as skipped, never left as holes)."""
    if previous is None or previous >= current:
        return ()
    return tuple(s for s in slots_between(timing, previous, current) if s > previous)
