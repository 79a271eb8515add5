"""Batched recovery's pure parts (ADR 0032): backfill or batches, the batch run's id, conf
and its refusal of a bad conf, the two settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from export_lib import settings
from export_lib.errors import ConfigError
from export_lib.periods.recovery import plan_recovery
from export_lib.pipeline.batch_requests import (
    batch_conf,
    batch_dag_id,
    batch_note,
    batch_run_id,
    parse_periods,
)

START = datetime(2026, 1, 1, 6, 0, tzinfo=UTC)
DAILY = [START + timedelta(days=i) for i in range(365)]


def test_a_year_of_missed_days_goes_in_batches_of_fifty_oldest_first():
    plan = plan_recovery(DAILY, settled=set(), in_flight=set(), threshold=8, size=50)
    assert plan.kind == "batch"
    assert [len(b) for b in plan.batches] == [50] * 7 + [15]
    assert plan.batches[0][0] == DAILY[0] and plan.batches[-1][-1] == DAILY[-1]
    assert plan.describe() == ("365 slot(s) 2026-01-01T06:00Z .. 2026-12-31T06:00Z in 8 "
                               "batch(es)")


def test_up_to_the_threshold_is_a_backfill_and_settled_or_in_flight_slots_are_left_out():
    missed = DAILY[:10]
    plan = plan_recovery(missed, settled={missed[0]}, in_flight={missed[9]}, threshold=8,
                         size=50)
    assert (plan.kind, plan.todo) == ("backfill", tuple(missed[1:9]))
    assert plan.describe() == "8 slot(s) 2026-01-02T06:00Z .. 2026-01-09T06:00Z by backfill"
    assert plan_recovery(missed, settled=set(missed), in_flight=set(), threshold=8,
                         size=50).kind == "none"


def test_few_slots_with_settled_ones_between_them_go_in_a_batch_not_a_backfill():
    """A batch left two failed periods apart: a backfill over them would start a no-op run for
    every settled slot between."""
    missed = DAILY[:60]
    settled = set(missed) - {missed[3], missed[40]}
    plan = plan_recovery(missed, settled=settled, in_flight=set(), threshold=8, size=50)
    assert (plan.kind, plan.batches) == ("batch", ((missed[3], missed[40]),))


def test_threshold_zero_batches_every_recovery():
    plan = plan_recovery(DAILY[:1], settled=set(), in_flight=set(), threshold=0, size=50)
    assert (plan.kind, plan.batches) == ("batch", ((DAILY[0],),))


def test_a_batch_run_says_which_periods_it_covers():
    slots = DAILY[49::-1]  # any order in, oldest first out
    assert batch_dag_id("acme") == "recovery_batch__acme"
    assert batch_run_id("acme/daily-spend", slots) == (
        "batch__acme_daily-spend__2026-01-01T06:00Z__2026-02-19T06:00Z")
    conf = batch_conf("acme/daily-spend", slots)
    assert conf["periods"][:2] == ["2026-01-01T06:00Z", "2026-01-02T06:00Z"]
    assert parse_periods(conf, "here") == ("acme/daily-spend", DAILY[:50])
    assert batch_note("acme/daily-spend", slots).startswith(
        "Batched recovery of acme/daily-spend: 50 period(s), slots 2026-01-01T06:00Z .. "
        "2026-02-19T06:00Z")


@pytest.mark.parametrize(("conf", "message"), [
    pytest.param({"periods": ["2026-01-01T06:00Z"]},
                 r"^run x: conf.schedule_id is None; give the export's id, e.g. "
                 r"'acme/daily-spend'$", id="no-schedule"),
    pytest.param({"schedule_id": "acme/daily-spend", "periods": []},
                 r"^run x: conf.periods is \[\]; give a list of slots", id="no-periods"),
    pytest.param({"schedule_id": "acme/daily-spend", "periods": ["2026-01-01T06:00Z", "soon"]},
                 r"^run x: conf.periods\[1\] is 'soon'; write a UTC slot such as "
                 r"'2026-03-28T05:00Z'$", id="bad-slot"),
    pytest.param({"schedule_id": "acme/daily-spend", "periods": ["2026-01-01T06:00"]},
                 r"^run x: conf.periods\[0\] is '2026-01-01T06:00'", id="naive-slot"),
])
def test_a_bad_batch_conf_is_refused_naming_the_field(conf, message):
    with pytest.raises(ConfigError, match=message):
        parse_periods(conf, "run x")


def test_the_batch_settings_and_their_refusals():
    assert (settings.batch_recovery_threshold({}), settings.batch_recovery_size({})) == (8, 50)
    assert settings.batch_recovery_threshold({"EXPORT_BATCH_RECOVERY_THRESHOLD": "0"}) == 0
    assert settings.batch_recovery_size({"EXPORT_BATCH_RECOVERY_SIZE": "200"}) == 200
    with pytest.raises(ConfigError, match=r"^EXPORT_BATCH_RECOVERY_SIZE: '0' is not a whole "
                       r"number, at least 1; unset it for the default \(50\)$"):
        settings.batch_recovery_size({"EXPORT_BATCH_RECOVERY_SIZE": "0"})
    with pytest.raises(ConfigError, match=r"^EXPORT_BATCH_RECOVERY_THRESHOLD: 'many' is not"):
        settings.batch_recovery_threshold({"EXPORT_BATCH_RECOVERY_THRESHOLD": "many"})
