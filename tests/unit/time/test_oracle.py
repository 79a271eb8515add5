"""An independent oracle: slots and windows by scanning UTC on a 15-minute grid.

Shares no code with ``export_lib.periods.slots``: it only converts UTC instants *to* local time (every
offset and transition of these zones is a multiple of 15 minutes in 2021–2031) and reads the
issue's rules literally. Seeded random schedules, all window kinds, all DST policies; and
``previous_business_day`` with random holiday calendars (issue 22 item 6), whose closed days it
takes from the ``holidays`` package directly and from the listed dates.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from export_lib.config.timing import Timing, WindowSpec
from export_lib.periods.preview import preview_rows

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Havana",
         "Pacific/Chatham", "America/Santiago", "Asia/Tehran", "Africa/Casablanca",
         "America/St_Johns", "Europe/London", "Australia/Adelaide", "Asia/Kathmandu"]
STEP = timedelta(minutes=15)


def span_days(every: int) -> int:
    """Days the oracle scans after a case's start: enough for the 400 slots compared (plus
    margin), at most 200. Scanning 200 days for an hourly case cost ~4x the time of what it
    compares (the scan is the test's cost: 23,520 instants per case at 200 days)."""
    return min(200, 400 * every // 24 + 20)


class Oracle:
    """Everything the issue text defines, computed by scanning UTC from ``begin`` to ``end``."""

    def __init__(self, tz: str, begin: datetime, end: datetime) -> None:
        self.tz = ZoneInfo(tz)
        self.occurrences: dict[datetime, list[datetime]] = defaultdict(list)
        self.day_start: dict[date, datetime] = {}
        self.timeline: list[tuple[datetime, datetime]] = []
        t = begin
        while t < end:
            local = t.astimezone(self.tz).replace(tzinfo=None)
            self.occurrences[local].append(t)
            self.day_start.setdefault(local.date(), t)
            self.timeline.append((t, local))
            t += STEP

    def first_instant_after(self, wall: datetime) -> datetime:
        return next(t for t, local in self.timeline if local > wall)

    def slots(self, hour: int, every: int, gap: str, fold: str, first: date, last: date):
        hours = [h for h in range(24) if h % every == hour % every]
        found: set[datetime] = set()
        day = first
        while day <= last:
            for h in hours:
                wall = datetime(day.year, day.month, day.day, h)
                seen = self.occurrences.get(wall, [])
                if not seen:
                    if gap == "shift":
                        found.add(self.first_instant_after(wall))
                elif len(seen) == 1:
                    found.add(seen[0])
                else:
                    found.update({"first": seen[:1], "second": seen[1:], "both": seen}[fold])
            day += timedelta(days=1)
        return sorted(found)

    def window(self, kind: str, n: int, slot: datetime, previous: datetime):
        day = slot.astimezone(self.tz).date()
        sod = self.day_start.__getitem__
        if kind == "calendar_day":
            return sod(day - timedelta(days=1)), sod(day)
        if kind == "trailing_days":
            return sod(day - timedelta(days=n)), sod(day)
        if kind == "previous_business_day":
            b = day - timedelta(days=1)
            while b.weekday() > 4:
                b -= timedelta(days=1)
            return sod(b), sod(b + timedelta(days=1))
        if kind == "trailing_hours":
            return slot - timedelta(hours=n), slot
        return previous, slot


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_cases(count: int, seed: int = 20260329):
    rng = random.Random(seed)
    for _ in range(count):
        yield (rng.choice(ZONES), rng.randrange(24), rng.choice([1, 2, 3, 4, 6, 8, 12, 24]),
               rng.choice(["shift", "skip"]), rng.choice(["first", "second", "both"]),
               rng.choice(["calendar_day", "trailing_days", "previous_business_day",
                           "trailing_hours", "interval"]),
               rng.randint(1, 40), date(2021, 1, 1) + timedelta(days=rng.randrange(3650)))


@pytest.mark.parametrize("case", list(random_cases(60)), ids=lambda c: f"{c[0]}-{c[1]}h")
def test_preview_matches_the_oracle(case):
    tz, hour, every, gap, fold, kind, n, day = case
    begin = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=45)
    span = span_days(every)
    oracle = Oracle(tz, begin, begin + timedelta(days=45 + span))
    expected = oracle.slots(hour, every, gap, fold, (begin + timedelta(days=2)).date(),
                            (begin + timedelta(days=45 + span - 3)).date())
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    index = next(i for i, s in enumerate(expected) if s >= start)
    count = min(len(expected) - index - 5, 400)
    spec = WindowSpec(kind=kind, days=n if kind == "trailing_days" else None,
                      hours=n if kind == "trailing_hours" else None)
    timing = Timing(timezone=tz, export_hour=hour, interval_hours=every, dst_gap=gap,
                    dst_fold=fold)
    rows = preview_rows(spec, timing, start, count)
    want = []
    for i in range(index, index + count):
        window = oracle.window(kind, n, expected[i], expected[i - 1])
        want.append((iso(expected[i]), iso(window[0]), iso(window[1])))
    got = [(r["slot_utc"], r["window_start_utc"], r["window_end_utc"]) for r in rows]
    assert got == want


def closed_days(country: tuple[str, str | None] | None, listed: set[date],
                first: int, last: int) -> set[date]:
    """Holidays straight from the ``holidays`` package (not through export_lib) plus the list."""
    import holidays

    closed = set(listed)
    if country is not None:
        closed |= set(holidays.country_holidays(country[0], subdiv=country[1],
                                                years=range(first, last + 1)))
    return closed


def holiday_cases(count: int, seed: int = 20260206):
    """previous_business_day schedules with random holiday calendars: runs of 1–4 listed days
    (chains, often touching a weekend), with or without a country's public holidays."""
    rng = random.Random(seed)
    for _ in range(count):
        day = date(2021, 1, 1) + timedelta(days=rng.randrange(3650))
        listed: set[date] = set()
        for _ in range(rng.randint(0, 30)):
            first = day - timedelta(days=10) + timedelta(days=rng.randrange(200))
            listed.update(first + timedelta(days=k) for k in range(rng.choice([1, 1, 2, 3, 4])))
        country = rng.choice([None, ("NZ", None), ("NZ", "AUK"), ("DE", "BY"), ("US", "CA"),
                              ("GB", None)])
        if country is None and not listed:
            listed.add(day + timedelta(days=3))
        yield (rng.choice(ZONES), rng.randrange(24), rng.choice([1, 2, 3, 4, 6, 8, 12, 24]),
               rng.choice(["shift", "skip"]), rng.choice(["first", "second", "both"]), day,
               country, listed)


@pytest.mark.parametrize("case", list(holiday_cases(30)),
                         ids=lambda c: f"{c[0]}-{c[1]}h-{c[6][0] if c[6] else 'listed'}")
def test_business_days_with_holidays_match_the_oracle(case):
    """B is the latest date before D that is Mon–Fri and not closed, read literally; the
    holidays a row says it skipped are exactly the closed weekdays between B and D."""
    from export_lib.config.holiday_calendar import HolidayCalendar

    tz, hour, every, gap, fold, day, country, listed = case
    begin = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=45)
    span = span_days(every)
    oracle = Oracle(tz, begin, begin + timedelta(days=45 + span))
    closed = closed_days(country, listed, day.year - 1, day.year + 1)
    expected = oracle.slots(hour, every, gap, fold, (begin + timedelta(days=2)).date(),
                            (begin + timedelta(days=45 + span - 3)).date())
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    index = next(i for i, s in enumerate(expected) if s >= start)
    count = min(len(expected) - index - 5, 400)
    calendar = HolidayCalendar(country=country[0] if country else None,
                               subdivision=country[1] if country else None,
                               dates=tuple(listed))
    timing = Timing(timezone=tz, export_hour=hour, interval_hours=every, dst_gap=gap,
                    dst_fold=fold)
    rows = preview_rows(WindowSpec(kind="previous_business_day"), timing, start, count,
                        holidays=calendar)
    want = []
    for slot in expected[index:index + count]:
        local_day = slot.astimezone(oracle.tz).date()
        b = local_day - timedelta(days=1)
        while b.weekday() > 4 or b in closed:
            b -= timedelta(days=1)
        skipped = [(b + timedelta(days=k)).isoformat() for k in range(1, (local_day - b).days)
                   if (b + timedelta(days=k)).weekday() < 5]
        want.append((iso(slot), iso(oracle.day_start[b]),
                     iso(oracle.day_start[b + timedelta(days=1)]), b.isoformat(), skipped))
    got = [(r["slot_utc"], r["window_start_utc"], r["window_end_utc"], r["business_day"],
            [h["date"] for h in r["holidays_skipped"]]) for r in rows]
    assert got == want
