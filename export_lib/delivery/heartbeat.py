"""A delivery attempt's heartbeat: how a worker that died, or gave up on an absent ledger, is
told from one that is still sending.

A delivery attempt is won in the ledger (``attempting``) before anything is sent, and an
``attempting`` record stops every other worker (only one may send). While the attempt's worker
sends the file and records the outcome, a daemon thread renews the attempt's ``heartbeat_at``
every ``EXPORT_DELIVERY_HEARTBEAT_SECONDS`` (the database's ``now()``: the worker's own clock
decides nothing another worker reads). An attempt silent for :data:`SILENT_BEATS` heartbeats
is taken over by the next try. Without it, a delivery whose acknowledgement could not be
written (the ledger restarted for longer than a task waits for it) held its destination for
30 minutes, longer than Airflow's retries wait. Renewing is best effort: a failed beat is
logged and the next one tries again; the delivery itself is never stopped by it.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.engine import Engine

from export_lib import settings
from export_lib.ledger import deliveries as rec
from export_lib.ledger.renewal import Renewal

SILENT_BEATS = settings.DELIVERY_SILENT_BEATS


def silent_after(every: timedelta | None = None) -> timedelta:
    """How long an attempt may go without a heartbeat before another worker takes it over."""
    return (every or settings.delivery_heartbeat()) * SILENT_BEATS


class Heartbeat(Renewal):
    """``with Heartbeat(engine, delivery_id, attempt):`` beats until the block ends."""

    def __init__(self, engine: Engine, delivery: str, number: int,
                 every: timedelta | None = None) -> None:
        super().__init__(lambda: rec.beat(engine, delivery, number),
                         (every or settings.delivery_heartbeat()).total_seconds(),
                         f"heartbeat-{delivery[-8:]}-{number}",
                         f"delivery {delivery} attempt {number}: renewing its heartbeat")


__all__ = ["SILENT_BEATS", "Heartbeat", "silent_after"]
