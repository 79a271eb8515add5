"""Deterministic, period-named artifact names (never the wall clock).

The period in a name is the reporting window in the company's timezone, half-open like the
window itself: ``2026-03-28`` for one local calendar day, ``2026-02-27--2026-03-29`` for a
range of whole days (end exclusive), ``2026-03-28T0700--2026-03-28T1300`` otherwise.
Generation time lives only in the manifest.

Several runs can report the same period (a calendar-day window on a 6-hourly schedule, the
previous business day on Saturday, Sunday and Monday), so the name also carries the run's slot:
``acme_daily-spend_2026-03-28_slot-20260329T0500Z_v1.csv``. Every run thus owns its names and a
published version is never overwritten by another run.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo


def period_label(start: datetime, end: datetime, timezone: str) -> str:
    tz = ZoneInfo(timezone)
    ls, le = start.astimezone(tz), end.astimezone(tz)
    if ls.time() == time(0) and le.time() == time(0):
        if le.date() - ls.date() == timedelta(days=1):
            return ls.date().isoformat()
        return f"{ls.date().isoformat()}--{le.date().isoformat()}"
    return f"{ls:%Y-%m-%dT%H%M}--{le:%Y-%m-%dT%H%M}"


def schedule_slug(schedule_id: str) -> str:
    """``acme/facebook/primary`` → ``facebook-primary`` (the company is the folder already)."""
    parts = schedule_id.split("/")
    return "-".join(parts[1:]) if len(parts) > 1 else parts[0]


def slot_tag(slot: datetime) -> str:
    return f"slot-{slot.astimezone(ZoneInfo('UTC')):%Y%m%dT%H%MZ}"


def artifact_key(company: str, schedule_id: str, period: str, slot: datetime, version: int,
                 ext: str) -> str:
    slug = schedule_slug(schedule_id)
    return f"{company}/{slug}/{company}_{slug}_{period}_{slot_tag(slot)}_v{version}.{ext}"
