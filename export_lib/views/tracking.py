"""Which periods' deadlines are tracked (ADR 0029): only those that could still be met when the
schedule was first deployed.

A schedule is *first deployed* when the ledger registered its first run (its earliest
``created_at``, whatever the trigger: the first scheduled run of a new DAG, a manual export).
A period whose deadline had passed by then — the first catch-up of a new schedule, an
operator's backfill of last year — is **not tracked**: it is not counted missed or late by
any reader (the obligations page, ``exportctl runs --missed/--late``, the metrics). A run that
ran for it still shows what happened to it (delivered, failed, ...). Every period due after
the first deployment is tracked, so a catch-up after a genuine outage still counts late or
missed. A slot older than the schedule's first run that has no run at all is not tracked either
(nothing owed it before the schedule existed).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from export_lib.ledger.schema import runs

NOT_TRACKED = "not tracked: due before this schedule was deployed"


def tracked_expression() -> Any:
    """SQL: True when the ``export_runs`` row's deadline was still ahead when its schedule's
    first run was registered. The run itself answers for every run created before its deadline
    (no subquery); only runs created after it (catch-up, backfill) ask for an earlier run of
    the schedule created before that deadline. A run without a deadline is never judged."""
    earlier = sa.alias(runs, "first_seen_run")
    return sa.and_(runs.c.deadline.is_not(None), sa.or_(
        runs.c.created_at < runs.c.deadline,
        sa.exists().where(earlier.c.schedule_id == runs.c.schedule_id,
                          earlier.c.created_at < runs.c.deadline)))


def first_seen(conn: Connection, schedule_ids: Iterable[str]) -> dict[str, tuple[datetime, datetime]]:
    """Per schedule with runs: (its first run's registration — the first deployment —, its
    oldest run's slot), in one statement."""
    ids = sorted(set(schedule_ids))
    if not ids:
        return {}
    rows = conn.execute(sa.select(runs.c.schedule_id, sa.func.min(runs.c.created_at),
                                  sa.func.min(runs.c.slot))
                        .where(runs.c.schedule_id.in_(ids)).group_by(runs.c.schedule_id))
    return {sid: (created, slot) for sid, created, slot in rows}


def slot_tracked(slot: datetime, deadline: datetime,
                 seen: tuple[datetime, datetime] | None) -> bool:
    """Whether a due slot without a run counts (pure): a schedule without any run yet counts
    every slot; else its deadline must come after the first deployment and the slot must not
    be older than the schedule's oldest run."""
    if seen is None:
        return True
    deployed, oldest_slot = seen
    return deadline > deployed and slot >= oldest_slot


__all__ = ["NOT_TRACKED", "first_seen", "slot_tracked", "tracked_expression"]
