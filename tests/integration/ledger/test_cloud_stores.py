"""The artifact store contract on S3 (moto's standalone server, IAM auth on) and GCS
(Google's storage-testbench), through the real pipeline: stage → validate → promote, identical
re-publication is a no-op, new content is v2 superseding v1, manifests beside artifacts, staging
deleted, and delivery of an object-store artifact to a local destination."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from export_lib.checksums import sha256_stream
from export_lib.errors import StorageError
from export_lib.pipeline import deliver_run, publish_run, register_run, render_run
from export_lib.storage.stores import open_store
from tests.fixtures.ledger import DAILY_SLOT
from tests.world import World

NOW = DAILY_SLOT + timedelta(minutes=5)
NAME = "acme__daily-spend__2026-03-28__slot-20260329T0500Z"


@dataclass
class Bucket:
    scheme: str
    name: str
    client: Any

    def keys(self) -> list[str]:
        if self.scheme == "s3":
            listed = self.client.list_objects_v2(Bucket=self.name).get("Contents", [])
            return sorted(o["Key"] for o in listed)
        return sorted(b.name for b in self.client.list_blobs(self.name))

    def uploads(self) -> list[str]:
        """Keys of unfinished multipart uploads (S3; GCS has none here)."""
        if self.scheme != "s3":
            return []
        return sorted(u["Key"] for u in
                      self.client.list_multipart_uploads(Bucket=self.name).get("Uploads", []))

    def session(self, staging_uri: str) -> int:
        """GCS: what the session a pending staging URI names answers a status query (308
        while open, 499/404 once cancelled, 200 once finalised)."""
        import requests

        from export_lib.storage.resumable import parse_pending

        pending = parse_pending(staging_uri)
        assert pending is not None, staging_uri
        return requests.put(pending[1], headers={"Content-Range": "bytes */*"},
                            timeout=10).status_code

    def get(self, key: str) -> bytes:
        if self.scheme == "s3":
            return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()
        return self.client.bucket(self.name).blob(key).download_as_bytes()


@pytest.fixture(params=["s3", "gcs"])
def bucket(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A fresh bucket; ``EXPORT_ARTIFACT_CONN`` names the connection ``artifacts``."""
    name = f"exports-{uuid.uuid4().hex[:10]}"
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        client = server.client()
        client.create_bucket(Bucket=name)
        found = Bucket("s3", name, client)
    else:
        server = request.getfixturevalue("gcs_server")
        client = server.client()
        client.create_bucket(name)
        found = Bucket("gs", name, client)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", f"{found.scheme}://{name}/exports")
    return found


def _bump_one_value(world: World) -> None:
    """A correction in the source for the same period: the next render differs."""
    with sqlite3.connect(world.demo_source) as conn:
        conn.execute("UPDATE widget_metrics SET value = value + 1 WHERE company_id = 'acme' "
                     "AND event_time = '2026-03-28 10:00:00'")


def test_stage_validate_promote_noop_and_new_version(sqlite_ledger, world: World,
                                                     bucket: Bucket, tmp_path: Path):
    store = open_store()  # EXPORT_ARTIFACT_ROOT=<scheme>://<bucket>/exports
    assert type(store).__name__ == {"s3": "S3Store", "gs": "GcsStore"}[bucket.scheme]
    key = register_run(sqlite_ledger, world.schedule(), DAILY_SLOT, now=NOW).run_key

    first = render_run(sqlite_ledger, store, key, now=NOW)
    final_v1 = f"exports/acme/daily-spend/{NAME}__v1.csv"
    # Written once, to its final key: an upload (S3) or a session (GCS) publication completes.
    assert bucket.keys() == []
    if bucket.scheme == "s3":
        assert bucket.uploads() == [final_v1]
    else:
        pending = sqlite_ledger.get_attempt(first["attempt_id"])
        assert pending.staging_uri.startswith(f"gs://{bucket.name}/{final_v1}?session=")
        assert bucket.session(pending.staging_uri) == 308  # open, its tail in the ledger
        assert 0 < len(pending.staging_tail or b"") < 256 * 1024
    v1 = publish_run(sqlite_ledger, store, key, first["attempt_id"], now=NOW)
    assert (v1["version"], v1["created"], v1["uri"]) == (
        1, True, f"{bucket.scheme}://{bucket.name}/{final_v1}")
    assert bucket.keys() == [final_v1, final_v1 + ".manifest.json"]  # staging deleted
    assert bucket.uploads() == []
    assert hashlib.sha256(bucket.get(final_v1)).hexdigest() == first["sha256"]
    manifest = json.loads(bucket.get(final_v1 + ".manifest.json"))
    assert {k: manifest[k] for k in ("version", "supersedes", "sha256", "rows", "run_key")} == {
        "version": 1, "supersedes": None, "sha256": first["sha256"], "rows": 72, "run_key": key}

    # The same content again (a regeneration of an unchanged source): a no-op.
    same = render_run(sqlite_ledger, store, key, now=NOW + timedelta(hours=1), regenerate=True)
    again = publish_run(sqlite_ledger, store, key, same["attempt_id"],
                        now=NOW + timedelta(hours=1))
    assert (again["version"], again["created"], again["sha256"]) == (1, False, first["sha256"])
    assert bucket.keys() == [final_v1, final_v1 + ".manifest.json"]
    assert bucket.uploads() == []  # the identical render's upload is aborted
    if bucket.scheme == "gs":  # and its session cancelled
        assert bucket.session(sqlite_ledger.get_attempt(same["attempt_id"]).staging_uri) == 404

    # Different content for the same period: version 2, superseding 1; v1 stays as it was.
    _bump_one_value(world)
    changed = render_run(sqlite_ledger, store, key, now=NOW + timedelta(hours=2), regenerate=True)
    v2 = publish_run(sqlite_ledger, store, key, changed["attempt_id"],
                     now=NOW + timedelta(hours=2))
    final_v2 = f"exports/acme/daily-spend/{NAME}__v2.csv"
    assert changed["sha256"] != first["sha256"]
    assert (v2["version"], v2["created"]) == (2, True)
    assert bucket.keys() == [final_v1, final_v1 + ".manifest.json",
                             final_v2, final_v2 + ".manifest.json"]
    assert json.loads(bucket.get(final_v2 + ".manifest.json"))["supersedes"] == 1
    assert hashlib.sha256(bucket.get(final_v1)).hexdigest() == first["sha256"]
    assert [(a.version, a.supersedes) for a in sqlite_ledger.artifacts(key)] == [
        (1, None), (2, 1)]

    # Delivery of an object-store artifact to a local destination streams it from the store.
    delivered = deliver_run(sqlite_ledger, key, "acme-dir", now=NOW + timedelta(hours=2))
    assert delivered["state"] == "acknowledged"
    outbox = world.outbox / "acme" / "daily-spend"
    copy = outbox / f"{NAME}__v2.csv"
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == changed["sha256"]


def test_store_reads_and_deletes_objects_of_its_own_bucket(bucket: Bucket):
    store = open_store(f"{bucket.scheme}://{bucket.name}/exports")
    uri = store.staging_uri("a1", "csv")
    assert uri == f"{bucket.scheme}://{bucket.name}/exports/.staging/a1.csv"
    with store.open_staging(uri) as fh:
        fh.write(b"x,y\n1,2\n")
    with store.read(uri) as fh:
        assert sha256_stream(fh) == (hashlib.sha256(b"x,y\n1,2\n").hexdigest(), 8)
    assert store.exists(uri)
    store.delete(uri)
    store.delete(uri)  # deleting twice is fine (garbage collection may repeat)
    assert not store.exists(uri) and bucket.keys() == []
    with pytest.raises(StorageError, match="does not exist"):
        with store.read(uri) as fh:
            fh.read()
    with pytest.raises(StorageError, match="belongs to bucket other-bucket"):
        store.delete(f"{bucket.scheme}://other-bucket/exports/.staging/a1.csv")


def test_s3_delete_aborts_the_unfinished_upload_of_a_killed_attempt(
        s3_server, monkeypatch: pytest.MonkeyPatch):
    """A worker SIGKILLed in the middle of uploading a staging object in parts (seen in
    tests/system/cluster/test_cluster.py) leaves an unfinished multipart upload; garbage collection's
    delete of that staging URI aborts it, and leaves other keys' uploads alone."""
    client = s3_server.client()
    name = f"exports-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", s3_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    store = open_store(f"s3://{name}/exports")
    uri = store.staging_uri("killed", "csv")
    key = uri.removeprefix(f"s3://{name}/")
    killed = client.create_multipart_upload(Bucket=name, Key=key)["UploadId"]
    client.upload_part(Bucket=name, Key=key, UploadId=killed, PartNumber=1, Body=b"x" * 1024)
    other = client.create_multipart_upload(Bucket=name, Key=key + ".other")["UploadId"]
    store.delete(uri)
    left = client.list_multipart_uploads(Bucket=name).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in left] == [(key + ".other", other)]
    store.delete(uri)  # again: nothing left to abort
