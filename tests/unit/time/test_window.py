"""Reporting windows: named DST cases with literal bounds, and tiling properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from export_lib.config.loader import load_catalog
from export_lib.config.timing import ALLOWED_INTERVAL_HOURS, Timing, WindowSpec
from export_lib.errors import WindowError
from export_lib.periods.slots import next_slots, previous_slot
from export_lib.periods.windows import ExportWindow, resolve_window
from tests.support.time import SHIPPED, timing, utc

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Havana",
         "Pacific/Chatham", "America/Santiago", "Asia/Kolkata", "UTC"]


def bounds(window: ExportWindow) -> tuple[str, str]:
    return window.start.isoformat(), window.end.isoformat()


@pytest.mark.parametrize(("tz", "hour", "every", "spec", "slot", "expected"), [
    pytest.param("Europe/Berlin", 7, 24, WindowSpec(kind="calendar_day"), "2026-03-30T05:00Z",
                 ("2026-03-28T23:00:00+00:00", "2026-03-29T22:00:00+00:00"),
                 id="berlin-calendar-day-23h"),
    pytest.param("Europe/Berlin", 7, 24, WindowSpec(kind="calendar_day"), "2026-10-26T06:00Z",
                 ("2026-10-24T22:00:00+00:00", "2026-10-25T23:00:00+00:00"),
                 id="berlin-calendar-day-25h"),
    pytest.param("America/Havana", 0, 24, WindowSpec(kind="calendar_day"), "2026-03-09T04:00Z",
                 ("2026-03-08T05:00:00+00:00", "2026-03-09T04:00:00+00:00"),
                 id="havana-day-starting-01:00"),
    pytest.param("America/Havana", 0, 24, WindowSpec(kind="calendar_day"), "2026-11-02T05:00Z",
                 ("2026-11-01T04:00:00+00:00", "2026-11-02T05:00:00+00:00"),
                 id="havana-day-with-repeated-midnight"),
    pytest.param("Europe/Berlin", 7, 24, WindowSpec(kind="trailing_days", days=3),
                 "2026-03-30T05:00Z", ("2026-03-26T23:00:00+00:00", "2026-03-29T22:00:00+00:00"),
                 id="berlin-trailing-3-days-across-spring"),
    pytest.param("Europe/Berlin", 7, 24, WindowSpec(kind="previous_business_day"),
                 "2026-03-30T05:00Z", ("2026-03-26T23:00:00+00:00", "2026-03-27T23:00:00+00:00"),
                 id="monday-reports-friday"),
    pytest.param("Europe/Berlin", 7, 24, WindowSpec(kind="previous_business_day"),
                 "2026-03-29T05:00Z", ("2026-03-26T23:00:00+00:00", "2026-03-27T23:00:00+00:00"),
                 id="sunday-reports-friday"),
    pytest.param("Europe/Berlin", 7, 24, WindowSpec(kind="previous_business_day"),
                 "2026-03-31T05:00Z", ("2026-03-29T22:00:00+00:00", "2026-03-30T22:00:00+00:00"),
                 id="tuesday-reports-monday"),
    pytest.param("Europe/Berlin", 0, 1, WindowSpec(kind="interval"), "2026-03-29T01:00Z",
                 ("2026-03-29T00:00:00+00:00", "2026-03-29T01:00:00+00:00"),
                 id="berlin-hourly-interval-over-gap"),
    pytest.param("Australia/Lord_Howe", 2, 24, WindowSpec(kind="trailing_hours", hours=6),
                 "2026-10-03T15:30Z", ("2026-10-03T09:30:00+00:00", "2026-10-03T15:30:00+00:00"),
                 id="lord-howe-trailing-hours-absolute"),
])
def test_window_bounds(tz, hour, every, spec, slot, expected):
    window = resolve_window((spec, timing(tz, hour, every)), utc(slot))
    assert bounds(window) == expected
    assert window.timezone == tz and window.kind == spec.kind


def test_interval_window_at_fold_both_covers_each_half_of_the_repeated_hour():
    hourly = timing("Europe/Berlin", 2, 24, fold="both")
    window = resolve_window((WindowSpec(kind="interval"), hourly), utc("2026-10-25T01:00Z"))
    assert bounds(window) == ("2026-10-25T00:00:00+00:00", "2026-10-25T01:00:00+00:00")


def test_data_export_window_uses_the_company_timezone(tmp_path):
    catalog = load_catalog(SHIPPED)
    secondary = catalog.schedule("acme/google-ads/secondary")  # cron 0 0 * * * UTC
    window = resolve_window(secondary, utc("2026-03-29T00:00Z"))
    assert bounds(window) == ("2026-03-25T23:00:00+00:00", "2026-03-28T23:00:00+00:00")
    assert window.timezone == "Europe/Berlin"


def test_window_of_an_off_schedule_instant_is_rejected():
    with pytest.raises(WindowError, match=r"^2026-03-29T06:00:00Z is not a slot of the schedule"):
        resolve_window((WindowSpec(), timing("Europe/Berlin", 7)), utc("2026-03-29T06:00Z"))


def test_window_dict_round_trip():
    window = resolve_window((WindowSpec(), timing("Europe/Berlin", 7)), utc("2026-03-30T05:00Z"))
    assert window.as_dict() == {
        "start": "2026-03-28T23:00:00Z", "end": "2026-03-29T22:00:00Z",
        "start_local": "2026-03-29T00:00:00+01:00", "end_local": "2026-03-30T00:00:00+02:00",
        "timezone": "Europe/Berlin", "kind": "calendar_day"}
    assert ExportWindow.from_dict(window.as_dict()) == window
    assert window.duration == timedelta(hours=23)


schedules = st.builds(
    Timing,
    timezone=st.sampled_from(ZONES),
    export_hour=st.integers(0, 23),
    interval_hours=st.sampled_from(ALLOWED_INTERVAL_HOURS),
    dst_gap=st.sampled_from(["shift", "skip"]),
    dst_fold=st.sampled_from(["first", "second", "both"]),
)
instants = st.datetimes(min_value=datetime(2021, 1, 1), max_value=datetime(2030, 12, 1),
                        timezones=st.just(UTC))
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(schedule=schedules, start=instants)
def test_slots_ascend_and_follow_the_policy(schedule, start):
    found = next_slots(schedule, start, 40)
    assert len(found) == 40 and list(found) == sorted(set(found)) and found[0] >= start
    tz = schedule.zone
    for slot in found:
        local = slot.astimezone(tz)
        wall = local.replace(tzinfo=None)
        on_the_hour = wall.minute == 0 and wall.second == 0 and wall.hour in schedule.local_hours
        after_gap = (slot - timedelta(seconds=1)).astimezone(tz).utcoffset() < local.utcoffset()
        assert on_the_hour or (schedule.dst_gap == "shift" and after_gap), local.isoformat()
        if on_the_hour:
            first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
            second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
            if first != second:  # ambiguous wall time: the fold policy picks the instant
                allowed = {"first": {first}, "second": {second}, "both": {first, second}}
                assert slot in allowed[schedule.dst_fold]


@PROPERTY
@given(schedule=schedules, start=instants)
def test_interval_windows_tile_time(schedule, start):
    found = next_slots(schedule, start, 30)
    spec = WindowSpec(kind="interval")
    windows = [resolve_window((spec, schedule), s) for s in found]
    assert windows[0].start == previous_slot(schedule, found[0])
    for earlier, later in zip(windows, windows[1:], strict=False):
        assert earlier.end == later.start and earlier.start < earlier.end


@PROPERTY
@given(schedule=schedules.filter(lambda t: t.dst_gap == "shift"), start=instants)
def test_calendar_day_windows_tile_time(schedule, start):
    found = next_slots(schedule, start, 60)
    spec = WindowSpec(kind="calendar_day")
    distinct = sorted({resolve_window((spec, schedule), s) for s in found},
                      key=lambda w: w.start)
    for earlier, later in zip(distinct, distinct[1:], strict=False):
        assert earlier.end == later.start
        assert timedelta(hours=21) <= earlier.duration <= timedelta(hours=27)
