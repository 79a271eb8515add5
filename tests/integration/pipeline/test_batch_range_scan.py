"""A batch reads the source once for its consecutive CSV periods (ADR 0038), on a real
PostgreSQL source and ledger with artifacts in the moto S3 server: one COPY, each period's
artifact byte-identical to a render of that period alone (under its own cutoff), an empty
period in the middle; a source failure mid-scan fails the period being written alone, the
rest are read one by one and a retry exports it once; ineligible periods (Parquet, overlapping
windows, a config version apart) are read per period and the batch's log line says why."""

from __future__ import annotations

import hashlib
import io
import logging
from datetime import timedelta

import psycopg

from tests.fixtures.delivery import webhook, webhook_server  # noqa: F401 - fixtures
from tests.integration.pipeline.test_batch_recovery import (  # noqa: F401 - a fixture
    NOW,
    SLOTS,
    Clock,
    _batch,
    batch_world,
)
from tests.integration.render.test_range_scan import CopyCounter
from tests.world import SEEDED_AT

PERIODS = SLOTS[:6]
NASTY = ['a "quoted" one', "comma, inside", "line\nbreak", "null-me", "=SUM(A1)", "",
         "tab\there", "ünïcödé"]
EMPTY = 3  # the period with no rows at all


def _cutoff(index: int):
    return NOW + timedelta(hours=index)


def _register(world, ledger, slots):
    """Register the periods before the batch, each with its own cutoff (a registration is
    never rewritten: the batch finds them)."""
    from export_lib.pipeline.start import register_run

    return [register_run(ledger, world.schedule(), slot, now=_cutoff(i)).run_key
            for i, slot in enumerate(slots)]


def _alone(dsn, run) -> tuple[str, int]:
    """sha256 and rows of a render of ``run``'s period on its own."""
    from export_lib.pipeline.stages import render_options, schedule_of
    from export_lib.render.engine import render
    from export_lib.source.connections import parse_connection
    from export_lib.source.database import open_source

    schedule = schedule_of(run)
    options = render_options(run, schedule)
    sink = io.BytesIO()
    with open_source(parse_connection("demo_source", dsn)) as source:
        result = render(source, schedule.query, company_id=run.company,
                        window_start=run.window_start, window_end=run.window_end,
                        cutoff=run.source_cutoff, options=options, sink=sink)
    assert result.sha256 == hashlib.sha256(sink.getvalue()).hexdigest()
    return result.sha256, result.rows


def _scan_events(ledger, key) -> list[str]:
    return [e["detail"] for e in ledger.events(key) if "one source read" in (e["detail"] or "")]


def _body(s3, bucket, artifact) -> bytes:
    key = artifact.uri.split(f"s3://{bucket}/", 1)[1]
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_one_read_gives_each_period_the_file_of_its_own_render(
        batch_world, monkeypatch, caplog):  # noqa: F811
    from export_lib.pipeline.batch import export_batch
    from export_lib.storage.stores import open_store

    world, dsn, s3, bucket = batch_world
    ledger = world.ledger()
    keys = _register(world, ledger, PERIODS)
    runs = [ledger.get_run(k) for k in keys]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE OR REPLACE VIEW widget_metrics AS SELECT company_id, "
                     "NULLIF(widget_id, 'null-me') AS widget_id, event_time, value, "
                     "ingested_at FROM widget_metrics_base WHERE readable(event_time)")
        rows = [(name, runs[1].window_start + timedelta(minutes=7 + i), i, SEEDED_AT)
                for i, name in enumerate(NASTY)]
        for i, run in enumerate(runs):  # one row just inside its cutoff, one just after
            rows += [("late-in", run.window_start + timedelta(hours=2), 1,
                      _cutoff(i) - timedelta(minutes=1)),
                     ("late-out", run.window_start + timedelta(hours=2), 2,
                      _cutoff(i) + timedelta(minutes=30))]
        conn.cursor().executemany("INSERT INTO widget_metrics_base VALUES ('acme', %s, %s, %s, "
                                  "%s)", rows)
        conn.execute("DELETE FROM widget_metrics_base WHERE company_id = 'acme' AND "
                     "event_time >= %s AND event_time < %s",
                     (runs[EMPTY].window_start, runs[EMPTY].window_end))
    copies = CopyCounter(monkeypatch)
    caplog.set_level(logging.INFO, logger="export_lib.pipeline.batch")

    outcome = export_batch(ledger, open_store(), world.schedule(), PERIODS,
                           _batch(world, Clock(NOW + timedelta(days=1))))

    assert [p.outcome for p in outcome.periods] == ["exported"] * len(PERIODS)
    assert len(copies.statements) == 1 and "width_bucket" in copies.statements[0]
    assert "source reads: 1 range scan(s) serving 6 period(s), 0 per-period read(s)" in (
        caplog.text)
    expected_rows = []
    for run in runs:
        (artifact,) = ledger.artifacts(run.run_key)
        sha, rows = _alone(dsn, run)
        assert (artifact.sha256, artifact.rows) == (sha, rows), run.run_key
        expected_rows.append(rows)
        body = _body(s3, bucket, artifact)
        assert hashlib.sha256(body).hexdigest() == sha
        if run is not runs[EMPTY]:
            assert b",late-in," in body and b"late-out" not in body, run.run_key
        assert _scan_events(ledger, run.run_key) == [
            "rendered from batch recovery_batch__acme/batch__test/export_periods's one source "
            "read for 6 periods [2026-03-17T23:00:00Z, 2026-03-23T23:00:00Z)"]
    assert expected_rows[EMPTY] == 0 and min(expected_rows[:EMPTY]) > 1
    assert _body(s3, bucket, ledger.artifacts(runs[EMPTY].run_key)[0]) == (
        b"company_id,widget_id,event_time,value\n")
    nasty = _body(s3, bucket, ledger.artifacts(runs[1].run_key)[0])
    for field in (b'"a ""quoted"" one"', b'"comma, inside"', b'"line\nbreak"', b",,",
                  b"'=SUM(A1)", b',"",', b"tab\there", "ünïcödé".encode()):
        assert field in nasty, field


class KillsTheScanOnFirstWrite:
    """The target of the period being written: terminates the scan's backend as its first
    rows land, so the COPY dies mid-stream."""

    def __init__(self, sink, dsn: str, pid: int) -> None:
        self.sink, self.dsn, self.pid = sink, dsn, pid

    def write(self, data):
        if self.pid:
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (self.pid,))
            self.pid = 0
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()


def test_a_source_failure_mid_scan_fails_that_period_alone_and_a_retry_exports_it_once(
        batch_world, monkeypatch, caplog):  # noqa: F811
    from export_lib.errors import SourceError
    from export_lib.pipeline.batch import export_batch
    from export_lib.render.range_scan import RangeScan
    from export_lib.storage.stores import open_store

    world, dsn, s3, bucket = batch_world
    ledger = world.ledger()
    periods, broken = SLOTS[:5], 2
    keys = _register(world, ledger, periods)
    run = ledger.get_run(keys[broken])
    with psycopg.connect(dsn, autocommit=True) as conn:
        # ~26 MB of CSV in the broken period: far more than the socket buffers hold.
        conn.execute("INSERT INTO widget_metrics_base SELECT 'acme', g || repeat('x', 640), "
                     "%s + g * interval '2 seconds', g, %s FROM generate_series(0, 40000) g",
                     (run.window_start, SEEDED_AT))
    render_period = RangeScan.render_period
    killed = []

    def faulty(scan, index, sink, check_schema=None):
        if index == broken and not killed:
            info = scan._source.connection.info
            killed.append(info.backend_pid)
            sink = KillsTheScanOnFirstWrite(sink, dsn, info.backend_pid)
        return render_period(scan, index, sink, check_schema)

    monkeypatch.setattr(RangeScan, "render_period", faulty)
    copies = CopyCounter(monkeypatch)
    caplog.set_level(logging.INFO, logger="export_lib.pipeline.batch")

    first = export_batch(ledger, open_store(), world.schedule(), periods,
                         _batch(world, Clock(NOW + timedelta(days=1))))

    assert [p.outcome for p in first.periods] == ["exported", "exported", "failed", "exported",
                                                  "exported"]
    assert first.periods[broken].detail.startswith(f"{SourceError.__name__}: source ")
    assert "one read for 5 periods" in first.periods[broken].detail
    assert len(copies.statements) == 3  # the scan, then periods 4 and 5 on their own
    assert [bool(_scan_events(ledger, k)) for k in keys] == [True, True, False, False, False]
    assert "1 range scan(s) serving 2 period(s), 2 per-period read(s); read per period: the " \
           "source failed mid-way" in caplog.text
    (attempt,) = ledger.attempts(keys[broken])
    assert attempt.state == "failed" and "one read for 5 periods" in attempt.error

    with psycopg.connect(dsn, autocommit=True) as conn:  # only there to outlast the buffers
        conn.execute("DELETE FROM widget_metrics_base WHERE widget_id LIKE '%xxxx'")
    again = export_batch(ledger, open_store(), world.schedule(), periods,
                         _batch(world, Clock(NOW + timedelta(days=2))))

    assert [p.outcome for p in again.periods] == ["done", "done", "exported", "done", "done"]
    assert len(copies.statements) == 4
    for key in keys:  # each once; the broken period whole
        (artifact,) = ledger.artifacts(key)
    (artifact,) = ledger.artifacts(keys[broken])
    with psycopg.connect(dsn) as conn:
        assert artifact.rows == conn.execute(
            "SELECT count(*) FROM widget_metrics_base WHERE company_id = 'acme' AND "
            "event_time >= %s AND event_time < %s", (run.window_start, run.window_end)
        ).fetchone()[0] > 0
    staging = s3.list_objects_v2(Bucket=bucket, Prefix="exports/.staging")
    assert staging["KeyCount"] == 0


def test_periods_no_scan_can_read_are_read_one_by_one_and_the_log_says_why(
        batch_world, caplog):  # noqa: F811
    import sqlalchemy as sa

    from export_lib.periods.slots import slots_between
    from export_lib.pipeline.batch import export_batch
    from export_lib.pipeline.range_batch import ScanGroup, plan_scans
    from export_lib.pipeline.start import register_run
    from export_lib.storage.stores import open_store

    world, dsn, s3, bucket = batch_world
    ledger = world.ledger()
    caplog.set_level(logging.INFO, logger="export_lib.pipeline.batch")
    hourly = world.schedule("acme/hourly-clicks")  # Parquet, contiguous hours
    slots = slots_between(hourly.timing, SLOTS[0], SLOTS[0] + timedelta(hours=3))[:3]

    outcome = export_batch(ledger, open_store(), hourly, slots, _batch(world, Clock(NOW)))

    assert [p.outcome for p in outcome.periods] == ["exported"] * 3
    assert ("source reads: 0 range scan(s) serving 0 period(s), 3 per-period read(s); read "
            "per period: format parquet (a range scan splits CSV and JSON Lines only: their COPY "
            "rows are the file's rows)") in caplog.text
    # A data export's trailing 90 days: each window overlaps the next.
    primary = world.schedule("acme/google-ads/primary")
    days = slots_between(primary.timing, SLOTS[0], SLOTS[0] + timedelta(days=2))[:2]
    keys = [register_run(ledger, primary, s, now=NOW).run_key for s in days]
    plan = plan_scans(ledger, keys)
    assert plan.units == keys
    (reason,) = plan.reasons
    assert reason.startswith("windows not contiguous ([") and reason.endswith(
        "): they overlap or leave a gap)")
    # A new config version between two periods starts a new scan.
    keys = _register(world, ledger, SLOTS[:4])
    with ledger.engine.begin() as conn:  # the last two registered under a newer version
        conn.execute(sa.text("UPDATE export_runs SET config_version = 'v-next' "
                             "WHERE run_key IN (:a, :b)"), {"a": keys[2], "b": keys[3]})
    plan = plan_scans(ledger, keys)
    assert [[r.run_key for r in u.runs] for u in plan.units if isinstance(u, ScanGroup)] == [
        keys[:2], keys[2:]]
    assert plan.reasons == [f"config versions differ ({ledger.get_run(keys[1]).config_version} "
                            "then v-next)"]
