"""Business days: the working days of the company's holiday country, less its holidays (ADR 0001
§3, ADR 0019).

Pure functions of local dates and a :class:`~export_lib.config.holiday_calendar.HolidayCalendar`
(None, or listed dates alone: Saturday and Sunday are the weekend). A calendar with a country
follows the ``holidays`` package's working-day rules for it: the country's own weekend (Friday
and Saturday in Israel and Saudi Arabia, Saturday and Sunday in the UAE since 2022; the package
knows when a weekend changed), the weekend days its law makes working days (Russia's Saturday
1 Nov 2025, worked for Monday 3 Nov off), and its observed days. The caller turns an instant
into a local date in the company timezone, so a holiday is the company's local day, whatever
the timezone of the schedule's cron.

Worked example, Pacific/Auckland with ``{country: NZ}``: Waitangi Day 2026 is Friday 6 Feb, so
the exports of Friday, Saturday, Sunday and Monday 9 Feb all report Thursday 5 Feb. In 2027 it
falls on a Saturday and is observed on Monday 8 Feb: Tuesday 9 Feb reports Friday 5 Feb.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from types import MappingProxyType

from export_lib.config.holiday_calendar import HolidayCalendar
from export_lib.errors import WindowError

# A calendar can list every day of a year (a typo, or a company closed for good): the search
# for a business day stops after this many closed days in a row instead of running forever.
MAX_CLOSED_DAYS = 366
LISTED = "listed in holidays.dates"  # the name of an explicit date the country does not have


SATURDAY_SUNDAY = frozenset({5, 6})  # date.weekday(): the weekend of a company with no country
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class _CountryYear:
    """What the ``holidays`` package says of one year of a country (and subdivision)."""

    holidays: Mapping[date, str]  # observed days included: the package's default, and the law's
    weekend: frozenset[date]  # the country's weekend days that year (a weekend can change)
    workdays: frozenset[date]  # weekend days the law makes working days (substituted days off)


@functools.lru_cache(maxsize=256)
def _country_year(country: str, subdivision: str | None, year: int) -> _CountryYear:
    """One year of a country, cached: years never change within a pinned package version.

    The neighbour years are loaded too: a day off substituted across New Year (a working
    Saturday in December for a day off in January) is recorded by the package with the year
    of the day off."""
    import holidays

    found = holidays.country_holidays(country, subdiv=subdivision, years=range(year - 1, year + 2))
    days = [date(year, 1, 1) + timedelta(days=n) for n in range(366)]
    days = [d for d in days if d.year == year]
    return _CountryYear(
        holidays=MappingProxyType({d: name for d, name in found.items() if d.year == year}),
        weekend=frozenset(d for d in days if found.is_weekend(d)),
        workdays=frozenset(d for d in found.weekend_workdays if d.year == year))


def is_weekend_day(day: date, calendar: HolidayCalendar | None = None) -> bool:
    """Whether ``day`` is a weekend day of the calendar's country (Saturday or Sunday without
    one), worked or not."""
    if calendar is None or calendar.country is None:
        return day.weekday() in SATURDAY_SUNDAY
    return day in _country_year(calendar.country, calendar.subdivision, day.year).weekend


def _working_weekend_day(day: date, calendar: HolidayCalendar | None) -> bool:
    if calendar is None or calendar.country is None:
        return False
    return day in _country_year(calendar.country, calendar.subdivision, day.year).workdays


def weekend_days(day: date, calendar: HolidayCalendar | None = None) -> tuple[int, ...]:
    """The weekdays (``date.weekday()``, Monday 0) of the calendar's weekend in the week that
    ends on ``day``: ``(4, 5)`` for Israel, ``(5, 6)`` without a country."""
    week = (day - timedelta(days=n) for n in range(7))
    return tuple(sorted(d.weekday() for d in week if is_weekend_day(d, calendar)))


def weekend_name(day: date, calendar: HolidayCalendar | None = None) -> str:
    """The weekend in words, for messages: ``Friday and Saturday`` for Israel."""
    names = [DAY_NAMES[n] for n in weekend_days(day, calendar)]
    if not names:
        return "no weekend day"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def holiday_name(day: date, calendar: HolidayCalendar | None) -> str | None:
    """The holiday ``day`` is in ``calendar`` (its name; :data:`LISTED` for an explicit date),
    or None. Weekends are not holidays here: :func:`is_business_day` treats them apart."""
    if calendar is None:
        return None
    if calendar.country is not None:
        name = _country_year(calendar.country, calendar.subdivision, day.year).holidays.get(day)
        if name:
            return name
    return LISTED if calendar.lists(day) else None


def is_business_day(day: date, calendar: HolidayCalendar | None = None) -> bool:
    """Not a weekend day of the calendar's country unless its law makes it a working day, and
    not a holiday (a listed date closes even a working weekend day)."""
    if is_weekend_day(day, calendar) and not _working_weekend_day(day, calendar):
        return False
    return holiday_name(day, calendar) is None


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
                      f"every one is a weekend day ({weekend_name(day, calendar)}) or a holiday "
                      f"of the calendar ({closed_by}); check company.holidays.dates")


def holidays_skipped(day: date, calendar: HolidayCalendar | None
                     ) -> tuple[tuple[date, str], ...]:
    """The holidays on working days between ``day``'s previous business day and ``day`` (both
    excluded), oldest first: why the window reports an earlier day than weekends alone would.
    A holiday on a weekend day of the country is left out (the weekend already skipped it)."""
    if calendar is None:
        return ()
    business = previous_business_day(day, calendar)
    found = []
    candidate = business + timedelta(days=1)
    while candidate < day:
        name = (None if is_weekend_day(candidate, calendar)
                and not _working_weekend_day(candidate, calendar)
                else holiday_name(candidate, calendar))
        if name is not None:
            found.append((candidate, name))
        candidate += timedelta(days=1)
    return tuple(found)
