"""``exportctl pause|unpause|cancel|revoke|hold|unhold|retention|actions`` as subprocesses on a
PostgreSQL ledger: one line per control, exit 1 and "nothing changed" on the wrong object, and
the audit trail lists every decision."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.world import DAILY, DAILY_SLOT, World

KEY = f"{DAILY}/{DAILY_SLOT}"
ARTIFACT = "exports/artifacts/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"
OUTBOX = "exports/outbox/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"


def _age_artifacts(world: World, days: int) -> None:
    engine = world.ledger().engine
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE export_artifacts SET generated_at = generated_at - "
                             f"interval '{days} days'"))
    engine.dispose()


def test_hold_retention_revoke_and_the_audit_trail(pg_world: World):
    w = pg_world
    w.run()
    assert w.exportctl("release", KEY, "--by", "ops").returncode == 0  # audited too

    finished = w.exportctl("cancel", KEY, "--by", "bob", "--why", "oops")
    assert (finished.returncode, finished.stdout) == (1, "")
    assert finished.stderr == (f"exportctl: nothing changed: run {KEY} is already ready; only a "
                               "run that has not finished can be cancelled; revoke its artifact "
                               "instead\n")

    held = w.exportctl("hold", KEY, "--by", "legal", "--why", "case 42")
    assert (held.returncode, held.stdout) == (0, f"run {KEY} held: retention keeps it until it "
                                                 "is unheld\n")
    _age_artifacts(w, 40)
    dry = w.exportctl("retention", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["deleted"], [k["run_key"] for k in report["kept"]]) == ([], [KEY])

    assert w.exportctl("unhold", KEY, "--by", "legal", "--why", "closed").returncode == 0
    listed = w.exportctl("retention", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("would delete artifact ") and ARTIFACT.rsplit("/", 1)[1] in lines[0]
    assert lines[-1] == ("1 artifact(s) would delete, 0 kept (held), 0 not deletable, 0 staging "
                         "leftover(s) (dry run: nothing changed)")
    assert (w.home / ARTIFACT).is_file()

    deleted = w.exportctl("retention")
    assert deleted.returncode == 0 and deleted.stdout.startswith("deleted artifact ")
    assert not (w.home / ARTIFACT).exists() and (w.home / (ARTIFACT + ".manifest.json")).exists()
    artifact_id = deleted.stdout.split()[2]
    late = w.exportctl("hold", artifact_id, "--by", "legal", "--why", "too late")
    assert late.returncode == 1
    assert late.stderr.startswith(f"exportctl: nothing changed: artifact {artifact_id} was "
                                  "deleted (deleted by retention at ")
    assert late.stderr.count("\n") == 1

    revoked = w.exportctl("revoke", KEY, "--by", "carol", "--why", "test rows")
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith(f"artifact {artifact_id} (run {KEY} v1) revoked: later "
                                     "deliveries are refused")
    assert "withdrawn from acme-dir: deleted " in revoked.stdout
    assert not (w.home / OUTBOX).exists()

    trail = w.exportctl("actions", "--company", "acme", "--json")
    assert trail.returncode == 0, trail.stderr
    assert [(a["who"], a["action"], a["changed"]) for a in reversed(json.loads(trail.stdout))] == [
        ("ops", "release", True), ("bob", "cancel", False), ("legal", "hold", True),
        ("legal", "unhold", True), ("retention", "retention-delete", True), ("legal", "hold", False),
        ("carol", "revoke", True)]


def test_pause_skips_the_next_run_and_bad_input_changes_nothing(pg_world: World):
    w = pg_world
    paused = w.exportctl("pause", "--company", "acme", "--by", "ops", "--why", "maintenance")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == ("company acme paused: its slots are recorded skipped until it is "
                             "unpaused; runs already started finish\n")
    unknown = w.exportctl("pause", "--company", "nope", "--by", "ops", "--why", "x")
    assert (unknown.returncode, unknown.stderr) == (1, (
        "exportctl: nothing changed: unknown company 'nope'; known companies: acme, "
        "dentsu-happiness, kiwi-outdoors\n"))
    no_who = w.exportctl("cancel", KEY, "--why", "x")
    assert no_who.returncode == 2 and "the following arguments are required: --by" in no_who.stderr

    result = w.run()

    assert result["state"] == "skipped" and result["artifact"] is None
    assert result["skipped"].startswith("company acme paused by ops at ")
    assert result["skipped"].endswith(": maintenance")
    assert w.exportctl("unpause", "--company", "acme", "--by", "ops",
                       "--why", "done").returncode == 0
    again = w.exportctl("unpause", "--company", "acme", "--by", "ops", "--why", "done")
    assert (again.returncode, again.stderr) == (
        1, "exportctl: nothing changed: company acme is not paused\n")
