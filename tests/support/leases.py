"""Time passing for leases, as the ledger sees it: leases are the database's clock
(export_lib.ledger.clock), so a test that needs one lapsed moves it into the database's past
instead of passing a later ``now``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from export_lib.ledger.schema import attempts, runs


def lapse_leases(ledger, run_key: str | None = None) -> int:
    """Every lease (of ``run_key``'s attempts, else all) ends a second ago by the database's
    clock, as if its holder had stopped renewing it long enough ago; how many were moved."""
    if ledger.engine.dialect.name == "postgresql":
        past = sa.func.now() - sa.text("interval '1 second'")
    else:  # an SQLite ledger's clock is this host's
        past = datetime.now(UTC) - timedelta(seconds=1)
    query = sa.update(attempts).values(lease_expires_at=past)
    if run_key is not None:
        query = query.where(attempts.c.run_id == sa.select(runs.c.id).where(
            runs.c.run_key == run_key).scalar_subquery())
    with ledger.engine.begin() as conn:
        return conn.execute(query).rowcount
