"""The ledger side of the operator controls (revision 0005): the audit trail of operator
actions, pauses, holds, and the revoked/deleted marks of artifacts.

Only reads and writes; what a control means is decided in :mod:`export_lib.pipeline.controls`
and :mod:`export_lib.pipeline.retention`. Every write is one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from export_lib.ledger.clock import agreed_now
from export_lib.ledger.records import ArtifactRecord, RunRecord, utc
from export_lib.ledger.runs import Ledger
from export_lib.ledger.schema import (
    artifacts,
    attempts,
    deliveries,
    form_tokens,
    holds,
    operator_actions,
    pauses,
    runs,
)
from export_lib.ledger.states import (
    DELIVERY_STATES,
    RUN_STATES,
    AttemptState,
    DeliveryState,
    RunState,
    check_transition,
)

NOTHING_CHANGED = "nothing changed: "
# How long a spent form token's row outlives its expiry: page servers' clocks may disagree.
FORM_TOKEN_SKEW = timedelta(hours=1)


@dataclass(frozen=True)
class Action:
    """One row of the audit trail."""

    at: datetime
    who: str
    action: str
    target_kind: str
    target_id: str
    why: str
    changed: bool
    outcome: str
    company: str | None = None
    schedule_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "at": utc(self.at).isoformat()}


def record_action(ledger: Ledger, action: Action, conn: sa.Connection | None = None) -> None:
    """Append ``action`` to the audit trail (in ``conn``'s transaction when given)."""
    values = {**action.__dict__, "changed": int(action.changed)}
    if conn is not None:
        conn.execute(sa.insert(operator_actions).values(**values))
        return
    with ledger._tx() as own:
        own.execute(sa.insert(operator_actions).values(**values))


def list_actions(ledger: Ledger, *, company: str | None = None, target_id: str | None = None,
                 limit: int = 500) -> list[Action]:
    """The audit trail, newest first (``company``/``target_id`` narrow it)."""
    query = sa.select(operator_actions).order_by(operator_actions.c.id.desc()).limit(limit)
    if company is not None:
        query = query.where(operator_actions.c.company == company)
    if target_id is not None:
        query = query.where(operator_actions.c.target_id == target_id)
    with ledger._read() as conn:
        rows = conn.execute(query).mappings().all()
    return [Action(**{k: v for k, v in row.items() if k != "id"} | {"changed": bool(row["changed"]),
                                                                    "at": utc(row["at"])})
            for row in rows]


def spend_form_token(ledger: Ledger, mac: str, *, who: str, now: datetime,
                     expires_at: datetime) -> bool:
    """Spend a form token once: True the first time, False when it was spent before (a
    replayed form). Rows expired an hour ago by both this host's and the database's clock
    are dropped on the way: a page server whose clock runs behind still refuses their tokens
    as spent rather than taking them as new."""
    try:
        with ledger._tx() as conn:
            gone = agreed_now(conn, now) - FORM_TOKEN_SKEW
            conn.execute(sa.delete(form_tokens).where(form_tokens.c.expires_at < gone))
            conn.execute(sa.insert(form_tokens).values(mac=mac, who=who, spent_at=now,
                                                       expires_at=expires_at))
    except sa.exc.IntegrityError:
        return False
    return True


def form_token_spent(ledger: Ledger, mac: str) -> bool:
    """Whether a form token was spent already: a replayed form is refused before its content
    is even read (:func:`spend_form_token` still decides, atomically, when the work is done)."""
    with ledger._read() as conn:
        return conn.execute(sa.select(form_tokens.c.mac).where(form_tokens.c.mac == mac)
                            ).first() is not None


# -- pauses --------------------------------------------------------------------------------------

def active_pause(ledger: Ledger, company: str, schedule_id: str | None) -> dict[str, Any] | None:
    """The active pause that stops ``schedule_id`` of ``company`` (a company-wide one first);
    with ``schedule_id`` None only a company-wide pause counts."""
    scope = pauses.c.schedule_id.is_(None)
    if schedule_id is not None:
        scope = sa.or_(scope, pauses.c.schedule_id == schedule_id)
    query = (sa.select(pauses).where(pauses.c.company == company, pauses.c.resumed_at.is_(None),
                                     scope)
             .order_by(pauses.c.schedule_id.is_(None).desc(), pauses.c.id))
    with ledger._read() as conn:
        row = conn.execute(query).mappings().first()
    return dict(row) if row else None


def exact_pause(ledger: Ledger, company: str, schedule_id: str | None) -> dict[str, Any] | None:
    """The active pause of exactly this scope (company-wide when ``schedule_id`` is None)."""
    scope = (pauses.c.schedule_id.is_(None) if schedule_id is None
             else pauses.c.schedule_id == schedule_id)
    with ledger._read() as conn:
        row = conn.execute(sa.select(pauses).where(
            pauses.c.company == company, pauses.c.resumed_at.is_(None), scope)).mappings().first()
    return dict(row) if row else None


def add_pause(ledger: Ledger, company: str, schedule_id: str | None, *, who: str, why: str,
              now: datetime, audit: Action) -> None:
    with ledger._tx() as conn:
        conn.execute(sa.insert(pauses).values(company=company, schedule_id=schedule_id,
                                              paused_by=who, paused_at=now, why=why))
        record_action(ledger, audit, conn)


def end_pause(ledger: Ledger, pause_id: int, *, who: str, now: datetime, audit: Action) -> None:
    with ledger._tx() as conn:
        conn.execute(sa.update(pauses).where(pauses.c.id == pause_id)
                     .values(resumed_by=who, resumed_at=now))
        record_action(ledger, audit, conn)


# -- artifacts -----------------------------------------------------------------------------------

def get_artifact(ledger: Ledger, artifact_id: int) -> tuple[ArtifactRecord, RunRecord] | None:
    with ledger._read() as conn:
        row = conn.execute(sa.select(artifacts).where(artifacts.c.id == artifact_id)).first()
    if row is None:
        return None
    art = ArtifactRecord(**dict(row._mapping))
    run = ledger.get_run(ledger.run_key_of(art.run_id))
    assert run is not None
    return art, run


def mark_revoked(ledger: Ledger, artifact_id: int, reason: str, now: datetime) -> None:
    with ledger._tx() as conn:
        conn.execute(sa.update(artifacts).where(artifacts.c.id == artifact_id)
                     .values(revoked_at=now, revoked_reason=reason))


def mark_deleted(ledger: Ledger, artifact_id: int, reason: str, now: datetime,
                 audit: Action) -> None:
    with ledger._tx() as conn:
        conn.execute(sa.update(artifacts).where(artifacts.c.id == artifact_id)
                     .values(deleted_at=now, deleted_reason=reason))
        record_action(ledger, audit, conn)


def live_artifacts(ledger: Ledger) -> list[tuple[ArtifactRecord, RunRecord]]:
    """Every artifact whose object retention has not deleted, with its run, oldest first."""
    query = (sa.select(artifacts, runs.c.run_key).join(runs, runs.c.id == artifacts.c.run_id)
             .where(artifacts.c.deleted_at.is_(None)).order_by(artifacts.c.generated_at))
    with ledger._read() as conn:
        rows = conn.execute(query).mappings().all()
    by_key: dict[str, RunRecord] = {}
    found = []
    for row in rows:
        data = dict(row)
        key = data.pop("run_key")
        if key not in by_key:
            by_key[key] = ledger.get_run(key)  # type: ignore[assignment]
        found.append((ArtifactRecord(**data), by_key[key]))
    return found


# -- holds ---------------------------------------------------------------------------------------

def active_holds(ledger: Ledger, run_id: int, artifact_id: int | None = None,
                 *, exact: bool = False) -> list[dict[str, Any]]:
    """Active holds on the run (``artifact_id`` None) or covering one of its artifacts (a hold
    on the artifact or on its whole run). ``exact``: only holds on exactly that target."""
    query = sa.select(holds).where(holds.c.run_id == run_id, holds.c.released_at.is_(None))
    if exact or artifact_id is None:
        query = query.where(holds.c.artifact_id.is_(None) if artifact_id is None
                            else holds.c.artifact_id == artifact_id)
    else:
        query = query.where(sa.or_(holds.c.artifact_id.is_(None),
                                   holds.c.artifact_id == artifact_id))
    with ledger._read() as conn:
        return [dict(r) for r in conn.execute(query.order_by(holds.c.id)).mappings()]


def add_hold(ledger: Ledger, run_id: int, artifact_id: int | None, *, who: str, why: str,
             now: datetime, audit: Action) -> None:
    with ledger._tx() as conn:
        conn.execute(sa.insert(holds).values(run_id=run_id, artifact_id=artifact_id,
                                             held_by=who, held_at=now, why=why))
        record_action(ledger, audit, conn)


def end_holds(ledger: Ledger, hold_ids: list[int], *, who: str, now: datetime,
              audit: Action) -> None:
    with ledger._tx() as conn:
        conn.execute(sa.update(holds).where(holds.c.id.in_(hold_ids))
                     .values(released_by=who, released_at=now))
        record_action(ledger, audit, conn)


# -- cancel --------------------------------------------------------------------------------------

def cancel(ledger: Ledger, run_key: str, reason: str, now: datetime, audit: Action) -> list[str]:
    """Cancel a run in one transaction: the generation moves on (the running attempt is fenced:
    it can neither record what it staged nor publish), running/staged attempts are abandoned,
    the run becomes CANCELLED and its pending, exhausted or refused deliveries ``cancelled``.
    Returns the ids of the cancelled deliveries."""
    with ledger._tx() as conn:
        run = ledger._lock_run(conn, run_key)
        check_transition(RUN_STATES, run.run_key, run.state, RunState.CANCELLED)
        conn.execute(sa.update(runs).where(runs.c.id == run.id)
                     .values(current_generation=run.current_generation + 1))
        conn.execute(
            sa.update(attempts)
            .where(attempts.c.run_id == run.id,
                   attempts.c.state.in_((AttemptState.RUNNING.value, AttemptState.STAGED.value)))
            .values(state=AttemptState.ABANDONED.value, finished_at=now, error=reason))
        ledger._move(conn, run, RunState.CANCELLED, now, reason=reason)
        open_states = [DeliveryState.PENDING.value, DeliveryState.EXHAUSTED.value,
                       DeliveryState.REFUSED.value]
        cancelled = list(conn.execute(
            sa.select(deliveries.c.delivery_id)
            .where(deliveries.c.run_key == run_key, deliveries.c.state.in_(open_states))
        ).scalars())
        if cancelled:
            conn.execute(sa.update(deliveries).where(deliveries.c.delivery_id.in_(cancelled))
                         .values(state=DeliveryState.CANCELLED.value, last_error=reason,
                                 updated_at=now))
        record_action(ledger, audit, conn)
    return cancelled


def cancel_deliveries(ledger: Ledger, run_key: str, version: int, reason: str,
                      now: datetime) -> list[str]:
    """Cancel the pending, exhausted or refused deliveries of one artifact version."""
    cancelled = []
    with ledger._tx() as conn:
        rows = conn.execute(sa.select(deliveries.c.delivery_id, deliveries.c.state).where(
            deliveries.c.run_key == run_key, deliveries.c.artifact_version == version)).all()
        for delivery_id, state in rows:
            if DeliveryState.CANCELLED in DELIVERY_STATES.allowed[DeliveryState(state)]:
                conn.execute(sa.update(deliveries)
                             .where(deliveries.c.delivery_id == delivery_id,
                                    deliveries.c.state == state)
                             .values(state=DeliveryState.CANCELLED.value, last_error=reason,
                                     updated_at=now))
                cancelled.append(delivery_id)
    return cancelled
