"""Operator controls on a real PostgreSQL ledger and the world's real local store and outbox:
pause, cancel (during render: nothing publishes), revoke (later deliveries refused, the period
regenerates), hold, and each one audited — also when it changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from export_lib.errors import DeliveryError, FencingError
from tests.fixtures.delivery import webhook, webhook_server  # noqa: F401 - fixtures
from tests.world import DAILY, build_world

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, 07:00 Berlin
KEY = f"{DAILY}/2026-03-29T05:00Z"
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)
OUTBOX = "exports/outbox/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"


@pytest.fixture()
def world(tmp_path, monkeypatch, pg_ledger_database):
    return build_world(tmp_path, pg_ledger_database, days=10).use(monkeypatch)


def _actions(ledger, target=None):
    from export_lib.ledger.controls import list_actions

    return [(a.who, a.action, a.target_id, a.why, a.changed, a.outcome)
            for a in reversed(list_actions(ledger, target_id=target))]


def test_cancel_between_render_and_publish_publishes_nothing(world):
    from export_lib.pipeline import RunContext, publish_run, render_run, start_run
    from export_lib.pipeline.controls import cancel_run

    ledger, store = world.ledger(), world.store
    started = start_run(ledger, world.schedule(), SLOT, now=NOW, ctx=RunContext())
    rendered = render_run(ledger, store, KEY, now=NOW)
    assert ledger.get_run(KEY).state == "rendering" and len(world.staging_files()) == 1

    result = cancel_run(ledger, KEY, who="alice", why="wrong query", now=NOW)
    with pytest.raises(FencingError, match=r"run acme/daily-spend/2026-03-29T05:00Z was "
                       r"cancelled \(cancelled by alice at 2026-03-29T05:05:00Z: wrong query\); "
                       r"attempt \w+ may not go on. Nothing was made visible."):
        publish_run(ledger, store, KEY, rendered["attempt_id"], now=NOW,
                    columns=rendered["columns"])

    assert started.skip_reason is None
    assert (result.changed, result.outcome) == (True, (
        f"run {KEY} cancelled (was rendering): its attempt is fenced off, nothing of it "
        "publishes"))
    run = ledger.get_run(KEY)
    assert (run.state, run.reason) == ("cancelled",
                                       "cancelled by alice at 2026-03-29T05:05:00Z: wrong query")
    assert ledger.artifacts(KEY) == [] and world.visible_files() == {}
    assert [a.state for a in ledger.attempts(KEY)] == ["abandoned"]
    assert _actions(ledger) == [("alice", "cancel", KEY, "wrong query", True, result.outcome)]
    # The slot stays cancelled: a repeated start (a cleared task) does not export it.
    again = start_run(ledger, world.schedule(), SLOT, now=NOW, ctx=RunContext())
    assert again.skip_reason == (f"run {KEY} is already cancelled: cancelled by alice at "
                                 "2026-03-29T05:05:00Z: wrong query")


def test_cancel_of_a_finished_or_unknown_run_changes_nothing(world):
    from export_lib.cli.commands import run_one
    from export_lib.pipeline.controls import cancel_run

    run_one(str(world.config), DAILY, "2026-03-29T05:00Z", now=NOW)
    ledger = world.ledger()
    before = world.counts()

    finished = cancel_run(ledger, KEY, who="bob", why="oops", now=NOW)
    unknown = cancel_run(ledger, "acme/nope/2026-01-01T00:00Z", who="bob", why="typo", now=NOW)

    assert (finished.changed, finished.outcome) == (False, (
        f"nothing changed: run {KEY} is already ready; only a run that has not finished can be "
        "cancelled; revoke its artifact instead"))
    assert unknown.outcome == ("nothing changed: run acme/nope/2026-01-01T00:00Z is not in the "
                               "ledger (see 'exportctl runs')")
    assert world.counts() == before and ledger.get_run(KEY).state == "ready"
    assert [(a[1], a[4]) for a in _actions(ledger)] == [("cancel", False), ("cancel", False)]


def test_revoke_withdraws_refuses_later_deliveries_and_the_period_regenerates(world):
    from export_lib.cli.commands import run_one
    from export_lib.pipeline import deliver_run, publish_run, render_run
    from export_lib.pipeline.controls import revoke_artifact

    run_one(str(world.config), DAILY, "2026-03-29T05:00Z", now=NOW)
    ledger, store = world.ledger(), world.store
    (v1,) = ledger.artifacts(KEY)
    assert (world.home / OUTBOX).is_file()
    later = NOW + timedelta(hours=1)

    result = revoke_artifact(ledger, KEY, who="carol", why="contains test rows", now=later,
                             exports_root=world.home / "exports")

    assert result.changed
    assert result.outcome.startswith(
        f"artifact {v1.id} (run {KEY} v1) revoked: later deliveries are refused; regenerate the "
        f"period to publish a new version; withdrawn from acme-dir: deleted {world.home / OUTBOX}")
    assert not (world.home / OUTBOX).exists()
    assert ledger.artifacts(KEY)[0].revoked_reason == (
        "revoked by carol at 2026-03-29T06:05:00Z: contains test rows")
    with pytest.raises(DeliveryError, match=r"^run acme/daily-spend/2026-03-29T05:00Z: artifact "
                       r"v1 is revoked by carol at 2026-03-29T06:05:00Z: contains test rows; "
                       r"regenerate the period to deliver a new version; not delivered to "
                       r"acme-dir$"):
        deliver_run(ledger, KEY, "acme-dir", now=later, config_dir=str(world.config))
    assert not (world.home / OUTBOX).exists()
    again = revoke_artifact(ledger, str(v1.id), who="carol", why="twice", now=later)
    assert again.outcome == (f"nothing changed: artifact {v1.id} is already revoked (revoked by "
                             "carol at 2026-03-29T06:05:00Z: contains test rows)")

    # The period regenerates as v2 (same content, but v1 is revoked) and is delivered.
    rendered = render_run(ledger, store, KEY, now=later, regenerate=True)
    published = publish_run(ledger, store, KEY, rendered["attempt_id"], now=later,
                            columns=rendered["columns"])
    delivered = deliver_run(ledger, KEY, "acme-dir", now=later, config_dir=str(world.config))
    assert (published["version"], published["created"], delivered["state"]) == (
        2, True, "acknowledged")
    assert (world.home / OUTBOX.replace("__v1.", "__v2.")).is_file()
    assert [(a[1], a[2], a[4]) for a in _actions(ledger)] == [
        ("revoke", str(v1.id), True), ("revoke", str(v1.id), False)]


def test_revoke_of_a_run_without_artifact_or_an_unknown_id_changes_nothing(world):
    from export_lib.pipeline import register_run
    from export_lib.pipeline.controls import revoke_artifact

    ledger = world.ledger()
    register_run(ledger, world.schedule(), SLOT, now=NOW)

    empty = revoke_artifact(ledger, KEY, who="dan", why="x", now=NOW)
    unknown = revoke_artifact(ledger, "4711", who="dan", why="x", now=NOW)

    assert empty.outcome == (f"nothing changed: run {KEY} is registered and it has no "
                             "published artifact")
    assert unknown.outcome == ("nothing changed: artifact 4711 is not in the ledger (see "
                               "'exportctl runs')")
    assert world.counts()["artifacts"] == 0
    assert [(a[1], a[2], a[4]) for a in _actions(ledger)] == [
        ("revoke", KEY, False), ("revoke", "4711", False)]


def test_pause_skips_new_slots_with_the_reason_and_unpause_resumes(world):
    from export_lib.config.loader import load_catalog
    from export_lib.pipeline import RunContext, start_run
    from export_lib.pipeline.controls import pause, unpause

    ledger, schedule = world.ledger(), world.schedule()
    catalog = load_catalog(world.config)
    paused = pause(ledger, "acme", None, who="erin", why="customer asked", now=NOW,
                   catalog=catalog)
    twice = pause(ledger, "acme", None, who="erin", why="again", now=NOW, catalog=catalog)
    typo = pause(ledger, "acme", "acme/nope", who="erin", why="x", now=NOW, catalog=catalog)

    skipped = start_run(ledger, schedule, SLOT, now=NOW, ctx=RunContext())
    resumed = unpause(ledger, "acme", None, who="erin", why="customer is back",
                      now=NOW + timedelta(days=1))
    nxt = start_run(ledger, schedule, SLOT + timedelta(days=1), now=NOW + timedelta(days=1),
                    ctx=RunContext())
    not_paused = unpause(ledger, "acme", None, who="erin", why="x", now=NOW)

    reason = "company acme paused by erin at 2026-03-29T05:05:00Z: customer asked"
    assert paused.changed and skipped.skip_reason == reason
    assert (ledger.get_run(KEY).state, ledger.get_run(KEY).reason) == ("skipped", reason)
    assert twice.outcome == f"nothing changed: company acme is already paused ({reason[13:]})"
    assert typo.outcome == ("nothing changed: unknown schedule 'acme/nope' (see 'exportctl "
                            "preview CONFIG_DIR')")
    assert resumed.changed and nxt.skip_reason is None and nxt.state == "registered"
    assert not_paused.outcome == "nothing changed: company acme is not paused"
    assert [(a[1], a[4]) for a in _actions(ledger)] == [
        ("pause", True), ("pause", False), ("pause", False), ("unpause", True),
        ("unpause", False)]


def test_a_schedule_pause_leaves_the_other_schedules_alone(world):
    from export_lib.pipeline import RunContext, start_run
    from export_lib.pipeline.controls import pause

    ledger = world.ledger()
    pause(ledger, "acme", DAILY, who="erin", why="bad numbers", now=NOW)
    hourly = world.schedule("acme/hourly-clicks")

    daily = start_run(ledger, world.schedule(), SLOT, now=NOW, ctx=RunContext())
    other = start_run(ledger, hourly, datetime(2026, 3, 29, 5, 0, tzinfo=UTC), now=NOW,
                      ctx=RunContext())

    assert daily.skip_reason == ("schedule acme/daily-spend paused by erin at "
                                 "2026-03-29T05:05:00Z: bad numbers")
    assert other.skip_reason is None


def test_revoke_withdraws_from_s3_and_local_and_records_that_a_webhook_cannot(
        tmp_path, monkeypatch, pg_ledger_database, s3_server, webhook):  # noqa: F811 - the fixture
    """Three destinations acknowledged v1: the S3 object and the local file are deleted, the
    webhook call cannot be taken back (recorded); revoke still succeeds."""
    import uuid

    from export_lib.cli.commands import run_one
    from export_lib.pipeline.controls import revoke_artifact

    bucket = f"acme-in-{uuid.uuid4().hex[:10]}"
    s3_server.client().create_bucket(Bucket=bucket)
    world = build_world(tmp_path, pg_ledger_database, days=10, AIRFLOW_CONN_ACME_S3=
                        s3_server.connection_uri(), AIRFLOW_CONN_ACME_HOOK=
                        webhook.connection_uri()).use(monkeypatch)
    world.grant_connection("acme_s3", "s3")
    world.grant_connection("acme_hook", "webhook")
    path = world.config / "acme.yaml"
    path.write_text(path.read_text().replace(
        "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n",
        "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
        f"      - {{id: acme-s3, type: s3, conn_id: acme_s3, bucket: {bucket}, prefix: acme/in}}\n"
        "      - {id: acme-hook, type: webhook, conn_id: acme_hook}\n", 1))
    result = run_one(str(world.config), DAILY, "2026-03-29T05:00Z", now=NOW)
    assert [d["state"] for d in result["deliveries"]] == ["acknowledged"] * 3
    name = OUTBOX.rsplit("/", 1)[1]
    assert s3_server.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 1

    revoked = revoke_artifact(world.ledger(), KEY, who="carol", why="leak", now=NOW,
                              exports_root=world.home / "exports")

    assert revoked.changed
    assert sorted(revoked.details) == sorted([
        f"withdrawn from acme-dir: deleted {world.home / OUTBOX}, {world.home / OUTBOX}.sha256",
        f"withdrawn from acme-s3: deleted s3://{bucket}/acme/in/{name}",
        "cannot withdraw from acme-hook (webhook): a webhook delivery cannot be taken back; "
        "tell its recipient (webhook (connection 'acme_hook') /) that it is revoked"])
    assert s3_server.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert not (world.home / OUTBOX).exists()
