"""Preview: the next slots of a schedule with their windows, run keys and deadlines.

The answer to "when will the customer see their export?", as plain dicts (``exportctl preview
--json``) or a table. Every UTC instant is ISO 8601 with a ``Z`` suffix
(``2026-03-29T05:00:00Z``); local instants carry their offset (``2026-03-29T07:00:00+02:00``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from export_lib.config.timing import Timing, WindowSpec
from export_lib.periods.names import deadline_for, run_key
from export_lib.periods.slots import format_instant, next_slots
from export_lib.periods.windows import window_for

if TYPE_CHECKING:
    from export_lib.config.models import Schedule

ADHOC_SCHEDULE_ID = "adhoc"


def preview_rows(spec: WindowSpec, timing: Timing, start: datetime, count: int, *,
                 schedule_id: str = ADHOC_SCHEDULE_ID,
                 window_tz: str | None = None) -> list[dict[str, Any]]:
    """The first ``count`` slots at or after ``start`` with their windows (ad-hoc form)."""
    tz_name = window_tz or timing.timezone
    rows = []
    previous = None  # consecutive slots: each one is the next one's previous slot
    for slot in next_slots(timing, start, count):
        window = window_for(spec, timing, slot, tz_name, previous=previous)
        previous = slot
        rows.append({
            "slot_utc": format_instant(slot),
            "slot_local": slot.astimezone(timing.zone).isoformat(),
            "window_start_utc": format_instant(window.start),
            "window_end_utc": format_instant(window.end),
            "window_start_local": window.as_dict()["start_local"],
            "window_end_local": window.as_dict()["end_local"],
            "window_kind": spec.kind,
            "timezone": timing.timezone,
            "window_timezone": tz_name,
            "run_key": run_key(schedule_id, slot),
        })
    return rows


def schedule_rows(schedule: Schedule, start: datetime, count: int) -> list[dict[str, Any]]:
    """Preview rows of a configured schedule, each with the config version in force for its
    slot (``config_version``, ``effective_from``; ADR 0005); slots before the first version's
    ``effective_from`` are left out."""
    first = schedule.first_effective
    if first is not None and first > start:
        start = first
    rows = preview_rows(schedule.window, schedule.timing, start, count,
                        schedule_id=schedule.schedule_id, window_tz=schedule.window_timezone)
    versioned = len(schedule.versions) > 1
    for index, row in enumerate(rows):
        slot = datetime.fromisoformat(row["slot_utc"])
        version = schedule.version_for(slot) or schedule
        if version.window != schedule.window:  # an earlier version with another window
            row = rows[index] = preview_rows(version.window, version.timing, slot, 1,
                                             schedule_id=schedule.schedule_id,
                                             window_tz=version.window_timezone)[0]
        row.update({
            "company": schedule.company.id,
            "company_status": schedule.company.status,
            "schedule": schedule.schedule_id,
            "dag_id": schedule.dag_id,
            "deadline_utc": format_instant(deadline_for(version, slot)),
            "config_version": version.config_version,
            "effective_from": (format_instant(version.effective_from)
                               if version.effective_from else None),
        })
        if versioned:
            row["config"] = version.config_version[:12] + (
                f" from {row['effective_from']}" if version.effective_from else " (oldest)")
    return rows


_COLUMNS = (("slot_local", "slot (local)"), ("slot_utc", "slot (UTC)"),
            ("window_start_local", "window start"), ("window_end_local", "window end"),
            ("deadline_utc", "deadline (UTC)"), ("run_key", "run key"),
            ("config", "config version"))


def render_table(rows: Iterable[dict[str, Any]]) -> str:
    """A fixed-width text table of preview rows (columns absent from all rows are dropped)."""
    rows = list(rows)
    if not rows:
        return "no slots in range"
    columns = [(key, title) for key, title in _COLUMNS if any(key in r for r in rows)]
    widths = [max(len(title), *(len(str(r.get(key, ""))) for r in rows))
              for key, title in columns]
    lines = ["  ".join(title.ljust(w) for (_, title), w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(str(row.get(key, "")).ljust(w)
                               for (key, _), w in zip(columns, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)
