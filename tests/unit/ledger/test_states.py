"""The one transition check: run and delivery state machines, exact messages, and both
repositories enforcing it (SQLite ledger migrated to head)."""

from __future__ import annotations

import pytest

from export_lib.errors import IllegalTransitionError
from export_lib.ledger import (
    DELIVERY_STATES,
    RUN_STATES,
    DeliveryState,
    RunState,
    check_transition,
    deliveries,
    runs,
    states,
)
from export_lib.ledger.records import NewDelivery
from tests.fixtures.ledger import NOW, registration


def test_both_repositories_use_the_one_check() -> None:
    assert runs.check_transition is deliveries.check_transition is states.check_transition


@pytest.mark.parametrize("machine", [RUN_STATES, DELIVERY_STATES], ids=["run", "delivery"])
def test_every_state_has_a_row_and_only_known_targets(machine) -> None:
    assert set(machine.allowed) == set(machine.states)
    for targets in machine.allowed.values():
        assert targets <= set(machine.states)


@pytest.mark.parametrize(("current", "target", "allowed"), [
    ("registered", "ready", "cancelled, failed, reading, skipped"),
    ("ready", "failed", "reading"),
    ("validating", "skipped", "cancelled, failed, reading, ready"),
    ("cancelled", "reading", "none \\(final state\\)"),
])
def test_illegal_run_transitions_name_run_states_and_allowed_moves(current, target, allowed):
    with pytest.raises(IllegalTransitionError,
                       match=f"^run acme/x/2026-01-01T00:00Z: cannot go from {current} to "
                             f"{target}; allowed from {current}: {allowed}$"):
        check_transition(RUN_STATES, "acme/x/2026-01-01T00:00Z", current, target)


@pytest.mark.parametrize(("current", "target", "allowed"), [
    ("pending", "acknowledged", "attempting, cancelled, refused"),
    ("exhausted", "attempting", "cancelled, pending"),
    ("refused", "acknowledged", "cancelled, pending"),
    ("acknowledged", "pending", "none \\(final state\\)"),
])
def test_illegal_delivery_transitions_name_delivery_states_and_allowed_moves(
    current, target, allowed
):
    with pytest.raises(IllegalTransitionError,
                       match=f"^delivery dlv-a-1: cannot go from {current} to {target}; "
                             f"allowed from {current}: {allowed}$"):
        check_transition(DELIVERY_STATES, "dlv-a-1", current, target)


def test_legal_moves_pass_and_enum_members_are_accepted() -> None:
    check_transition(RUN_STATES, "k", RunState.READY, RunState.READING)
    check_transition(DELIVERY_STATES, "d", DeliveryState.ATTEMPTING, "attempting")


def test_unknown_states_are_rejected_with_the_valid_ones() -> None:
    with pytest.raises(IllegalTransitionError,
                       match="^delivery d: unknown state in 'pending' → 'sent'; valid states: "
                             "pending, attempting, acknowledged, exhausted, refused, cancelled$"):
        check_transition(DELIVERY_STATES, "d", "pending", "sent")
    with pytest.raises(IllegalTransitionError, match="^run k: unknown state in 'done'"):
        check_transition(RUN_STATES, "k", "done", "reading")


def test_run_repository_refuses_an_illegal_move(sqlite_ledger) -> None:
    key = sqlite_ledger.register(registration(), NOW)[0].run_key
    attempt = sqlite_ledger.claim_attempt(key, origin="t", now=NOW,
                                          staging_uri=lambda a: "file:///x")
    with pytest.raises(IllegalTransitionError,
                       match=f"^run {key}: cannot go from reading to ready; allowed from "
                             "reading: cancelled, failed, reading, rendering, skipped$"):
        sqlite_ledger.advance(key, attempt.attempt_id, RunState.READY, NOW)
    assert sqlite_ledger.get_run(key).state == "reading"  # nothing written
    assert [e["to_state"] for e in sqlite_ledger.events(key)] == ["registered", "reading"]


def test_delivery_repository_refuses_an_illegal_move(sqlite_ledger) -> None:
    engine = sqlite_ledger.engine
    the_id = deliveries.delivery_id("acme/x", 1, "archive")
    record = deliveries.ensure_record(engine, NewDelivery(
        delivery_id=the_id, run_key="acme/x", artifact_version=1, destination_id="archive",
        destination_type="local", destination_config="{}", target="/out",
        artifact_name="f.csv", artifact_sha256="0" * 64, artifact_bytes=1, retry_until=NOW), now=NOW)
    with engine.begin() as conn, pytest.raises(
        IllegalTransitionError,
        match=f"^delivery {the_id}: cannot go from pending to exhausted; "
              "allowed from pending: attempting, cancelled, refused$",
    ):
        deliveries.transition(conn, record, "exhausted", now=NOW)
    assert deliveries.get_record(engine, the_id).state == "pending"
