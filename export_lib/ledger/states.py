"""Every state machine of the ledger, and the one place their transitions are enforced.

Runs::

    registered → reading → rendering → validating → ready, or failed / skipped / cancelled.
    A new attempt (a retry after a crash, or a regeneration of a ready run) restarts at reading.

Deliveries (one per run, artifact version and destination)::

    pending ──▶ attempting ──▶ acknowledged            (terminal)
       │  ▲         │  │
       │  └─────────┘  └────▶ exhausted ──▶ pending    (operator requeue)
       ▼  retryable failure
    refused ──▶ pending                                (owner authorised again / requeue)
    pending / exhausted / refused ──▶ cancelled        (operator cancel or revoke; terminal)

    ``attempting → attempting`` is a takeover of an attempt whose worker died.

Run attempts and delivery attempts carry a state too (``AttemptState``, ``AttemptOutcome``);
they are written by the repositories directly, without a transition table: an attempt's state
only records what happened to it, nothing is decided from moving it.

Both repositories call :func:`check_transition` with their :class:`StateMachine`, so the rules
and the wording of an illegal move are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from export_lib.errors import IllegalTransitionError


class RunState(StrEnum):
    REGISTERED = "registered"
    READING = "reading"
    RENDERING = "rendering"
    VALIDATING = "validating"
    READY = "ready"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class AttemptState(StrEnum):
    """State of one render attempt of a run (``export_attempts.state``)."""

    RUNNING = "running"
    STAGED = "staged"
    PUBLISHED = "published"
    FAILED = "failed"
    ABANDONED = "abandoned"


class DeliveryState(StrEnum):
    PENDING = "pending"
    ATTEMPTING = "attempting"
    ACKNOWLEDGED = "acknowledged"
    EXHAUSTED = "exhausted"
    REFUSED = "refused"
    CANCELLED = "cancelled"


class AttemptOutcome(StrEnum):
    """Outcome of one delivery attempt in the history (``delivery_attempts.outcome``)."""

    IN_PROGRESS = "in_progress"
    DELIVERED = "delivered"
    ALREADY_PRESENT = "already_present"
    RETRYABLE_FAILURE = "retryable_failure"
    PERMANENT_FAILURE = "permanent_failure"
    ABANDONED = "abandoned"


IN_FLIGHT = frozenset({RunState.READING, RunState.RENDERING, RunState.VALIDATING})
TERMINAL = frozenset({RunState.READY, RunState.FAILED, RunState.SKIPPED, RunState.CANCELLED})
UNRESOLVED_DELIVERIES = (DeliveryState.PENDING, DeliveryState.ATTEMPTING,
                         DeliveryState.EXHAUSTED, DeliveryState.REFUSED)


@dataclass(frozen=True)
class StateMachine:
    """A named transition table: ``noun`` names the subject in error messages."""

    noun: str
    states: type[StrEnum]
    allowed: Mapping[StrEnum, frozenset[StrEnum]]


RUN_STATES = StateMachine("run", RunState, {
    RunState.REGISTERED: frozenset(
        {RunState.READING, RunState.FAILED, RunState.SKIPPED, RunState.CANCELLED}
    ),
    # An in-flight run may restart at READING: its attempt died and a new one claimed it.
    RunState.READING: frozenset(
        {RunState.READING, RunState.RENDERING, RunState.FAILED, RunState.SKIPPED,
         RunState.CANCELLED}
    ),
    # RENDERING → SKIPPED: an empty window under skip_empty is known only after rendering.
    RunState.RENDERING: frozenset(
        {RunState.READING, RunState.VALIDATING, RunState.FAILED, RunState.SKIPPED,
         RunState.CANCELLED}
    ),
    RunState.VALIDATING: frozenset(
        {RunState.READING, RunState.READY, RunState.FAILED, RunState.CANCELLED}
    ),
    # READY → READING only for an explicit regeneration/restatement (a new version).
    RunState.READY: frozenset({RunState.READING}),
    RunState.FAILED: frozenset({RunState.READING, RunState.CANCELLED, RunState.SKIPPED}),
    RunState.SKIPPED: frozenset({RunState.READING}),
    RunState.CANCELLED: frozenset(),
})

DELIVERY_STATES = StateMachine("delivery", DeliveryState, {
    DeliveryState.PENDING: frozenset({DeliveryState.ATTEMPTING, DeliveryState.REFUSED,
                                      DeliveryState.CANCELLED}),
    # ATTEMPTING → ATTEMPTING: takeover of an attempt whose worker died (see stale_after).
    DeliveryState.ATTEMPTING: frozenset({DeliveryState.ACKNOWLEDGED, DeliveryState.PENDING,
                                         DeliveryState.EXHAUSTED, DeliveryState.ATTEMPTING}),
    DeliveryState.EXHAUSTED: frozenset({DeliveryState.PENDING, DeliveryState.CANCELLED}),
    DeliveryState.REFUSED: frozenset({DeliveryState.PENDING, DeliveryState.CANCELLED}),
    DeliveryState.ACKNOWLEDGED: frozenset(),
    # An operator cancelled the run, or revoked the artifact: never delivered.
    DeliveryState.CANCELLED: frozenset(),
})


def check_transition(machine: StateMachine, subject: str, current: str, target: str) -> None:
    """Raise IllegalTransitionError unless ``machine`` allows ``current → target``.

    The message names the subject (run key or delivery id), both states and the allowed
    moves, e.g. ``run acme/x: cannot go from ready to failed; allowed from ready: reading``.
    """
    try:
        cur, tgt = machine.states(current), machine.states(target)
    except ValueError as exc:
        valid = ", ".join(s.value for s in machine.states)
        raise IllegalTransitionError(
            f"{machine.noun} {subject}: unknown state in {current!r} → {target!r}; "
            f"valid states: {valid}"
        ) from exc
    allowed = machine.allowed[cur]
    if tgt not in allowed:
        moves = ", ".join(sorted(s.value for s in allowed)) or "none (final state)"
        raise IllegalTransitionError(
            f"{machine.noun} {subject}: cannot go from {cur.value} to {tgt.value}; "
            f"allowed from {cur.value}: {moves}"
        )
