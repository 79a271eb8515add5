"""A compressed JSON Lines export end to end on a real PostgreSQL (ADR 0033): the company file
says ``format: jsonl`` and ``compression: gzip``; render, publish and a local delivery give a
``.jsonl.gz`` file whose sha256 is the one in the manifest, in the ledger and in the sidecar,
and whose lines are the period's rows."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from export_lib.pipeline import deliver_run, publish_run, register_run, render_run
from export_lib.source.demo import seed_source
from tests.world import COMPANIES, SEEDED_AT, build_world

DAILY = "acme/daily-spend"
SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # the period 2026-03-28 (Berlin)


@pytest.fixture()
def pg_world(tmp_path, monkeypatch, postgres_server, pg_ledger_database):
    """A world whose demo source and ledger are one PostgreSQL database."""
    from export_lib.source.connections import parse_connection

    dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + pg_ledger_database.rsplit("/", 1)[1]
    world = build_world(tmp_path, pg_ledger_database, days=3, AIRFLOW_CONN_DEMO_SOURCE=dsn)
    seed_source(parse_connection("demo_source", dsn), COMPANIES, now=SEEDED_AT + timedelta(
        days=1), days=4)
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", str(world.artifacts))
    return world.use(monkeypatch)


def test_a_gzipped_json_lines_export_is_delivered_with_the_manifest_sha256(pg_world):
    world = pg_world
    path = world.config / "acme.yaml"
    data = yaml.safe_load(path.read_text())
    data["widget_exports"][0].update(format="jsonl", compression="gzip")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    ledger = world.ledger()
    key = register_run(ledger, world.schedule(DAILY), SLOT, now=SLOT).run_key
    rendered = render_run(ledger, world.store, key, now=SLOT)
    published = publish_run(ledger, world.store, key, rendered.attempt_id, now=SLOT)
    assert published.uri.endswith("/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1"
                                  ".jsonl.gz")
    (artifact,) = ledger.artifacts(key)
    manifest = json.loads(Path(artifact.manifest_uri.removeprefix("file://")).read_text())
    assert (manifest["format"], manifest["compression"], manifest["media_type"]) == (
        "jsonl.gz", "gzip", "application/gzip")
    assert artifact.format == "jsonl.gz"

    outcome = deliver_run(ledger, key, "acme-dir", now=SLOT + timedelta(minutes=1),
                          config_dir=str(world.config))
    assert outcome.state == "acknowledged"  # a local file: placed and verified
    (delivered,) = [p for p in world.root.rglob("acme__daily-spend__*.jsonl.gz")
                    if "outbox" in p.parts]
    body = delivered.read_bytes()
    digest = hashlib.sha256(body).hexdigest()
    # One sha256 everywhere: the compressed bytes the recipient holds.
    assert digest == manifest["sha256"] == artifact.sha256 == rendered.sha256
    assert len(body) == manifest["bytes"]
    assert delivered.with_name(delivered.name + ".sha256").read_text() == (
        f"{digest}  {delivered.name}\n")
    records = [json.loads(line) for line in gzip.decompress(body).splitlines()]
    assert len(records) == manifest["rows"] == rendered.rows > 0
    assert list(records[0]) == ["company_id", "widget_id", "event_time", "value"]
    # csv.timestamps: local (acme.yaml) applies to JSON Lines too: Berlin's offset.
    assert {r["company_id"] for r in records} == {"acme"}
    assert all(r["event_time"].endswith(("+01", "+02")) for r in records)
