"""recovery_range (ADR 0006): the missed slots a scheduled run hands to one backfill."""

from __future__ import annotations

from datetime import timedelta

from export_lib.config.timing import Timing
from export_lib.periods.recovery import recovery_range
from tests.support.time import utc

DAILY = Timing(timezone="UTC", cron="0 14 * * *")
HOURLY = Timing(timezone="UTC", cron="0 * * * *")


def test_a_new_dag_recovers_its_lookback_oldest_first():
    got = recovery_range(DAILY, utc("2026-11-30T14:00Z"), previous=None,
                         lookback=timedelta(days=30))
    assert (got.first, got.last, got.count) == (utc("2026-10-31T14:00Z"),
                                                utc("2026-11-29T14:00Z"), 30)


def test_48_missed_hourly_slots_after_an_outage_reach_back_to_the_previous_run():
    """The scheduler (catchup=False) created 12:00 after a 2-day outage; the previous run was
    two days earlier at 12:00: the 47 slots between plus the previous itself (it has a run;
    the backfill's reprocess_behavior=none skips it) — 48 slots older than the lookback."""
    got = recovery_range(HOURLY, utc("2026-11-30T12:00Z"), previous=utc("2026-11-28T12:00Z"),
                         lookback=timedelta(hours=6))
    assert (got.first, got.last, got.count) == (utc("2026-11-28T12:00Z"),
                                                utc("2026-11-30T11:00Z"), 48)


def test_the_range_always_covers_the_lookback_so_a_lost_slot_is_found_again():
    got = recovery_range(HOURLY, utc("2026-11-30T12:00Z"), previous=utc("2026-11-30T11:00Z"),
                         lookback=timedelta(hours=3))
    assert (got.first, got.last, got.count) == (utc("2026-11-30T09:00Z"),
                                                utc("2026-11-30T11:00Z"), 3)


def test_nothing_before_effective_from_and_nothing_when_no_slot_was_missed():
    assert recovery_range(DAILY, utc("2026-11-30T14:00Z"), previous=None,
                          lookback=timedelta(days=30),
                          effective_from=utc("2026-11-30T14:00Z")) is None
    got = recovery_range(DAILY, utc("2026-11-30T14:00Z"), previous=None,
                         lookback=timedelta(days=30), effective_from=utc("2026-11-28T00:00Z"))
    assert got.describe() == "2 missed slots 2026-11-28T14:00Z .. 2026-11-29T14:00Z"
