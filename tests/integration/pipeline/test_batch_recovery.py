"""Batched recovery (ADR 0032) on a real PostgreSQL ledger and source, artifacts in the moto S3
server, a local destination and a webhook: each period of a batch gets its own run, artifact
v1 and delivery records; a period whose source rows are unreadable and a destination down for
part of the batch fail only their periods; a retry (a clear) exports only what is not done."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import psycopg
import pytest

from export_lib.source.demo import seed_source
from tests.fixtures.delivery import webhook, webhook_server  # noqa: F401 - fixtures
from tests.world import COMPANIES, DAILY, SEEDED_AT, build_world

# acme/daily-spend: 07:00 Berlin; ten calendar days inside the seeded range, across the start
# of summer time (slot 06:00Z before 29 March, 05:00Z from it).
SLOTS = [datetime(2026, 3, d, 6, 0, tzinfo=UTC) for d in range(19, 29)] + [
    datetime(2026, 3, 29, 5, 0, tzinfo=UTC)]
NOW = SEEDED_AT + timedelta(days=1)
# The period 2026-03-24 (Berlin), slot 2026-03-25 07:00 Berlin: one hour of its source rows is
# unreadable.
BROKEN = datetime(2026, 3, 25, 6, 0, tzinfo=UTC)
UNREADABLE = (datetime(2026, 3, 24, 10, 0, tzinfo=UTC), datetime(2026, 3, 24, 11, 0, tzinfo=UTC))


class Clock:
    """The batch's time: advances one second a reading, so leases and events keep order."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture()
def batch_world(tmp_path, monkeypatch, postgres_server, pg_ledger_database, s3_server, webhook):  # noqa: F811
    """Source rows in PostgreSQL behind a view that refuses the rows listed in ``unreadable``;
    artifacts in an S3 bucket; destinations: acme-dir (local) and acme-hook (webhook)."""
    from export_lib.source.connections import parse_connection

    dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + pg_ledger_database.rsplit("/", 1)[1]
    bucket = f"artifacts-{uuid.uuid4().hex[:10]}"
    s3_server.client().create_bucket(Bucket=bucket)
    world = build_world(tmp_path, pg_ledger_database, days=14, AIRFLOW_CONN_DEMO_SOURCE=dsn,
                        EXPORT_ARTIFACT_ROOT=f"s3://{bucket}/exports",
                        EXPORT_ARTIFACT_CONN="artifacts",
                        AIRFLOW_CONN_ARTIFACTS=s3_server.connection_uri(),
                        AIRFLOW_CONN_ACME_HOOK=webhook.connection_uri()).use(monkeypatch)
    seed_source(parse_connection("demo_source", dsn), COMPANIES, now=SEEDED_AT, days=14)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE widget_metrics RENAME TO widget_metrics_base")
        conn.execute("CREATE TABLE unreadable (lo timestamptz, hi timestamptz)")
        conn.execute("""CREATE FUNCTION readable(t timestamptz) RETURNS boolean AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM unreadable WHERE t >= lo AND t < hi) THEN
                RAISE EXCEPTION 'row at % is unreadable (test fault)', t;
              END IF;
              RETURN true;
            END $$ LANGUAGE plpgsql""")
        conn.execute("CREATE VIEW widget_metrics AS SELECT * FROM widget_metrics_base "
                     "WHERE readable(event_time)")
    world.grant_connection("acme_hook", "webhook")
    path = world.config / "acme.yaml"
    path.write_text(path.read_text().replace(
        "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n",
        "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
        "      - {id: acme-hook, type: webhook, conn_id: acme_hook}\n", 1))
    return world, dsn, s3_server.client(), bucket


def _batch(world, clock):
    from export_lib.config.loader import allowlist
    from export_lib.pipeline.batch import Batch

    return Batch(ref="recovery_batch__acme/batch__test/export_periods",
                 config_dir=str(world.config), allowlist=allowlist(str(world.config)),
                 clock=clock, sleep=lambda _s: None)


def _window_rows(dsn, run) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*) FROM widget_metrics_base WHERE company_id = 'acme' "
            "AND event_time >= %s AND event_time < %s",
            (run.window_start, run.window_end)).fetchone()[0]


def _deliveries(ledger):
    import sqlalchemy as sa

    with ledger.engine.connect() as conn:
        return sorted(conn.execute(sa.text(
            "SELECT run_key, destination_id, artifact_version, state FROM deliveries")).all())


def test_a_batch_gives_each_period_its_run_artifact_and_deliveries(batch_world, webhook):  # noqa: F811
    from export_lib.pipeline.batch import export_batch
    from export_lib.storage.stores import open_store

    world, dsn, s3, bucket = batch_world
    ledger = world.ledger()

    outcome = export_batch(ledger, open_store(), world.schedule(), list(reversed(SLOTS)),
                           _batch(world, Clock(NOW)))

    assert [(p.slot, p.outcome) for p in outcome.periods] == [(s, "exported") for s in SLOTS]
    runs = sorted(ledger.list_runs(schedule_id=DAILY), key=lambda r: r.slot)
    assert [r.slot for r in runs] == SLOTS
    assert {(r.state, r.trigger, r.batch) for r in runs} == {
        ("ready", "batch", "recovery_batch__acme/batch__test/export_periods")}
    assert len({r.config_version for r in runs}) == 1 and all(r.source_cutoff for r in runs)
    for run in runs:
        (artifact,) = ledger.artifacts(run.run_key)
        assert artifact.version == 1
        assert artifact.rows == _window_rows(dsn, run) > 0, run.run_key
        key = artifact.uri.split(f"s3://{bucket}/", 1)[1]
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        assert len(body.splitlines()) == artifact.rows + 1  # the header
        assert s3.head_object(Bucket=bucket, Key=key + ".manifest.json")
    assert _deliveries(ledger) == sorted(
        (r.run_key, dest, 1, "acknowledged") for r in runs for dest in ("acme-dir", "acme-hook"))
    assert sum(webhook.state.processed.values()) == len(SLOTS)
    staging = s3.list_objects_v2(Bucket=bucket, Prefix="exports/.staging")
    assert staging["KeyCount"] == 0
    # Periods in slot order: each registration (and its render) after the previous one's.
    assert [r.created_at for r in runs] == sorted(r.created_at for r in runs)
    # Visible as a period of its own, plus the batch that produced it.
    from export_lib.pipeline.explain import explain_facts, explain_period

    text = explain_period(world.schedule(), SLOTS[0], explain_facts(ledger, DAILY, SLOTS[0]),
                          now=NOW + timedelta(hours=1))
    assert text.startswith(f"{DAILY}, slot 2026-03-19 07:00 CET (06:00 UTC), period ")
    assert text.endswith(" Exported by batched recovery: DAG recovery_batch__acme, run and task "
                         "batch__test/export_periods (its task log has this period's lines).")
    assert "exported by batch recovery_batch__acme/batch__test/export_periods" in [
        e["detail"] for e in ledger.events(runs[0].run_key)]


def test_a_failing_period_fails_alone_and_a_retry_exports_only_the_not_done(
        batch_world, webhook, caplog):  # noqa: F811
    import logging

    from export_lib.pipeline.batch import BatchIncomplete, export_batch
    from export_lib.storage.stores import open_store

    world, dsn, s3, bucket = batch_world
    ledger, clock = world.ledger(), Clock(NOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO unreadable VALUES (%s, %s)", UNREADABLE)
    webhook.fail_next(3, 503)  # the webhook is down for the first three periods' deliveries

    caplog.set_level(logging.INFO, logger="export_lib.pipeline.batch")
    first = export_batch(ledger, open_store(), world.schedule(), SLOTS, _batch(world, clock))

    # The server sorts the range before its first row, so the unreadable row fails the range
    # scan (ADR 0038) before any period began: every period is read on its own.
    assert ("source reads: 1 range scan(s) serving 0 period(s), 11 per-period read(s); read "
            "per period: the range scan could not start") in caplog.text
    broken_key = f"{DAILY}/2026-03-25T06:00Z"
    assert [(p.slot, p.outcome) for p in first.failed] == [
        (SLOTS[0], "failed"), (SLOTS[1], "failed"), (SLOTS[2], "failed"), (BROKEN, "failed")]
    assert "is unreadable (test fault)" in next(p.detail for p in first.failed
                                                if p.slot == BROKEN)
    with pytest.raises(BatchIncomplete, match=r"^acme/daily-spend: 11 period\(s\): 7 exported, "
                       r"4 failed; failed: 2026-03-19T06:00:00Z failed: acme-hook: delivery "):
        raise BatchIncomplete(first)
    assert ledger.get_run(broken_key).state == "failed"
    assert ledger.artifacts(broken_key) == []
    before = {(k, d): s for k, d, _v, s in _deliveries(ledger)}
    assert sum(s == "acknowledged" for s in before.values()) == 2 * 7 + 3  # acme-dir of 0-2 too
    assert {before[(f"{DAILY}/{s:%Y-%m-%dT%H:%MZ}", "acme-hook")] for s in SLOTS[:3]} == {
        "pending"}
    received = sum(webhook.state.processed.values())
    assert received == 7

    # The fault clears; the retry (a clear of the batch's task) runs the same batch again.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM unreadable")
    second = export_batch(ledger, open_store(), world.schedule(), SLOTS, _batch(world, clock))

    assert [p.slot for p in second.of("done")] == [s for s in SLOTS if s not in
                                                   (*SLOTS[:3], BROKEN)]
    assert [p.slot for p in second.of("exported")] == [*SLOTS[:3], BROKEN]
    assert second.failed == []
    assert _deliveries(ledger) == sorted(
        (f"{DAILY}/{s:%Y-%m-%dT%H:%MZ}", dest, 1, "acknowledged") for s in SLOTS
        for dest in ("acme-dir", "acme-hook"))
    assert sum(webhook.state.processed.values()) == received + 4  # each once: the three and the broken
    for slot in SLOTS:
        key = f"{DAILY}/{slot:%Y-%m-%dT%H:%MZ}"
        assert [a.version for a in ledger.artifacts(key)] == [1]
    (broken_artifact,) = ledger.artifacts(broken_key)
    assert broken_artifact.rows == _window_rows(dsn, ledger.get_run(broken_key))
    # A third run of the batch finds everything done and calls no stage at all.
    third = export_batch(ledger, open_store(), world.schedule(), SLOTS, _batch(world, clock))
    assert [p.outcome for p in third.periods] == ["done"] * len(SLOTS)
    assert sum(webhook.state.processed.values()) == received + 4


def test_a_batch_alerts_each_period_it_leaves_undone_and_each_delivery_that_gave_up(
        batch_world, webhook, monkeypatch):  # noqa: F811
    """A failed period alerts as its own run would: when the batch task fails for good, every
    period not done (a render that failed, a delivery still pending, a period never started);
    after any batch, a delivery that gave up (refused or exhausted). Each once, to the team and owner."""
    from export_airflow.tasks.batch_alerts import BatchFailureNotifier, send_batch_alerts

    from export_lib.alerts import AlertReason, batch_alerts
    from export_lib.ledger.deliveries import records_of, transition
    from export_lib.ledger.notices import list_notices
    from export_lib.pipeline.batch import export_batch
    from export_lib.storage.stores import open_store
    from tests.services.smtp import start_smtp, stop_smtp

    world, dsn, _s3, _bucket = batch_world
    ledger = world.ledger()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO unreadable VALUES (%s, %s)", UNREADABLE)
    webhook.fail_next(3, 503)
    ran, never = SLOTS[:7], SLOTS[7]  # the batch stopped before SLOTS[7] (a timeout, say)
    export_batch(ledger, open_store(), world.schedule(), ran, _batch(world, Clock(NOW)))
    where = "recovery_batch__acme/batch__test/export_periods try 12"

    final = batch_alerts(ledger, DAILY, [*ran, never], where=where, given_up=True)
    assert [(a.slot, a.reason, a.destination) for a in final] == [
        *[(s, AlertReason.DELIVERY, "acme-hook") for s in SLOTS[:3]],
        (BROKEN, AlertReason.FAILED, None), (never, AlertReason.FAILED, None)]
    assert final[0].detail.startswith("delivery to acme-hook is pending after 1 attempt(s): ")
    assert final[3].detail.startswith("the run is failed after 1 attempt(s): ")
    assert "is unreadable (test fault)" in final[3].detail
    assert (final[4].detail, final[4].period) == (
        "not exported: the batch ended before this period was started", None)
    assert {a.where for a in final} == {f"batched recovery {where}"}
    # Still retrying: a pending delivery and a failed render wait for the batch's retry.
    assert batch_alerts(ledger, DAILY, [*ran, never], where=where, given_up=False) == []

    relay = start_smtp()
    try:
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT",
                           f"smtp://127.0.0.1:{relay.port}/?from_email=airflow%40example.com"
                           "&disable_ssl=true&disable_tls=true&retry_limit=0&timeout=10")
        # The first period's webhook delivery is refused (its permission recheck): final, so
        # the task's report after the batch alerts it even though the task goes on retrying.
        key0 = f"{DAILY}/{SLOTS[0]:%Y-%m-%dT%H:%MZ}"
        record = next(r for r in records_of(ledger.engine, key0)
                      if r.destination_id == "acme-hook")
        with ledger.engine.begin() as conn:
            assert transition(conn, record, "refused", now=NOW)
        assert send_batch_alerts(ledger, "acme", str(world.config), DAILY, ran, where=where,
                                 given_up=False) == 1
        assert [str(m["Subject"]) for m in relay.messages] == [
            "[exports] delivery not made (acme-hook): acme/daily-spend 2026-03-18"]

        # The last retry fails: the failure callback alerts the rest; twice is still once.
        ti = SimpleNamespace(dag_id="recovery_batch__acme", run_id="batch__test",
                             task_id="export_periods", try_number=12)
        run = SimpleNamespace(conf={"schedule_id": DAILY, "periods": [
            f"{s:%Y-%m-%dT%H:%MZ}" for s in (*ran, never)]})
        notifier = BatchFailureNotifier(company="acme", config_dir=str(world.config))
        notifier({"ti": ti, "dag_run": run})
        notifier({"ti": ti, "dag_run": run})
    finally:
        stop_smtp(relay)
    subjects = sorted(str(m["Subject"]) for m in relay.messages)
    assert subjects == sorted([
        "[exports] delivery not made (acme-hook): acme/daily-spend 2026-03-18",
        "[exports] delivery not made (acme-hook): acme/daily-spend 2026-03-19",
        "[exports] delivery not made (acme-hook): acme/daily-spend 2026-03-20",
        "[exports] export failed: acme/daily-spend 2026-03-24",  # its render failed
        "[exports] export failed: acme/daily-spend slot 2026-03-26T06:00Z"])  # never started
    assert {tuple(sorted(rcpts)) for _, rcpts in relay.handler.envelopes} == {
        ("data-team@acme.example", "exports-team@example.com")}
    body = next(p for p in relay.messages[-1].walk() if p.get_content_type() == "text/html") \
        .get_payload(decode=True).decode()
    assert f"airflow: batched recovery {where}" in body
    sent = [n for s in (*ran, never) for n in list_notices(
        ledger.engine, f"{DAILY}/{s:%Y-%m-%dT%H:%MZ}")]
    assert sorted((n["reason"], n["state"], n["claims"]) for n in sent) == sorted(
        [("delivery:acme-hook", "sent", 3)]  # after the batch, then twice at the end
        + [("delivery:acme-hook", "sent", 2)] * 2 + [("failed", "sent", 2)] * 2)


def test_a_retry_owes_the_asset_events_of_the_versions_its_failed_tries_published(
        batch_world, webhook):  # noqa: F811
    """Airflow records a task's outlet events only when it succeeds: the versions a failed (or
    killed) try of a batch published were never announced, and the next try finds their
    periods done. It owes their events: each version a try of the task published (by its
    attempts' origin), none published elsewhere, none Airflow already holds."""
    from export_lib.config.loader import allowlist
    from export_lib.pipeline.asset_events import owed_batch_events, published_event
    from export_lib.pipeline.batch import Batch, export_batch
    from export_lib.pipeline.stages import RunContext
    from export_lib.storage.stores import open_store

    world, dsn, _s3, _bucket = batch_world
    ledger, clock = world.ledger(), Clock(NOW)
    task = "airflow:recovery_batch__acme/batch__test/export_periods/"

    def run_as(origin: str, slots: list[datetime]):
        return export_batch(ledger, open_store(), world.schedule(), slots, Batch(
            ref="recovery_batch__acme/batch__test/export_periods",
            ctx=RunContext(origin=origin, trigger="batch"), config_dir=str(world.config),
            allowlist=allowlist(str(world.config)), clock=clock, sleep=lambda _s: None))

    slots = SLOTS[4:8]  # 23-26 March: the broken period and one on either side of it
    assert BROKEN in slots[1:-1]
    keys = [f"{DAILY}/{s:%Y-%m-%dT%H:%MZ}" for s in slots]
    broken_key = f"{DAILY}/2026-03-25T06:00Z"
    # The first period was published by its own DAG run before the batch.
    run_as("airflow:widget_export__acme__daily-spend/scheduled__x/render/try1", slots[:1])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO unreadable VALUES (%s, %s)", UNREADABLE)
    first = run_as(f"{task}try1", slots)
    assert [p.outcome for p in first.periods] == ["done"] + [
        "failed" if k == broken_key else "exported" for k in keys[1:]]

    owed = owed_batch_events(ledger, keys, task, set())
    published_by_try1 = [k for k in keys[1:] if k != broken_key]
    assert [(e.name, e.extra["run_key"], e.extra["version"]) for e in owed] == [
        ("export:acme/daily-spend", k, 1) for k in published_by_try1]
    held = {(published_by_try1[0], 1)}
    assert [e.extra["run_key"] for e in owed_batch_events(ledger, keys, task, held)] == \
        published_by_try1[1:]

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM unreadable")
    second = run_as(f"{task}try2", slots)
    (fixed,) = second.of("exported")
    assert fixed.run_key == broken_key
    # Try 1 failed, so Airflow holds none of its events: try 2 owes all three, in slot order,
    # the fixed period's the very event its own publish would have made.
    owed = owed_batch_events(ledger, keys, task, set())
    assert [e.extra["run_key"] for e in owed] == keys[1:]
    assert owed[keys[1:].index(broken_key)] == published_event(ledger, fixed.published)
