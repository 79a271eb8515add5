"""A render on a full volume: a real size-limited filesystem (tmpfs, ``mount -t tmpfs -o
size=1m``) under the local artifact store (and under the temp directory, which a GCS render
never writes to). The render fails with one StorageFull line naming the volume, the bytes written and the
fix; no partial or staging file and no object is left; nothing is published; the views say the
run waits on storage; once space is freed the retry publishes exactly one artifact.

Needs ``mount`` (root, or CAP_SYS_ADMIN, as in the test container); skipped with that reason
where it is not allowed."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from export_lib.errors import StorageFull
from export_lib.pipeline import publish_run, register_run, render_run
from export_lib.storage import cloud
from export_lib.storage.stores import LocalStore, open_store
from export_lib.views.obligations import obligation_filter, obligations_page
from tests.integration.ledger.test_bytes_moved_once import NOW, SLOT, _dsn, _seed
from tests.world import World

ROWS = 3000  # ~200 KiB of CSV
LEFT_FREE = 64 * 1024  # so the render runs out of space part way


@pytest.fixture()
def world(world: World, pg_database: str, monkeypatch: pytest.MonkeyPatch) -> World:
    """acme/daily-spend (in UTC) reading :data:`ROWS` rows of ``metrics`` from PostgreSQL."""
    dsn = _dsn(pg_database)
    _seed(dsn, ROWS)
    monkeypatch.setenv("AIRFLOW_CONN_PG_SOURCE", dsn)
    path = world.config / "acme.yaml"
    company = yaml.safe_load(path.read_text())
    company["company"]["timezone"] = "UTC"
    daily = next(s for s in company["widget_exports"] if s["id"] == "daily-spend")
    daily["query"] = {"source": "pg_source", "table": "metrics",
                      "columns": ["id", "company_id", "event_time", "label", "value"],
                      "timestamp_column": "event_time", "tenant_column": "company_id",
                      "ingested_column": "ingested_at"}
    path.write_text(yaml.safe_dump(company, sort_keys=False))
    world.allow_table("pg_source", "metrics")
    return world


@pytest.fixture()
def volume(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, filled but for :data:`LEFT_FREE` bytes by ``filler``."""
    mnt = tmp_path / "vol"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not allowed here: {done.stderr.strip()}")
    try:
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        (mnt / "filler").write_bytes(b"\0" * (free - LEFT_FREE))
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _full(volume: Path, what: str, setting: str = "EXPORT_ARTIFACT_ROOT") -> str:
    """The one line, as a regex: ``what`` is the file's pattern, ``setting`` the one to move."""
    return (rf"^storage full: the volume {re.escape(str(volume))} \(1\.0 MiB, [\d.]+ MiB free\) "
            rf"ran out of space \(ENOSPC\) after [1-9]\d* bytes \([\d.]+ MiB\) of {what} were "
            r"written: the file needs more than that free there; the partial file was removed "
            rf"and nothing was published\. Fix: free space on {re.escape(str(volume))} \(or "
            rf"raise the quota\), or point {setting} at a larger volume; the task's retry renders the "
            r"period again$")


def test_a_render_on_a_full_volume_waits_on_storage_and_its_retry_publishes_once(
        world: World, volume: Path, monkeypatch: pytest.MonkeyPatch):
    root = volume / "artifacts"
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", str(root))
    ledger = world.ledger()
    key = register_run(ledger, world.schedule(), SLOT, now=NOW).run_key

    with pytest.raises(StorageFull, match=_full(volume, re.escape(str(root / ".staging")) +
                                                 r"/[0-9a-f-]+\.csv")) as raised:
        render_run(ledger, LocalStore(root), key, now=NOW)
    assert "\n" not in str(raised.value) and raised.value.retryable
    assert 0 < raised.value.written <= LEFT_FREE
    assert _files(volume) == ["filler"]  # no partial staging file, no artifact
    run = ledger.get_run(key)
    assert (run.state, run.reason) == ("failed", str(raised.value))
    assert (ledger.count("artifacts"), ledger.latest_artifact(key)) == (0, None)

    # What the views say: exportctl runs, explain, the company page's outcome.
    runs = world.exportctl("runs")
    assert runs.returncode == 0, runs.stderr
    assert f"  waiting on storage: the volume {volume} (1.0 MiB" in runs.stdout
    explained = world.exportctl("explain", "--schedule", "acme/daily-spend", "--date",
                                "2026-03-02", "--no-airflow")
    assert explained.returncode == 0, explained.stderr
    assert f"waiting on storage since {run.updated_at:%Y-%m-%d %H:%M}" in explained.stdout
    page = obligations_page(ledger.engine, obligation_filter(outcome="storage"), now=NOW)
    assert [(r["run_key"], r["outcome"]) for r in page["runs"]] == [(key, "storage")]

    (volume / "filler").unlink()  # space freed: the task's retry
    rendered = render_run(ledger, LocalStore(root), key, now=NOW)
    published = publish_run(ledger, LocalStore(root), key, rendered["attempt_id"], now=NOW)
    assert (published["version"], published["created"]) == (1, True)
    name = published["uri"].rsplit("/", 1)[1]
    assert _files(volume) == [f"artifacts/acme/daily-spend/{name}",
                              f"artifacts/acme/daily-spend/{name}.manifest.json"]
    assert (ledger.get_run(key).state, ledger.count("artifacts")) == ("ready", 1)
    assert sorted(a.state for a in ledger.attempts(key)) == ["failed", "published"]


def test_a_gcs_render_never_spools_so_a_full_temp_volume_does_not_stop_it(
        world: World, volume: Path, gcs_server, monkeypatch: pytest.MonkeyPatch):
    """A GCS render streams its chunks to the upload session (no spool file): with the temp
    directory on a full volume it renders and publishes, and writes nothing there."""
    bucket = f"exports-{uuid.uuid4().hex[:10]}"
    gcs = gcs_server.client()
    gcs.create_bucket(bucket)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", gcs_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    monkeypatch.setattr(tempfile, "tempdir", str(volume))
    monkeypatch.setattr(cloud, "SPOOL_BYTES", 4096)  # a spool would be on disk past 4 KiB
    store = open_store(f"gs://{bucket}/exports")
    ledger = world.ledger()
    key = register_run(ledger, world.schedule(), SLOT, now=NOW).run_key
    rendered = render_run(ledger, store, key, now=NOW)
    assert rendered["bytes"] > LEFT_FREE and _files(volume) == ["filler"]
    published = publish_run(ledger, store, key, rendered["attempt_id"], now=NOW)
    assert published["created"] and ledger.count("artifacts") == 1
    final = published["uri"].removeprefix(f"gs://{bucket}/")
    assert sorted(b.name for b in gcs.list_blobs(bucket)) == [final, final + ".manifest.json"]
