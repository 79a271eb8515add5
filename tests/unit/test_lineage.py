"""What an export run reads and writes, as OpenLineage names it (export_lib.pipeline.lineage,
ADR 0027): the names carry scheme, host and port of a connection, never its login, password,
path or extras (SQLite ledger, local store, no Airflow; the events themselves are checked in
tests/dags/test_walking_skeleton.py through Airflow's OpenLineage provider)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from export_lib.config.destinations import (
    EmailDestination,
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
    WebhookDestination,
)
from export_lib.config.loader import load_catalog
from export_lib.errors import ConfigError
from export_lib.pipeline import publish_run, register_run, render_run
from export_lib.pipeline.lineage import (
    LineageDataset,
    deliver_lineage,
    destination_dataset,
    export_lineage,
    source_dataset,
    split_uri,
)
from export_lib.source.connections import parse_connection
from tests.world import acme_library_world

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, window 2026-03-28 Berlin
SECRET = "pw-Sekret-9f8e"
CONNECTIONS = {
    "warehouse": f"postgresql://reader:{SECRET}@db.example:6543/marketing?sslmode=require",
    "partner_sftp": f"sftp://upload:{SECRET}@sftp.partner.example:2222/home/{SECRET}",
    "partner_hook": f"https://hook:{SECRET}@hooks.partner.example:8443/{SECRET}?token={SECRET}",
    "relay": f"smtp://mailer:{SECRET}@relay.example:587",
}


def resolver(conn_id: str):
    return parse_connection(conn_id, CONNECTIONS[conn_id])


def test_a_postgresql_source_is_host_port_and_database_schema_table_without_its_login():
    conn = resolver("warehouse")
    assert source_dataset(conn, "widget_metrics", "ads", ("a", "b")) == LineageDataset(
        "postgres://db.example:6543", "marketing.ads.widget_metrics", ("a", "b"))
    # No schema in the export: the search_path's first, public; no port: PostgreSQL's.
    bare = parse_connection("x", "postgresql://u:p@db.example/marketing")
    assert source_dataset(bare, "t", None) == LineageDataset("postgres://db.example:5432",
                                                             "marketing.public.t")


def test_a_sqlite_source_is_its_file():
    conn = parse_connection("demo_source", "sqlite:////srv/demo/demo.db")
    assert source_dataset(conn, "widget_metrics", None) == LineageDataset(
        "sqlite:///srv/demo/demo.db", "main.widget_metrics")


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://bucket/exports/acme/daily-spend", ("s3://bucket", "exports/acme/daily-spend")),
    ("gs://bucket/acme/daily-spend", ("gs://bucket", "acme/daily-spend")),
    ("file:///var/exports/artifacts/acme/daily-spend",
     ("file", "/var/exports/artifacts/acme/daily-spend")),
    ("s3://bucket", ("s3://bucket", "/")),
])
def test_a_store_uri_splits_into_namespace_and_name(uri, expected):
    assert split_uri(uri) == expected


@pytest.mark.parametrize(("destination", "expected"), [
    (LocalDestination(id="dir", path="outbox/acme"), ("file", "/srv/exports/outbox/acme")),
    (LocalDestination(id="share", path="/mnt/share/acme"), ("file", "/mnt/share/acme")),
    (S3Destination(id="s3", bucket="partner-bucket", prefix="in/acme/"),
     ("s3://partner-bucket", "in/acme/")),
    (S3Destination(id="s3", bucket="partner-bucket"), ("s3://partner-bucket", "/")),
    (GcsDestination(id="gcs", bucket="partner-bucket", prefix="in"), ("gs://partner-bucket", "in")),
    (SftpDestination(id="sftp", conn_id="partner_sftp", path="/upload/acme"),
     ("sftp://sftp.partner.example:2222", "/upload/acme")),
    (WebhookDestination(id="hook", conn_id="partner_hook", endpoint="/exports/acme"),
     ("https://hooks.partner.example:8443", "/exports/acme")),
    (EmailDestination(id="mail", conn_id="relay", to=("a@acme.example", "b@acme.example")),
     ("smtp://relay.example:587", "a@acme.example,b@acme.example")),
])
def test_each_destination_is_named_by_its_place_never_its_credentials(destination, expected):
    found = destination_dataset(destination, resolver=resolver, exports_root="/srv/exports")
    assert (found.namespace, found.name) == expected
    assert SECRET not in repr(found) and "mailer" not in repr(found)


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    config, ledger, store = acme_library_world(tmp_path, monkeypatch)
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", str(store.root))
    schedule = load_catalog(config).schedule("acme/daily-spend")
    return ledger, store, register_run(ledger, schedule, SLOT, now=SLOT).run_key, tmp_path


def test_an_export_reads_its_captured_table_and_writes_its_schedules_artifacts(world):
    ledger, store, key, tmp_path = world
    before = export_lineage(ledger, key)
    (source,) = before.inputs
    assert source == LineageDataset(f"sqlite://{tmp_path}/demo.db", "main.widget_metrics",
                                    ("company_id", "widget_id", "event_time", "value"))
    (artifacts,) = before.outputs
    folder = str((tmp_path / "artifacts" / "acme" / "daily-spend").resolve())
    assert artifacts == LineageDataset("file", folder, source.columns, source)
    run = ledger.get_run(key)
    assert before.run == {
        "run_key": key, "company": "acme", "schedule": "acme/daily-spend", "period": "2026-03-28",
        "window_start": "2026-03-27T23:00:00+00:00", "window_end": "2026-03-28T23:00:00+00:00",
        "timezone": "Europe/Berlin", "config_version": run.config_version}

    rendered = render_run(ledger, store, key, now=SLOT)
    published = publish_run(ledger, store, key, rendered["attempt_id"], now=SLOT)
    after = export_lineage(ledger, key)
    assert after.inputs == before.inputs
    # After a render the artifacts carry the file's column types (the schema contract's).
    assert after.outputs == (LineageDataset(artifacts.namespace, artifacts.name,
                                            source.columns, source,
                                            ("string", "string", "timestamptz", "decimal(14,2)")),)
    assert after.run == {**before.run, "version": "1", "sha256": published.sha256,
                         "artifact_uri": published.uri}


def test_a_delivery_reads_the_artifacts_and_writes_its_captured_destination(world):
    ledger, _, key, tmp_path = world
    lineage = deliver_lineage(ledger, key, "acme-dir", exports_root="/srv/exports")
    folder = str((tmp_path / "artifacts" / "acme" / "daily-spend").resolve())
    assert lineage.inputs == (LineageDataset("file", folder),)
    assert lineage.outputs == (LineageDataset("file", "/srv/exports/outbox/acme/daily-spend"),)
    with pytest.raises(ConfigError, match=r"\['nowhere'\] are not configured for this schedule"):
        deliver_lineage(ledger, key, "nowhere")
