"""The one clock machines agree on: the ledger database's.

A lease written by one worker and judged by another, a delivery window one worker closes and
another would still retry in, an attempt one worker started and another may take over: each is
compared with the database's ``now()``, never with the host's clock of whoever happens to ask
(docs/adr/0034-which-clock.md has the table). The caller's ``now`` still stamps what it
records (started_at, events), where a skewed clock misleads a reader but decides nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Connection, func, select


def database_now(conn: Connection) -> datetime:
    """The ledger's clock, aware UTC: PostgreSQL's ``now()`` (the transaction's start, so one
    transaction judges with one instant); an SQLite ledger is one file on this host, whose
    clock is the database's."""
    if conn.dialect.name == "postgresql":
        return conn.execute(select(func.now())).scalar_one().astimezone(UTC)
    return datetime.now(UTC)


def agreed_now(conn: Connection, now: datetime) -> datetime:
    """The earlier of the caller's ``now`` and the database's clock: what has passed by both.
    A decision that closes something (a delivery window, a deadline reached, an attempt given
    up as dead) is taken at this moment, so it waits for both clocks: the database's vetoes a
    worker whose clock runs fast, and a caller's deliberately earlier ``now`` (a replay, a
    test) still reads as that moment."""
    return min(now.astimezone(UTC), database_now(conn))
