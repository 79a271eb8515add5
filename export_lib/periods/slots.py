"""Slots: the instants a schedule fires, as pure functions of a :class:`Timing` (ADR 0001).

On each local date D in the timing's zone the candidate wall times are ``h:00`` for every
``h`` in ``Timing.local_hours`` (or the cron's matching wall times). Each wall time is turned
into instants by the DST policy:

* it does not exist (a gap): ``shift`` → the first instant after the gap, ``skip`` → none;
* it occurs twice (a fold): ``first`` → the earlier, ``second`` → the later, ``both`` → both.

The slots are the set of those instants (duplicates merged), ascending. Worked example,
Europe/Berlin, 02:00 daily: on 2026-03-29 02:00 does not exist; ``shift`` fires at 03:00 CEST
(01:00 UTC), ``skip`` not at all. On 2026-10-25 02:00 happens at 00:00 and 01:00 UTC;
``first``/``second``/``both`` fire at 00:00 / 01:00 / both.

All functions take and return timezone-aware datetimes (results are in UTC) and never read
the clock.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from export_lib.config.timing import Timing, zone
from export_lib.errors import WindowError
from export_lib.periods.cron_walls import cron_fields, cron_walls
from export_lib.periods.instants import format_instant

_MAX_SEARCH = timedelta(days=366 * 30)  # sparse crons (29 Feb) still fire within 30 years


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise WindowError(f"{name} must be timezone-aware (got naive {value.isoformat()}); "
                          "add an offset such as +00:00")
    utc = value.astimezone(UTC)
    # A plain datetime, so pendulum (Airflow) instants behave like stdlib ones in arithmetic.
    return datetime(utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second,
                    utc.microsecond, tzinfo=UTC)


def _local_naive(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def _end_of_gap(wall: datetime, tz: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant whose local time is past the missing ``wall`` (the transition).

    ``before`` is an instant whose local time is earlier than ``wall`` and ``after`` one whose
    local time is later; bisect on whole seconds (tz offsets are whole seconds).
    """
    lo, hi = int(before.timestamp()), int(after.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _local_naive(datetime.fromtimestamp(mid, UTC), tz) > wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def resolve_wall_time(wall: datetime, tz: ZoneInfo, dst_gap: str = "shift",
                      dst_fold: str = "first") -> tuple[datetime, ...]:
    """The UTC instants of a naive local ``wall`` time under the DST policy (0, 1 or 2)."""
    earlier = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    later = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if earlier == later:
        return (earlier,)
    if earlier < later:  # a fold: the wall time happens twice
        return {"first": (earlier,), "second": (later,), "both": (earlier, later)}[dst_fold]
    # A gap: PEP 495 maps fold=0 with the offset before the transition, which lands after it.
    if dst_gap == "skip":
        return ()
    return (_end_of_gap(wall, tz, later, earlier),)


def start_of_day(tz: ZoneInfo | str, day: date) -> datetime:
    """The earliest instant whose local date is ``day`` (midnight, or the end of a gap).

    Example: America/Havana skips 00:00–01:00 on 2026-03-08, so the day starts at 01:00 CDT
    (05:00 UTC).
    """
    zone_info = zone(tz) if isinstance(tz, str) else tz
    return resolve_wall_time(datetime.combine(day, time()), zone_info, "shift", "first")[0]


def _wall_times(timing: Timing, w_from: datetime, w_to: datetime) -> Iterator[datetime]:
    """Candidate naive wall times ``w`` with ``w_from <= w < w_to``, ascending."""
    if timing.cron is None:
        hours = timing.local_hours
        day = w_from.date()
        while day <= w_to.date():
            for hour in hours:
                wall = datetime.combine(day, time(hour))
                if w_from <= wall < w_to:
                    yield wall
            day += timedelta(days=1)
        return
    fields = cron_fields(timing.cron)
    if fields is not None:
        yield from cron_walls(fields, w_from, w_to)
        return
    from croniter import croniter  # L, W and # (rare): croniter itself

    matches = croniter(timing.cron, w_from - timedelta(microseconds=1), ret_type=datetime)
    while (wall := matches.get_next()) < w_to:
        yield wall


def _offset_bounds(tz: ZoneInfo, start: datetime, end: datetime) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offset of ``tz`` at instants from a day before ``start``
    to a day after ``end``, widened to whole UTC days so that consecutive look-ups (every step
    of a backfill, the scheduler's next slot) share one cached answer."""
    return _day_offset_bounds(tz, start.astimezone(UTC).date(), end.astimezone(UTC).date())


@functools.lru_cache(maxsize=4096)
def _day_offset_bounds(tz: ZoneInfo, first: date, last: date) -> tuple[timedelta, timedelta]:
    """Offsets of ``tz`` from the day before ``first`` to two days after ``last`` (UTC days),
    sampled every 3 h (no zone keeps an offset for less)."""
    cursor = datetime.combine(first, time(), UTC) - timedelta(days=1)
    stop = datetime.combine(last, time(), UTC) + timedelta(days=2)
    low = high = cursor.astimezone(tz).utcoffset() or timedelta(0)
    while cursor <= stop:
        offset = cursor.astimezone(tz).utcoffset() or timedelta(0)
        low, high = min(low, offset), max(high, offset)
        cursor += timedelta(hours=3)
    return low, high


def slots_between(timing: Timing, start: datetime, end: datetime) -> tuple[datetime, ...]:
    """Every slot ``s`` with ``start <= s < end``, ascending, in UTC.

    A timing with a timeline (edited from an explicit slot) has each timing's slots in its
    own span: the old timing's before the new one's ``effective_from``, the new one's from it.
    """
    start, end = _aware(start, "start"), _aware(end, "end")
    if end <= start:
        return ()
    if not timing.earlier:
        return _plain_slots_between(timing, start, end)
    found: list[datetime] = []
    for since, until, plain in timing.segments:
        lo = start if since is None else max(start, _aware(since, "effective_from"))
        hi = end if until is None else min(end, _aware(until, "effective_from"))
        if lo < hi:
            found += _plain_slots_between(plain, lo, hi)
    return tuple(sorted(set(found)))


def _plain_slots_between(timing: Timing, start: datetime, end: datetime
                         ) -> tuple[datetime, ...]:
    """Only the wall times that can land in ``[start, end)`` are enumerated, so a frequent
    cron costs its slots in the range, not days of matches (the timetable is on the
    scheduler's hot path). Every instant ``u`` of a wall time ``w`` (either side of a fold,
    or the end of a gap under ``shift``) lies in ``[w - high, w - low]`` for the zone's
    offsets around the range, so the walls to try are ``[start + low, end + high]``."""
    tz = timing.zone
    low, high = _offset_bounds(tz, start, end)
    naive_start, naive_end = start.replace(tzinfo=None), end.replace(tzinfo=None)
    found: set[datetime] = set()
    for wall in _wall_times(timing, naive_start + low, naive_end + high + timedelta(seconds=1)):
        for instant in resolve_wall_time(wall, tz, timing.dst_gap, timing.dst_fold):
            if start <= instant < end:
                found.add(instant)
    return tuple(sorted(found))


def _typical_gap(timing: Timing, near: datetime) -> timedelta:
    """The usual time between two slots near ``near`` (a cron's from its next two matches)."""
    if timing.earlier:
        return min(_typical_gap(plain, near) for _, _, plain in timing.segments)
    if timing.cron is None:
        return timedelta(hours=timing.interval_hours or 24)
    local = _local_naive(near, timing.zone)
    walls = _wall_times(timing, local, local + _MAX_SEARCH)
    first = next(walls, None)
    second = next(walls, None)
    if first is None or second is None:
        return timedelta(hours=24)
    return max(second - first, timedelta(minutes=1))


def next_slots(timing: Timing, after_or_at: datetime, count: int) -> tuple[datetime, ...]:
    """The first ``count`` slots at or after ``after_or_at`` (fewer only for a dead cron)."""
    start = _aware(after_or_at, "after_or_at")
    if count <= 0:
        return ()
    span = _typical_gap(timing, start) * (count + 1) + timedelta(hours=1)
    while True:
        found = slots_between(timing, start, start + span)
        if len(found) >= count or span > _MAX_SEARCH:
            return found[:count]
        span *= 2


def latest_slot_at_or_before(timing: Timing, t: datetime) -> datetime | None:
    """The last slot ``s <= t`` (None only for a cron that has not fired for 30 years)."""
    end = _aware(t, "t") + timedelta(microseconds=1)
    span = _typical_gap(timing, end) * 2 + timedelta(hours=1)
    while True:
        found = slots_between(timing, end - span, end)
        if found:
            return found[-1]
        if span > _MAX_SEARCH:
            return None
        span *= 2


def previous_slot(timing: Timing, t: datetime) -> datetime | None:
    """The last slot strictly before ``t``."""
    return latest_slot_at_or_before(timing, _aware(t, "t") - timedelta(microseconds=1))


def is_slot(timing: Timing, t: datetime) -> bool:
    """Whether ``t`` is exactly one of the schedule's slots."""
    instant = _aware(t, "t")
    return instant in slots_between(timing, instant, instant + timedelta(microseconds=1))


def nearest_slots(timing: Timing, t: datetime, n: int = 2) -> tuple[datetime, ...]:
    """Up to ``n`` slots on each side of ``t`` (for "not on the schedule" errors), ascending."""
    instant = _aware(t, "t")
    before: list[datetime] = []
    cursor: datetime | None = instant
    while cursor is not None and len(before) < n:
        cursor = previous_slot(timing, cursor)
        if cursor is not None:
            before.insert(0, cursor)
    after = next_slots(timing, instant + timedelta(microseconds=1), n)
    return (*before, *after)


def require_slot(timing: Timing, t: datetime, what: str = "schedule") -> datetime:
    """Return ``t`` in UTC if it is a slot, else raise ``WindowError`` naming nearby slots."""
    instant = _aware(t, "slot")
    if not is_slot(timing, instant):
        near = ", ".join(format_instant(s) for s in nearest_slots(timing, instant))
        raise WindowError(f"{format_instant(instant)} is not a slot of {what} "
                          f"({timing.summary}); the nearest valid slots are {near}")
    return instant


