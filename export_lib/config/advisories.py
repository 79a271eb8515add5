"""Warnings about a valid config: settings that work, but not as their author may expect.

``exportctl validate`` prints them after the errors and still exits 0 when there are no errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from export_lib.config.durations import short
from export_lib.config.models import CompanyConfig, Schedule
from export_lib.config.timing import zone


def retention_warnings(schedules: Iterable[Schedule]) -> list[str]:
    """A schedule whose ``retention_days`` is shorter than one of its destinations'
    ``retry_window``: retention keeps an artifact while its delivery may still be retried
    (ADR 0017), so such artifacts outlive ``retention_days``."""
    lines = []
    for schedule in schedules:
        days = schedule.policies.retention_days
        for destination in schedule.destinations:
            window = destination.retry_window
            if timedelta(days=days) >= window:
                continue
            needed = math.ceil(window / timedelta(days=1))
            lines.append(
                f"warning: {schedule.schedule_id}: retention_days {days} is shorter than "
                f"destination {destination.id}'s retry_window ({short(window)}): its artifacts "
                "are kept until their deliveries are final, past retention_days; set "
                f"retention_days to {needed} or more, or shorten retry_window")
    return lines


def holiday_warnings(companies: Mapping[str, CompanyConfig], schedules: Iterable[Schedule], *,
                     now: datetime) -> list[str]:
    """A holiday calendar nothing reads (no ``previous_business_day`` export in any version),
    and explicit ``dates`` without a country that all lie before today (in the company
    timezone): from then on the calendar skips Saturdays and Sundays only, silently (ADR 0019)."""
    kinds: dict[str, set[str]] = {}
    for schedule in schedules:
        kinds.setdefault(schedule.company.id, set()).update(
            version.window.kind for version in schedule.versions)
    lines = []
    for company_id, company in companies.items():
        calendar = company.holidays
        if calendar is None:
            continue
        if "previous_business_day" not in kinds.get(company_id, set()):
            lines.append(f"warning: {company_id}: company.holidays has no effect: no export of "
                         "the company uses window kind previous_business_day (only those "
                         "windows skip holidays); remove it or use that window kind")
        today = now.astimezone(zone(company.timezone)).date()
        if calendar.country is None and calendar.dates[-1] < today:
            lines.append(f"warning: {company_id}: company.holidays.dates ends at "
                         f"{calendar.dates[-1].isoformat()}, before today ({today.isoformat()}): "
                         "previous_business_day now skips Saturdays and Sundays only; add the coming "
                         "holidays, or set holidays.country")
    return lines
