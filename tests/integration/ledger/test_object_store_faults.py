"""An object store answering 503 SlowDown, 500 or resetting connections for a while: renders,
publications and deliveries through a fault-injecting proxy (tests/services/faultproxy.py) in
front of moto's S3 server and the GCS testbench, on a real PostgreSQL source.

The SDKs retry each request (EXPORT_OBJECT_STORE_MAX_ATTEMPTS, backoff with jitter); a call
that still fails fails its stage, and the stage is retried as Airflow's task retry would
(render, publish and deliver are idempotent on the run key). Afterwards every period has
exactly one artifact: the bucket lists its object and manifest and nothing else, no multipart
upload is pending; a stale attempt's publication is still refused (the ledger's fence and the
store's create-only writes); the delivery ledger counts every delivery call; the destination's
object has the manifest's sha256.

Sizes: ``OBJECT_FAULT_SHARE`` (0.4), ``OBJECT_FAULT_SECONDS`` (2 in make test, 20 in make
acceptance), ``OBJECT_FAULT_PERIODS`` (daily periods; 2 and 8), ``OBJECT_FAULT_ROWS`` (rows a
day; 2,000 (~140 KiB, one part) and 100,000 (~7 MiB, two parts of 5 MiB)),
``OBJECT_FAULT_MAX_ATTEMPTS`` (3 and 5) and ``OBJECT_FAULT_KINDS`` (slowdown,internal,reset).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote

import psycopg
import pytest

from export_lib.errors import DeliveryError, ExportError, FencingError, PublishError
from export_lib.ledger import Ledger
from export_lib.pipeline import deliver_run, publish_run, register_run, render_run
from export_lib.storage import multipart
from export_lib.storage.stores import open_store
from tests.integration.ledger.test_bytes_moved_once import _dsn
from tests.services.faultproxy import FaultProxy
from tests.support.leases import lapse_leases
from tests.support.pg_daily_spend import export_daily_spend_from_pg
from tests.world import World

SHARE = float(os.environ.get("OBJECT_FAULT_SHARE", "0.4"))
SECONDS = float(os.environ.get("OBJECT_FAULT_SECONDS", "2"))
KINDS = tuple(os.environ.get("OBJECT_FAULT_KINDS", "slowdown,internal,reset").split(","))
# Tries of one request (EXPORT_OBJECT_STORE_MAX_ATTEMPTS): fewer than the default 5 in make
# test, so that requests run out of tries and the stages' retries are exercised too.
MAX_ATTEMPTS = os.environ.get("OBJECT_FAULT_MAX_ATTEMPTS", "3")
PERIODS = int(os.environ.get("OBJECT_FAULT_PERIODS", "2"))
ROWS = int(os.environ.get("OBJECT_FAULT_ROWS", "2000"))
TRIES = 8  # Airflow's task tries within the test (the deployment's are 11, hours apart)
FIRST = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)  # acme/daily-spend (UTC): 2026-03-01
T = TypeVar("T")


def _seed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE metrics (id bigint, company_id text, event_time timestamptz,"
                     " label text, value numeric(12,2), ingested_at timestamptz)")
        conn.execute(
            "INSERT INTO metrics SELECT g, 'acme', timestamptz '2026-03-01 00:00:00+00' + "
            "(g %% %s) * interval '1 day' + (g %% 86400) * interval '1 second', "
            "'label-' || (g %% 977), (g %% 100000) / 100.0, "
            "timestamptz '2026-03-01 00:00:00+00' FROM generate_series(1, %s) g",
            (PERIODS, ROWS * PERIODS))


class Faulty:
    """acme/daily-spend reading ``metrics`` into an artifact store (``kind``: s3 or gs) whose
    connection goes through the proxy, delivering to another bucket of the same account (a
    server-side copy). ``direct`` is a client past the proxy, for the checks."""

    def __init__(self, kind: str, world: World, server: Any, dsn: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.kind, self.world = kind, world
        self.proxy = FaultProxy(server.port, seed=7).start()
        self.direct = server.client()
        self.bucket = f"exports-{uuid.uuid4().hex[:10]}"
        self.dest = f"dest-{uuid.uuid4().hex[:10]}"
        for name in (self.bucket, self.dest):
            (self.direct.create_bucket(Bucket=name) if kind == "s3"
             else self.direct.create_bucket(name))
        uri = server.connection_uri().replace(quote(server.endpoint, safe=""),
                                              quote(self.proxy.endpoint, safe=""))
        assert self.proxy.endpoint.split(":")[-1] in uri
        monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", uri)
        monkeypatch.setenv("AIRFLOW_CONN_PG_SOURCE", dsn)
        monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
        monkeypatch.setenv("EXPORT_OBJECT_STORE_MAX_ATTEMPTS", MAX_ATTEMPTS)
        monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", f"{kind}://{self.bucket}/exports")
        monkeypatch.setattr(multipart, "PART_SIZE", 5 * 1024 * 1024)
        export_daily_spend_from_pg(world, kind="s3" if kind == "s3" else "gcs",
                                   dest_bucket=self.dest)

    def keys(self, bucket: str) -> list[str]:
        if self.kind == "s3":
            listed = self.direct.list_objects_v2(Bucket=bucket).get("Contents", [])
            return sorted(o["Key"] for o in listed)
        return sorted(b.name for b in self.direct.list_blobs(bucket))

    def uploads(self) -> list[str]:
        if self.kind != "s3":
            return []  # GCS stages an object (listed by keys) instead
        found = self.direct.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        return sorted(u["Key"] for u in found)

    def put(self, key: str, body: bytes) -> None:
        if self.kind == "s3":
            self.direct.put_object(Bucket=self.bucket, Key=key, Body=body)
        else:
            self.direct.bucket(self.bucket).blob(key).upload_from_string(body)

    def delete(self, key: str) -> None:
        if self.kind == "s3":
            self.direct.delete_object(Bucket=self.bucket, Key=key)
        else:
            self.direct.bucket(self.bucket).blob(key).delete()

    def sha256(self, bucket: str, key: str) -> str:
        if self.kind == "s3":
            body = self.direct.get_object(Bucket=bucket, Key=key)["Body"].read()
        else:
            body = self.direct.bucket(bucket).blob(key).download_as_bytes()
        return hashlib.sha256(body).hexdigest()


@pytest.fixture(params=["s3", "gs"])
def faulty(request, world: World, pg_database: str,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Faulty]:
    server = request.getfixturevalue("s3_server" if request.param == "s3" else "gcs_server")
    dsn = _dsn(pg_database)
    _seed(dsn)
    faulty = Faulty(request.param, world, server, dsn, monkeypatch)
    try:
        yield faulty
    finally:
        faulty.proxy.stop()


class Retried:
    """A stage called as Airflow calls a task: again after a retryable failure, up to TRIES.
    ``failures`` counts the failed calls by stage."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.errors: list[str] = []
        self.calls: dict[tuple[str, str], int] = {}

    def __call__(self, stage: str, key: str, call: Callable[[], T]) -> T:
        for n in range(1, TRIES + 1):
            self.calls[(stage, key)] = self.calls.get((stage, key), 0) + 1
            try:
                return call()
            except ExportError as exc:
                if not exc.retryable or n == TRIES:
                    raise
                error: Exception = exc
            except Exception as exc:  # noqa: BLE001 - an SDK's error: Airflow retries the task
                if n == TRIES:
                    raise
                error = exc
            self.failures[stage] = self.failures.get(stage, 0) + 1
            self.errors.append(f"{stage}: {type(error).__name__}: {error}"[:200])
        raise AssertionError("unreachable")


def _export(ledger: Ledger, world: World, retried: Retried, slot: datetime, now: datetime,
            blocked: FaultProxy | None = None) -> str:
    key = register_run(ledger, world.schedule(), slot, now=now).run_key
    while True:  # a publication refused for good (the upload is gone) renders again
        rendered = retried("render", key, lambda: render_run(ledger, open_store(), key, now=now))
        if not rendered["rendered"]:
            break  # already published by an earlier try
        try:
            retried("publish", key, lambda attempt=rendered["attempt_id"]: publish_run(
                ledger, open_store(), key, attempt, now=now))
            break
        except ExportError:
            retried.failures["publish refused"] = retried.failures.get("publish refused", 0) + 1
            if retried.failures["publish refused"] > TRIES:
                raise
    if blocked is not None:  # every request refused: the delivery's first call fails
        with blocked.faults(1.0, kinds=("slowdown",)), \
                pytest.raises(DeliveryError, match="attempt 1 failed, will retry until"):
            retried.calls[("deliver", key)] = 1
            deliver_run(ledger, key, "dest", now=now)
    retried("deliver", key, lambda: _delivered(deliver_run(ledger, key, "dest", now=now)))
    return key


def _delivered(result: Any) -> Any:
    assert result["state"] == "acknowledged", result
    return result


def test_renders_publications_and_deliveries_through_object_store_faults(
        faulty: Faulty, sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch):
    retried = Retried()
    slots = [FIRST + timedelta(days=n) for n in range(PERIODS)]
    now = FIRST + timedelta(days=PERIODS)
    started = time.monotonic()
    with faulty.proxy.faults(SHARE, SECONDS, KINDS):
        keys = [_export(sqlite_ledger, faulty.world, retried, slot, now,
                        blocked=faulty.proxy if slot == slots[-1] else None) for slot in slots]
        fenced = _stale_attempt_is_fenced(faulty, sqlite_ledger, retried, keys[0], now)
    took = time.monotonic() - started
    # every kind was injected (slowdown also by the blocked delivery)
    assert {kind for kind, _ in faulty.proxy.counts} >= set(KINDS), faulty.proxy.counts

    expected, delivered = [], []
    for key in keys:
        (artifact,) = sqlite_ledger.artifacts(key)  # exactly one artifact a period
        final = artifact.uri.removeprefix(f"{faulty.kind}://{faulty.bucket}/")
        expected += [final, final + ".manifest.json"]
        assert faulty.sha256(faulty.bucket, final) == artifact.sha256
        (d,) = [d for d in _deliveries(sqlite_ledger, key)]
        assert (d["state"], d["attempts"]) == ("acknowledged", retried.calls[("deliver", key)])
        assert d["attempts"] >= (2 if key == keys[-1] else 1)  # the blocked one was retried
        name = final.rsplit("/", 1)[1]
        assert faulty.sha256(faulty.dest, f"acme/{name}") == artifact.sha256
        delivered.append(f"acme/{name}")
    assert faulty.keys(faulty.bucket) == sorted(expected)  # nothing partial, nothing twice
    assert faulty.uploads() == []
    assert faulty.keys(faulty.dest) == sorted(delivered)
    assert fenced
    print(f"\n{faulty.kind}: {PERIODS} periods in {took:.1f} s through {faulty.proxy.requests} "
          f"requests, {faulty.proxy.injected} faults injected ({dict(faulty.proxy.counts)}); "
          f"stage failures retried: {retried.failures} {retried.errors}")


def _deliveries(ledger: Ledger, key: str) -> list[dict[str, Any]]:
    from export_lib.pipeline.stages import list_deliveries

    return list_deliveries(ledger, key)


def _stale_attempt_is_fenced(faulty: Faulty, ledger: Ledger, retried: Retried, key: str,
                             now: datetime) -> bool:
    """A regeneration under faults: the older attempt's publication is refused (FencingError),
    and at the store a manifest another run claims cannot be taken over (create-only write)."""
    stale = retried("render", key, lambda: render_run(ledger, open_store(), key, now=now,
                                                       regenerate=True))
    lapse_leases(ledger, key)  # its worker stalled past its lease (the ledger's clock)
    later = now + timedelta(minutes=30)
    fresh = retried("render", key, lambda: render_run(ledger, open_store(), key, now=later,
                                                       regenerate=True))
    with pytest.raises(FencingError, match="is stale; generation \\d+ owns the run"):
        retried("publish", key, lambda: publish_run(ledger, open_store(), key,
                                                    stale["attempt_id"], now=later))
    # The fresh attempt renders the same rows: no new version, its upload is aborted.
    published = retried("publish", key, lambda: publish_run(ledger, open_store(), key,
                                                            fresh["attempt_id"], now=later))
    assert (published["version"], published["created"]) == (1, False)
    (artifact,) = ledger.artifacts(key)
    name = artifact.uri.removeprefix(f"{faulty.kind}://{faulty.bucket}/exports/")
    staged = f"exports/.staging/{uuid.uuid4().hex}.csv"  # another run's staged object
    faulty.put(staged, b"a,b\n9,9\n")
    with pytest.raises(PublishError, match=f"belongs to run {key}, not "
                                           "acme/daily-spend/another"):
        retried("promote", key, lambda: open_store().promote(
            f"{faulty.kind}://{faulty.bucket}/{staged}", name,
            {"run_key": "acme/daily-spend/another", "sha256": "0" * 64}))
    faulty.delete(staged)
    return True
