"""The ledger side of batched recovery (ADR 0032, revision 0010): which batch exported a run,
and which slots of a schedule still need a recovery.

A run exported by a batch carries the batch's Airflow task (``dag_id/run_id/task_id``) in
``export_runs.batch``, so the run page, ``exportctl explain`` and ``runs --json`` say which
batch produced the period. Everything else about the run is its own, as for any run.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa

from export_lib.ledger.records import utc
from export_lib.ledger.runs import Ledger
from export_lib.ledger.schema import events, runs
from export_lib.ledger.states import RunState

# A slot whose run is in one of these states needs no recovery (a failed or unfinished run
# does: the batch resumes it).
_SETTLED_RUNS = (RunState.READY.value, RunState.SKIPPED.value, RunState.CANCELLED.value)


def mark_batch(ledger: Ledger, run_key: str, batch: str, now: datetime) -> None:
    """Record that ``batch`` works on the run (once per batch: a retry of the same batch
    writes nothing new), with an event in the run's history."""
    with ledger._tx() as conn:
        run = ledger._lock_run(conn, run_key)
        if run.batch == batch:
            return
        conn.execute(sa.update(runs).where(runs.c.id == run.id).values(batch=batch))
        conn.execute(sa.insert(events).values(run_id=run.id, at=now, from_state=run.state,
                                              to_state=run.state,
                                              detail=f"exported by batch {batch}"))


def note_range_scan(ledger: Ledger, run_key: str, detail: str, now: datetime) -> None:
    """Record in the run's history that its file came from a batch's range scan (ADR 0038):
    one source read for several periods, not one of its own."""
    with ledger._tx() as conn:
        run = ledger._lock_run(conn, run_key)
        conn.execute(sa.insert(events).values(run_id=run.id, at=now, from_state=run.state,
                                              to_state=run.state, detail=detail))


def settled_slots(ledger: Ledger, schedule_id: str, slots: Iterable[datetime]) -> set[datetime]:
    """The slots among ``slots`` whose run of ``schedule_id`` is ready, skipped or cancelled."""
    wanted = sorted(slots)
    if not wanted:
        return set()
    with ledger._read() as conn:
        found = conn.execute(
            sa.select(runs.c.slot).where(runs.c.schedule_id == schedule_id,
                                         runs.c.slot >= wanted[0], runs.c.slot <= wanted[-1],
                                         runs.c.state.in_(_SETTLED_RUNS))).scalars().all()
    return {utc(s) for s in found} & set(wanted)


__all__ = ["mark_batch", "note_range_scan", "settled_slots"]
