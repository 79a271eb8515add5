"""The cron walls computed from fields are croniter's, match for match; a next slot costs
about a millisecond for any cron (issue 25 item 0), checked by counting work, not by timing."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter

from export_lib.config.timing import Timing
from export_lib.periods import cron_walls as walls_module
from export_lib.periods.cron_walls import cron_fields, cron_walls
from export_lib.periods.slots import latest_slot_at_or_before, next_slots, slots_between

EXPRESSIONS = [
    "0 9 * * *", "30 16 * * *", "*/2 * * * *", "*/7 3-5 * * *", "0 * * * *", "15,45 */3 * * *",
    "0 9 * * 1-5", "0 9 1,15 * 1", "0 9 */2 * *", "0 9 */2 * 3", "0 0 29 2 *", "0 9 * * 7",
    "5 4 * jan,feb sun", "0 12 31 * *", "59 23 * * 0", "@daily", "@hourly", "@weekly",
    "@monthly", "0 6 1 */3 *", "10-20/5 8 * * 6",
]


def croniter_walls(expr: str, w_from: datetime, w_to: datetime) -> list[datetime]:
    it = croniter(expr, w_from - timedelta(microseconds=1), ret_type=datetime)
    out = []
    while (wall := it.get_next()) < w_to:
        out.append(wall)
    return out


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_walls_are_croniters(expr):
    fields = cron_fields(expr)
    assert fields is not None
    rng = random.Random(expr)
    per_day = len(fields.minutes) * len(fields.hours)
    spans = [1, 7, 49] + ([24 * 40] if per_day <= 4 else [])  # croniter is the slow side
    for _ in range(25):
        w_from = datetime(2024, 1, 1) + timedelta(minutes=rng.randrange(3 * 365 * 24 * 60),
                                                  seconds=rng.choice([0, 0, 1, 59]))
        w_to = w_from + timedelta(hours=rng.choice(spans))
        assert list(cron_walls(fields, w_from, w_to)) == croniter_walls(expr, w_from, w_to)


@pytest.mark.parametrize("expr", ["0 9 L * *", "0 9 * * 1#2"])
def test_last_and_nth_go_to_croniter_and_still_give_its_slots(expr):
    assert cron_fields(expr) is None
    timing = Timing(timezone="Europe/Berlin", cron=expr)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    slots = slots_between(timing, start, start + timedelta(days=120))
    walls = croniter_walls(expr, datetime(2026, 1, 1, 1), datetime(2026, 5, 1, 1))
    assert [s.astimezone(timing.zone).replace(tzinfo=None) for s in slots] == walls


class CountingFields:
    """Counts the walls produced: the cost of a next slot is the walls it looks at."""

    def __init__(self, monkeypatch):
        self.produced = 0
        original = walls_module.cron_walls

        def counting(fields, w_from, w_to):
            for wall in original(fields, w_from, w_to):
                self.produced += 1
                yield wall

        monkeypatch.setattr("export_lib.periods.slots.cron_walls", counting)


def test_a_next_slot_of_a_two_minute_cron_looks_at_minutes_not_days(monkeypatch):
    """The five-day search window of before looked at ~3,600 matches of ``*/2`` per call."""
    timing = Timing(timezone="America/New_York", cron="*/2 * * * *")
    counter = CountingFields(monkeypatch)
    at = datetime(2026, 12, 2, 11, 17, 30, tzinfo=UTC)
    assert next_slots(timing, at, 1) == (datetime(2026, 12, 2, 11, 18, tzinfo=UTC),)
    assert latest_slot_at_or_before(timing, at) == datetime(2026, 12, 2, 11, 16, tzinfo=UTC)
    assert counter.produced < 200, counter.produced


def test_across_a_dst_gap_and_fold_the_next_slots_are_the_full_enumerations():
    """Around both Berlin transitions, next/latest agree with slots over a wide range."""
    for expr, gap, fold in (("*/15 * * * *", "shift", "both"), ("30 2 * * *", "shift", "first"),
                            ("0 1-3 * * *", "skip", "second")):
        timing = Timing(timezone="Europe/Berlin", cron=expr, dst_gap=gap, dst_fold=fold)
        for day in (datetime(2026, 3, 28, 22, tzinfo=UTC), datetime(2026, 10, 24, 22, tzinfo=UTC)):
            every = slots_between(timing, day - timedelta(days=3), day + timedelta(days=6))
            for probe in [day + timedelta(minutes=7 * i) for i in range(0, 24 * 60 // 7, 5)]:
                after = [s for s in every if s >= probe]
                before = [s for s in every if s <= probe]
                assert next_slots(timing, probe, 3) == tuple(after[:3]), (expr, probe)
                assert latest_slot_at_or_before(timing, probe) == before[-1], (expr, probe)
