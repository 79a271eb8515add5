"""A company's holiday calendar (``company.holidays``): its weekend and the local dates that are
not business days (ADR 0019).

Two sources, alone or together: a ``country`` (and optionally one of its ``subdivision`` codes)
from the maintained ``holidays`` package, observed days included (New Zealand's Waitangi Day on
a Saturday is off on the Monday), and ``dates`` the company lists itself (a shutdown, a regional
day the package does not know). The country also sets the weekend and its working weekend days
(the package's working-day rules: Friday and Saturday in Israel); without a country the weekend
is Saturday and Sunday. Every date is a local date in the company timezone. Only
``previous_business_day`` windows read the calendar (:mod:`export_lib.periods.business_days`).

The calendar is part of the company, so it is part of every schedule's ``config_version``: a
holiday edit is a new config version like any other. The package itself is pinned in the lock;
upgrading it can move a holiday, which is why a run captures its window once (ADR 0002).

``holidays`` is imported only for a company that names a country: the package loads all of its
~250 country modules at the first country lookup (~0.7 s of CPU), which the DAG parse of a
company without a country calendar must not pay.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import re
from datetime import date, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from export_lib.config.limits import shown
from export_lib.config.messages import invalid
from export_lib.config.timing import FrozenModel

MAX_HOLIDAY_DATES = 1_000  # a few closures a year for decades; far beyond any real list
FIRST_YEAR, LAST_YEAR = 2000, 2100  # as effective_from: a year outside is a typo
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SHOWN_SUBDIVISIONS = 40  # Italy has 114 provinces: one error line must stay readable


def check_holiday_date(value: Any) -> date:
    """A holiday: a YAML date (``2026-12-29``) or the same text quoted, in 2000–2100."""
    day = None
    if isinstance(value, date) and not isinstance(value, datetime):
        day = value
    elif isinstance(value, str) and _ISO_DATE.fullmatch(value.strip()):
        try:
            day = date.fromisoformat(value.strip())
        except ValueError:
            day = None
    if day is None:
        raise invalid("holiday_date", f"expected a date written YYYY-MM-DD such as 2026-12-29, "
                      f"without a time (got {shown(value)})")
    if not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise invalid("holiday_date", f"holiday {day.isoformat()} is outside the years "
                      f"{FIRST_YEAR} to {LAST_YEAR}; check the year")
    return day


HolidayDate = Annotated[date, BeforeValidator(check_holiday_date)]


@functools.lru_cache(maxsize=1)
def _countries() -> dict[str, str]:
    """ISO 3166 alpha-2 code → English name of every country the package supports.

    Read from the package's registry, which names the countries without loading their modules.
    """
    from holidays.registry import COUNTRIES

    return {entry[1]: re.sub(r"(?<=[a-z])(?=[A-Z])", " ", entry[0])
            for entry in COUNTRIES.values()}


@functools.lru_cache(maxsize=1)
def _alpha3() -> dict[str, str]:
    from holidays.registry import COUNTRIES

    return {entry[2]: entry[1] for entry in COUNTRIES.values()}


def country_class(code: str) -> Any:
    """The ``holidays`` class of a supported country code (loads the package's countries)."""
    import holidays

    return getattr(holidays, code)


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def _country_hint(text: str) -> str:
    known = _countries()
    by_name = {_letters(name): code for code, name in known.items()}
    guess = (text.upper() if text.upper() in known else _alpha3().get(text.upper())
             or by_name.get(_letters(text)))
    if guess is None:
        close = difflib.get_close_matches(_letters(text), list(by_name), n=1, cutoff=0.75)
        guess = by_name[close[0]] if close else None
    if guess is not None:
        return f"did you mean '{guess}' ({known[guess]})?"
    return ("use the two-letter ISO 3166 code of a country the holidays package supports, "
            "e.g. 'NZ', 'AU', 'DE', 'GB', 'US'")


def check_country(value: Any) -> str:
    """``value`` if it is the alpha-2 code of a country the ``holidays`` package supports."""
    if not isinstance(value, str) or not value or len(value) > 64:
        raise invalid("holidays", f"holidays.country must be a two-letter ISO 3166 code such as "
                      f"'NZ' (got {shown(value)})")
    if value not in _countries():
        raise invalid("holidays", f"unknown holiday country {shown(value)}; "
                      f"{_country_hint(value)}")
    return value


def check_subdivision(value: Any, country: str) -> str:
    """``value`` if it is one of ``country``'s subdivision codes in the ``holidays`` package."""
    if not isinstance(value, str) or not value or len(value) > 64:
        raise invalid("holidays", f"holidays.subdivision must be a subdivision code such as "
                      f"'AUK' (got {shown(value)})")
    cls = country_class(country)
    codes: tuple[str, ...] = tuple(cls.subdivisions)
    if value in codes:
        return value
    name = _countries()[country]
    if not codes:
        raise invalid("holidays", f"{name} ({country}) has no subdivisions in the holidays "
                      f"package; remove holidays.subdivision (got {shown(value)})")
    aliases: dict[str, str] = dict(getattr(cls, "subdivisions_aliases", None) or {})
    by_lower = {c.lower(): c for c in codes} | {a.lower(): c for a, c in aliases.items()}
    guess = by_lower.get(value.lower())
    if guess is None:
        close = difflib.get_close_matches(value.lower(), list(by_lower), n=1, cutoff=0.6)
        guess = by_lower[close[0]] if close else None
    hint = f"did you mean '{guess}'? " if guess else ""
    listed = ", ".join(codes[:_SHOWN_SUBDIVISIONS]) + (
        f", … ({len(codes)} in all)" if len(codes) > _SHOWN_SUBDIVISIONS else "")
    raise invalid("holidays", f"unknown subdivision {shown(value)} of {name} ({country}); "
                  f"{hint}use one of its codes: {listed}")


class HolidayCalendar(FrozenModel):
    """``company.holidays``: ``country`` (+ ``subdivision``) and/or explicit ``dates``.

    ``dates`` are kept sorted, so reordering the list is not a new config version.
    """

    country: str | None = Field(None, description="The two-letter ISO 3166 code of a country "
                                "the holidays package knows; its weekend (Friday and Saturday for "
                                "IL) and public holidays (observed days included) are not "
                                "business days, its working weekend days are.", examples=["NZ"])
    subdivision: str | None = Field(None, description="One of the country's subdivision codes "
                                    "(a state, a region), for its regional holidays too.",
                                    examples=["AUK"])
    dates: tuple[HolidayDate, ...] = Field(
        default=(), max_length=MAX_HOLIDAY_DATES, description="Further local dates that are not "
        "business days (YYYY-MM-DD, years 2000 to 2100).", examples=[["2026-12-29"]])

    @field_validator("country", mode="before")
    @classmethod
    def _country(cls, value: Any) -> Any:
        return None if value is None else check_country(value)

    @field_validator("subdivision", mode="before")
    @classmethod
    def _subdivision(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        if "country" not in info.data:
            return value  # the country is wrong: its own error says so, nothing to check here
        country = info.data["country"]
        if country is None:
            raise invalid("holidays", f"holidays.subdivision {shown(value)} needs "
                          "holidays.country, e.g. {country: NZ, subdivision: AUK}")
        return check_subdivision(value, country)

    @field_validator("dates")
    @classmethod
    def _sorted_once(cls, value: tuple[date, ...]) -> tuple[date, ...]:
        seen: set[date] = set()
        for day in value:
            if day in seen:
                raise invalid("holidays", f"holiday {day.isoformat()} is listed more than once "
                              "in holidays.dates; keep it once")
            seen.add(day)
        return tuple(sorted(value))

    @model_validator(mode="after")
    def _not_empty(self) -> HolidayCalendar:
        if self.country is None and not self.dates:
            raise invalid("holidays", "holidays needs 'country' (e.g. {country: NZ, "
                          "subdivision: AUK}) and/or 'dates' (e.g. {dates: [2026-12-29]}); "
                          "remove the holidays key for Saturday-Sunday weekends only")
        return self

    def lists(self, day: date) -> bool:
        """Whether ``day`` is one of the explicit ``dates`` (sorted: a binary search)."""
        index = bisect.bisect_left(self.dates, day)
        return index < len(self.dates) and self.dates[index] == day

    @property
    def summary(self) -> str:
        """``NZ-AUK holidays + 3 listed dates``, ``NZ holidays``, ``2 listed dates``."""
        parts = []
        if self.country is not None:
            where = self.country + (f"-{self.subdivision}" if self.subdivision else "")
            parts.append(f"{where} holidays")
        if self.dates:
            parts.append(f"{len(self.dates)} listed date{'s' if len(self.dates) > 1 else ''}")
        return " + ".join(parts)
