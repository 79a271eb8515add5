"""A batch process SIGKILLed in the middle of a range scan (ADR 0038) loses nothing and sends
nothing twice. Real PostgreSQL source and ledger, artifacts in the moto S3 server, a local
destination and a webhook.

The batch runs in a child process over eleven contiguous daily CSV periods. The source stalls
in the middle of the scan: ``ascii`` (which formula neutralisation calls on every text field,
above the sorted rows, so row by row as they are sent) is shadowed for the source database by
one that waits on an advisory lock the test holds when it meets the gate row. The gate row
sits in period 5 behind more than a splitter piece of rows, so periods 1-4 are published
(their deliveries follow the scan), period 5's attempt holds its lease with its first piece
of rows in hand, periods 6-11 are registered and not begun. Then SIGKILL; the gate opens; the
killed attempt's lease lapses on the database's clock; the batch runs again in this process.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import psycopg

from tests.fixtures.delivery import webhook, webhook_server  # noqa: F401 - fixtures
from tests.integration.pipeline.test_batch_range_scan import _alone
from tests.integration.pipeline.test_batch_recovery import (  # noqa: F401 - a fixture
    NOW,
    SLOTS,
    Clock,
    _batch,
    batch_world,
)
from tests.integration.render.test_range_scan import CopyCounter
from tests.support.leases import lapse_leases
from tests.world import DAILY, SEEDED_AT

GATED = 4  # the period the kill lands in (0-based): the four before it are published
GATE = 4242  # the advisory lock the gate row waits on
FILLER = 12_000  # ~1.6 MB of the gated period's rows before the gate: more than one piece
REF = "recovery_batch__acme/batch__test/export_periods"  # a retry runs as the same task

# The batch in a child process, as a worker runs it; it never ends on its own (the gate).
CHILD = """\
import sys
from datetime import datetime, timedelta

from export_lib.config.loader import allowlist, load_catalog
from export_lib.ledger import open_ledger
from export_lib.pipeline.batch import Batch, export_batch
from export_lib.storage.stores import open_store

config, ref, start, *slots = sys.argv[1:]
now = [datetime.fromisoformat(start)]


def clock():
    now[0] += timedelta(seconds=1)
    return now[0]


schedule = load_catalog(config, only="acme").schedule("acme/daily-spend")
export_batch(open_ledger(), open_store(), schedule, [datetime.fromisoformat(s) for s in slots],
             Batch(ref=ref, config_dir=config, allowlist=allowlist(config), clock=clock,
                   sleep=lambda _s: None))
sys.exit("the batch ended: the gate did not hold it")
"""


def _gate(dsn: str, slot) -> None:
    """The gated period's filler rows and its gate row; ``ascii`` shadowed by one that waits
    on the advisory lock at the gate row (new connections of the source database only)."""
    start = slot - timedelta(hours=30)  # 00:00Z of the period's Berlin day
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO widget_metrics_base SELECT 'acme', 'fill-' || g || "
                     "repeat('x', 100), %s + g * interval '1 second', g, %s "
                     "FROM generate_series(1, %s) g", (start, SEEDED_AT, FILLER))
        conn.execute("INSERT INTO widget_metrics_base VALUES ('acme', 'stall-here', %s, 1, %s)",
                     (start + timedelta(hours=22), SEEDED_AT))
        conn.execute(f"""CREATE FUNCTION public.ascii(t text) RETURNS integer AS $$
            BEGIN
              IF t = 'stall-here' THEN
                PERFORM pg_advisory_lock_shared({GATE});
                PERFORM pg_advisory_unlock_shared({GATE});
              END IF;
              RETURN pg_catalog.ascii(t);
            END $$ LANGUAGE plpgsql""")
        database = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{database}" SET search_path = public, pg_catalog')


def _stalled(dsn: str) -> int | None:
    """The backend waiting at the gate, if one is."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND wait_event = 'advisory' AND query LIKE 'COPY%%'").fetchone()
    return row[0] if row else None


def _kill_at_the_gate(world, dsn, ledger, keys) -> int:
    """Run the batch in a child process; SIGKILL it once the gated period's attempt holds its
    lease with the periods before it published and the source is waiting at the gate."""
    args = [sys.executable, "-c", CHILD, str(world.config), REF,
            (NOW + timedelta(days=1)).isoformat(), *(s.isoformat() for s in SLOTS)]
    proc = subprocess.Popen(args, env=world.env, cwd=world.home, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline, backend = time.monotonic() + 60, None
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            backend = _stalled(dsn)
            run = ledger.get_run(keys[GATED])
            if backend and run is not None and run.state == "rendering" and all(
                    ledger.artifacts(k) for k in keys[:GATED]):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the batch did not reach the gate within 60 s (is ascii() "
                                 "still evaluated above the sorted rows?)")
    finally:
        if proc.poll() is None:  # not reached: the test fails, the child must not outlive it
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return backend


def _final_keys(s3, bucket) -> list[str]:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="exports/").get("Contents", [])
    return sorted(o["Key"] for o in listed if not o["Key"].startswith("exports/.staging/"))


def _key(artifact, bucket) -> str:
    return artifact.uri.split(f"s3://{bucket}/", 1)[1]


def test_a_batch_killed_mid_scan_loses_nothing_and_sends_nothing_twice(
        batch_world, webhook, monkeypatch, caplog):  # noqa: F811
    from export_lib.cli.commands import current_catalog
    from export_lib.pipeline import collect_staging_garbage
    from export_lib.pipeline.batch import export_batch
    from export_lib.storage.stores import open_store

    world, dsn, s3, bucket = batch_world
    ledger = world.ledger()
    keys = [f"{DAILY}/{s:%Y-%m-%dT%H:%MZ}" for s in SLOTS]
    _gate(dsn, SLOTS[GATED])
    gate = psycopg.connect(dsn, autocommit=True)
    try:
        gate.execute("SELECT pg_advisory_lock(%s)", (GATE,))
        backend = _kill_at_the_gate(world, dsn, ledger, keys)

        # Right after the kill: the periods before the gate published, v1 each, not delivered
        # (a scan's deliveries follow it); the gated one holding its lease, nothing of it at a
        # final name; the rest registered, not begun.
        runs = [ledger.get_run(k) for k in keys]
        assert [r.state for r in runs] == (["ready"] * GATED + ["rendering"]
                                           + ["registered"] * (len(SLOTS) - GATED - 1))
        published = [ledger.artifacts(k) for k in keys[:GATED]]
        assert [[a.version for a in p] for p in published] == [[1]] * GATED
        assert _final_keys(s3, bucket) == sorted(
            _key(a, bucket) + suffix for (a,) in published for suffix in ("", ".manifest.json"))
        (killed,) = ledger.attempts(keys[GATED])
        assert killed.state == "running" and killed.staging_uri.startswith(
            f"s3://{bucket}/exports/.staging/")
        assert [ledger.attempts(k) for k in keys[GATED + 1:]] == [[]] * (len(SLOTS) - GATED - 1)
        assert world.counts()["deliveries"] == 0 and webhook.state.requests == []
        assert not (world.outbox / "acme").exists()
        pending = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert runs[GATED].window_start <= SLOTS[GATED] - timedelta(hours=8) < (
            runs[GATED].window_end)  # the gate row is the gated period's
    finally:
        gate.close()  # the gate opens: the killed batch's query runs on into a closed socket
    opened, deadline = time.monotonic(), time.monotonic() + 20
    while _stalled(dsn) == backend and time.monotonic() < deadline:
        time.sleep(0.1)
    with psycopg.connect(dsn) as conn:  # the killed batch's query ends on its own
        assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                            (backend,)).fetchone()[0] == 0
    print(f"\nkilled at the gate; {len(pending)} unfinished upload(s) left by the kill; its "
          f"query gone {time.monotonic() - opened:.1f} s after the gate opened")

    assert lapse_leases(ledger, keys[GATED]) == 1  # by the ledger's clock: no sleep
    copies = CopyCounter(monkeypatch)
    caplog.set_level(logging.INFO, logger="export_lib.pipeline.batch")
    again = export_batch(ledger, open_store(), world.schedule(), SLOTS,
                         _batch(world, Clock(NOW + timedelta(days=2))))

    assert [p.outcome for p in again.periods] == ["exported"] * len(SLOTS)
    # The published periods read nothing; the rest, the killed one included, one range scan.
    (line,) = [r.getMessage() for r in caplog.records if "source reads:" in r.getMessage()]
    assert line.endswith(f"source reads: 1 range scan(s) serving {len(SLOTS) - GATED} "
                         "period(s), 0 per-period read(s)"), line
    (statement,) = copies.statements
    assert "width_bucket" in statement
    runs = [ledger.get_run(k) for k in keys]
    assert {r.state for r in runs} == {"ready"}
    assert [[(a.generation, a.state) for a in ledger.attempts(k)] for k in keys] == [
        [(1, "abandoned"), (2, "published")] if i == GATED else [(1, "published")]
        for i in range(len(SLOTS))]
    expected = {}
    for run in runs:
        (artifact,) = ledger.artifacts(run.run_key)
        sha, rows = _alone(dsn, run)
        assert (artifact.version, artifact.sha256, artifact.rows) == (1, sha, rows), run.run_key
        body = s3.get_object(Bucket=bucket, Key=_key(artifact, bucket))["Body"].read()
        assert hashlib.sha256(body).hexdigest() == sha
        expected[f"slot-{run.slot:%Y%m%dT%H%MZ}"] = sha
    assert ledger.artifacts(keys[GATED])[0].rows > FILLER
    with ledger.engine.connect() as conn:
        import sqlalchemy as sa

        deliveries = sorted(conn.execute(sa.text(
            "SELECT run_key, destination_id, artifact_version, state FROM deliveries")).all())
    assert deliveries == sorted((k, dest, 1, "acknowledged") for k in keys
                                for dest in ("acme-dir", "acme-hook"))
    assert len(webhook.state.requests) == len(webhook.state.processed) == len(SLOTS)
    outbox = world.outbox / "acme" / "daily-spend"
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in outbox.iterdir() if p.name.endswith(".csv")}
    assert len(files) == len(SLOTS) and sorted(p.name for p in outbox.iterdir()) == sorted(
        [*files, *(f + ".sha256" for f in files)])
    assert {tag: sha for name, sha in files.items() for tag in expected if tag in name} == (
        expected)

    # The killed attempt's staging object (its piece of the gated period) is garbage; gc
    # deletes it, aborting its upload: nothing staged or pending is left.
    report = collect_staging_garbage(ledger, open_store(), current_catalog(str(world.config)))
    assert [(c.attempt_id, c.uri) for c in report.cleaned] == [
        (killed.attempt_id, killed.staging_uri)] and not report.kept and not report.held
    assert s3.list_objects_v2(Bucket=bucket, Prefix="exports/.staging")["KeyCount"] == 0
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert ledger.staging_garbage() == []
    ledger.engine.dispose()
