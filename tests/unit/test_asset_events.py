"""The asset event a published artifact makes (export_lib.pipeline.asset_events, ADR 0024): one
per new version, none when publish finds nothing new, its extra the manifest's fields, its
asset the schedule's folder in the store (SQLite ledger, local store, no Airflow)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.errors import ArtifactValidationError, StorageError
from export_lib.pipeline import publish_run, register_run, render_run
from export_lib.pipeline.asset_events import (
    check_announced,
    published_event,
    schedule_asset_name,
    schedule_asset_uri,
)
from export_lib.storage.stores import root_uri
from tests.world import acme_library_world

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, window 2026-03-28 Berlin
NEXT = SLOT + timedelta(days=1)
# The demo source's widget_metrics (SQLite: TIMESTAMP holds UTC text, hence timestamptz).
COLUMNS = [{"name": "company_id", "type": "string", "nullable": False},
           {"name": "widget_id", "type": "string", "nullable": False},
           {"name": "event_time", "type": "timestamptz", "nullable": False},
           {"name": "value", "type": "decimal(14,2)", "nullable": False}]
# What the manifest and the event's extra both carry, under the same names.
SHARED = ("run_key", "company", "schedule", "period", "timezone", "window_start_utc",
          "window_end_utc", "config_version", "version", "supersedes", "correction", "rows",
          "bytes", "sha256", "format", "generated_at", "schema", "schema_fingerprint",
          "schema_major", "schema_change", "schema_diff")


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    config, ledger, store = acme_library_world(tmp_path, monkeypatch)
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", str(store.root))
    schedule = load_catalog(config).schedule("acme/daily-spend")
    key = register_run(ledger, schedule, SLOT, now=SLOT).run_key
    return ledger, store, key, tmp_path


def _publish(ledger, store, key, now, **kw):
    rendered = render_run(ledger, store, key, now=now, regenerate=kw.pop("regenerate", False))
    return publish_run(ledger, store, key, rendered["attempt_id"], now=now, **kw)


def _manifest(uri: str) -> dict:
    return json.loads(Path(uri.removeprefix("file://")).read_text())


def test_a_new_version_is_one_event_whose_extra_is_the_manifest(world):
    ledger, store, key, tmp_path = world
    published = _publish(ledger, store, key, SLOT)
    event = published_event(ledger, published)

    assert event.name == schedule_asset_name("acme/daily-spend") == "export:acme/daily-spend"
    # The schedule's folder: every artifact of the schedule is an object under the asset's URI.
    folder = (tmp_path / "artifacts" / "acme" / "daily-spend").resolve().as_uri()
    assert event.uri == folder and published.uri.startswith(folder + "/")
    (artifact,) = ledger.artifacts(key)
    manifest = _manifest(artifact.manifest_uri)
    assert {k: event.extra[k] for k in SHARED} == {k: manifest[k] for k in SHARED}
    assert (event.extra["artifact_uri"], event.extra["manifest_uri"]) == (
        artifact.uri, artifact.manifest_uri)
    assert (event.extra["period"], event.extra["version"], event.extra["rows"],
            event.extra["correction"]) == ("2026-03-28", 1, 72, False)
    # The file's schema (ADR 0025): the first file of the schedule sets its contract, major 1.
    assert (event.extra["schema"], event.extra["schema_major"], event.extra["schema_change"],
            event.extra["schema_diff"]) == (COLUMNS, 1, None, [])
    assert json.loads(json.dumps(event.extra)) == event.extra  # plain JSON, as Airflow stores it


def test_publishing_nothing_new_makes_no_event(world):
    ledger, store, key, _ = world
    first = _publish(ledger, store, key, SLOT)
    assert published_event(ledger, first) is not None
    # Render found the run ready (a re-run of the DAG run): publish reports the artifact.
    again = publish_run(ledger, store, key, None, now=SLOT + timedelta(hours=1))
    # A regenerated file with the same content keeps v1.
    same = _publish(ledger, store, key, SLOT + timedelta(hours=2), regenerate=True)
    assert (again.created, same.created, same.version) == (False, False, 1)
    assert published_event(ledger, again) is None
    assert published_event(ledger, same) is None


def test_a_correction_is_an_event_marked_as_such(world):
    ledger, store, key, tmp_path = world
    first = published_event(ledger, _publish(ledger, store, key, SLOT))
    with sqlite3.connect(tmp_path / "demo.db") as conn:  # a row for the period arrives late
        conn.execute("INSERT INTO widget_metrics VALUES ('acme', 'late', '2026-03-28 12:00:00', "
                     "9.99, '2026-03-29 09:00:00')")
    v2 = _publish(ledger, store, key, SLOT + timedelta(hours=6), regenerate=True,
                  correction=True)
    event = published_event(ledger, v2)
    assert (event.extra["version"], event.extra["supersedes"], event.extra["correction"],
            event.extra["rows"]) == (2, 1, True, 73)
    assert (event.name, event.uri) == (first.name, first.uri)  # the same asset as v1's event
    assert event.extra["sha256"] == _manifest(event.extra["manifest_uri"])["sha256"]


def test_a_consumer_refuses_a_file_changed_after_its_event(world):
    ledger, store, key, _ = world
    event = published_event(ledger, _publish(ledger, store, key, SLOT))
    loaded = check_announced(store, event.extra)
    assert (loaded["period"], loaded["version"], loaded["rows"]) == ("2026-03-28", 1, 72)
    path = Path(event.extra["artifact_uri"].removeprefix("file://"))
    path.write_text(path.read_text() + "acme,extra,2026-03-28 10:00:00,1.00\n")
    with pytest.raises(ArtifactValidationError,
                       match=r"acme/daily-spend 2026-03-28 v1 announced .* the object changed "
                             r"after it was published: do not load it"):
        check_announced(store, event.extra)


@pytest.mark.parametrize(("root", "expected"), [
    ("s3://exports-bucket/prod/", "s3://exports-bucket/prod/acme/google-ads__primary"),
    ("s3://exports-bucket", "s3://exports-bucket/acme/google-ads__primary"),
    ("gs://b/a/b", "gs://b/a/b/acme/google-ads__primary"),
    ("file:///srv/exports/", "file:///srv/exports/acme/google-ads__primary"),
    ("/srv/exports", "file:///srv/exports/acme/google-ads__primary"),
])
def test_the_asset_uri_is_the_schedules_folder_in_every_store(root, expected):
    assert schedule_asset_uri("acme", "acme/google-ads/primary", root) == expected


def test_a_relative_root_is_made_absolute_and_an_unknown_scheme_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert root_uri("exports/artifacts") == (tmp_path / "exports/artifacts").resolve().as_uri()
    with pytest.raises(StorageError, match=r"EXPORT_ARTIFACT_ROOT='ftp://host/x': unsupported "
                                           r"scheme 'ftp'; use a local path"):
        root_uri("ftp://host/x")


def test_a_new_schema_major_is_announced_on_the_same_asset_with_its_diff(tmp_path, monkeypatch):
    """schema_policy new_major on the SQLite world: the value column becomes TEXT between two
    runs; the second file is announced on the schedule's asset as major 2, with the diff."""
    config, ledger, store = acme_library_world(tmp_path, monkeypatch)
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", str(store.root))
    company = config / "acme.yaml"
    company.write_text(company.read_text().replace(
        "    recovery: each\n", "    recovery: each\n    schema_policy: new_major\n", 1))
    schedule = load_catalog(config).schedule("acme/daily-spend")
    assert schedule.policies.schema_policy == "new_major"
    first = register_run(ledger, schedule, SLOT, now=SLOT).run_key
    before = published_event(ledger, _publish(ledger, store, first, SLOT))
    with sqlite3.connect(tmp_path / "demo.db") as conn:  # SQLite cannot ALTER a column's type
        conn.executescript(
            "ALTER TABLE widget_metrics RENAME TO widget_metrics_old;"
            "CREATE TABLE widget_metrics (company_id TEXT NOT NULL, widget_id TEXT NOT NULL, "
            "event_time TIMESTAMP NOT NULL, value TEXT NOT NULL, ingested_at TIMESTAMP NOT NULL,"
            " PRIMARY KEY (company_id, widget_id, event_time));"
            "INSERT INTO widget_metrics SELECT * FROM widget_metrics_old;")
    second = register_run(ledger, schedule, NEXT, now=NEXT).run_key
    after = published_event(ledger, _publish(ledger, store, second, NEXT))
    assert (after.name, after.uri) == (before.name, before.uri)  # one asset per schedule
    assert after.extra["artifact_uri"].endswith(
        "__2026-03-29__slot-20260330T0500Z__schema-2__v1.csv")
    assert (after.extra["schema_major"], after.extra["schema_change"],
            after.extra["schema_diff"], after.extra["schema"][3]) == (
        2, "new_major", ["column value: type decimal(14,2) → string"],
        {"name": "value", "type": "string", "nullable": False})
    assert before.extra["schema_fingerprint"] != after.extra["schema_fingerprint"]
    manifest = _manifest(after.extra["manifest_uri"])
    assert {k: manifest[k] for k in SHARED} == {k: after.extra[k] for k in SHARED}
