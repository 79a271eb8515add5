"""Each export's bytes moved once on GCS (ADR 0031), on Google's storage-testbench and a real
PostgreSQL source: the render's resumable session at the artifact's final name is what
publication finalises with the tail the ledger kept (no staging object is ever listed, the
object appears only at publication, never over another), a failed, fenced or killed render's
session is cancelled, and a publication whose answer was lost is recognised by its retry."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import sqlalchemy as sa
import yaml

from export_lib.errors import FencingError, PublishError, SourceError
from export_lib.ledger import Ledger
from export_lib.ledger.schema import attempts
from export_lib.pipeline import publish_run, register_run, render_run
from export_lib.storage import resumable
from export_lib.storage.resumable import parse_pending
from export_lib.storage.stores import open_store
from tests.support.leases import lapse_leases
from tests.support.pg_daily_spend import export_daily_spend_from_pg
from tests.world import World, build_world

SLOT = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)  # acme/daily-spend (UTC here): 2026-03-01
NOW = SLOT + timedelta(minutes=5)
FINAL = "exports/acme/daily-spend/acme__daily-spend__2026-03-01__slot-20260302T0700Z__v1.csv"
ROWS = 40_000  # ~2.6 MiB of CSV: five chunks of 512 KiB and a tail
CHUNK = 2 * resumable.QUANTUM


def _dsn(sqlalchemy_url: str) -> str:
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://")


def _seed(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE metrics (id bigint, company_id text, event_time timestamptz,"
                     " label text, value numeric(12,2), ingested_at timestamptz)")
        conn.execute(
            "INSERT INTO metrics SELECT g, 'acme', timestamptz '2026-03-01 00:00:00+00' + "
            "(g %% 86400) * interval '1 second', 'label-' || (g %% 977), (g %% 100000) / 100.0,"
            " timestamptz '2026-03-02 01:00:00+00' FROM generate_series(1, %s) g", (rows,))


def session_status(staging_uri: str) -> int:
    """What the session a pending staging URI names answers a status query: 308 open, 404
    cancelled, 200 finalised."""
    pending = parse_pending(staging_uri)
    assert pending is not None, staging_uri
    return requests.put(pending[1], headers={"Content-Range": "bytes */*"},
                        timeout=10).status_code


class GcsWorld:
    """acme/daily-spend reading ``metrics`` from PostgreSQL into a GCS artifact store."""

    def __init__(self, world: World, gcs_server: Any, dsn: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = gcs_server.client()
        self.bucket = f"exports-{uuid.uuid4().hex[:10]}"
        self.client.create_bucket(self.bucket)
        monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", gcs_server.connection_uri())
        monkeypatch.setenv("AIRFLOW_CONN_PG_SOURCE", dsn)
        monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
        monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", f"gs://{self.bucket}/exports")
        monkeypatch.setattr(resumable, "CHUNK_SIZE", CHUNK)
        export_daily_spend_from_pg(world, kind="gcs", dest_bucket=self.bucket,
                                   csv={"delimiter": ","})
        self.world = world

    def keys(self) -> list[str]:
        return sorted(b.name for b in self.client.list_blobs(self.bucket))

    def get(self, key: str) -> bytes:
        return self.client.bucket(self.bucket).blob(key).download_as_bytes()

    def sha256(self, key: str) -> str:
        return hashlib.sha256(self.get(key)).hexdigest()

    def register(self, ledger: Ledger) -> str:
        return register_run(ledger, self.world.schedule(), SLOT, now=NOW).run_key


@pytest.fixture()
def gw(world: World, gcs_server, pg_database: str, monkeypatch: pytest.MonkeyPatch) -> GcsWorld:
    dsn = _dsn(pg_database)
    _seed(dsn, ROWS)
    return GcsWorld(world, gcs_server, dsn, monkeypatch)


class Watcher(threading.Thread):
    """Lists the bucket every few milliseconds: every name that was ever visible."""

    def __init__(self, gw: GcsWorld) -> None:
        super().__init__(daemon=True)
        self.gw, self.seen = gw, set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.seen.update(self.gw.keys())
            self.stop.wait(0.01)

    def __enter__(self) -> Watcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()
        self.seen.update(self.gw.keys())


def test_an_artifact_is_written_once_to_its_final_name(sqlite_ledger, gw: GcsWorld,
                                                       tmp_path: Path):
    key = gw.register(sqlite_ledger)
    with Watcher(gw) as watcher:
        rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
        # Rendered, not yet published: nothing listed, the session open at the final name.
        assert gw.keys() == []
        attempt = sqlite_ledger.get_attempt(rendered["attempt_id"])
        assert attempt.staging_uri.startswith(f"gs://{gw.bucket}/{FINAL}?session=")
        pending = parse_pending(attempt.staging_uri)
        assert pending is not None and pending[2] == rendered["attempt_id"]
        tail = attempt.staging_tail or b""
        assert 0 < len(tail) < resumable.QUANTUM
        # Full chunks, then what is left in 256 KiB multiples; the rest is the tail.
        assert (rendered["bytes"] - len(tail)) % resumable.QUANTUM == 0
        held = requests.put(pending[1], headers={"Content-Range": "bytes */*"}, timeout=10)
        assert (held.status_code, held.headers["Range"]) == (
            308, f"bytes=0-{rendered['bytes'] - len(tail) - 1}")
        published = publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"],
                                now=NOW)
    assert watcher.seen == {FINAL, FINAL + ".manifest.json"}  # never a staging object
    assert published["uri"] == f"gs://{gw.bucket}/{FINAL}" and rendered["rows"] == ROWS
    assert gw.sha256(FINAL) == rendered["sha256"] == published["sha256"]
    blob = gw.client.bucket(gw.bucket).get_blob(FINAL)
    # (The testbench adds metadata of its own, x_emulator_* and x_testbench_*.)
    assert (blob.size, blob.crc32c, blob.metadata["attempt"]) == (
        rendered["bytes"], pending[3], rendered["attempt_id"])
    assert sqlite_ledger.get_attempt(rendered["attempt_id"]).staging_tail is None  # cleared
    assert session_status(attempt.staging_uri) == 200  # finalised: the object

    # The same period rendered into a local store: the same bytes.
    local = open_store(str(tmp_path / "local"))
    again = render_run(sqlite_ledger, local, key, now=NOW + timedelta(hours=1), regenerate=True)
    assert again["sha256"] == rendered["sha256"] and again["bytes"] == rendered["bytes"]


def test_identical_content_cancels_the_session(sqlite_ledger, gw: GcsWorld):
    key = gw.register(sqlite_ledger)
    first = render_run(sqlite_ledger, open_store(), key, now=NOW)
    publish_run(sqlite_ledger, open_store(), key, first["attempt_id"], now=NOW)
    later = NOW + timedelta(hours=1)
    same = render_run(sqlite_ledger, open_store(), key, now=later, regenerate=True)
    uri = sqlite_ledger.get_attempt(same["attempt_id"]).staging_uri
    assert session_status(uri) == 308
    again = publish_run(sqlite_ledger, open_store(), key, same["attempt_id"], now=later)
    assert (again["version"], again["created"]) == (1, False)
    assert session_status(uri) == 404  # cancelled: no version 2, nothing listed
    assert gw.keys() == [FINAL, FINAL + ".manifest.json"]


def test_skip_empty_cancels_the_session(sqlite_ledger, gw: GcsWorld, pg_database: str):
    with psycopg.connect(_dsn(pg_database), autocommit=True) as conn:
        conn.execute("DELETE FROM metrics")
    path = gw.world.config / "acme.yaml"
    company = yaml.safe_load(path.read_text())
    daily = next(s for s in company["widget_exports"] if s["id"] == "daily-spend")
    daily["skip_empty"] = True
    path.write_text(yaml.safe_dump(company, sort_keys=False))
    key = gw.register(sqlite_ledger)
    skipped = render_run(sqlite_ledger, open_store(), key, now=NOW)
    assert skipped["skipped"].startswith("the window holds no rows")
    (attempt,) = sqlite_ledger.attempts(key)
    assert "?session=" in attempt.staging_uri and session_status(attempt.staging_uri) == 404
    assert gw.keys() == [] and sqlite_ledger.get_run(key).state == "skipped"


def test_a_publication_whose_answer_was_lost_is_published_by_its_retry(sqlite_ledger,
                                                                       gw: GcsWorld):
    """The session was finalised, then the worker died before the ledger committed:
    publish's retry finds the object its own attempt finalised and records it."""
    key = gw.register(sqlite_ledger)
    rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
    attempt = sqlite_ledger.get_attempt(rendered["attempt_id"])
    manifest = {"run_key": key, "sha256": rendered["sha256"], "bytes": rendered["bytes"]}
    name = FINAL.removeprefix("exports/")
    uri, _ = open_store().promote(attempt.staging_uri, name, manifest, tail=attempt.staging_tail)
    assert gw.keys() == [FINAL, FINAL + ".manifest.json"]
    # Its answer lost: the same publication again finalises nothing twice.
    assert open_store().promote(attempt.staging_uri, name, manifest,
                                tail=attempt.staging_tail)[0] == uri
    published = publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"], now=NOW)
    assert (published["version"], published["created"]) == (1, True)
    assert gw.sha256(FINAL) == rendered["sha256"]
    assert sqlite_ledger.get_run(key).state == "ready"


def test_an_object_already_at_the_name_is_never_overwritten(sqlite_ledger, gw: GcsWorld):
    key = gw.register(sqlite_ledger)
    rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
    uri = sqlite_ledger.get_attempt(rendered["attempt_id"]).staging_uri
    gw.client.bucket(gw.bucket).blob(FINAL).upload_from_string(b"someone else's\n")
    with pytest.raises(PublishError, match=f"gs://{gw.bucket}/{FINAL} exists with other "
                                           "content and no run claims it"):
        publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"], now=NOW)
    assert gw.keys() == [FINAL] and gw.get(FINAL) == b"someone else's\n"
    assert sqlite_ledger.get_run(key).state == "validating"
    assert session_status(uri) == 308  # not finalised; garbage collection cancels it

    # The race the check cannot see (the object created after it): GCS refuses the
    # finalisation itself (the session's ifGenerationMatch=0).
    attempt = sqlite_ledger.get_attempt(rendered["attempt_id"])
    pending = parse_pending(uri)
    assert pending is not None
    with pytest.raises(PublishError, match=r"GCS refused to finalise .* \(HTTP 412\)"):
        resumable.finalise(sessions(), pending[1], sent=rendered["bytes"] - len(
            attempt.staging_tail or b""), tail=attempt.staging_tail or b"", crc32c=pending[3],
            uri=uri, max_attempts=1)
    assert gw.get(FINAL) == b"someone else's\n"


def sessions() -> requests.Session:
    return requests.Session()


def test_a_failed_render_cancels_its_session(sqlite_ledger, gw: GcsWorld, pg_database: str,
                                             monkeypatch: pytest.MonkeyPatch):
    """The source's connection is terminated the moment the session opens (its first chunk
    is full; ~8 MiB of rows are still to come): the render fails, its session is cancelled."""
    dsn = _dsn(pg_database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO metrics SELECT m.* FROM metrics m, generate_series(1, 3)")
    key = gw.register(sqlite_ledger)
    restage = sqlite_ledger.restage
    opened: list[str] = []

    def restage_then_kill_the_source(*args: Any) -> None:
        restage(*args)
        opened.append(args[2])
        with psycopg.connect(dsn, autocommit=True) as conn:
            (killed,) = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                "application_name LIKE 'export_lib render %%' AND datname = current_database()"
                # The render's own backend: a parallel plan's workers carry its name too (CI
                # 6 Dec: 3 terminated), and ending the leader ends them.
                " AND backend_type = 'client backend'"
            ).fetchone()
        assert killed == 1

    monkeypatch.setattr(sqlite_ledger, "restage", restage_then_kill_the_source)
    with pytest.raises(SourceError, match="terminat|closed|lost"):
        render_run(sqlite_ledger, open_store(), key, now=NOW)
    assert gw.keys() == []
    (attempt,) = sqlite_ledger.attempts(key)
    assert attempt.state == "failed" and attempt.staging_uri == opened[0]
    assert "?session=" in attempt.staging_uri and session_status(attempt.staging_uri) == 404


def test_a_stale_attempt_cannot_overwrite_and_its_session_is_cancelled(
        sqlite_ledger, gw: GcsWorld, pg_database: str):
    key = gw.register(sqlite_ledger)
    stale = render_run(sqlite_ledger, open_store(), key, now=NOW)
    with psycopg.connect(_dsn(pg_database), autocommit=True) as conn:
        conn.execute("UPDATE metrics SET value = value + 1 WHERE id = 7")
    assert lapse_leases(sqlite_ledger, key) == 1
    later = NOW + timedelta(minutes=30)
    fresh = render_run(sqlite_ledger, open_store(), key, now=later)
    assert fresh["sha256"] != stale["sha256"]
    stale_uri = sqlite_ledger.get_attempt(stale["attempt_id"]).staging_uri
    assert session_status(stale_uri) == 308  # two sessions at one final name, neither visible
    publish_run(sqlite_ledger, open_store(), key, fresh["attempt_id"], now=later)
    with pytest.raises(FencingError, match="is stale; generation 2 owns the run"):
        publish_run(sqlite_ledger, open_store(), key, stale["attempt_id"], now=later)
    assert session_status(stale_uri) == 404  # the fenced publication cancelled it
    assert gw.sha256(FINAL) == fresh["sha256"]
    # Garbage collection of the stale attempt's session never touches the object.
    open_store().delete(stale_uri)
    assert gw.keys() == [FINAL, FINAL + ".manifest.json"] and gw.sha256(FINAL) == fresh["sha256"]
    assert [a.version for a in sqlite_ledger.artifacts(key)] == [1]


def test_an_attempt_staged_by_an_older_release_still_publishes(sqlite_ledger, gw: GcsWorld):
    """A staging object (the GCS path before sessions) is copied to the final name."""
    key = gw.register(sqlite_ledger)
    rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
    attempt = sqlite_ledger.get_attempt(rendered["attempt_id"])
    body = gw.client.bucket(gw.bucket)
    # What an older release left: the file as a staging object, the attempt naming it.
    pending = parse_pending(attempt.staging_uri)
    assert pending is not None
    resumable.finalise(sessions(), pending[1], sent=rendered["bytes"] - len(
        attempt.staging_tail or b""), tail=attempt.staging_tail or b"", crc32c=pending[3],
        uri=attempt.staging_uri, max_attempts=1)
    staging = f"exports/.staging/{attempt.attempt_id}.csv"
    body.copy_blob(body.blob(FINAL), body, staging)
    body.blob(FINAL).delete()
    with sqlite_ledger.engine.begin() as conn:
        conn.execute(sa.update(attempts).where(attempts.c.attempt_id == attempt.attempt_id)
                     .values(staging_uri=f"gs://{gw.bucket}/{staging}", staging_tail=None))
    published = publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"], now=NOW)
    assert (published["version"], published["created"]) == (1, True)
    assert gw.keys() == [FINAL, FINAL + ".manifest.json"]
    assert gw.sha256(FINAL) == rendered["sha256"]


def test_the_writer_holds_about_two_chunks_whatever_the_size(gcs_server,
                                                              monkeypatch: pytest.MonkeyPatch):
    """24 MiB written in 1 MiB writes through 8 MiB chunks: the held bytes do not grow with
    the file (the chunk being sent and the buffer)."""
    bucket = f"exports-{uuid.uuid4().hex[:10]}"
    gcs_server.client().create_bucket(bucket)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", gcs_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    store = open_store(f"gs://{bucket}/exports")
    block = hashlib.sha256(b"seed").digest() * (1 << 15)  # 1 MiB
    started: list[str] = []
    tracemalloc.start()
    try:
        with store.open_direct(lambda: "big.csv", attempt_id="a1",
                               on_started=started.append) as writer:
            for _ in range(24):
                writer.write(block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (writer.sent, len(writer.tail or b"")) == (24 << 20, 0)
    assert session_status(started[0]) == 308
    print(f"peak heap {peak / 2**20:.1f} MiB for 24 MiB in chunks of 8 MiB")
    assert peak < 2.5 * resumable.CHUNK_SIZE
    store.delete(started[0])
    assert session_status(started[0]) == 404


# --- a render SIGKILLed mid-upload, then its retry ------------------------------------------

KILL_ROWS = 400_000  # ~26 MiB of CSV: the session holds 8 MiB chunks while the render goes on


def _gcs_world(home: Path, ledger_url: str, dsn: str, gcs_server: Any, bucket: str) -> World:
    world = build_world(home, ledger_url, AIRFLOW_CONN_PG_SOURCE=dsn,
                        AIRFLOW_CONN_ARTIFACTS=gcs_server.connection_uri(),
                        EXPORT_ARTIFACT_CONN="artifacts",
                        EXPORT_ARTIFACT_ROOT=f"gs://{bucket}/exports",
                        EXPORT_RENDER_LEASE_SECONDS="3")
    export_daily_spend_from_pg(world, kind="gcs", dest_bucket=bucket, csv={"delimiter": ","})
    return world


def _kill_mid_upload(world: World) -> str:
    """Start the run, SIGKILL it once its session holds bytes; the session's URI."""
    args = [sys.executable, "-m", "export_lib", "run", str(world.config), "--schedule",
            "acme/daily-spend", "--slot", "2026-03-02T07:00Z", "--json"]
    proc = subprocess.Popen(args, env=world.env, cwd=world.home, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ledger = world.ledger()
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the render finished before it could be killed"
            uris = [a.staging_uri for r in ledger.list_runs() for a in ledger.attempts(r.run_key)
                    if "?session=" in a.staging_uri]
            if uris:
                held = requests.put(parse_pending(uris[0])[1],  # type: ignore[index]
                                    headers={"Content-Range": "bytes */*"}, timeout=10)
                if held.status_code == 308 and held.headers.get("Range"):
                    os.kill(proc.pid, signal.SIGKILL)
                    break
            time.sleep(0.02)
        else:
            pytest.fail("no session holding bytes within 90 s")
    finally:
        proc.wait(timeout=30)
        ledger.engine.dispose()
    assert proc.returncode == -signal.SIGKILL
    return uris[0]


def test_sigkill_mid_upload_then_retry_publishes_one_identical_artifact(
        tmp_path: Path, pg_database: str, pg_ledger_database: str, gcs_server):
    dsn = _dsn(pg_database)
    _seed(dsn, KILL_ROWS)
    bucket, elsewhere = (f"{what}-{uuid.uuid4().hex[:10]}" for what in ("exports", "clean"))
    for name in (bucket, elsewhere):
        gcs_server.client().create_bucket(name)
    # The reference: the same period rendered into a local artifact store.
    clean = build_world(tmp_path / "clean", f"sqlite:///{tmp_path / 'clean.db'}",
                        AIRFLOW_CONN_PG_SOURCE=dsn,
                        AIRFLOW_CONN_ARTIFACTS=gcs_server.connection_uri())
    export_daily_spend_from_pg(clean, kind="gcs", dest_bucket=elsewhere, csv={"delimiter": ","})
    world = _gcs_world(tmp_path / "killed", pg_ledger_database, dsn, gcs_server, bucket)
    killed_uri = _kill_mid_upload(world)
    listed = sorted(b.name for b in gcs_server.client().list_blobs(bucket))
    assert listed == []  # nothing partial anywhere

    retried = world.run("acme/daily-spend", "2026-03-02T07:00Z")
    art = retried["artifact"]
    reference = clean.run("acme/daily-spend", "2026-03-02T07:00Z")["artifact"]
    assert (art["version"], art["rows"], art["sha256"]) == (1, KILL_ROWS, reference["sha256"])
    ledger = world.ledger()
    (run,) = ledger.list_runs()
    assert [(a.generation, a.state) for a in ledger.attempts(run.run_key)] == [
        (1, "abandoned"), (2, "published")]
    names = sorted(b.name for b in gcs_server.client().list_blobs(bucket))
    assert names == sorted([FINAL, FINAL + ".manifest.json", "acme/" + FINAL.rsplit("/", 1)[1]])
    assert session_status(killed_uri) == 308  # the killed render's session, until gc

    gc = world.exportctl("ledger", "gc", "--json")
    assert gc.returncode == 0, gc.stderr
    (killed,) = [a for a in ledger.attempts(run.run_key) if a.state == "abandoned"]
    assert json.loads(gc.stdout) == {"cleaned": [{
        "attempt_id": killed.attempt_id, "run_key": run.run_key, "uri": killed_uri}],
        "kept": [], "held": []}
    assert session_status(killed_uri) == 404 and ledger.staging_garbage() == []
    assert sorted(b.name for b in gcs_server.client().list_blobs(bucket)) == names
    ledger.engine.dispose()
