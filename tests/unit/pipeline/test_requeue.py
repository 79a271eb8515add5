"""Requeue: an exhausted or refused delivery goes back to pending by an operator's decision,
recorded with who, when and why, and is then delivered once (library and ``exportctl``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from export_lib.errors import ConfigError, PublishError
from tests.world import DAILY, DAILY_SLOT

OUTBOX_FILE = "exports/outbox/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"
NOW = datetime(2026, 3, 29, 9, 0, tzinfo=UTC)
KEY = f"{DAILY}/{DAILY_SLOT}"


def _give_up(world, state: str, error: str = "550 mailbox gone") -> None:
    """The delivery of the world's exported run ends ``state`` (whatever decided it) and the
    delivered file is gone from the destination."""
    ledger = world.ledger()
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE deliveries SET state = :s, last_error = :e, receipt = NULL, "
                             "acknowledged_at = NULL"), {"s": state, "e": error})
    ledger.engine.dispose()
    (world.home / OUTBOX_FILE).unlink()


@pytest.mark.parametrize("state", ["exhausted", "refused"])
def test_requeue_records_the_operator_action_and_delivers_once(export_world, state):
    from export_lib.pipeline import deliver_run, operator_actions, requeue_deliveries

    export_world.run()
    _give_up(export_world, state)
    ledger = export_world.ledger()

    requeued = requeue_deliveries(ledger, KEY, who="alice", why="mailbox restored", now=NOW)
    delivered = deliver_run(ledger, KEY, "acme-dir", now=NOW + timedelta(seconds=1),
                            config_dir=str(export_world.config))

    assert [(r.destination_id, r.was, r.last_error) for r in requeued] == [
        ("acme-dir", state, "550 mailbox gone")]
    (action,) = operator_actions(ledger, KEY)
    assert action["at"] == NOW
    assert action["detail"] == (
        f"operator action: requeued delivery {requeued[0].delivery_id} to acme-dir (was {state} "
        "after 1 attempt(s); last error: 550 mailbox gone) by alice: mailbox restored")
    assert (delivered["state"], delivered["attempts"]) == ("acknowledged", 2)
    assert (export_world.home / OUTBOX_FILE).is_file()
    counts = export_world.counts()
    assert (counts["runs"], counts["artifacts"], counts["deliveries"]) == (1, 1, 1)
    from export_lib.ledger.controls import list_actions

    (audited,) = list_actions(ledger)  # the operators' audit trail has it too
    assert (audited.who, audited.action, audited.target_id, audited.why, audited.outcome) == (
        "alice", "requeue", requeued[0].delivery_id, "mailbox restored",
        f"delivery to acme-dir requeued (was {state})")
    # Nothing left to requeue: a second call is a no-op and records nothing.
    assert requeue_deliveries(ledger, KEY, who="alice", why="again", now=NOW) == []
    assert len(operator_actions(ledger, KEY)) == 1


def test_requeue_leaves_acknowledged_deliveries_alone(export_world):
    from export_lib.pipeline import operator_actions, requeue_deliveries

    export_world.run()
    ledger = export_world.ledger()
    before = export_world.counts()

    assert requeue_deliveries(ledger, KEY, who="bob", why="just in case", now=NOW) == []
    assert operator_actions(ledger, KEY) == []
    assert export_world.counts() == before


def test_requeue_refuses_a_destination_the_run_never_had(export_world):
    from export_lib.pipeline import requeue_deliveries

    export_world.run()
    with pytest.raises(ConfigError, match=r"run acme/daily-spend/2026-03-29T05:00Z has no "
                                          r"destination 'nope'; its destinations \(as captured "
                                          r"at registration\): acme-dir"):
        requeue_deliveries(export_world.ledger(), KEY, destination_id="nope", who="bob",
                           why="typo", now=NOW)


def test_requeue_of_an_unpublished_run_says_there_is_nothing_to_requeue(export_world):
    from export_lib.pipeline import register_run, requeue_deliveries

    ledger = export_world.ledger()
    register_run(ledger, export_world.schedule(), datetime(2026, 3, 29, 5, 0, tzinfo=UTC),
                 now=NOW)
    with pytest.raises(PublishError, match="has no published artifact, so nothing to requeue"):
        requeue_deliveries(ledger, KEY, who="bob", why="early", now=NOW)


def test_exportctl_requeue_delivers_and_names_who(export_world):
    export_world.run()
    _give_up(export_world, "exhausted")

    result = export_world.exportctl("requeue", KEY, "--destination", "acme-dir", "--by", "carol",
                                    "--reason", "SFTP host fixed", "--config",
                                    str(export_world.config))
    again = export_world.exportctl("requeue", KEY)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("requeued dlv-acme-dir-") and lines[0].endswith(
        " to acme-dir (was exhausted) by carol")
    assert lines[1].startswith("  delivered to acme-dir: acknowledged")
    assert (export_world.home / OUTBOX_FILE).is_file()
    (run,) = export_world.runs()
    assert [(d["destination"], d["state"]) for d in run["deliveries"]] == [
        ("acme-dir", "acknowledged")]
    assert again.returncode == 1
    assert again.stderr == (f"exportctl: nothing to requeue: no delivery of {KEY} to any "
                            "destination is exhausted or refused (see 'exportctl runs "
                            "--unresolved')\n")


def test_the_deliver_task_leaves_unknown_destinations_and_unpublished_runs_to_delivery(
        export_world):
    """``strict=False`` (the deliver task): nothing to requeue, no error of its own."""
    from export_lib.pipeline import register_run, requeue_deliveries

    ledger = export_world.ledger()
    register_run(ledger, export_world.schedule(), datetime(2026, 3, 29, 5, 0, tzinfo=UTC),
                 now=NOW)
    assert requeue_deliveries(ledger, KEY, who="airflow", why="cleared", now=NOW,
                              strict=False) == []
    export_world.run()
    assert requeue_deliveries(ledger, KEY, destination_id="added-later", who="airflow",
                              why="cleared", now=NOW, strict=False) == []
