"""Named DST cases for slots, with literal expected instants (ADR 0001)."""

from __future__ import annotations

from datetime import date

import pytest

from export_lib.config.timing import Timing
from export_lib.errors import WindowError
from export_lib.periods.slots import (
    is_slot,
    latest_slot_at_or_before,
    nearest_slots,
    next_slots,
    previous_slot,
    require_slot,
    slots_between,
    start_of_day,
)
from tests.support.time import timing, utc, z

CASES = [
    pytest.param("Europe/Berlin", 2, 24, "shift", "first", "2026-03-28T12:00Z",
                 "2026-03-30T12:00Z", ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"],
                 id="europe-berlin-spring-02:00-shift-to-03:00"),
    pytest.param("Europe/Berlin", 2, 24, "skip", "first", "2026-03-28T12:00Z",
                 "2026-03-30T12:00Z", ["2026-03-30T00:00:00Z"],
                 id="europe-berlin-spring-02:00-skipped"),
    pytest.param("Europe/Berlin", 2, 24, "shift", "first", "2026-10-24T12:00Z",
                 "2026-10-26T12:00Z", ["2026-10-25T00:00:00Z", "2026-10-26T01:00:00Z"],
                 id="europe-berlin-fall-first"),
    pytest.param("Europe/Berlin", 2, 24, "shift", "second", "2026-10-24T12:00Z",
                 "2026-10-26T12:00Z", ["2026-10-25T01:00:00Z", "2026-10-26T01:00:00Z"],
                 id="europe-berlin-fall-second"),
    pytest.param("Europe/Berlin", 2, 24, "shift", "both", "2026-10-24T12:00Z",
                 "2026-10-26T12:00Z",
                 ["2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-26T01:00:00Z"],
                 id="europe-berlin-fall-both"),
    pytest.param("Europe/Berlin", 0, 1, "shift", "first", "2026-03-29T00:00Z",
                 "2026-03-29T02:00Z", ["2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z"],
                 id="europe-berlin-hourly-shift-merges-with-03:00"),
    pytest.param("America/New_York", 2, 24, "shift", "first", "2026-03-07T12:00Z",
                 "2026-03-09T12:00Z", ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
                 id="america-new-york-spring-shift"),
    pytest.param("America/New_York", 1, 24, "shift", "both", "2026-10-31T12:00Z",
                 "2026-11-02T12:00Z",
                 ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-02T06:00:00Z"],
                 id="america-new-york-fall-both"),
    pytest.param("Australia/Lord_Howe", 2, 24, "shift", "first", "2026-10-02T12:00Z",
                 "2026-10-04T12:00Z", ["2026-10-02T15:30:00Z", "2026-10-03T15:30:00Z"],
                 id="lord-howe-30-minute-gap-shift-to-02:30"),
    pytest.param("Australia/Lord_Howe", 2, 24, "skip", "first", "2026-10-02T12:00Z",
                 "2026-10-04T12:00Z", ["2026-10-02T15:30:00Z"],
                 id="lord-howe-30-minute-gap-skip"),
    pytest.param("Australia/Lord_Howe", 0, 1, "shift", "both", "2026-04-04T13:00Z",
                 "2026-04-04T17:00Z",
                 ["2026-04-04T13:00:00Z", "2026-04-04T14:00:00Z", "2026-04-04T15:30:00Z",
                  "2026-04-04T16:30:00Z"],
                 id="lord-howe-30-minute-fold-has-no-whole-hour"),
    pytest.param("America/Havana", 0, 24, "shift", "first", "2026-03-07T00:00Z",
                 "2026-03-09T12:00Z",
                 ["2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"],
                 id="havana-midnight-gap-shift-to-01:00"),
    pytest.param("America/Havana", 0, 24, "skip", "first", "2026-03-07T00:00Z",
                 "2026-03-09T12:00Z", ["2026-03-07T05:00:00Z", "2026-03-09T04:00:00Z"],
                 id="havana-midnight-gap-skip"),
    pytest.param("America/Havana", 0, 24, "shift", "second", "2026-10-31T00:00Z",
                 "2026-11-02T12:00Z",
                 ["2026-10-31T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-02T05:00:00Z"],
                 id="havana-midnight-fold-second"),
    pytest.param("America/Havana", 0, 24, "shift", "both", "2026-10-31T00:00Z",
                 "2026-11-02T12:00Z",
                 ["2026-10-31T04:00:00Z", "2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z",
                  "2026-11-02T05:00:00Z"],
                 id="havana-midnight-fold-both"),
    pytest.param("Pacific/Chatham", 3, 24, "shift", "first", "2026-09-25T12:00Z",
                 "2026-09-27T12:00Z", ["2026-09-25T14:15:00Z", "2026-09-26T14:00:00Z"],
                 id="chatham-03:00-in-gap-shift-to-03:45"),
    pytest.param("Pacific/Chatham", 3, 24, "shift", "both", "2026-04-03T12:00Z",
                 "2026-04-05T12:00Z",
                 ["2026-04-03T13:15:00Z", "2026-04-04T13:15:00Z", "2026-04-04T14:15:00Z"],
                 id="chatham-fold-both"),
]


@pytest.mark.parametrize(("tz", "hour", "every", "gap", "fold", "start", "end", "expected"),
                         CASES)
def test_slots_at_dst_changes(tz, hour, every, gap, fold, start, end, expected):
    found = slots_between(timing(tz, hour, every, gap, fold), utc(start), utc(end))
    assert z(found) == expected


@pytest.mark.parametrize(("tz", "day", "expected"), [
    pytest.param("Europe/Berlin", date(2026, 3, 29), "2026-03-28T23:00:00+00:00", id="berlin"),
    pytest.param("America/Havana", date(2026, 3, 8), "2026-03-08T05:00:00+00:00",
                 id="havana-gap-swallows-midnight"),
    pytest.param("America/Havana", date(2026, 11, 1), "2026-11-01T04:00:00+00:00",
                 id="havana-midnight-repeated-earliest"),
    pytest.param("Pacific/Chatham", date(2026, 9, 27), "2026-09-26T11:15:00+00:00",
                 id="chatham"),
])
def test_start_of_day(tz, day, expected):
    assert start_of_day(tz, day).isoformat() == expected


def test_six_hourly_slots_follow_export_hour_modulo_interval():
    every_six = timing("Asia/Kolkata", hour=5, every=6)
    assert z(next_slots(every_six, utc("2026-01-01T00:00Z"), 4)) == [
        "2026-01-01T05:30:00Z", "2026-01-01T11:30:00Z", "2026-01-01T17:30:00Z",
        "2026-01-01T23:30:00Z"]  # 11:00, 17:00, 23:00 IST, then 05:00 IST on 2 January


def test_an_interval_that_does_not_divide_24_restarts_at_export_hour_each_day():
    """Seed 000 allows any interval from 1 to 24 h: 02:00 every 5 h is 02, 07, 12, 17, 22 local
    time every day (the night gap is 4 h), across a DST change too."""
    every_five = timing("Europe/Berlin", hour=2, every=5)
    assert every_five.local_hours == (2, 7, 12, 17, 22)
    assert every_five.summary == ("02:00 Europe/Berlin, every 5 h from 02:00, 07:00, 12:00, "
                                  "17:00, 22:00 each day")
    # 2026-03-29: 02:00 does not exist in Berlin (shift → 03:00 CEST = 01:00 UTC).
    assert z(next_slots(every_five, utc("2026-03-28T20:00Z"), 7)) == [
        "2026-03-28T21:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T05:00:00Z",
        "2026-03-29T10:00:00Z", "2026-03-29T15:00:00Z", "2026-03-29T20:00:00Z",
        "2026-03-30T00:00:00Z"]
    assert z([previous_slot(every_five, utc("2026-03-29T01:00Z"))]) == ["2026-03-28T21:00:00Z"]
    assert timing("UTC", hour=0, every=7).local_hours == (0, 7, 14, 21)
    assert timing("UTC", hour=20, every=23).local_hours == (20,)


def test_next_slots_is_inclusive_and_previous_is_strict():
    daily = timing("Europe/Berlin", hour=7)
    slot = utc("2026-03-29T05:00Z")
    assert next_slots(daily, slot, 1) == (slot,)
    assert z([previous_slot(daily, slot)]) == ["2026-03-28T06:00:00Z"]
    assert latest_slot_at_or_before(daily, slot) == slot
    assert z([latest_slot_at_or_before(daily, utc("2026-03-29T04:59Z"))]) == [
        "2026-03-28T06:00:00Z"]
    assert is_slot(daily, slot) and not is_slot(daily, utc("2026-03-29T06:00Z"))


def test_cron_slots_use_wall_time_matches_with_the_dst_policy():
    cron = Timing(timezone="Europe/Berlin", cron="30 2 * * *", dst_gap="skip", dst_fold="both")
    found = slots_between(cron, utc("2026-03-28T00:00Z"), utc("2026-03-31T00:00Z"))
    assert z(found) == ["2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"]
    fall = slots_between(cron, utc("2026-10-25T00:00Z"), utc("2026-10-26T00:00Z"))
    assert z(fall) == ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]


def test_cron_gap_shift_goes_to_the_end_of_the_gap_not_plus_one_hour():
    cron = Timing(timezone="Europe/Berlin", cron="30 2 * * *")
    assert z(next_slots(cron, utc("2026-03-29T00:00Z"), 1)) == ["2026-03-29T01:00:00Z"]


def test_sparse_cron_finds_leap_days():
    leap = Timing(timezone="UTC", cron="0 0 29 2 *")
    assert z(next_slots(leap, utc("2025-01-01T00:00Z"), 2)) == [
        "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]


def test_nearest_slots_name_both_sides():
    daily = timing("UTC", hour=7)
    assert z(nearest_slots(daily, utc("2026-01-02T12:00Z"), 1)) == [
        "2026-01-02T07:00:00Z", "2026-01-03T07:00:00Z"]


def test_off_schedule_slot_is_rejected_with_nearest_slots():
    daily = timing("Europe/Berlin", hour=7)
    with pytest.raises(WindowError, match=r"^2026-03-29T06:00:00Z is not a slot of the test "
                       r"\(07:00 Europe/Berlin, every 24 h\); the nearest valid slots are "
                       r"2026-03-28T06:00:00Z, 2026-03-29T05:00:00Z, 2026-03-30T05:00:00Z, "
                       r"2026-03-31T05:00:00Z$"):
        require_slot(daily, utc("2026-03-29T06:00Z"), "the test")


def test_naive_instants_are_rejected():
    with pytest.raises(WindowError, match="start must be timezone-aware"):
        slots_between(timing("UTC"), utc("2026-01-01T00:00"), utc("2026-01-02T00:00Z"))
