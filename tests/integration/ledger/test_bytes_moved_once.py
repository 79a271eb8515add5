"""Each export's bytes moved once (ADR 0031), on moto's S3 server, the GCS testbench and a real
PostgreSQL source: the render's multipart upload to the final key is what publication
completes (no staging object is ever listed, a failed render leaves no upload), a stale
attempt cannot overwrite, S3 → S3 and GCS → GCS deliveries copy server-side, and the
cross-store stream holds a few MiB whatever the artifact's size."""

from __future__ import annotations

import base64
import hashlib
import threading
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from export_lib.config.destinations import GcsDestination, S3Destination
from export_lib.delivery import DeliverableArtifact, deliver
from export_lib.errors import FencingError, PublishError, SourceError
from export_lib.ledger import Ledger
from export_lib.pipeline import deliver_run, publish_run, register_run, render_run
from export_lib.storage import multipart
from export_lib.storage.stores import open_store
from tests.support.leases import lapse_leases
from tests.support.pg_daily_spend import export_daily_spend_from_pg
from tests.world import World

SLOT = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)  # acme/daily-spend (UTC here): 2026-03-01
NOW = SLOT + timedelta(minutes=5)
FINAL = ("exports/acme/daily-spend/acme__daily-spend__2026-03-01__slot-20260302T0700Z__v1.csv")
ROWS = 120_000  # ~8 MiB of CSV: two parts of 5 MiB (S3's smallest)


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


class S3World:
    """The world's acme/daily-spend reading ``metrics`` from PostgreSQL into an S3 artifact
    store, delivering to ``dest`` (bucket ``dest-…``) with the store's connection."""

    def __init__(self, world: World, s3_server: Any, dsn: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = s3_server.client()
        self.bucket = f"exports-{uuid.uuid4().hex[:10]}"
        self.dest = f"dest-{uuid.uuid4().hex[:10]}"
        for name in (self.bucket, self.dest):
            self.client.create_bucket(Bucket=name)
        monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", s3_server.connection_uri())
        monkeypatch.setenv("AIRFLOW_CONN_PG_SOURCE", dsn)
        monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
        monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", f"s3://{self.bucket}/exports")
        monkeypatch.setattr(multipart, "PART_SIZE", 5 * 1024 * 1024)
        export_daily_spend_from_pg(world, kind="s3", dest_bucket=self.dest,
                                   csv={"delimiter": ","})
        self.world = world

    def keys(self, bucket: str | None = None) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=bucket or self.bucket).get("Contents", [])
        return sorted(o["Key"] for o in listed)

    def uploads(self) -> list[str]:
        found = self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        return sorted(u["Key"] for u in found)

    def sha256(self, bucket: str, key: str) -> str:
        body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
        digest = hashlib.sha256()
        while chunk := body.read(1 << 20):
            digest.update(chunk)
        return digest.hexdigest()

    def register(self, ledger: Ledger) -> str:
        return register_run(ledger, self.world.schedule(), SLOT, now=NOW).run_key


@pytest.fixture()
def s3w(world: World, s3_server, pg_database: str, monkeypatch: pytest.MonkeyPatch) -> S3World:
    dsn = _dsn(pg_database)
    _seed(dsn, ROWS)
    return S3World(world, s3_server, dsn, monkeypatch)


class Watcher(threading.Thread):
    """Lists the bucket every few milliseconds: every key that was ever visible."""

    def __init__(self, s3w: S3World) -> None:
        super().__init__(daemon=True)
        self.s3w, self.seen, self.uploads_seen = s3w, set(), set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.seen.update(self.s3w.keys())
            self.uploads_seen.update(self.s3w.uploads())
            self.stop.wait(0.01)

    def __enter__(self) -> Watcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()
        self.seen.update(self.s3w.keys())  # what the block left, whenever the last look was


def test_an_artifact_is_written_once_to_its_final_key(sqlite_ledger, s3w: S3World):
    key = s3w.register(sqlite_ledger)
    with Watcher(s3w) as watcher:
        rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
        # Rendered, not yet published: nothing listed, one upload in flight at the final key.
        assert (s3w.keys(), s3w.uploads()) == ([], [FINAL])
        attempt = sqlite_ledger.get_attempt(rendered["attempt_id"])
        assert attempt.staging_uri.startswith(f"s3://{s3w.bucket}/{FINAL}?upload=")
        published = publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"],
                                now=NOW)
    assert watcher.seen == {FINAL, FINAL + ".manifest.json"}  # never a staging object
    assert watcher.uploads_seen <= {FINAL} and s3w.uploads() == []
    assert published["uri"] == f"s3://{s3w.bucket}/{FINAL}" and rendered["rows"] == ROWS
    assert s3w.sha256(s3w.bucket, FINAL) == rendered["sha256"] == published["sha256"]
    etag = s3w.client.head_object(Bucket=s3w.bucket, Key=FINAL)["ETag"]
    assert etag.strip('"').endswith("-2")  # the render's two parts, completed as they were


def test_a_publication_whose_commit_was_lost_is_published_by_its_retry(sqlite_ledger,
                                                                         s3w: S3World):
    """The upload was completed, then the worker died before the ledger committed: publish's
    retry finds the object its own attempt completed and records it (no second upload)."""
    key = s3w.register(sqlite_ledger)
    rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
    pending = sqlite_ledger.get_attempt(rendered["attempt_id"]).staging_uri
    open_store().promote(pending, FINAL.removeprefix("exports/"),
                         {"run_key": key, "sha256": rendered["sha256"]})
    assert (s3w.keys(), s3w.uploads()) == ([FINAL, FINAL + ".manifest.json"], [])
    published = publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"], now=NOW)
    assert (published["version"], published["created"]) == (1, True)
    assert s3w.sha256(s3w.bucket, FINAL) == rendered["sha256"]
    assert sqlite_ledger.get_run(key).state == "ready"


def test_a_key_another_run_owns_is_refused_and_a_retry_is_idempotent(s3_server, monkeypatch):
    client = s3_server.client()
    bucket = f"exports-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", s3_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    store = open_store(f"s3://{bucket}/exports")
    key = "acme/daily-spend/a__v1.csv"

    def upload(attempt: str, body: bytes) -> str:
        started: list[str] = []
        with store.open_direct(lambda: key, attempt_id=attempt, on_started=started.append) as w:
            w.write(body)
        return started[0]

    def manifest(run_key: str, body: bytes) -> dict[str, Any]:
        return {"run_key": run_key, "sha256": hashlib.sha256(body).hexdigest()}

    mine = upload("a1", b"a,b\n1,2\n")
    uri, _ = store.promote(mine, key, manifest("acme/daily-spend/A", b"a,b\n1,2\n"))
    # The response was lost: publish's retry completes nothing twice and reports the same.
    assert store.promote(mine, key, manifest("acme/daily-spend/A", b"a,b\n1,2\n"))[0] == uri
    theirs = upload("b1", b"a,b\n9,9\n")
    with pytest.raises(PublishError, match="belongs to run acme/daily-spend/A, not "
                                           "acme/daily-spend/B"):
        store.promote(theirs, key, manifest("acme/daily-spend/B", b"a,b\n9,9\n"))
    body = client.get_object(Bucket=bucket, Key=f"exports/{key}")["Body"].read()
    assert body == b"a,b\n1,2\n"
    assert [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            ] == [f"exports/{key}"]
    store.delete(theirs)  # garbage collection of the refused attempt: its upload only
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_failed_render_leaves_no_upload_behind(sqlite_ledger, s3w: S3World,
                                                 pg_database: str,
                                                 monkeypatch: pytest.MonkeyPatch):
    """The source's connection is terminated the moment the upload starts (its first part is
    full; about 27 MiB of rows are still to come, more than the sockets buffer): the render
    fails, its upload is aborted."""
    dsn = _dsn(pg_database)
    with psycopg.connect(dsn, autocommit=True) as conn:  # ~32 MiB of CSV
        conn.execute("INSERT INTO metrics SELECT m.* FROM metrics m, generate_series(1, 3)")
    key = s3w.register(sqlite_ledger)
    restage = sqlite_ledger.restage

    def restage_then_kill_the_source(*args: Any) -> None:
        restage(*args)
        assert s3w.uploads() == [FINAL]
        with psycopg.connect(dsn, autocommit=True) as conn:
            (killed,) = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                # Its own database only: the session's server carries other tests' sources,
                # whose renders are not this test's to end (CI 6 Dec: one of another test's).
                "application_name LIKE 'export_lib render %%' AND datname = current_database()"
                # The render's own backend: a parallel plan's workers carry its name too (CI
                # 6 Dec: 3 terminated), and ending the leader ends them.
                " AND backend_type = 'client backend'"
            ).fetchone()
        assert killed == 1

    monkeypatch.setattr(sqlite_ledger, "restage", restage_then_kill_the_source)
    with pytest.raises(SourceError, match="terminat|closed|lost"):
        render_run(sqlite_ledger, open_store(), key, now=NOW)
    assert (s3w.keys(), s3w.uploads()) == ([], [])
    (attempt,) = sqlite_ledger.attempts(key)
    assert attempt.state == "failed" and "?upload=" in attempt.staging_uri


def test_a_stale_attempt_cannot_overwrite(sqlite_ledger, s3w: S3World, pg_database: str):
    key = s3w.register(sqlite_ledger)
    stale = render_run(sqlite_ledger, open_store(), key, now=NOW)
    # Its worker stalls past the lease; another attempt takes over with other content.
    with psycopg.connect(_dsn(pg_database), autocommit=True) as conn:
        conn.execute("UPDATE metrics SET value = value + 1 WHERE id = 7")
    lapse_leases(sqlite_ledger, key)  # by the ledger's clock (ADR 0034)
    later = NOW + timedelta(minutes=30)
    assert lapse_leases(sqlite_ledger, key) == 1  # leases keep the database's clock
    fresh = render_run(sqlite_ledger, open_store(), key, now=later)
    assert fresh["sha256"] != stale["sha256"]
    assert s3w.uploads() == [FINAL, FINAL]  # two uploads to one final key, neither visible
    publish_run(sqlite_ledger, open_store(), key, fresh["attempt_id"], now=later)
    # The fenced publication aborts the stale attempt's upload of the same key.
    assert s3w.uploads() == []
    with pytest.raises(FencingError, match="is stale; generation 2 owns the run"):
        publish_run(sqlite_ledger, open_store(), key, stale["attempt_id"], now=later)
    assert s3w.sha256(s3w.bucket, FINAL) == fresh["sha256"]
    # Garbage collection of the stale attempt's recorded upload never touches the object.
    open_store().delete(sqlite_ledger.get_attempt(stale["attempt_id"]).staging_uri)
    assert s3w.keys() == [FINAL, FINAL + ".manifest.json"]
    assert s3w.sha256(s3w.bucket, FINAL) == fresh["sha256"]
    assert [a.version for a in sqlite_ledger.artifacts(key)] == [1]


def test_s3_to_s3_delivery_is_a_server_side_copy(sqlite_ledger, s3w: S3World, tmp_path: Path):
    key = s3w.register(sqlite_ledger)
    rendered = render_run(sqlite_ledger, open_store(), key, now=NOW)
    published = publish_run(sqlite_ledger, open_store(), key, rendered["attempt_id"], now=NOW)
    delivered = deliver_run(sqlite_ledger, key, "dest", now=NOW)
    target = "acme/" + FINAL.rsplit("/", 1)[1]
    assert delivered["state"] == "acknowledged"
    assert f"copied from {published['uri']} sha256 verified by S3" in delivered["receipt"]
    assert s3w.sha256(s3w.dest, target) == published["sha256"]
    head = s3w.client.head_object(Bucket=s3w.dest, Key=target, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == base64.b64encode(
        bytes.fromhex(published["sha256"])).decode()
    assert head["Metadata"]["sha256"] == published["sha256"]

    # The same through the transport with the store's object: not one byte read from it.
    stored = open_store().stored(published["uri"])
    again = _deliverable(published, stored)
    destination = S3Destination(id="copy", conn_id="artifacts", bucket=s3w.dest,
                                prefix="again")
    outcome = deliver(sqlite_ledger.engine, destination, again, run_key=key,
                      period_label="2026-03-01", owner="data-team@acme.example",
                      authorized={"data-team@acme.example"}, retry_until=NOW + timedelta(days=1),
                      now=NOW, exports_root=tmp_path)
    assert outcome.state == "acknowledged" and stored.bytes_read == 0
    assert s3w.sha256(s3w.dest, "again/" + again.name) == published["sha256"]


def _deliverable(published: dict[str, Any], stored: Any) -> DeliverableArtifact:
    return DeliverableArtifact(
        local_path=None, name=published["uri"].rsplit("/", 1)[1], version=1,
        sha256=published["sha256"], bytes=published["bytes"], rows=published["rows"],
        format="csv", uri=published["uri"], window_start=SLOT - timedelta(days=1, hours=7),
        window_end=SLOT - timedelta(hours=7), stored=stored,
        manifest={"company": "acme", "schedule": "acme/daily-spend"})


def _big_artifact(s3_server, monkeypatch: pytest.MonkeyPatch, mib: int) -> tuple[Any, dict]:
    """A ``mib`` MiB object in an S3 artifact store (put as it is: the store's content)."""
    client = s3_server.client()
    bucket = f"exports-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", s3_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    block = hashlib.sha256(b"seed").digest() * (1 << 15)  # 1 MiB
    body = block * mib
    key = "exports/acme/daily-spend/big__v1.csv"
    client.put_object(Bucket=bucket, Key=key, Body=body)
    uri = f"s3://{bucket}/{key}"
    published = {"uri": uri, "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body),
                 "rows": 1}
    del body
    return open_store(f"s3://{bucket}/exports").stored(uri), published


@pytest.mark.parametrize(("kind", "mib"), [("gcs", 32), ("s3-other-account", 16)])
def test_the_cross_store_stream_holds_a_few_mib(kind: str, mib: int, sqlite_ledger, s3_server,
                                                gcs_server, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path):
    """An artifact from the S3 store to a destination it cannot copy to: streamed, never
    loaded (the held bytes do not grow with the artifact)."""
    stored, published = _big_artifact(s3_server, monkeypatch, mib)
    dest = f"dest-{uuid.uuid4().hex[:10]}"
    if kind == "gcs":
        gcs_server.client().create_bucket(dest)
        monkeypatch.setenv("AIRFLOW_CONN_DEST", gcs_server.connection_uri())
        destination: Any = GcsDestination(id="dest", conn_id="dest", bucket=dest)
    else:  # the same server under another endpoint spelling: another account as far as we know
        s3_server.client().create_bucket(Bucket=dest)
        monkeypatch.setenv("AIRFLOW_CONN_DEST", s3_server.connection_uri().replace(
            "127.0.0.1", "localhost"))
        destination = S3Destination(id="dest", conn_id="dest", bucket=dest)
    artifact = _deliverable(published, stored)
    tracemalloc.start()
    try:
        outcome = deliver(sqlite_ledger.engine, destination, artifact, run_key="r",
                          period_label="2026-03-01", owner="o", authorized={"o"},
                          retry_until=NOW + timedelta(days=1), now=NOW, exports_root=tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.state == "acknowledged", outcome
    assert stored.bytes_read == published["bytes"]
    if kind == "gcs":
        blob = gcs_server.client().bucket(dest).get_blob(artifact.name)
        assert hashlib.sha256(blob.download_as_bytes()).hexdigest() == published["sha256"]
    else:
        body = s3_server.client().get_object(Bucket=dest, Key=artifact.name)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == published["sha256"]
    print(f"{kind}: peak heap {peak / 2**20:.2f} MiB for {mib} MiB")
    # GCS: two 4 MiB chunks; S3: one part of 5 MiB (S3's smallest) and the client's buffers.
    assert peak < 9 * 2**20


def test_gcs_to_gcs_delivery_is_a_server_side_copy(sqlite_ledger, gcs_server,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path):
    client = gcs_server.client()
    store_bucket, dest = (f"{p}-{uuid.uuid4().hex[:10]}" for p in ("exports", "dest"))
    client.create_bucket(store_bucket)
    client.create_bucket(dest)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", gcs_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    body = b"id,value\n" + b"".join(b"%d,%d\n" % (i, i * 7) for i in range(200_000))
    key = "exports/acme/daily-spend/gcs__v1.csv"
    client.bucket(store_bucket).blob(key).upload_from_string(body)
    uri = f"gs://{store_bucket}/{key}"
    stored = open_store(f"gs://{store_bucket}/exports").stored(uri)
    published = {"uri": uri, "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body),
                 "rows": 200_000}
    artifact = _deliverable(published, stored)
    outcome = deliver(sqlite_ledger.engine,
                      GcsDestination(id="dest", conn_id="artifacts", bucket=dest), artifact,
                      run_key="r", period_label="2026-03-01", owner="o", authorized={"o"},
                      retry_until=NOW + timedelta(days=1), now=NOW, exports_root=tmp_path)
    assert outcome.state == "acknowledged" and f"copied from {uri}" in outcome.receipt
    assert stored.bytes_read == 0
    blob = client.bucket(dest).get_blob(artifact.name)
    assert hashlib.sha256(blob.download_as_bytes()).hexdigest() == published["sha256"]
    assert blob.metadata["sha256"] == published["sha256"]
