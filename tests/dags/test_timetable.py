"""ExportTimetable: agrees with ``exportctl preview`` slot for slot; catchup; serialization."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from export_lib.config.timing import Timing, WindowSpec
from export_lib.periods.preview import preview_rows
from tests.support.time import timing, utc

TIMINGS = [
    pytest.param(timing("Europe/Berlin", 2, 24, "shift", "first"), id="berlin-02-shift-first"),
    pytest.param(timing("Europe/Berlin", 2, 24, "skip", "both"), id="berlin-02-skip-both"),
    pytest.param(timing("America/Havana", 0, 12, "shift", "second"), id="havana-00-12h"),
    pytest.param(timing("Australia/Lord_Howe", 2, 6, "skip", "both"), id="lord-howe-6h"),
    pytest.param(timing("Pacific/Chatham", 3, 8, "shift", "both"), id="chatham-8h"),
    pytest.param(Timing(timezone="America/New_York", cron="30 1 * * *", dst_fold="both"),
                 id="new-york-cron-fold-both"),
]


def restriction(earliest: datetime | None, catchup: bool = True, latest: datetime | None = None):
    import pendulum
    from airflow.timetables.base import TimeRestriction

    def as_pendulum(d):
        return (None if d is None else pendulum.instance(d))
    return TimeRestriction(earliest=as_pendulum(earliest), latest=as_pendulum(latest),
                           catchup=catchup)


@pytest.mark.parametrize("schedule", TIMINGS)
def test_timetable_agrees_with_preview_over_a_dst_year(schedule):
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(schedule)
    start = utc("2026-01-01T00:00Z")
    per_day = 24 // (schedule.interval_hours or 24)
    rows = preview_rows(WindowSpec(kind="interval"), schedule, start, 366 * per_day)
    runs, last = [], None
    for _ in rows:
        info = table.next_run_info(last, restriction(start), now=utc("2030-01-01T00:00Z"))
        assert info.run_after == info.logical_date == info.data_interval.end
        runs.append(info.logical_date.strftime("%Y-%m-%dT%H:%M:%SZ"))
        last = info.data_interval
    assert runs == [row["slot_utc"] for row in rows]


def test_catchup_false_starts_at_the_latest_slot_not_before():
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(timing("Europe/Berlin", 7))
    now = utc("2026-03-29T09:12Z")  # paused for months, unpaused after today's 07:00 CEST
    info = table.next_run_info(None, restriction(utc("2026-01-01T00:00Z"), catchup=False),
                               now=now)
    assert info.logical_date.isoformat() == "2026-03-29T05:00:00+00:00"
    older = table.next_run_info(table.infer_manual_data_interval(
        run_after=utc("2026-02-01T06:00Z")), restriction(None, catchup=False), now=now)
    assert older.logical_date.isoformat() == "2026-03-29T05:00:00+00:00"
    future = table.next_run_info(None, restriction(utc("2026-06-01T00:00Z"), catchup=False),
                                 now=now)
    assert future.logical_date.isoformat() == "2026-06-01T05:00:00+00:00"


def test_end_date_stops_the_schedule():
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(timing("UTC", 7))
    last = table.infer_manual_data_interval(run_after=utc("2026-01-01T07:00Z"))
    assert table.next_run_info(last, restriction(None, latest=utc("2026-01-02T06:59Z")),
                               now=utc("2026-01-05T00:00Z")) is None


def test_manual_trigger_maps_to_its_slot():
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(timing("Europe/Berlin", 7))
    on_slot = table.infer_manual_data_interval(run_after=utc("2026-03-29T05:00Z"))
    between = table.infer_manual_data_interval(run_after=utc("2026-03-29T04:59Z"))
    assert (on_slot.start.isoformat(), on_slot.end.isoformat()) == (
        "2026-03-29T05:00:00+00:00", "2026-03-29T05:00:00+00:00")
    assert between.start.isoformat() == "2026-03-28T06:00:00+00:00"


def test_serialization_round_trip_through_airflow():
    from airflow.serialization.decoders import decode_timetable
    from airflow.serialization.encoders import encode_timetable
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(Timing(timezone="UTC", cron="30 9 * * *", dst_fold="both"))
    assert ExportTimetable.deserialize(table.serialize()) == table
    encoded = encode_timetable(table)
    assert encoded["__type"] == "export_airflow.timetable.ExportTimetable"
    assert decode_timetable(encoded) == table
    assert table.summary == "cron 30 9 * * * UTC (dst_gap=shift, dst_fold=both)"
    assert ExportTimetable(timing("Europe/Berlin", 7)).summary == "07:00 Europe/Berlin, every 24 h"
    assert table.periodic is True


def test_plugin_registers_the_timetable():
    from export_airflow.plugin import ExportPlugin

    assert ExportPlugin.name == "export_plugin"
    assert [t.__module__ + "." + t.__qualname__ for t in ExportPlugin.timetables] == [
        "export_airflow.timetable.ExportTimetable"]


def test_now_is_read_only_at_the_airflow_edge():
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(timing("UTC", 0, 1))
    info = table.next_dagrun_info(last_automated_data_interval=None,
                                  restriction=restriction(None, catchup=False))
    assert info.logical_date <= datetime.now(UTC)


def _iterate(table, earliest: datetime, latest: datetime, catchup: bool, now: datetime):
    """What Airflow's ``iter_dagrun_infos_between`` does for a backfill (catchup=True)."""
    infos, last = [], None
    while (info := table.next_run_info(last, restriction(earliest, catchup=catchup,
                                                         latest=latest), now=now)) is not None:
        infos.append(info.logical_date.strftime("%Y-%m-%dT%H:%MZ"))
        last = info.data_interval
    return infos


def test_a_backfill_lists_every_slot_of_its_range_however_old():
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(Timing(timezone="UTC", cron="0 14 * * *"))
    now = utc("2026-11-30T12:00Z")
    assert _iterate(table, utc("2026-11-20T00:00Z"), utc("2026-11-23T23:59Z"), True, now) == [
        "2026-11-20T14:00Z", "2026-11-21T14:00Z", "2026-11-22T14:00Z", "2026-11-23T14:00Z"]
    # a range holding no slot lists nothing (Airflow then says "No runs to create")
    assert _iterate(table, utc("2026-11-20T00:00Z"), utc("2026-11-20T13:59Z"), True, now) == []


def test_the_scheduler_always_jumps_to_the_newest_due_slot():
    """catchup=False (ADR 0006): after a 30-day outage the next run is the newest due slot,
    never the oldest missed one; missed slots are recover_missed's backfill."""
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(Timing(timezone="UTC", cron="0 14 * * *"))
    last = table.infer_manual_data_interval(run_after=utc("2026-10-31T14:00Z"))
    now = utc("2026-11-30T13:58Z")
    info = table.next_run_info(last, restriction(utc("2020-01-01T00:00Z"), catchup=False),
                               now=now)
    assert info.logical_date.isoformat() == "2026-11-29T14:00:00+00:00"
    after = table.next_run_info(info.data_interval, restriction(utc("2020-01-01T00:00Z"),
                                                                catchup=False), now=now)
    assert after.run_after.isoformat() == "2026-11-30T14:00:00+00:00"


def test_pre_adr_0006_serializations_still_load():
    from export_airflow.timetable import ExportTimetable

    old = {"timing": Timing(timezone="UTC", cron="0 14 * * *").model_dump(mode="json"),
           "lookback_seconds": 172800.0, "recovery": "latest"}
    assert ExportTimetable.deserialize(old) == ExportTimetable(Timing(timezone="UTC",
                                                                      cron="0 14 * * *"))


def test_after_48_missed_hourly_slots_the_scheduler_creates_the_current_hour():
    from export_airflow.timetable import ExportTimetable

    table = ExportTimetable(Timing(timezone="UTC", cron="0 * * * *"))
    last = table.infer_manual_data_interval(run_after=utc("2026-11-28T12:00Z"))
    info = table.next_run_info(last, restriction(utc("2020-01-01T00:00Z"), catchup=False),
                               now=utc("2026-11-30T12:00:30Z"))
    assert info.logical_date.isoformat() == "2026-11-30T12:00:00+00:00"
    # the 47 hours between are recover_missed's backfill, listed slot by slot
    assert len(_iterate(table, utc("2026-11-28T13:00Z"), utc("2026-11-30T11:00Z"), True,
                        utc("2026-11-30T12:00:30Z"))) == 47


def test_one_dag_follows_a_timing_edited_from_an_explicit_slot():
    """issue 22: 07:00 Berlin until 3 Dec 08:00Z, then 09:00: the scheduler walks from the last
    old slot to the first new one, a backfill lists each timing's slots in its own span, and
    the timeline survives serialisation (the scheduler rebuilds it from the metadata DB)."""
    from airflow.timetables.base import DataInterval
    from export_airflow.timetable import ExportTimetable

    from export_lib.config.timing import timeline_of

    seven = Timing(timezone="Europe/Berlin", export_hour=7, interval_hours=24)
    nine = Timing(timezone="Europe/Berlin", export_hour=9, interval_hours=24)
    table = ExportTimetable(timeline_of([(None, seven), (utc("2026-12-03T08:00Z"), nine)]))
    last = DataInterval.exact(utc("2026-12-03T06:00Z"))
    after = table.next_run_info(last, restriction(None, catchup=False), now=utc("2026-12-03T07:00Z"))
    assert after.logical_date == utc("2026-12-03T08:00Z")
    backfill, found = None, []
    for _ in range(4):
        backfill = table.next_run_info(backfill, restriction(utc("2026-12-02T00:00Z")),
                                       now=utc("2026-12-06T00:00Z"))
        found.append(f"{backfill.logical_date:%d %H:%M}")
        backfill = backfill.data_interval
    assert found == ["02 06:00", "03 06:00", "03 08:00", "04 08:00"]
    again = ExportTimetable.deserialize(table.serialize())
    assert again == table and again.summary == (
        "09:00 Europe/Berlin, every 24 h from 2026-12-03T08:00Z; before: 07:00 Europe/Berlin, "
        "every 24 h")
    assert table.infer_manual_data_interval(run_after=utc("2026-12-04T07:30Z")).start == utc(
        "2026-12-03T08:00Z")  # 07:00 Berlin is no longer a slot: the latest 09:00 one
