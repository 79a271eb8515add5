"""Run keys and deadlines: deterministic, readable, reversible."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from export_lib.config.loader import load_catalog
from export_lib.errors import WindowError
from export_lib.periods.names import deadline_for, parse_run_key, run_key, slot_label
from tests.support.time import SHIPPED, utc


def test_run_key_is_minute_precision_in_utc():
    berlin_summer = timezone(timedelta(hours=2))
    slot = utc("2026-03-29T07:00:00+02:00").astimezone(berlin_summer)
    assert run_key("acme/daily-spend", slot) == "acme/daily-spend/2026-03-29T05:00Z"


def test_run_key_shows_seconds_only_when_present():
    assert slot_label(utc("2026-03-29T05:00:30Z")) == "2026-03-29T05:00:30Z"


def test_run_key_round_trip():
    key = run_key("acme/google-ads/primary", utc("2026-03-29T14:00Z"))
    assert parse_run_key(key) == ("acme/google-ads/primary", utc("2026-03-29T14:00Z"))


def test_malformed_run_key_is_rejected():
    with pytest.raises(WindowError, match=r"^malformed run key 'acme-2026'; expected "
                       r"'<schedule id>/<YYYY-MM-DDTHH:MMZ>'"):
        parse_run_key("acme-2026")


def test_naive_slot_is_rejected():
    with pytest.raises(WindowError, match="a run key needs a timezone-aware slot"):
        run_key("acme/daily-spend", utc("2026-03-29T05:00"))


def test_deadline_is_slot_plus_the_schedule_deadline():
    schedule = load_catalog(SHIPPED).schedule("kiwi-outdoors/six-hourly-orders")
    assert deadline_for(schedule, utc("2026-03-29T13:00Z")).isoformat() == (
        "2026-03-29T14:30:00+00:00")
