"""Timing edits from an explicit slot (issue 22 item 2, ADR 0005 amended): an export's timing
keys may differ between versions; the schedule's slots follow the timeline (each timing in its
own span), windows stay contiguous across the switch, and a timing without a timeline is
serialised exactly as before."""

from __future__ import annotations

from datetime import datetime

import pytest

from export_lib.config.timing import Timing, WindowSpec, timeline_of
from export_lib.errors import WindowError
from export_lib.periods.slots import (
    is_slot,
    latest_slot_at_or_before,
    next_slots,
    previous_slot,
    require_slot,
    slots_between,
)
from export_lib.periods.windows import window_for


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


BERLIN_7 = Timing(timezone="Europe/Berlin", export_hour=7, interval_hours=24)
BERLIN_9 = Timing(timezone="Europe/Berlin", export_hour=9, interval_hours=24)
SWITCH = _at("2026-12-03T08:00Z")  # the first 09:00 Berlin slot after 2 Dec, 10:00 UTC
DAILY = timeline_of([(None, BERLIN_7), (SWITCH, BERLIN_9)])


def test_each_timing_fires_in_its_own_span():
    assert slots_between(DAILY, _at("2026-12-01T00:00Z"), _at("2026-12-06T00:00Z")) == tuple(
        _at(s) for s in ("2026-12-01T06:00Z", "2026-12-02T06:00Z", "2026-12-03T06:00Z",
                         "2026-12-03T08:00Z", "2026-12-04T08:00Z", "2026-12-05T08:00Z"))
    assert next_slots(DAILY, _at("2026-12-03T06:00:01Z"), 2) == (
        _at("2026-12-03T08:00Z"), _at("2026-12-04T08:00Z"))
    assert latest_slot_at_or_before(DAILY, _at("2026-12-03T07:59Z")) == _at("2026-12-03T06:00Z")
    assert previous_slot(DAILY, _at("2026-12-03T08:00Z")) == _at("2026-12-03T06:00Z")
    assert is_slot(DAILY, _at("2026-12-02T06:00Z")) and is_slot(DAILY, _at("2026-12-04T08:00Z"))
    assert not is_slot(DAILY, _at("2026-12-04T06:00Z"))  # the old hour, after the switch
    assert not is_slot(DAILY, _at("2026-12-02T08:00Z"))  # the new hour, before it


def test_an_old_slot_after_the_switch_is_refused_naming_the_slots_around_it():
    with pytest.raises(WindowError, match=r"2026-12-04T06:00:00Z is not a slot of acme/daily "
                       r"\(09:00 Europe/Berlin, every 24 h from 2026-12-03T08:00Z; before: "
                       r"07:00 Europe/Berlin, every 24 h\); the nearest valid slots are "
                       r"2026-12-03T06:00:00Z, 2026-12-03T08:00:00Z, 2026-12-04T08:00:00Z, "
                       r"2026-12-05T08:00:00Z$"):
        require_slot(DAILY, _at("2026-12-04T06:00Z"), "acme/daily")


def test_interval_windows_tile_time_across_an_interval_change():
    """interval_hours 6 -> 4 at 12:00 UTC: the first new slot reports since the last old one."""
    six = Timing(timezone="UTC", export_hour=0, interval_hours=6)
    four = Timing(timezone="UTC", export_hour=0, interval_hours=4)
    timeline = timeline_of([(None, six), (_at("2026-12-02T12:00Z"), four)])
    slots = slots_between(timeline, _at("2026-12-02T00:00Z"), _at("2026-12-03T00:00Z"))
    assert [f"{s:%H}" for s in slots] == ["00", "06", "12", "16", "20"]
    spec = WindowSpec(kind="interval")
    windows = [window_for(spec, timeline, s, "UTC") for s in slots[1:]]
    assert [(f"{w.start:%H}", f"{w.end:%H}") for w in windows] == [
        ("00", "06"), ("06", "12"), ("12", "16"), ("16", "20")]
    assert all(a.end == b.start for a, b in zip(windows, windows[1:], strict=False))


def test_a_timezone_change_of_a_cron():
    berlin = Timing(timezone="Europe/Berlin", cron="0 6 * * *")
    york = Timing(timezone="America/New_York", cron="0 6 * * *")
    timeline = timeline_of([(None, berlin), (_at("2026-12-03T11:00Z"), york)])
    assert slots_between(timeline, _at("2026-12-02T00:00Z"), _at("2026-12-05T00:00Z")) == (
        _at("2026-12-02T05:00Z"), _at("2026-12-03T05:00Z"), _at("2026-12-03T11:00Z"),
        _at("2026-12-04T11:00Z"))
    assert timeline.at(_at("2026-12-03T10:59Z")) == berlin
    assert timeline.at(_at("2026-12-03T11:00Z")) == york


def test_versions_with_the_same_timing_share_a_span_and_one_timing_stays_plain():
    same = timeline_of([(None, BERLIN_7), (_at("2026-11-01T00:00Z"), BERLIN_7)])
    assert same == BERLIN_7 and not same.earlier
    three = timeline_of([(None, BERLIN_7), (_at("2026-11-01T00:00Z"), BERLIN_7),
                         (SWITCH, BERLIN_9)])
    assert three == DAILY
    assert [(f"{a:%Y-%m-%d}" if a else None, t.export_hour) for a, _, t in three.segments] == [
        (None, 7), ("2026-12-03", 9)]


def test_a_plain_timing_serialises_as_before_and_a_timeline_round_trips():
    assert BERLIN_7.model_dump(mode="json") == {
        "timezone": "Europe/Berlin", "export_hour": 7, "interval_hours": 24, "cron": None,
        "dst_gap": "shift", "dst_fold": "first"}
    dumped = DAILY.model_dump(mode="json")
    assert dumped["effective_from"] == "2026-12-03T08:00:00Z"
    assert [e["export_hour"] for e in dumped["earlier"]] == [7]
    assert "earlier" not in dumped["earlier"][0]
    assert Timing.model_validate(dumped) == DAILY


def test_a_timeline_out_of_order_is_refused():
    with pytest.raises(ValueError, match="earlier timings must be plain and in order"):
        Timing.model_validate({**BERLIN_9.model_dump(), "effective_from": "2026-12-01T00:00Z",
                               "earlier": [{**BERLIN_7.model_dump(),
                                            "effective_from": "2026-12-02T00:00Z"},
                                           BERLIN_7.model_dump()]})
