"""The delivery repository: one record per (run, artifact version, destination) and its attempts.

The tables (``deliveries``, ``delivery_attempts``) are in :mod:`export_lib.ledger.schema`, the
state machine in :mod:`export_lib.ledger.states` (``DELIVERY_STATES``), the records in
:mod:`export_lib.ledger.records`; this module only reads and writes.

Concurrency: the record is created with insert-or-ignore on its primary key (the delivery id is
derived from the unique triple), and every state change is a compare-and-swap
``UPDATE … WHERE delivery_id = ? AND state = ? AND attempts = ?``. Exactly one of two racing
workers wins an attempt, on PostgreSQL and SQLite alike, without holding a lock across the
network call. Timestamps are stored in UTC.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from export_lib.errors import ConfigError, IllegalTransitionError
from export_lib.ledger.clock import database_now
from export_lib.ledger.records import DeliveryRecord, NewDelivery, utc
from export_lib.ledger.schema import deliveries, delivery_attempts, metadata
from export_lib.ledger.states import (
    DELIVERY_STATES,
    UNRESOLVED_DELIVERIES,
    AttemptOutcome,
    DeliveryState,
    check_transition,
)

# Kept for callers that create the delivery tables themselves (tests, bench): the one ledger
# MetaData, so ``create_all`` creates the whole ledger schema, deliveries included.
delivery_metadata = metadata

# Plain-string names of the states and outcomes, as the engine and the CLI compare them.
PENDING = DeliveryState.PENDING.value
ATTEMPTING = DeliveryState.ATTEMPTING.value
ACKNOWLEDGED = DeliveryState.ACKNOWLEDGED.value
EXHAUSTED = DeliveryState.EXHAUSTED.value
REFUSED = DeliveryState.REFUSED.value
STATES = tuple(s.value for s in DeliveryState)
UNRESOLVED = tuple(s.value for s in UNRESOLVED_DELIVERIES)

IN_PROGRESS = AttemptOutcome.IN_PROGRESS.value
DELIVERED = AttemptOutcome.DELIVERED.value
ALREADY_PRESENT = AttemptOutcome.ALREADY_PRESENT.value
RETRYABLE_FAILURE = AttemptOutcome.RETRYABLE_FAILURE.value
PERMANENT_FAILURE = AttemptOutcome.PERMANENT_FAILURE.value
ABANDONED = AttemptOutcome.ABANDONED.value

__all__ = [
    "ABANDONED", "ACKNOWLEDGED", "ALREADY_PRESENT", "ATTEMPTING", "DELIVERED", "EXHAUSTED",
    "IN_PROGRESS", "PENDING", "PERMANENT_FAILURE", "REFUSED", "RETRYABLE_FAILURE", "STATES",
    "UNRESOLVED", "DeliveryRecord", "NewDelivery", "beat", "deliveries", "delivery_attempts",
    "delivery_id", "delivery_metadata", "ensure_record", "finish_attempt", "get_record",
    "list_deliveries", "records_of", "requeue", "silence", "start_attempt", "transition", "utc",
]


def delivery_id(run_key: str, version: int, destination_id: str) -> str:
    """Stable id of a delivery: readable destination prefix + sha256 of the triple.

    Used as the webhook ``Idempotency-Key``, the e-mail ``Message-ID`` and the SFTP temp name,
    so every retry of the same delivery presents the same identity to the destination.
    """
    digest = hashlib.sha256(f"{run_key}\x1f{version}\x1f{destination_id}".encode()).hexdigest()
    return f"dlv-{destination_id[:40]}-{digest[:20]}"


def _insert_ignore(conn: Connection, table: sa.Table, values: dict[str, Any]) -> None:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - other dialects: plain insert, losing a race raises
        conn.execute(table.insert().values(**values))
        return
    conn.execute(insert(table).values(**values).on_conflict_do_nothing())


def ensure_record(engine: Engine, new: NewDelivery, *, now: datetime) -> DeliveryRecord:
    """Insert the record in ``pending`` unless it exists; return the stored row either way."""
    moment = utc(now)
    with engine.begin() as conn:
        _insert_ignore(
            conn,
            deliveries,
            {**new.__dict__, "state": PENDING, "attempts": 0, "budget_base": 0,
             "created_at": moment, "updated_at": moment},
        )
    found = get_record(engine, new.delivery_id)
    assert found is not None  # inserted or already there, never deleted in between
    return found


def get_record(engine: Engine, the_id: str) -> DeliveryRecord | None:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(deliveries).where(deliveries.c.delivery_id == the_id)
        ).mappings().first()
    return DeliveryRecord.from_row(row) if row else None


def records_of(engine: Engine, run_key: str) -> list[DeliveryRecord]:
    """Every delivery record of the run (each artifact version), by version and destination."""
    query = (sa.select(deliveries).where(deliveries.c.run_key == run_key)
             .order_by(deliveries.c.artifact_version, deliveries.c.destination_id))
    with engine.connect() as conn:
        return [DeliveryRecord.from_row(row) for row in conn.execute(query).mappings()]


def transition(
    conn: Connection, record: DeliveryRecord, target: str, *, now: datetime, **values: Any
) -> bool:
    """Compare-and-swap ``record`` to ``target``; False when another worker moved it first.

    The WHERE clause pins both state and attempt count, so a stale reader can never overwrite a
    newer attempt's outcome.
    """
    check_transition(DELIVERY_STATES, record.delivery_id, record.state, target)
    result = conn.execute(
        deliveries.update()
        .where(
            deliveries.c.delivery_id == record.delivery_id,
            deliveries.c.state == record.state,
            deliveries.c.attempts == record.attempts,
        )
        .values(state=target, updated_at=utc(now), **values)
    )
    return result.rowcount == 1


def start_attempt(conn: Connection, record: DeliveryRecord, *, now: datetime) -> int | None:
    """Move to ``attempting`` and open a history row; the attempt number, or None if raced."""
    number = record.attempts + 1
    moment = utc(now)
    if not transition(conn, record, ATTEMPTING, now=moment, attempts=number,
                      attempt_started_at=moment):
        return None
    if record.state == ATTEMPTING:  # takeover: the previous worker died mid-attempt
        conn.execute(
            delivery_attempts.update()
            .where(delivery_attempts.c.delivery_id == record.delivery_id,
                   delivery_attempts.c.attempt == record.attempts,
                   delivery_attempts.c.outcome == IN_PROGRESS)
            .values(outcome=ABANDONED, error="worker stopped mid-attempt; taken over")
        )
    conn.execute(
        delivery_attempts.insert().values(
            delivery_id=record.delivery_id, attempt=number, started_at=moment,
            outcome=IN_PROGRESS, heartbeat_at=database_now(conn),
        )
    )
    return number


def beat(engine: Engine, delivery: str, number: int) -> bool:
    """Renew the heartbeat of attempt ``number`` (the database's clock: the worker's own
    decides nothing another worker reads); False once the attempt is no longer in progress."""
    with engine.begin() as conn:
        return conn.execute(
            delivery_attempts.update()
            .where(delivery_attempts.c.delivery_id == delivery,
                   delivery_attempts.c.attempt == number,
                   delivery_attempts.c.outcome == IN_PROGRESS)
            .values(heartbeat_at=database_now(conn))
        ).rowcount == 1


def silence(conn: Connection, delivery: str, number: int) -> timedelta | None:
    """How long attempt ``number`` has been silent by the database's clock (since its last
    heartbeat); None when it has no heartbeat (started by a release before revision 0012)."""
    last = conn.execute(
        sa.select(delivery_attempts.c.heartbeat_at)
        .where(delivery_attempts.c.delivery_id == delivery,
               delivery_attempts.c.attempt == number)
    ).scalar()
    return None if last is None else database_now(conn) - utc(last)


def finish_attempt(
    conn: Connection,
    delivery: str,
    number: int,
    *,
    outcome: str,
    duration_ms: int,
    error: str | None = None,
    receipt: str | None = None,
) -> bool:
    """Close the history row of attempt ``number``; False when it was abandoned meanwhile."""
    result = conn.execute(
        delivery_attempts.update()
        .where(delivery_attempts.c.delivery_id == delivery,
               delivery_attempts.c.attempt == number,
               delivery_attempts.c.outcome == IN_PROGRESS)
        .values(outcome=outcome, duration_ms=duration_ms, error=error, receipt=receipt)
    )
    return result.rowcount == 1


def requeue(engine: Engine, the_id: str, *, now: datetime,
            window: timedelta | None = None) -> DeliveryRecord:
    """Operator action: give an exhausted or refused delivery a fresh retry window.

    The window restarts now: ``retry_until = now + window`` (default: the destination's
    ``retry_window`` as recorded). Attempt numbers keep counting (the history stays unique);
    ``budget_base`` records how many attempts came before this requeue.
    """
    from export_lib.config.destinations import DEFAULT_RETRY_WINDOW, parse_destination

    record = get_record(engine, the_id)
    if record is None:
        raise IllegalTransitionError(f"no delivery {the_id!r}; list them with list_deliveries()")
    if window is None:
        try:
            window = parse_destination(record.destination_config).retry_window
        except ValueError:  # not a destination config we can read: the default window
            window = DEFAULT_RETRY_WINDOW
    with engine.begin() as conn:
        check_transition(DELIVERY_STATES, the_id, record.state, PENDING)
        conn.execute(
            deliveries.update()
            .where(deliveries.c.delivery_id == the_id, deliveries.c.state == record.state)
            .values(state=PENDING, budget_base=record.attempts, updated_at=utc(now),
                    retry_until=utc(now) + window)
        )
    refreshed = get_record(engine, the_id)
    assert refreshed is not None
    return refreshed


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = utc(value).isoformat() if isinstance(value, datetime) else value
    return out


def list_deliveries(
    engine: Engine, run_key: str | None = None, *, states: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """Delivery records as plain dicts (ISO timestamps), each with its ``history`` of attempts.

    ``states`` narrows the list, e.g. ``("pending", "attempting", "exhausted", "refused")`` for
    the unresolved deliveries an operator must look at. Ordered by run key, artifact version
    and destination id, for stable CLI output.
    """
    unknown = sorted(set(states or ()) - set(STATES))
    if unknown:
        raise ConfigError(f"unknown delivery state(s) {unknown}; valid: {', '.join(STATES)}")
    query = sa.select(deliveries).order_by(
        deliveries.c.run_key, deliveries.c.artifact_version, deliveries.c.destination_id
    )
    history_query = sa.select(delivery_attempts).order_by(
        delivery_attempts.c.delivery_id, delivery_attempts.c.attempt
    )
    history_query = history_query.join(deliveries)
    if run_key is not None:
        query = query.where(deliveries.c.run_key == run_key)
        history_query = history_query.where(deliveries.c.run_key == run_key)
    if states is not None:
        query = query.where(deliveries.c.state.in_(list(states)))
        history_query = history_query.where(deliveries.c.state.in_(list(states)))
    with engine.connect() as conn:
        rows = [_jsonable(row) for row in conn.execute(query).mappings()]
        history: dict[str, list[dict[str, Any]]] = {}
        for row in conn.execute(history_query).mappings():
            item = _jsonable(row)
            item.pop("id")
            item.pop("heartbeat_at", None)  # liveness bookkeeping, not the attempt's history
            history.setdefault(item.pop("delivery_id"), []).append(item)
    for row in rows:
        row["destination_config"] = json.loads(row["destination_config"])
        row["history"] = history.get(row["delivery_id"], [])
    return rows
