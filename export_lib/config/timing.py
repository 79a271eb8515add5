"""When a schedule fires and what period it reports: the ``Timing`` and ``WindowSpec`` models.

Both are plain data (frozen pydantic models) so a timetable can serialise a ``Timing`` into
the Airflow metadata DB and rebuild it, and ``config_version`` can hash them. The arithmetic
lives in :mod:`export_lib.periods.slots` and :mod:`export_lib.periods.windows`; see
``docs/adr/0001-windows-and-dst.md`` for the semantics. They are part of the config (every
schedule carries them), so they live here, below ``periods``: the config never imports the
time arithmetic (the layers are in ``docs/explanation/architecture.md``).
"""

from __future__ import annotations

import difflib
import functools
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

from export_lib.config.limits import MAX_WINDOW_DAYS, MAX_WINDOW_HOURS, StrictInt, shown
from export_lib.config.messages import invalid

ALLOWED_INTERVAL_HOURS = tuple(range(1, 25))  # any whole number of hours, 1 to 24, as before
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

DstGap = Literal["shift", "skip"]
DstFold = Literal["first", "second", "both"]
WindowKind = Literal["calendar_day", "trailing_days", "previous_business_day", "trailing_hours",
                     "interval"]


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@functools.lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """The ``ZoneInfo`` for an IANA name (cached: zones are immutable)."""
    return ZoneInfo(name)


@functools.lru_cache(maxsize=1)
def _all_zone_names() -> tuple[str, ...]:
    import zoneinfo

    return tuple(sorted(zoneinfo.available_timezones()))


def timezone_suggestions(name: str, n: int = 3) -> list[str]:
    """The closest valid IANA names to a misspelt one (case-insensitive)."""
    names = _all_zone_names()
    by_lower = {z.lower(): z for z in names}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=n, cutoff=0.5)
    return [by_lower[c] for c in close]


def check_timezone(name: Any) -> str:
    """Return ``name`` if it is a known IANA timezone, else raise a custom pydantic error."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise invalid("timezone", f"timezone must be an IANA name such as 'Europe/Berlin' "
                      f"(got {shown(name)})")
    try:
        zone(name)
    except (ZoneInfoNotFoundError, ValueError):
        hint = timezone_suggestions(name)
        fix = f"did you mean {', '.join(repr(h) for h in hint)}?" if hint else (
            "use an IANA name such as 'Europe/Berlin' or 'UTC'")
        raise invalid("timezone", f"unknown timezone {shown(name)}; {fix}") from None
    return name


def check_cron(expr: Any) -> str:
    """Return ``expr`` if it is a 5-field cron expression (or an @alias) croniter accepts."""
    text = str(expr).strip() if isinstance(expr, str) and len(expr) <= 100 else ""
    if not text or not _cron_ok(text):
        raise invalid(
            "cron",
            f"invalid cron expression {shown(expr)}; use 5 fields 'minute hour day month weekday' "
            f"such as '0 14 * * *', or one of {', '.join(CRON_ALIASES)}",
        )
    return text


@functools.lru_cache(maxsize=1024)
def _cron_ok(text: str) -> bool:
    """Cached: croniter's check is slow and DAG parsing validates every schedule's cron."""
    from croniter import croniter

    return (text in CRON_ALIASES) or (len(text.split()) == 5 and croniter.is_valid(text))


def check_export_hour(value: int) -> int:
    if not 0 <= value <= 23:
        raise invalid("hour", f"export_hour {value} is out of range; use an hour from 0 to 23 "
                      f"(local time in the schedule timezone)")
    return value


def check_interval_hours(value: int) -> int:
    if value not in ALLOWED_INTERVAL_HOURS:
        raise invalid("interval", f"interval_hours {value} is out of range; use a whole number "
                      "of hours from 1 to 24")
    return value


ExportHour = Annotated[StrictInt, AfterValidator(check_export_hour)]
IntervalHours = Annotated[StrictInt, AfterValidator(check_interval_hours)]


class Timing(FrozenModel):
    """When a schedule fires: local hours every ``interval_hours``, or a cron, in ``timezone``.

    Exactly one form is used: ``cron`` (data exports), or ``export_hour`` + ``interval_hours``
    (widget exports; defaults 0 and 24 when ``cron`` is absent). ``dst_gap`` / ``dst_fold``
    decide what happens to wall times that do not exist or occur twice (ADR 0001).

    A schedule whose timing was edited from an explicit slot (ADR 0005 as amended)
    carries its timeline: ``earlier`` timings, oldest first, each in force from its own
    ``effective_from`` (the oldest from the beginning) until the next one's, and this one from
    its ``effective_from`` on. The slot arithmetic follows the timeline; ``plain`` is one
    timing alone. A timing without a timeline serialises exactly as before (no new keys), so
    config versions and serialised DAGs do not move.
    """

    timezone: str
    export_hour: ExportHour | None = None
    interval_hours: IntervalHours | None = None
    cron: str | None = None
    dst_gap: DstGap = "shift"
    dst_fold: DstFold = "first"
    effective_from: datetime | None = None
    earlier: tuple[Timing, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_timeline(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and not self.earlier and self.effective_from is None:
            data.pop("earlier", None)
            data.pop("effective_from", None)
        return data

    @model_validator(mode="after")
    def _timeline_in_order(self) -> Timing:
        if not self.earlier:
            return self
        starts = [t.effective_from for t in (*self.earlier[1:], self)]
        if any(s is None for s in starts) or any(t.earlier for t in self.earlier) or any(
                a >= b for a, b in zip(starts, starts[1:], strict=False)):
            raise invalid("timing", "a timing's earlier timings must be plain and in order, "
                          "each but the oldest with an effective_from before the next one's")
        return self

    @property
    def plain(self) -> Timing:
        """This timing alone (no timeline)."""
        if not self.earlier and self.effective_from is None:
            return self
        return self.model_copy(update={"earlier": (), "effective_from": None})

    @property
    def segments(self) -> tuple[tuple[datetime | None, datetime | None, Timing], ...]:
        """``(from, until, plain timing)`` for each timing of the timeline, oldest first; the
        oldest from ``None`` (the beginning), the newest until ``None`` (no end)."""
        chain = (*self.earlier, self)
        return tuple((t.effective_from if i else None,
                      chain[i + 1].effective_from if i + 1 < len(chain) else None, t.plain)
                     for i, t in enumerate(chain))

    def at(self, instant: datetime) -> Timing:
        """The plain timing in force at ``instant``."""
        found = self.segments[0][2]
        for start, _, timing in self.segments:
            if start is None or start <= instant:
                found = timing
        return found

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("cron") is not None:
            both = [k for k in ("export_hour", "interval_hours") if data.get(k) is not None]
            if both:
                raise invalid(
                    "timing",
                    f"use either 'cron' or 'export_hour'/'interval_hours', not both "
                    f"(got cron {data['cron']!r} and {', '.join(both)})",
                )
            return data
        return {"export_hour": 0, "interval_hours": 24, **{k: v for k, v in data.items()
                                                           if v is not None}}

    @field_validator("timezone", mode="before")
    @classmethod
    def _check_timezone(cls, value: Any) -> str:
        return check_timezone(value)

    @field_validator("cron", mode="before")
    @classmethod
    def _check_cron(cls, value: Any) -> Any:
        return None if value is None else check_cron(value)

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)

    @property
    def local_hours(self) -> tuple[int, ...]:
        """The wall-clock hours of every local day.

        A divisor of 24 tiles the day: every ``h`` with ``h ≡ export_hour (mod interval_hours)``
        (07:00 every 6 h → 01, 07, 13, 19). Any other interval restarts at ``export_hour`` each
        local day (02:00 every 5 h → 02, 07, 12, 17, 22; the last gap of the day is longer),
        so the export hour the customer chose is always one of the times.
        """
        assert self.export_hour is not None and self.interval_hours is not None
        step = self.interval_hours
        if 24 % step:
            return tuple(range(self.export_hour, 24, step))
        return tuple(h for h in range(24) if h % step == self.export_hour % step)

    @property
    def summary(self) -> str:
        """Human text such as ``07:00 Europe/Berlin, every 24 h`` or ``cron 0 14 * * * UTC``."""
        if self.cron is not None:
            text = f"cron {self.cron} {self.timezone}"
        else:
            text = f"{self.export_hour:02d}:00 {self.timezone}, every {self.interval_hours} h"
            if 24 % self.interval_hours:
                text += " from " + ", ".join(f"{h:02d}:00" for h in self.local_hours) + " each day"
        if (self.dst_gap, self.dst_fold) != ("shift", "first"):
            text += f" (dst_gap={self.dst_gap}, dst_fold={self.dst_fold})"
        if self.earlier and self.effective_from is not None:
            text += (f" from {self.effective_from.astimezone(UTC):%Y-%m-%dT%H:%MZ}; before: "
                     f"{self.earlier[-1].plain.summary}")
        return text


def timeline_of(versions: list[tuple[datetime | None, Timing]]) -> Timing:
    """The timeline of a schedule's versions (``(effective_from, timing)``, oldest first):
    consecutive versions with the same timing share one span; one timing: it, plain."""
    chain: list[Timing] = []
    for start, timing in versions:
        if chain and chain[-1].plain == timing.plain:
            continue
        chain.append(timing.plain.model_copy(update={"effective_from": start if chain else None}))
    if len(chain) < 2:
        return chain[-1] if chain else versions[-1][1]
    return chain[-1].model_copy(update={"earlier": tuple(chain[:-1])})


class WindowSpec(FrozenModel):
    """Which period a slot reports (ADR 0001). ``days``/``hours`` only where the kind uses N."""

    kind: WindowKind = Field(
        "calendar_day", description="For a slot on local day D (company time zone): "
        "calendar_day is day D-1; trailing_days the N days before D; previous_business_day the "
        "last business day before D (not a weekend day of the company's holiday country, "
        "Saturday and Sunday without one, nor a company holiday); trailing_hours the N hours "
        "before the slot; interval the time since the previous slot. Windows are half-open "
        "[start, end).")
    # The lower bound is the validator's (its message names the kind); here only for editors.
    days: StrictInt | None = Field(default=None, le=MAX_WINDOW_DAYS,
                                   description="N of trailing_days (and only there).",
                                   examples=[30], json_schema_extra={"minimum": 1})
    hours: StrictInt | None = Field(default=None, le=MAX_WINDOW_HOURS,
                                    description="N of trailing_hours (and only there).",
                                    examples=[6], json_schema_extra={"minimum": 1})

    @model_validator(mode="after")
    def _n_matches_kind(self) -> WindowSpec:
        needs = {"trailing_days": "days", "trailing_hours": "hours"}.get(self.kind)
        for name in ("days", "hours"):
            value = getattr(self, name)
            if name == needs and value is None:
                raise invalid("window", f"window kind {self.kind!r} needs '{name}' (a positive "
                              f"integer), e.g. {{kind: {self.kind}, {name}: 3}}")
            if name == needs and value < 1:
                raise invalid("window", f"window {name} must be at least 1 (got {value})")
            if name != needs and value is not None:
                raise invalid("window", f"window kind {self.kind!r} does not use '{name}' (got "
                              f"{value}); remove it or use kind 'trailing_{name}'")
        return self
