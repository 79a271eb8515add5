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

import contextvars
import threading
from datetime import timedelta
from types import TracebackType

from sqlalchemy.engine import Engine

from export_lib import settings
from export_lib.ledger import deliveries as rec
from export_lib.logfmt import get_logger

log = get_logger(__name__)

SILENT_BEATS = settings.DELIVERY_SILENT_BEATS


def silent_after(every: timedelta | None = None) -> timedelta:
    """How long an attempt may go without a heartbeat before another worker takes it over."""
    return (every or settings.delivery_heartbeat()) * SILENT_BEATS


class Heartbeat:
    """``with Heartbeat(engine, delivery_id, attempt):`` beats until the block ends."""

    def __init__(self, engine: Engine, delivery: str, number: int,
                 every: timedelta | None = None) -> None:
        self._engine, self._delivery, self._number = engine, delivery, number
        self._every = (every or settings.delivery_heartbeat()).total_seconds()
        self._stop = threading.Event()
        # The thread runs in a copy of this context: its log lines carry the run's fields.
        self._thread = threading.Thread(target=contextvars.copy_context().run,
                                        args=(self._run,), daemon=True,
                                        name=f"heartbeat-{delivery[-8:]}-{number}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                if not rec.beat(self._engine, self._delivery, self._number):
                    return  # finished, or taken over meanwhile: nothing to keep alive
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                log.warning("delivery %s attempt %d: renewing its heartbeat failed: %s",
                            self._delivery, self._number, exc)


__all__ = ["SILENT_BEATS", "Heartbeat", "silent_after"]
