"""Business days: Monday to Friday, less the company's holidays (ADR 0001 §3, ADR 0019).

Pure functions of local dates and a :class:`~export_lib.config.holiday_calendar.HolidayCalendar`
(None: weekends only). The caller turns an instant into a local date in the company timezone,
so a holiday is the company's local day, whatever the timezone of the schedule's cron.

Worked example, Pacific/Auckland with ``{country: NZ}``: Waitangi Day 2026 is Friday 6 Feb, so
the exports of Friday, Saturday, Sunday and Monday 9 Feb all report Thursday 5 Feb. In 2027 it
falls on a Saturday and is observed on Monday 8 Feb: Tuesday 9 Feb reports Friday 5 Feb.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import date, timedelta
from types import MappingProxyType

from export_lib.config.holiday_calendar import HolidayCalendar
from export_lib.errors import WindowError

# A calendar can list every day of a year (a typo, or a company closed for good): the search
# for a business day stops after this many closed days in a row instead of running forever.
MAX_CLOSED_DAYS = 366
LISTED = "listed in holidays.dates"  # the name of an explicit date the country does not have


@functools.lru_cache(maxsize=256)
def _country_year(country: str, subdivision: str | None, year: int) -> Mapping[date, str]:
    """The package's holidays of one year (observed days included: the package's default, and
    what the law of e.g. New Zealand gives as the day off), cached: years never change within
    a pinned package version."""
    import holidays

    found = holidays.country_holidays(country, subdiv=subdivision, years=year)
    return MappingProxyType(dict(found))


def holiday_name(day: date, calendar: HolidayCalendar | None) -> str | None:
    """The holiday ``day`` is in ``calendar`` (its name; :data:`LISTED` for an explicit date),
    or None. Weekends are not holidays here: :func:`is_business_day` treats them apart."""
    if calendar is None:
        return None
    if calendar.country is not None:
        name = _country_year(calendar.country, calendar.subdivision, day.year).get(day)
        if name:
            return name
    return LISTED if calendar.lists(day) else None


def is_business_day(day: date, calendar: HolidayCalendar | None = None) -> bool:
    return day.weekday() < 5 and holiday_name(day, calendar) is None


def previous_business_day(day: date, calendar: HolidayCalendar | None = None) -> date:
    """The latest business day strictly before ``day``.

    :raises WindowError: the calendar closes more than :data:`MAX_CLOSED_DAYS` days in a row.
    """
    candidate = day - timedelta(days=1)
    for _ in range(MAX_CLOSED_DAYS):
        if is_business_day(candidate, calendar):
            return candidate
        candidate -= timedelta(days=1)
    closed_by = calendar.summary if calendar is not None else "weekends"
    raise WindowError(f"no business day in the {MAX_CLOSED_DAYS} days before {day.isoformat()}: "
                      f"every one is a weekend day or a holiday of the calendar ({closed_by}); "
                      "check company.holidays.dates")


def holidays_skipped(day: date, calendar: HolidayCalendar | None
                     ) -> tuple[tuple[date, str], ...]:
    """The weekday holidays between ``day``'s previous business day and ``day`` (both
    excluded), oldest first: why the window reports an earlier day than weekends alone would.
    A holiday on a weekend is left out (the weekend already skipped it)."""
    if calendar is None:
        return ()
    business = previous_business_day(day, calendar)
    found = []
    candidate = business + timedelta(days=1)
    while candidate < day:
        name = holiday_name(candidate, calendar) if candidate.weekday() < 5 else None
        if name is not None:
            found.append((candidate, name))
        candidate += timedelta(days=1)
    return tuple(found)
