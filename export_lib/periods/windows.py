"""Reporting windows: the half-open period ``[start, end)`` a slot exports (ADR 0001).

For a slot ``s`` whose local date (in the window timezone) is D:

* ``calendar_day``          → [start_of_day(D−1), start_of_day(D))
* ``trailing_days`` N       → [start_of_day(D−N), start_of_day(D))
* ``previous_business_day`` → B = latest business day before D: a working day of the country
  of the company's calendar (its own weekend, e.g. Friday–Saturday in Israel; Saturday–Sunday
  without a country) that is not one of its holidays (``company.holidays``, ADR 0019)
  → [start_of_day(B), start_of_day(B+1))
* ``trailing_hours`` N      → [s − N hours, s)  (absolute hours, so 23/25-hour days don't matter)
* ``interval``              → [previous slot, s)

Worked example: Europe/Berlin, a slot at 2026-03-30 07:00 CEST with ``calendar_day`` reports
[2026-03-28T23:00Z, 2026-03-29T22:00Z): the 23-hour day of the spring change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import field_validator, model_validator

from export_lib.config.timing import FrozenModel, Timing, WindowKind, WindowSpec, zone
from export_lib.errors import WindowError
from export_lib.periods.business_days import previous_business_day
from export_lib.periods.names import period_label
from export_lib.periods.slots import format_instant, previous_slot, require_slot, start_of_day

if TYPE_CHECKING:
    from export_lib.config.holiday_calendar import HolidayCalendar
    from export_lib.config.models import Schedule

# A manual export's window is the one its request names (``pipeline.start.start_manual``), not
# one a window kind computed from a slot.
ExportWindowKind = Literal[WindowKind, "manual"]


class ExportWindow(FrozenModel):
    """A reporting window. Invariants: ``start`` and ``end`` MUST be aware and in UTC,
    ``start <= end``, half-open ``[start, end)``; ``timezone`` is the IANA zone its calendar
    boundaries were computed in (and its period is named in); ``kind`` the window kind that
    produced it (``manual``: the window a manual export's request named).

    The one window type: a run's window travels through XCom in the run summary as this model's
    JSON (``start``/``end`` as UTC ISO strings, ``timezone``, ``kind``).
    """

    start: datetime
    end: datetime
    timezone: str
    kind: ExportWindowKind

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("window bounds must be timezone-aware")
        return value.astimezone(UTC)

    @model_validator(mode="after")
    def _ordered(self) -> ExportWindow:
        if self.end < self.start:
            raise ValueError(f"window end {self.end} is before its start {self.start}")
        return self

    @property
    def period(self) -> str:
        """The period's name in ``timezone`` (:func:`~export_lib.periods.names.period_label`)."""
        return period_label(self.start, self.end, self.timezone)

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    def contains(self, instant: datetime) -> bool:
        """Half-open membership: ``start <= instant < end``."""
        return self.start <= instant < self.end

    def as_dict(self) -> dict[str, str]:
        """JSON-able form (XCom, ledger, logs): UTC ISO strings with ``Z`` plus local ones."""
        tz = zone(self.timezone)
        return {
            "start": format_instant(self.start),
            "end": format_instant(self.end),
            "start_local": self.start.astimezone(tz).isoformat(),
            "end_local": self.end.astimezone(tz).isoformat(),
            "timezone": self.timezone,
            "kind": self.kind,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportWindow:
        """Inverse of :meth:`as_dict` (extra local fields are ignored)."""
        return cls(start=datetime.fromisoformat(data["start"]),
                   end=datetime.fromisoformat(data["end"]),
                   timezone=data["timezone"], kind=data["kind"])


def window_for(spec: WindowSpec, timing: Timing, slot: datetime, window_tz: str, *,
               previous: datetime | None = None,
               holidays: HolidayCalendar | None = None) -> ExportWindow:
    """The window of ``slot`` (assumed on the schedule) with calendar math in ``window_tz``.

    :param previous: the slot before ``slot`` if the caller already knows it (a preview
        walking consecutive slots); otherwise it is searched for ``interval`` windows.
    :param holidays: the calendar whose weekend and holidays ``previous_business_day`` skips
        (local dates in ``window_tz``; None: Saturday and Sunday); the other kinds ignore it.
    """
    tz = zone(window_tz)
    day = slot.astimezone(tz).date()
    if spec.kind == "calendar_day":
        start, end = start_of_day(tz, day - timedelta(days=1)), start_of_day(tz, day)
    elif spec.kind == "trailing_days":
        assert spec.days is not None
        start, end = start_of_day(tz, day - timedelta(days=spec.days)), start_of_day(tz, day)
    elif spec.kind == "previous_business_day":
        business = previous_business_day(day, holidays)
        start = start_of_day(tz, business)
        end = start_of_day(tz, business + timedelta(days=1))
    elif spec.kind == "trailing_hours":
        assert spec.hours is not None
        start, end = slot - timedelta(hours=spec.hours), slot
    else:
        before = previous if previous is not None else previous_slot(timing, slot)
        if before is None:
            raise WindowError(f"no slot before {format_instant(slot)} for an interval window "
                              f"({timing.summary})")
        start, end = before, slot
    return ExportWindow(start=start, end=end, timezone=window_tz, kind=spec.kind)


def resolve_window(source: Schedule | tuple[WindowSpec, Timing], slot: datetime) -> ExportWindow:
    """The reporting window of ``slot`` for a schedule or a ``(window_spec, timing)`` pair.

    :param source: a :class:`~export_lib.config.models.Schedule` (window math in the company
        timezone, business days by the company's holidays), or a pair whose window math uses
        the timing's own timezone and Saturday–Sunday weekends only.
    :param slot: an aware instant that MUST be a slot of the schedule.
    :raises WindowError: the slot is not on the schedule (the message names nearby slots).
    """
    if isinstance(source, tuple):
        spec, timing = source
        window_tz, what, holidays = timing.timezone, "the schedule", None
    else:
        spec, timing = source.window, source.timing
        window_tz, what = source.company.timezone, f"schedule {source.schedule_id}"
        holidays = source.company.holidays
    instant = require_slot(timing, slot, what)
    return window_for(spec, timing, instant, window_tz, holidays=holidays)
