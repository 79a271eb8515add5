"""The real pipeline (resolve → render → publish) with a LocalStore and a PostgreSQL ledger:
fencing of stale attempts, captured config, corrupted staging objects and staging clean-up."""

from __future__ import annotations

import csv
import json
from datetime import timedelta
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.errors import ArtifactValidationError, FencingError
from export_lib.ledger import open_ledger
from export_lib.pipeline import collect_staging_garbage, publish_run, register_run, render_run
from export_lib.storage.stores import LocalStore
from tests.fixtures.ledger import DAILY_SLOT
from tests.support import children
from tests.support.leases import lapse_leases
from tests.world import World

NOW = DAILY_SLOT + timedelta(minutes=5)
FINAL = "acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"
VISIBLE = f"exports/artifacts/{FINAL}"  # as World.visible_files() names it


def _publish_in_process(url: str, root: str, run_key: str, attempt_id: str, out) -> None:
    """A stalled worker waking up: publish its (old) attempt from another process."""
    try:
        publish_run(open_ledger(url), LocalStore(root), run_key, attempt_id, now=NOW)
        out.put(("published", ""))
    except FencingError as exc:
        out.put(("FencingError", str(exc)))


def test_stale_attempt_publish_run_moves_nothing_to_a_final_name(
        pg_ledger, pg_ledger_database, world: World):
    key = register_run(pg_ledger, world.schedule(), DAILY_SLOT, now=NOW).run_key
    old = render_run(pg_ledger, world.store, key, now=NOW)
    # The old attempt stalled past its render lease (5 min): a new attempt takes the run over.
    lapse_leases(pg_ledger, key)
    new = render_run(pg_ledger, world.store, key, now=NOW + timedelta(minutes=6))
    assert (old["generation"], new["generation"]) == (1, 2)
    assert old["sha256"] == new["sha256"]  # same content: only the generation tells them apart

    ctx = children.context()
    out = ctx.Queue()
    proc = children.process(ctx, _publish_in_process, (
        pg_ledger_database, str(world.store.root), key, old["attempt_id"], out))
    proc.start()
    outcome, message = out.get(timeout=60)
    proc.join(timeout=60)
    assert outcome == "FencingError"
    assert "(generation 1) is stale; generation 2 owns the run" in message
    assert world.visible_files() == {}
    assert pg_ledger.count("artifacts") == 0
    # The fenced attempt's staging file can never be published: it is removed at once.
    assert world.staging_files() == [f"{new['attempt_id']}.csv"]

    published = publish_run(pg_ledger, world.store, key, new["attempt_id"], now=NOW)
    assert (published["version"], published["created"]) == (1, True)
    assert sorted(world.visible_files()) == [VISIBLE, VISIBLE + ".manifest.json"]
    assert [(a.generation, a.state) for a in pg_ledger.attempts(key)] == [
        (1, "abandoned"), (2, "published")]
    assert [a.attempt_id for a in pg_ledger.staging_garbage()] == [old["attempt_id"]]
    assert pg_ledger.get_run(key).state == "ready"


def test_config_changed_between_slot_and_retry_keeps_the_captured_version(
        pg_ledger, world: World):
    captured = world.schedule()
    first = register_run(pg_ledger, captured, DAILY_SLOT, now=NOW)
    # Someone edits the config after the slot: drops a column and switches the delimiter.
    path = world.config / "acme.yaml"
    text = path.read_text()
    edited = text.replace("columns: [company_id, widget_id, event_time, value]\n      "
                          "timestamp_column: event_time\n      tenant_column: company_id\n      "
                          "ingested_column: ingested_at\n      order_by: [event_time, widget_id]",
                          "columns: [company_id, widget_id, event_time]\n      "
                          "timestamp_column: event_time\n      tenant_column: company_id\n      "
                          "ingested_column: ingested_at\n      order_by: [event_time, widget_id]",
                          1).replace('csv: {delimiter: ",", timestamps: local}',
                                     'csv: {delimiter: ";", timestamps: local}', 1)
    assert edited != text
    path.write_text(edited)
    changed = world.schedule()
    assert changed.config_version != captured.config_version

    retry = register_run(pg_ledger, changed, DAILY_SLOT, now=NOW + timedelta(hours=1))
    assert (retry.run_key, retry.created) == (first.run_key, False)
    assert retry.config_version == captured.config_version
    key = retry.run_key
    rendered = render_run(pg_ledger, world.store, key, now=NOW + timedelta(hours=1))
    published = publish_run(pg_ledger, world.store, key, rendered["attempt_id"],
                            now=NOW + timedelta(hours=1), columns=rendered["columns"])

    final = world.store.root / FINAL
    with final.open(newline="") as fh:
        header = next(csv.reader(fh))
    assert header == ["company_id", "widget_id", "event_time", "value"]  # captured columns, ","
    manifest = json.loads(Path(str(final) + ".manifest.json").read_text())
    assert manifest["config_version"] == captured.config_version
    (artifact,) = pg_ledger.artifacts(key)
    assert (artifact.config_version, artifact.sha256) == (captured.config_version,
                                                          published["sha256"])
    assert pg_ledger.count("runs") == 1


def test_corrupted_staging_object_fails_the_attempt_and_publishes_nothing(
        pg_ledger, world: World):
    key = register_run(pg_ledger, world.schedule(), DAILY_SLOT, now=NOW).run_key
    bad = render_run(pg_ledger, world.store, key, now=NOW)
    staged = world.store.root / ".staging" / f"{bad['attempt_id']}.csv"
    data = bytearray(staged.read_bytes())
    data[-5] = ord("9") if data[-5] != ord("9") else ord("8")  # same size, one digit changed
    staged.write_bytes(bytes(data))

    with pytest.raises(ArtifactValidationError,
                       match=r"staged object file://.*\.csv does not match what was rendered"):
        publish_run(pg_ledger, world.store, key, bad["attempt_id"], now=NOW)
    assert (pg_ledger.get_run(key).state, [a.state for a in pg_ledger.attempts(key)]) == (
        "failed", ["failed"])
    assert pg_ledger.get_run(key).reason.startswith(f"staged object {staged.as_uri()}")
    assert pg_ledger.count("artifacts") == 0 and world.visible_files() == {}

    retry = render_run(pg_ledger, world.store, key, now=NOW + timedelta(minutes=10))
    published = publish_run(pg_ledger, world.store, key, retry["attempt_id"],
                            now=NOW + timedelta(minutes=10))
    assert (published["version"], published["sha256"], retry["generation"]) == (
        1, bad["sha256"], 2)
    assert sorted(world.visible_files()) == [VISIBLE, VISIBLE + ".manifest.json"]
    assert [a.attempt_id for a in pg_ledger.staging_garbage()] == [bad["attempt_id"]]
    assert world.staging_files() == [staged.name]  # the published one was moved away

    catalog = load_catalog(world.config)
    report = collect_staging_garbage(pg_ledger, world.store, catalog)
    assert report == {"cleaned": [{"attempt_id": bad["attempt_id"], "run_key": key,
                                   "uri": staged.as_uri()}], "kept": [], "held": []}
    assert world.staging_files() == [] and pg_ledger.staging_garbage() == []
    assert pg_ledger.attempts(key)[0].staging_cleaned == 1
    assert collect_staging_garbage(pg_ledger, world.store, catalog) == {
        "cleaned": [], "kept": [], "held": []}


def test_publication_that_lost_its_ledger_commit_is_completed_by_the_retry(
        pg_ledger, world: World):
    """The object reached its final name but the ledger transaction died (a crash between
    promote and commit): nothing was recorded, and the retry records v1 over the same bytes."""
    key = register_run(pg_ledger, world.schedule(), DAILY_SLOT, now=NOW).run_key
    first = render_run(pg_ledger, world.store, key, now=NOW)
    attempt = pg_ledger.get_attempt(first["attempt_id"])
    pg_ledger.advance(key, attempt.attempt_id, "validating", NOW)

    def promote_then_crash(version: int) -> tuple[str, str]:
        world.store.promote(attempt.staging_uri, FINAL.replace("__v1", f"__v{version}"),
                            {"sha256": attempt.sha256, "version": version, "run_key": key})
        raise OSError("worker lost its ledger connection")

    with pytest.raises(OSError, match="lost its ledger connection"):
        pg_ledger.publish(key, attempt.attempt_id, now=NOW, fmt="csv", promote=promote_then_crash)
    assert pg_ledger.count("artifacts") == 0 and pg_ledger.get_run(key).state == "validating"
    assert sorted(world.visible_files()) == [VISIBLE, VISIBLE + ".manifest.json"]  # unrecorded

    # A render retry once the crashed attempt's lease (5 min) lapsed.
    lapse_leases(pg_ledger, key)
    retry = render_run(pg_ledger, world.store, key, now=NOW + timedelta(minutes=6))
    published = publish_run(pg_ledger, world.store, key, retry["attempt_id"],
                            now=NOW + timedelta(minutes=6))
    assert (published["version"], published["created"], published["sha256"]) == (
        1, True, first["sha256"])
    assert sorted(world.visible_files()) == [VISIBLE, VISIBLE + ".manifest.json"]
    assert world.staging_files() == []
    manifest = json.loads((world.store.root / (FINAL + ".manifest.json")).read_text())
    assert (manifest["run_key"], manifest["version"]) == (key, 1)  # rewritten in full
    assert [(a.generation, a.state) for a in pg_ledger.attempts(key)] == [
        (1, "abandoned"), (2, "published")]
