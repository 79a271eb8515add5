"""Retention on a real PostgreSQL ledger and the world's real local store: artifacts past
``retention_days`` are deleted and recorded (the manifest stays, marked deleted), held ones and
those under ``legal_hold`` are kept, ``dry_run`` changes nothing, and a store that cannot delete
is recorded while retention carries on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import sqlalchemy as sa

from tests.world import DAILY, build_world

SLOTS = ("2026-03-27T06:00Z", "2026-03-28T06:00Z", "2026-03-29T05:00Z")
EXPORTED = datetime(2026, 3, 29, 6, 0, tzinfo=UTC)
LATER = EXPORTED + timedelta(days=31)  # past the default 30 days


def exported_world(tmp_path, monkeypatch, pg_ledger_database):
    """A world on ``pg_ledger_database`` whose acme/daily-spend exported and delivered ``SLOTS``."""
    from export_lib.cli.commands import run_one

    world = build_world(tmp_path, pg_ledger_database, days=10).use(monkeypatch)
    for slot in SLOTS:
        run_one(str(world.config), DAILY, slot, now=EXPORTED)
    return world


@pytest.fixture()
def world(tmp_path, monkeypatch, pg_ledger_database):
    return exported_world(tmp_path, monkeypatch, pg_ledger_database)


def _path(uri: str) -> Path:
    return Path(unquote(urlsplit(uri).path))


def _catalog(world):
    from export_lib.config.loader import load_catalog

    return load_catalog(world.config)


def test_retention_deletes_all_but_the_held_artifact_and_records_each(world):
    from export_lib.ledger.controls import list_actions
    from export_lib.pipeline import RunContext, render_run, start_run
    from export_lib.pipeline.controls import cancel_run, hold
    from export_lib.pipeline.retention import apply_retention

    ledger, store = world.ledger(), world.store
    # A staging leftover: an earlier slot cancelled while it rendered.
    old_slot = datetime(2026, 3, 26, 6, 0, tzinfo=UTC)
    start_run(ledger, world.schedule(), old_slot, now=EXPORTED, ctx=RunContext())
    render_run(ledger, store, f"{DAILY}/2026-03-26T06:00Z", now=EXPORTED)
    cancel_run(ledger, f"{DAILY}/2026-03-26T06:00Z", who="ops", why="test", now=EXPORTED)
    first, held, third = (ledger.artifacts(f"{DAILY}/{slot}")[0] for slot in SLOTS)
    assert hold(ledger, str(held.id), who="legal", why="case 42", now=EXPORTED).changed
    files_before, actions_before = world.visible_files(), len(list_actions(ledger))

    dry = apply_retention(ledger, _catalog(world), store, now=LATER, dry_run=True)
    assert [i["artifact_id"] for i in dry.deleted] == [first.id, third.id]
    assert [(i["artifact_id"], i["reason"]) for i in dry.kept] == [
        (held.id, "held by legal at 2026-03-29T06:00:00Z: case 42")]
    assert len(dry.staging_deleted) == 1 and dry.failed == []
    assert world.visible_files() == files_before and len(world.staging_files()) == 1
    assert len(list_actions(ledger)) == actions_before
    assert all(a.deleted_at is None for a in (ledger.artifacts(f"{DAILY}/{s}")[0] for s in SLOTS))

    done = apply_retention(ledger, _catalog(world), store, now=LATER)

    assert [i["artifact_id"] for i in done.deleted] == [first.id, third.id]
    assert [i["artifact_id"] for i in done.kept] == [held.id]
    assert world.staging_files() == []
    assert not _path(first.uri).exists() and not _path(third.uri).exists()
    assert _path(held.uri).is_file()
    for artifact in (first, third):
        row = ledger.artifacts(ledger.run_key_of(artifact.run_id))[0]
        assert row.deleted_at == LATER
        assert row.deleted_reason == ("deleted by retention at 2026-04-29T06:00:00Z: older than "
                                      "retention_days=30 (generated 2026-03-29T06:00:00Z)")
        manifest = json.loads(_path(artifact.manifest_uri).read_text())  # the manifest stays
        assert (manifest["sha256"], manifest["deleted_at"]) == (artifact.sha256,
                                                                LATER.isoformat())
    recorded = [(a.who, a.action, a.target_id, a.changed) for a in list_actions(ledger)
                if a.action == "retention-delete"]
    assert sorted(recorded) == sorted([("retention", "retention-delete", str(first.id), True),
                                       ("retention", "retention-delete", str(third.id), True)])
    # Idempotent: a second pass deletes nothing more.
    again = apply_retention(ledger, _catalog(world), store, now=LATER)
    assert (again.deleted, [i["artifact_id"] for i in again.kept]) == ([], [held.id])
    # A deleted artifact cannot be held any more.
    late = hold(ledger, str(first.id), who="legal", why="too late", now=LATER)
    assert late.outcome == (f"nothing changed: artifact {first.id} was deleted (deleted by "
                            "retention at 2026-04-29T06:00:00Z: older than retention_days=30 "
                            "(generated 2026-03-29T06:00:00Z)); there is nothing left to hold")


def test_a_run_hold_covers_its_artifacts_until_unheld(world):
    from export_lib.pipeline.controls import hold, unhold
    from export_lib.pipeline.retention import apply_retention

    ledger = world.ledger()
    key = f"{DAILY}/{SLOTS[0]}"
    assert hold(ledger, key, who="legal", why="audit", now=EXPORTED).changed
    kept = apply_retention(ledger, _catalog(world), world.store, now=LATER, dry_run=True)
    assert [i["run_key"] for i in kept.kept] == [key]

    released = unhold(ledger, key, who="legal", why="audit closed", now=LATER)
    twice = unhold(ledger, key, who="legal", why="again", now=LATER)
    after = apply_retention(ledger, _catalog(world), world.store, now=LATER, dry_run=True)

    assert released.outcome == f"run {key} no longer held: retention applies to it again"
    assert twice.outcome == f"nothing changed: run {key} is not held"
    assert after.kept == [] and len(after.deleted) == 3


def test_legal_hold_keeps_everything_and_a_store_that_cannot_delete_is_recorded(world):
    from export_lib.ledger.controls import list_actions
    from export_lib.ledger.schema import artifacts
    from export_lib.pipeline.retention import apply_retention

    ledger = world.ledger()
    first = ledger.artifacts(f"{DAILY}/{SLOTS[0]}")[0]
    # This artifact was published to another store (EXPORT_ARTIFACT_ROOT changed since).
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(artifacts).where(artifacts.c.id == first.id)
                     .values(uri="s3://old-bucket/acme/daily-spend/old.csv"))
    # Younger than retention: untouched either way.
    assert apply_retention(ledger, _catalog(world), world.store,
                           now=EXPORTED + timedelta(days=29)).deleted == []

    done = apply_retention(ledger, _catalog(world), world.store, now=LATER)

    assert [i["uri"] for i in done.failed] == ["s3://old-bucket/acme/daily-spend/old.csv"]
    assert done.failed[0]["error"] == ("StorageError: s3://old-bucket/acme/daily-spend/old.csv "
                                       "is not a file:// URI of the local artifact store")
    assert len(done.deleted) == 2  # the others were deleted all the same
    (refused,) = [a for a in list_actions(ledger) if not a.changed]
    assert refused.outcome.startswith("nothing changed: the store cannot delete s3://old-bucket")
    assert ledger.artifacts(f"{DAILY}/{SLOTS[0]}")[0].deleted_at is None

    # legal_hold on the schedule (today's config) keeps what is left.
    path = world.config / "acme.yaml"
    path.write_text(path.read_text().replace("    deadline: 2h\n    recovery: each\n",
                                             "    deadline: 2h\n    recovery: each\n"
                                             "    legal_hold: true\n", 1))
    held = apply_retention(ledger, _catalog(world), world.store, now=LATER)
    assert held.failed == [] and held.deleted == []
    assert [i["reason"] for i in held.kept] == ["schedule acme/daily-spend is under legal_hold"]
