"""Retention and ``exportctl ledger gc`` never fail open (issue 22, item 3; ADR 0017), on the
retention tests' world (a real PostgreSQL ledger, the local store, three exported days of
acme/daily-spend): an artifact is kept while a delivery of it may still be retried or is not
final, while its company's config file has errors, while no config can be read, and a manual
run follows its base export's policy. Every kept object says why, in exactly these words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from export_lib.errors import DeliveryError
from tests.integration.pipeline.test_retention import (
    EXPORTED,
    LATER,
    SLOTS,
    _catalog,
    _path,
    exported_world,
)
from tests.services.http import start_receiver, stop_receiver
from tests.support.cli import exportctl
from tests.world import DAILY

ACME_DIR = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
POLICIES = "    deadline: 2h\n    recovery: each\n"  # the end of acme/daily-spend's block


@pytest.fixture()
def world(tmp_path, monkeypatch, pg_ledger_database):
    return exported_world(tmp_path, monkeypatch, pg_ledger_database)


def _edit(world, old: str, new: str) -> None:
    path = world.config / "acme.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _ids(items) -> list[int]:
    return [item["artifact_id"] for item in items]


def test_an_artifact_waits_for_its_deliveries_to_be_final(world, monkeypatch):
    from export_lib.cli.commands import run_one
    from export_lib.pipeline.controls import revoke_artifact
    from export_lib.pipeline.retention import apply_retention

    # A partner webhook that is down, and a retention shorter than its 5-day retry window.
    receiver = start_receiver()
    stop_receiver(receiver)
    monkeypatch.setenv("AIRFLOW_CONN_PARTNER_HOOK", f"http://127.0.0.1:{receiver.port}")
    world.grant_connection("partner_hook", "webhook")
    _edit(world, ACME_DIR, ACME_DIR + "      - {id: partner, type: webhook, conn_id: "
                                      "partner_hook, endpoint: /hooks/exports}\n")
    _edit(world, POLICIES, POLICIES + "    retention_days: 1\n")
    slot = "2026-03-30T05:00Z"
    with pytest.raises(DeliveryError, match="will retry until 2026-04-04T05:00:00Z"):
        run_one(str(world.config), DAILY, slot, now=datetime(2026, 3, 30, 5, 10, tzinfo=UTC))
    ledger, key = world.ledger(), f"{DAILY}/{slot}"
    (waiting,) = ledger.artifacts(key)
    older = [ledger.artifacts(f"{DAILY}/{s}")[0].id for s in SLOTS]

    retrying = apply_retention(ledger, _catalog(world), world.store,
                               now=datetime(2026, 4, 2, 6, 0, tzinfo=UTC))

    assert _ids(retrying.deleted) == older  # delivered to acme-dir, their only destination
    assert [(i["artifact_id"], i["reason"]) for i in retrying.kept] == [
        (waiting.id, "delivery to partner is still retrying until 2026-04-04T05:00:00Z; kept")]
    assert _path(waiting.uri).is_file() and ledger.artifacts(key)[0].deleted_at is None

    # The window closes: the delivery is exhausted, which an operator may still requeue.
    with pytest.raises(DeliveryError, match="exhausted: its retry window closed"):
        run_one(str(world.config), DAILY, slot, now=datetime(2026, 4, 4, 5, 0, tzinfo=UTC))
    exhausted = apply_retention(ledger, _catalog(world), world.store,
                                now=datetime(2026, 4, 5, 6, 0, tzinfo=UTC))
    assert [(i["artifact_id"], i["reason"]) for i in exhausted.kept] == [(
        waiting.id, f"delivery to partner is exhausted, which is not final; kept until it is "
                    f"requeued (exportctl requeue {key}) or the artifact is revoked (exportctl "
                    f"revoke {waiting.id})")]
    assert exhausted.deleted == [] and _path(waiting.uri).is_file()

    # Revoked, nothing of it is delivered any more: retention may delete it.
    assert revoke_artifact(ledger, str(waiting.id), who="ops", why="partner gone",
                           now=datetime(2026, 4, 5, 7, 0, tzinfo=UTC)).changed
    released = apply_retention(ledger, _catalog(world), world.store,
                               now=datetime(2026, 4, 5, 8, 0, tzinfo=UTC))
    assert (_ids(released.deleted), released.kept) == ([waiting.id], [])
    assert not _path(waiting.uri).exists()


def test_a_held_company_whose_file_has_a_typo_keeps_every_artifact(world):
    from export_lib.pipeline.retention import apply_retention

    ledger = world.ledger()
    # Under legal_hold since the runs, and the same edit mistyped a policy: the file no longer
    # loads, so today's legal_hold cannot be read (the runs captured legal_hold: false).
    _edit(world, POLICIES, POLICIES.replace("each", "eahc") + "    legal_hold: true\n")
    catalog = _catalog(world)
    assert list(catalog.errors) == [str(world.config / "acme.yaml")]

    report = apply_retention(ledger, catalog, world.store, now=LATER)

    assert report.deleted == [] and report.failed == []
    reason = (f"config file {world.config / 'acme.yaml'} has errors, so today's legal_hold and "
              "retention_days of company acme are unknown; kept until it validates (exportctl "
              f"validate {world.config})")
    assert [i["reason"] for i in report.kept] == [reason] * 3
    assert all(_path(ledger.artifacts(f"{DAILY}/{s}")[0].uri).is_file() for s in SLOTS)


def test_retention_without_a_readable_config_deletes_nothing_and_says_why(world):
    ledger = world.ledger()
    artifacts = [ledger.artifacts(f"{DAILY}/{s}")[0] for s in SLOTS]
    env = {k: v for k, v in world.env.items() if k != "EXPORT_CONFIG_DIR"}  # and no ./dags/config

    result = exportctl("retention", cwd=world.home, env=env)

    assert result.returncode == 0, result.stderr
    reason = ("no readable config: no config directory was given, so today's legal_hold and "
              "retention_days of acme/daily-spend are unknown; kept (pass --config DIR or set "
              "EXPORT_CONFIG_DIR)")
    assert result.stdout.splitlines() == [
        *(f"kept artifact {a.id} {a.uri}: {reason}" for a in artifacts),
        "0 artifact(s) deleted, 3 kept (held), 0 not deletable, 0 staging leftover(s)"]
    assert all(_path(a.uri).is_file() for a in artifacts)
    assert all(ledger.artifacts(f"{DAILY}/{s}")[0].deleted_at is None for s in SLOTS)


def test_a_manual_run_follows_its_base_exports_retention_and_legal_hold(world):
    from export_lib.config.manual import manual_run_key
    from export_lib.pipeline import RunContext, publish_run, render_run, start_manual
    from export_lib.pipeline.retention import apply_retention

    ledger, store = world.ledger(), world.store
    params = {"company": "acme", "base_export": DAILY, "reason": "audit request 42",
              "window_start": "2026-03-26T00:00:00Z", "window_end": "2026-03-27T00:00:00Z"}
    key = start_manual(ledger, str(world.config), params, run_id="manual__audit",
                       requested_at=EXPORTED, now=EXPORTED, ctx=RunContext()).run_key
    assert key == manual_run_key("acme", "manual__audit")
    rendered = render_run(ledger, store, key, now=EXPORTED)
    manual = publish_run(ledger, store, key, rendered["attempt_id"], now=EXPORTED,
                         columns=rendered["columns"])

    # The base keeps its artifacts 45 days now (the manual run captured 30): none is due.
    _edit(world, POLICIES, POLICIES + "    retention_days: 45\n")
    longer = apply_retention(ledger, _catalog(world), store, now=LATER, dry_run=True)
    assert (longer.deleted, longer.kept) == ([], [])

    # The base is put under legal_hold: the manual run's artifact is held with it.
    _edit(world, "    retention_days: 45\n", "    legal_hold: true\n")
    held = apply_retention(ledger, _catalog(world), store, now=LATER)

    assert held.deleted == [] and held.failed == []
    assert [(i["run_key"], i["reason"]) for i in held.kept] == [
        *((f"{DAILY}/{s}", "schedule acme/daily-spend is under legal_hold") for s in SLOTS),
        (key, f"schedule acme/daily-spend is under legal_hold; manual run {key} is based on it")]
    assert _path(manual["uri"]).is_file()


def test_ledger_gc_keeps_the_staging_leftovers_of_a_held_export(world):
    from export_lib.pipeline import RunContext, render_run, start_run
    from export_lib.pipeline.controls import cancel_run, hold, unhold

    ledger = world.ledger()
    # A staging leftover: a slot cancelled while it rendered.
    old = f"{DAILY}/2026-03-26T06:00Z"
    start_run(ledger, world.schedule(), datetime(2026, 3, 26, 6, 0, tzinfo=UTC), now=EXPORTED,
              ctx=RunContext())
    render_run(ledger, world.store, old, now=EXPORTED)
    cancel_run(ledger, old, who="ops", why="test", now=EXPORTED)
    (leftover,) = ledger.staging_garbage()
    _edit(world, POLICIES, POLICIES + "    legal_hold: true\n")

    legal = world.exportctl("ledger", "gc")

    assert (legal.returncode, legal.stderr) == (0, "")
    assert legal.stdout.splitlines() == [
        f"kept {leftover.staging_uri} ({old}): schedule acme/daily-spend is under legal_hold",
        "0 staging object(s) cleaned, 1 kept (held), 0 not deletable"]
    assert len(world.staging_files()) == 1

    # An operator's hold on the run keeps it as well, once the legal hold is lifted.
    _edit(world, "    legal_hold: true\n", "")
    assert hold(ledger, old, who="legal", why="case 42", now=EXPORTED).changed
    operator = world.exportctl("ledger", "gc", "--json")
    assert operator.returncode == 0, operator.stderr
    assert operator.stdout.count("held by legal at 2026-03-29T06:00:00Z: case 42") == 1
    assert len(world.staging_files()) == 1

    assert unhold(ledger, old, who="legal", why="closed", now=EXPORTED).changed
    released = world.exportctl("ledger", "gc")
    assert released.stdout.splitlines()[-1] == ("1 staging object(s) cleaned, 0 kept (held), "
                                                "0 not deletable")
    assert world.staging_files() == [] and ledger.staging_garbage() == []


def test_validate_warns_when_retention_is_shorter_than_a_retry_window(world):
    world.grant_connection("partner_hook", "webhook")
    _edit(world, POLICIES, POLICIES + "    retention_days: 3\n")
    _edit(world, ACME_DIR, ACME_DIR.replace("daily-spend}", "daily-spend, retry_window: 36h}")
          + "      - {id: partner, type: webhook, conn_id: partner_hook, endpoint: /hooks}\n")

    result = world.exportctl("validate", str(world.config))

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "warning: acme/daily-spend: retention_days 3 is shorter than destination partner's "
        "retry_window (5d): its artifacts are kept until their deliveries are final, past "
        "retention_days; set retention_days to 5 or more, or shorten retry_window",
        f"OK: 3 companies, 10 schedules in {world.config} (1 warning(s))"]
