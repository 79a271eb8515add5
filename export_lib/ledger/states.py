"""Run states and the one place their transitions are enforced.

registered → reading → rendering → validating → ready, or failed / skipped / cancelled.
A new attempt (a retry after a crash, or a regeneration of a ready run) restarts at reading.
"""

from __future__ import annotations

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


IN_FLIGHT = frozenset({RunState.READING, RunState.RENDERING, RunState.VALIDATING})
TERMINAL = frozenset({RunState.READY, RunState.FAILED, RunState.SKIPPED, RunState.CANCELLED})

_ALLOWED: dict[RunState, frozenset[RunState]] = {
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
}


def check_transition(run_key: str, current: RunState | str, target: RunState | str) -> None:
    """Raise IllegalTransitionError unless ``current → target`` is allowed."""
    cur, tgt = RunState(current), RunState(target)
    if tgt not in _ALLOWED[cur]:
        allowed = ", ".join(sorted(s.value for s in _ALLOWED[cur])) or "none (final state)"
        raise IllegalTransitionError(
            f"run {run_key}: cannot go from {cur.value} to {tgt.value}; allowed from "
            f"{cur.value}: {allowed}"
        )
