"""The delivery ledger: one record per (run, artifact version, destination) and its attempts.

States and the only allowed moves (enforced by :func:`check_transition`, used by every write)::

    pending ──▶ attempting ──▶ acknowledged            (terminal)
       │  ▲         │  │
       │  └─────────┘  └────▶ exhausted ──▶ pending    (operator requeue)
       ▼  retryable failure
    refused ──▶ pending                                (owner authorised again / requeue)

``attempting → attempting`` is a takeover of an attempt whose worker died (older than
``stale_after``); the dead attempt is marked ``abandoned`` in the history.

Concurrency: the record is created with insert-or-ignore on its primary key (the delivery id is
derived from the unique triple), and every state change is a compare-and-swap
``UPDATE … WHERE delivery_id = ? AND state = ? AND attempts = ?``. Exactly one of two racing
workers wins an attempt, on PostgreSQL and SQLite alike, without holding a lock across the
network call. Timestamps are stored in UTC.

The tables live in their own ``delivery_metadata`` so the Alembic migration can include them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from export_lib.errors import ConfigError, IllegalTransitionError

delivery_metadata = sa.MetaData()

PENDING = "pending"
ATTEMPTING = "attempting"
ACKNOWLEDGED = "acknowledged"
EXHAUSTED = "exhausted"
REFUSED = "refused"
STATES = (PENDING, ATTEMPTING, ACKNOWLEDGED, EXHAUSTED, REFUSED)
UNRESOLVED = (PENDING, ATTEMPTING, EXHAUSTED, REFUSED)

TRANSITIONS: Mapping[str, frozenset[str]] = {
    PENDING: frozenset({ATTEMPTING, REFUSED}),
    ATTEMPTING: frozenset({ACKNOWLEDGED, PENDING, EXHAUSTED, ATTEMPTING}),
    EXHAUSTED: frozenset({PENDING}),
    REFUSED: frozenset({PENDING}),
    ACKNOWLEDGED: frozenset(),
}

# Outcomes of one attempt in the history table.
IN_PROGRESS = "in_progress"
DELIVERED = "delivered"
ALREADY_PRESENT = "already_present"
RETRYABLE_FAILURE = "retryable_failure"
PERMANENT_FAILURE = "permanent_failure"
ABANDONED = "abandoned"

deliveries = sa.Table(
    "deliveries",
    delivery_metadata,
    sa.Column("delivery_id", sa.String(80), primary_key=True),
    sa.Column("run_key", sa.String(400), nullable=False),
    sa.Column("artifact_version", sa.Integer, nullable=False),
    sa.Column("destination_id", sa.String(64), nullable=False),
    sa.Column("destination_type", sa.String(16), nullable=False),
    sa.Column("destination_config", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("artifact_name", sa.String(400), nullable=False),
    sa.Column("artifact_sha256", sa.String(64), nullable=False),
    sa.Column("artifact_bytes", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    # attempts made before the last operator requeue: the retry budget counts from here.
    sa.Column("budget_base", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text),
    sa.Column("receipt", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("attempt_started_at", sa.DateTime(timezone=True)),
    sa.Column("acknowledged_at", sa.DateTime(timezone=True)),
    sa.UniqueConstraint("run_key", "artifact_version", "destination_id", name="uq_delivery_triple"),
    sa.CheckConstraint(f"state IN {STATES!r}", name="ck_delivery_state"),
    sa.Index("ix_deliveries_run_key", "run_key"),
    sa.Index("ix_deliveries_state", "state"),
)

delivery_attempts = sa.Table(
    "delivery_attempts",
    delivery_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "delivery_id",
        sa.String(80),
        sa.ForeignKey("deliveries.delivery_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("duration_ms", sa.Integer),
    sa.Column("outcome", sa.String(24), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("receipt", sa.Text),
    sa.UniqueConstraint("delivery_id", "attempt", name="uq_delivery_attempt"),
)


def delivery_id(run_key: str, version: int, destination_id: str) -> str:
    """Stable id of a delivery: readable destination prefix + sha256 of the triple.

    Used as the webhook ``Idempotency-Key``, the e-mail ``Message-ID`` and the SFTP temp name,
    so every retry of the same delivery presents the same identity to the destination.
    """
    digest = hashlib.sha256(f"{run_key}\x1f{version}\x1f{destination_id}".encode()).hexdigest()
    return f"dlv-{destination_id[:40]}-{digest[:20]}"


def check_transition(current: str, target: str) -> None:
    """Raise IllegalTransitionError unless the state machine allows ``current → target``."""
    if target not in TRANSITIONS.get(current, frozenset()):
        allowed = sorted(TRANSITIONS.get(current, frozenset())) or ["none (terminal)"]
        raise IllegalTransitionError(
            f"delivery cannot move from {current!r} to {target!r}; "
            f"allowed from {current!r}: {', '.join(allowed)}"
        )


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive values (SQLite reads) are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(frozen=True)
class DeliveryRecord:
    """One row of ``deliveries`` as read back (timestamps in UTC)."""

    delivery_id: str
    run_key: str
    artifact_version: int
    destination_id: str
    destination_type: str
    destination_config: str
    target: str
    artifact_sha256: str
    state: str
    attempts: int
    budget_base: int
    last_error: str | None
    receipt: str | None
    attempt_started_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeliveryRecord:
        started = row["attempt_started_at"]
        return cls(
            **{name: row[name] for name in cls.__dataclass_fields__
               if name != "attempt_started_at"},
            attempt_started_at=utc(started) if started else None,
        )


@dataclass(frozen=True)
class NewDelivery:
    """What the engine knows when it first records a delivery."""

    delivery_id: str
    run_key: str
    artifact_version: int
    destination_id: str
    destination_type: str
    destination_config: str
    target: str
    artifact_name: str
    artifact_sha256: str
    artifact_bytes: int


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


def transition(
    conn: Connection, record: DeliveryRecord, target: str, *, now: datetime, **values: Any
) -> bool:
    """Compare-and-swap ``record`` to ``target``; False when another worker moved it first.

    The WHERE clause pins both state and attempt count, so a stale reader can never overwrite a
    newer attempt's outcome.
    """
    check_transition(record.state, target)
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
            outcome=IN_PROGRESS,
        )
    )
    return number


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


def requeue(engine: Engine, the_id: str, *, now: datetime) -> DeliveryRecord:
    """Operator action: give an exhausted or refused delivery a fresh retry budget.

    Attempt numbers keep counting (the history stays unique); the budget restarts here.
    """
    record = get_record(engine, the_id)
    if record is None:
        raise IllegalTransitionError(f"no delivery {the_id!r}; list them with list_deliveries()")
    with engine.begin() as conn:
        check_transition(record.state, PENDING)
        conn.execute(
            deliveries.update()
            .where(deliveries.c.delivery_id == the_id, deliveries.c.state == record.state)
            .values(state=PENDING, budget_base=record.attempts, updated_at=utc(now))
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
            history.setdefault(item.pop("delivery_id"), []).append(item)
    for row in rows:
        row["destination_config"] = json.loads(row["destination_config"])
        row["history"] = history.get(row["delivery_id"], [])
    return rows
