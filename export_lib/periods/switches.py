"""The periods around a timing switch that no slot reports, or that two report.

A schedule whose timing changed between config versions fires the old timing's slots before the
new version's ``effective_from`` and the new timing's from it (ADR 0005 §5). Where the switch
falls decides what each period around it gets. Moving 09:00 to 07:00 with ``effective_from``
between the hours (08:00) drops today's 09:00 slot, which would have reported yesterday, while
the first 07:00 slot is tomorrow's and reports today: yesterday is reported by no slot. Moving
07:00 to 09:00 at 08:00 makes today's 09:00 report the day 07:00 already reported.

:func:`switch_problems` names every such period of a schedule's timeline, with the
``effective_from`` that avoids it (:func:`avoiding_switch`). A period reported twice whose whole
window the old timing reported is *guarded*: ``start_run`` skips the second run as already
delivered (ADR 0016), so it is sent once; a partial overlap is exported twice in part.
Overlaps a timing makes with itself (a three-day trailing window every day, a six-hourly
calendar-day export) are by design and never named, nor is a partial repeat by a timing whose
windows overlap each other anyway.

Pure: no ledger, no clock (``now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from export_lib.config.timing import Timing, WindowSpec, timeline_of
from export_lib.periods.instants import format_instant
from export_lib.periods.names import period_label
from export_lib.periods.slots import slots_between
from export_lib.periods.windows import window_for

if TYPE_CHECKING:
    from export_lib.config.models import Schedule

Span = tuple[datetime, datetime]
# How many switch instants (slots of either timing) :func:`avoiding_switch` tries.
CANDIDATES = 16


@dataclass(frozen=True)
class SwitchProblem:
    """A period around the switch at ``switch`` (a version's ``effective_from``) that no slot
    of the timeline reports (``unreported``) or that a slot of each timing reports
    (``reported_twice``)."""

    schedule_id: str
    switch: datetime
    kind: Literal["unreported", "reported_twice"]
    start: datetime
    end: datetime
    period: str  # the period's name in the window timezone (``2026-03-28``)
    timezone: str
    # unreported: the old timing's slot that would have reported it (dropped by the switch);
    # reported_twice: the old slot and the new one.
    slots: tuple[datetime, ...]
    # reported_twice: the old timing reported the new slot's whole window, so the second run is
    # skipped as already delivered (ADR 0016) and the period is sent once.
    guarded: bool
    # The effective_from that avoids it (None: no switch instant does, the two timings'
    # windows do not line up).
    fix: datetime | None
    in_effect: bool  # the switch is at or before ``now``

    @property
    def fix_text(self) -> str:
        """``effective_from: 2026-03-28T06:00:00Z`` (the line to write), or ``""``."""
        return f"effective_from: {format_instant(self.fix)}" if self.fix else ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (the company page's endpoint): instants as UTC ``Z`` strings."""
        return {"schedule": self.schedule_id, "switch": format_instant(self.switch),
                "kind": self.kind, "period": self.period, "timezone": self.timezone,
                "start": format_instant(self.start), "end": format_instant(self.end),
                "slots": [format_instant(s) for s in self.slots], "guarded": self.guarded,
                "fix": format_instant(self.fix) if self.fix else None,
                "in_effect": self.in_effect}


def switch_problems(schedule: Schedule, *, now: datetime) -> tuple[SwitchProblem, ...]:
    """Every period around each timing switch of ``schedule``'s timeline that no slot reports
    or that two report, oldest switch first, each with the ``effective_from`` that avoids it.

    :param schedule: a schedule from the catalog (its ``timing`` is the timeline of every
        version's timing; windows in the company timezone, business days by its holidays)
    :param now: the current instant (aware); only decides ``in_effect``
    """
    found: list[SwitchProblem] = []
    segments = schedule.timing.segments
    for index in range(1, len(segments)):
        switch, _, new = segments[index]
        assert switch is not None  # every segment but the first has a start
        specs = _Specs.around(schedule, switch)
        spans = _problems_at(schedule, specs, schedule.timing, switch,
                             segments[index - 1][2], new)
        if not spans:
            continue
        fix = avoiding_switch(schedule, segments[:index], new, switch)
        for kind, span, slots, guarded in spans:
            found.append(SwitchProblem(
                schedule_id=schedule.schedule_id, switch=switch, kind=kind, start=span[0],
                end=span[1], period=period_label(span[0], span[1], schedule.window_timezone),
                timezone=schedule.window_timezone, slots=slots, guarded=guarded,
                fix=fix if fix != switch else None, in_effect=switch <= now))
    return tuple(found)


def avoiding_switch(schedule: Schedule, kept: tuple, new: Timing, at_or_after: datetime, *,
                    lenient: bool = True) -> datetime | None:
    """The first switch instant to ``new`` at or after ``at_or_after`` (a slot of either
    timing: where ``exportctl reschedule`` switches) at which every period is reported exactly
    once; failing that (``lenient``), the first at which none is unreported and every double is
    guarded (sent once, ADR 0016). None when none of the next :data:`CANDIDATES` does.

    :param kept: the timeline's segments that stay (``Timing.segments`` entries, oldest first;
        the last is the old timing the switch leaves)
    """
    old = kept[-1][2]
    specs = _Specs.around(schedule, at_or_after)
    horizon = at_or_after + _reach(schedule) * 2
    candidates = sorted({*slots_between(old, at_or_after, horizon),
                         *slots_between(new, at_or_after, horizon)})[:CANDIDATES]
    fallback = None
    for candidate in candidates:
        chain = [(start, plain) for start, _, plain in kept if start is None or start < candidate]
        timeline = timeline_of([*chain, (candidate, new)])
        spans = _problems_at(schedule, replace(specs, switch=candidate), timeline, candidate, old, new)
        if not spans:
            return candidate
        if fallback is None and lenient and all(kind == "reported_twice" and guarded
                                                for kind, _, _, guarded in spans):
            fallback = candidate
    return fallback


@dataclass(frozen=True)
class _Specs:
    """The window spec of a slot: the old version's before the switch, the new one's from it
    (a version may change its window with its timing)."""

    old: WindowSpec
    new: WindowSpec
    switch: datetime

    @classmethod
    def around(cls, schedule: Schedule, switch: datetime) -> _Specs:
        first = schedule.versions[0]
        return cls((schedule.version_for(switch - timedelta(microseconds=1)) or first).window,
                   (schedule.version_for(switch) or first).window, switch)

    def of(self, slot: datetime) -> WindowSpec:
        return self.old if slot < self.switch else self.new


def _reach(schedule: Schedule) -> timedelta:
    """How far around a switch its periods reach: the longest window of any version plus a
    few days (weekends and holidays of a previous-business-day window)."""
    days = max(max(v.window.days or 0, -(-(v.window.hours or 0) // 24))
               for v in schedule.versions)
    return timedelta(days=days + 5)


def _windows(schedule: Schedule, timing: Timing, slots: tuple[datetime, ...],
             spec: Callable[[datetime], WindowSpec]) -> list[Span]:
    """The windows of consecutive ``slots`` of ``timing`` (interval windows: the first one
    looks for the slot before it)."""
    tz, holidays = schedule.window_timezone, schedule.company.holidays
    out, previous = [], None
    for slot in slots:
        window = window_for(spec(slot), timing, slot, tz, previous=previous, holidays=holidays)
        out.append((window.start, window.end))
        previous = slot
    return out


def _problems_at(schedule: Schedule, specs: _Specs, timeline: Timing, switch: datetime,
                 old: Timing, new: Timing
                 ) -> list[tuple[str, Span, tuple[datetime, ...], bool]]:
    """``(kind, span, slots, guarded)`` for each period around ``switch`` of ``timeline``."""
    reach = _reach(schedule)
    before = slots_between(timeline, switch - reach * 2, switch)
    after = slots_between(timeline, switch, switch + reach)
    both = _windows(schedule, timeline, (*before, *after), specs.of)
    old_windows, new_windows = both[:len(before)], both[len(before):]
    reported = _union(both)
    found: list[tuple[str, Span, tuple[datetime, ...], bool]] = []
    # Unreported: what a slot of the old timing the switch dropped would have reported of the
    # time before the switch, where no slot of the timeline reports it.
    dropped = tuple(s for s in slots_between(old, switch, switch + reach) if s not in after)
    seen: set[Span] = set()
    for slot, (start, end) in zip(dropped, _windows(schedule, old, dropped,
                                                     lambda _: specs.old), strict=True):
        if start >= switch:
            continue
        for hole in _subtract((start, end), reported):
            if hole not in seen:
                seen.add(hole)
                found.append(("unreported", hole, (slot,), False))
    # Reported twice: a new slot's window over the old timing's windows, beyond what the new
    # timing's own earlier slots would report of it anyway (its overlaps by design).
    old_union = _union(old_windows)
    own = slots_between(new, switch - reach * 2, switch + reach)
    own_windows = list(zip(own, _windows(schedule, new, own, lambda _: specs.new), strict=True))
    for slot, window in zip(after, new_windows, strict=True):
        overlap = _intersect(window, old_union)
        if not overlap:
            continue
        design = _union([w for s, w in own_windows if s < slot])
        excess = [piece for span in overlap for piece in _subtract(span, design)]
        if not excess:
            continue
        guarded = overlap == [window]
        if design and not guarded and _intersect(window, design):
            # Windows that overlap by design (trailing 24 hours every 6 h) report each hour
            # several times anyway: one more partial repeat is not a period sent twice.
            continue
        reporter = next(s for s, w in zip(reversed(before), reversed(old_windows), strict=True)
                        if w[0] < window[1] and w[1] > window[0])
        found.extend(("reported_twice", span, (reporter, slot), guarded)
                     for span in ([window] if guarded else excess))
    return found


def _union(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[0] < s[1]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _subtract(span: Span, covered: list[Span]) -> list[Span]:
    """The parts of ``span`` outside the (merged, sorted) ``covered`` spans."""
    out, cursor = [], span[0]
    for start, end in covered:
        if end <= cursor or start >= span[1]:
            continue
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < span[1]:
        out.append((cursor, span[1]))
    return out


def _intersect(span: Span, covered: list[Span]) -> list[Span]:
    return [(max(span[0], s), min(span[1], e)) for s, e in covered
            if s < span[1] and e > span[0]]


__all__ = ["SwitchProblem", "avoiding_switch", "switch_problems"]
