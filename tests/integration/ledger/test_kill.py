"""SIGKILL in the middle of a render, then the same ``exportctl run`` again (PostgreSQL ledger
and source): one artifact whose sha256 equals an uninterrupted run's, nothing partial under a
final name, the killed attempt's staging object recorded as garbage and collected by
``exportctl ledger gc``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.world import World, build_world

log = logging.getLogger(__name__)

ROWS = 1_000_000
SLOT = "2026-03-29T00:00Z"
FINAL = "bigco/daily/bigco__daily__2026-03-28__slot-20260329T0000Z__v1.csv"
BIGCO = """\
company: {id: bigco, name: Big Co, timezone: UTC, owner: data@bigco.example, status: active}
widget_exports:
  - id: daily
    export_hour: 0
    interval_hours: 24
    window: {kind: calendar_day}
    query:
      source: big_source
      table_schema: %(schema)s
      table: big_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
      ingested_column: ingested_at
      order_by: [event_time, widget_id]
    format: csv
    csv: {delimiter: ",", timestamps: utc}
    destinations:
      - {id: big-dir, type: local, path: outbox/bigco/daily}
"""


@pytest.fixture(scope="module")
def big_source(postgres_server) -> Iterator[tuple[str, str]]:
    """A million rows of one company's day, made by the server (generate_series)."""
    schema = f"big_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.big_metrics AS SELECT 'bigco'::text AS company_id, "
            "'w' || i AS widget_id, timestamptz '2026-03-28 00:00+00' + i * interval "
            f"'1 ms' * (86400000.0 / {ROWS}) AS event_time, (i % 1000)::numeric(14, 2) AS value, "
            "timestamptz '2026-03-28 00:00+00' AS ingested_at "
            f"FROM generate_series(0, {ROWS - 1}) AS i")
        conn.execute(f"ANALYZE {schema}.big_metrics")
    yield postgres_server.dsn, schema
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _big_world(home: Path, ledger_url: str, source: tuple[str, str]) -> World:
    dsn, schema = source
    # A short render lease: the retry waits for the killed attempt's lease to lapse.
    world = build_world(home, ledger_url, AIRFLOW_CONN_BIG_SOURCE=dsn,
                        EXPORT_RENDER_LEASE_SECONDS="3")
    world.allow_table("big_source", "big_metrics", table_schema=schema)
    (world.config / "bigco.yaml").write_text(BIGCO % {"schema": schema})
    return world


def _kill_mid_render(world: World) -> tuple[Path, int]:
    """Start the run, SIGKILL it once its staging object exists and is growing."""
    args = [sys.executable, "-m", "export_lib", "run", str(world.config), "--schedule",
            "bigco/daily", "--slot", SLOT, "--json"]
    proc = subprocess.Popen(args, env=world.env, cwd=world.home, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    staging = world.artifacts / ".staging"
    deadline, last = time.monotonic() + 60, 0
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the render finished before it could be killed"
            files = list(staging.glob("*.csv")) if staging.exists() else []
            size = files[0].stat().st_size if files else 0
            if last and size > last:  # exists, holds data, and grew since the last look
                os.kill(proc.pid, signal.SIGKILL)
                break
            last = size
            time.sleep(0.005)
        else:
            pytest.fail("no growing staging object within 60 s")
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return files[0], size


def test_sigkill_mid_render_then_retry_publishes_one_identical_artifact(
        tmp_path: Path, pg_ledger_database: str, big_source):
    clean = _big_world(tmp_path / "clean", f"sqlite:///{tmp_path / 'clean.db'}", big_source)
    reference = clean.run("bigco/daily", SLOT)["artifact"]
    assert reference["rows"] == ROWS

    world = _big_world(tmp_path / "killed", pg_ledger_database, big_source)
    staged, seen = _kill_mid_render(world)
    partial = staged.read_bytes()
    rows_before_kill = partial.count(b"\n") - 1  # minus the header
    log.info("killed after %d of %d rows (%d bytes staged)", rows_before_kill, ROWS, len(partial))
    assert 0 < len(partial) < reference_bytes(clean)
    assert world.visible_files() == {}
    ledger = world.ledger()
    (run,) = ledger.list_runs()
    (killed,) = ledger.attempts(run.run_key)
    assert (run.state, killed.state) == ("rendering", "running")
    assert killed.staging_uri == staged.resolve().as_uri()

    retried = world.run("bigco/daily", SLOT)
    art = retried["artifact"]
    assert (art["version"], art["rows"], art["sha256"]) == (1, ROWS, reference["sha256"])
    assert (world.counts()["runs"], world.counts()["attempts"],
            world.counts()["artifacts"], world.counts()["deliveries"]) == (1, 2, 1, 1)
    assert [(a.generation, a.state) for a in ledger.attempts(run.run_key)] == [
        (1, "abandoned"), (2, "published")]
    assert [a.attempt_id for a in ledger.staging_garbage()] == [killed.attempt_id]
    visible = world.visible_files()
    outbox = "exports/outbox/bigco/daily/bigco__daily__2026-03-28__slot-20260329T0000Z__v1.csv"
    artifact = f"exports/artifacts/{FINAL}"
    assert sorted(visible) == sorted([artifact, artifact + ".manifest.json", outbox,
                                      outbox + ".sha256"])
    assert visible[artifact] == visible[outbox] == reference["sha256"]
    assert world.staging_files() == [staged.name]  # only the killed attempt's object is left

    gc = world.exportctl("ledger", "gc", "--json")
    assert gc.returncode == 0, gc.stderr
    assert json.loads(gc.stdout) == {"cleaned": [{
        "attempt_id": killed.attempt_id, "run_key": run.run_key, "uri": killed.staging_uri}],
        "kept": [], "held": []}
    assert world.staging_files() == [] and ledger.staging_garbage() == []
    (listed,) = world.runs()
    assert [(a["version"], a["sha256"]) for a in listed["artifacts"]] == [
        (1, reference["sha256"])]
    ledger.engine.dispose()


def reference_bytes(world: World) -> int:
    return (world.artifacts / FINAL).stat().st_size
