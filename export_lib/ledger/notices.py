"""Once-per-run announcements (``export_notices``, revision 0006): an alert or a once-only
metric is *claimed* before it is sent and marked *sent* after, so three retries and a clear of
the same failure send one alert, and two processes asking at once send one.

A claim that was never confirmed (the sender died) is taken over after :data:`STALE`; a send
that failed is ``failed`` and the next ask tries again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from export_lib.ledger.clock import agreed_now
from export_lib.ledger.deliveries import _insert_ignore
from export_lib.ledger.schema import notices

CLAIMED, SENT, FAILED = "claimed", "sent", "failed"
STALE = timedelta(minutes=10)


@dataclass(frozen=True)
class Claim:
    """The outcome of asking to announce ``key``: ``granted`` means this caller sends it."""

    key: str
    granted: bool
    state: str
    claims: int


def claim_notice(engine: Engine, *, key: str, kind: str, run_key: str, reason: str,
                 now: datetime, recipients: str | None = None,
                 stale: timedelta = STALE) -> Claim:
    """Claim ``key`` (insert-or-get, then take over a failed or stale claim), counting the ask."""
    with engine.begin() as conn:
        _insert_ignore(conn, notices, {
            "notice_key": key, "kind": kind, "run_key": run_key, "reason": reason[:64],
            "recipients": recipients, "state": CLAIMED, "claims": 0, "created_at": now,
            "updated_at": now})
        query = sa.select(notices).where(notices.c.notice_key == key)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        row = conn.execute(query).one()
        fresh = row.claims == 0
        # A claim another process made is stale by both clocks (the database's vetoes a
        # fast host), so a slow sender is not doubled by a host whose clock runs ahead.
        retake = row.state == FAILED or (row.state == CLAIMED
                                         and row.updated_at < agreed_now(conn, now) - stale)
        granted = fresh or retake
        values: dict[str, Any] = {"claims": row.claims + 1}
        if granted:
            values.update(state=CLAIMED, updated_at=now, recipients=recipients, error=None)
        conn.execute(sa.update(notices).where(notices.c.notice_key == key).values(**values))
    return Claim(key, granted, CLAIMED if granted else row.state, row.claims + 1)


def confirm_notice(engine: Engine, key: str, now: datetime) -> None:
    """The claimed notice was sent."""
    with engine.begin() as conn:
        conn.execute(sa.update(notices).where(notices.c.notice_key == key)
                     .values(state=SENT, sent_at=now, updated_at=now))


def fail_notice(engine: Engine, key: str, error: str, now: datetime) -> None:
    """Sending the claimed notice failed: the next ask tries again."""
    with engine.begin() as conn:
        conn.execute(sa.update(notices).where(notices.c.notice_key == key)
                     .values(state=FAILED, error=error[:2000], updated_at=now))


def list_notices(engine: Engine, run_key: str | None = None) -> list[dict[str, Any]]:
    """Every notice (of one run), oldest first."""
    query = sa.select(notices).order_by(notices.c.id)
    if run_key is not None:
        query = query.where(notices.c.run_key == run_key)
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]
