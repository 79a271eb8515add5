"""Preview: the next slots of a schedule with their windows, run keys and deadlines.

The answer to "when will the customer see their export?", as plain dicts (``exportctl preview
--json``) or a table. Every UTC instant is ISO 8601 with a ``Z`` suffix
(``2026-03-29T05:00:00Z``); local instants carry their offset (``2026-03-29T07:00:00+02:00``).

A ``previous_business_day`` schedule of a company with a holiday calendar (ADR 0019) also shows
``business_day`` (the local date it reports) and ``holidays_skipped``: the weekday holidays
that made it report an earlier day than weekends alone would.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from export_lib.config.timing import Timing, WindowSpec, zone
from export_lib.periods.business_days import holidays_skipped
from export_lib.periods.names import deadline_for, run_key
from export_lib.periods.slots import format_instant, next_slots
from export_lib.periods.windows import window_for

if TYPE_CHECKING:
    from export_lib.config.holiday_calendar import HolidayCalendar
    from export_lib.config.models import Schedule

ADHOC_SCHEDULE_ID = "adhoc"


def preview_rows(spec: WindowSpec, timing: Timing, start: datetime, count: int, *,
                 schedule_id: str = ADHOC_SCHEDULE_ID, window_tz: str | None = None,
                 holidays: HolidayCalendar | None = None) -> list[dict[str, Any]]:
    """The first ``count`` slots at or after ``start`` with their windows (ad-hoc form)."""
    tz_name = window_tz or timing.timezone
    rows = []
    previous = None  # consecutive slots: each one is the next one's previous slot
    for slot in next_slots(timing, start, count):
        window = window_for(spec, timing, slot, tz_name, previous=previous, holidays=holidays)
        previous = slot
        row = {
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
        }
        if spec.kind == "previous_business_day" and holidays is not None:
            local = zone(tz_name)
            row.update(_business_day(window.start.astimezone(local).date(),
                                     slot.astimezone(local).date(), holidays))
        rows.append(row)
    return rows


def _business_day(business: date, day: date, holidays: HolidayCalendar) -> dict[str, Any]:
    return {"business_day": business.isoformat(),
            "holidays_skipped": [{"date": d.isoformat(), "name": name}
                                 for d, name in holidays_skipped(day, holidays)]}


def schedule_rows(schedule: Schedule, start: datetime, count: int) -> list[dict[str, Any]]:
    """Preview rows of a configured schedule, each with the config version in force for its
    slot (``config_version``, ``effective_from``; ADR 0005); slots before the first version's
    ``effective_from`` are left out."""
    first = schedule.first_effective
    if first is not None and first > start:
        start = first
    rows = preview_rows(schedule.window, schedule.timing, start, count,
                        schedule_id=schedule.schedule_id, window_tz=schedule.window_timezone,
                        holidays=schedule.company.holidays)
    versioned = len(schedule.versions) > 1
    for index, row in enumerate(rows):
        slot = datetime.fromisoformat(row["slot_utc"])
        version = schedule.version_for(slot) or schedule
        if version.window != schedule.window:  # an earlier version with another window
            row = rows[index] = preview_rows(version.window, version.timing, slot, 1,
                                             schedule_id=schedule.schedule_id,
                                             window_tz=version.window_timezone,
                                             holidays=version.company.holidays)[0]
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
            ("business_day", "business day"), ("holidays_skipped", "holidays skipped"),
            ("deadline_utc", "deadline (UTC)"),
            ("run_key", "run key"), ("config", "config version"))


def _day(text: str) -> str:
    return f"{date.fromisoformat(text):%a} {text}"  # 'Thu 2026-02-05': weekdays are the point


def _cell(key: str, value: Any) -> str:
    if key == "business_day" and value:
        return _day(value)
    if key == "holidays_skipped":  # a list in JSON; in the table: 'Fri 2026-02-06 Waitangi Day'
        return "; ".join(f"{_day(h['date'])} {h['name']}" for h in value or ())
    return "" if value is None else str(value)


def render_table(rows: Iterable[dict[str, Any]]) -> str:
    """A fixed-width text table of preview rows (columns absent from all rows are dropped)."""
    rows = list(rows)
    if not rows:
        return "no slots in range"
    columns = [(key, title) for key, title in _COLUMNS if any(key in r for r in rows)]
    widths = [max(len(title), *(len(_cell(key, r.get(key))) for r in rows))
              for key, title in columns]
    lines = ["  ".join(title.ljust(w) for (_, title), w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(_cell(key, row.get(key)).ljust(w)
                               for (key, _), w in zip(columns, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)
