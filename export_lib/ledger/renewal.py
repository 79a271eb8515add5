"""A daemon thread that renews something in the ledger while a block of work runs: a render's
lease (:class:`export_lib.pipeline.lease.LeaseKeeper`), a delivery attempt's heartbeat
(:class:`export_lib.delivery.heartbeat.Heartbeat`).

Renewing is best effort: a failed renewal is logged and the next tick tries again; the work
itself is never stopped by it. ``renew()`` returning False (what it renews has finished or was
taken over) ends the thread.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from types import TracebackType

from export_lib.logfmt import get_logger

log = get_logger(__name__)


class Renewal:
    """``with Renewal(renew, every, name, what):`` calls ``renew()`` every ``every`` seconds
    until the block ends; ``what`` says what it does, for the warning of a failed renewal."""

    def __init__(self, renew: Callable[[], bool], every: float, name: str, what: str) -> None:
        self._renew, self._every, self._what = renew, every, what
        self._stop = threading.Event()
        # The thread runs in a copy of this context: its log lines carry the run's fields.
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                        name=name, daemon=True)

    def __enter__(self) -> Renewal:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                if not self._renew():
                    return  # finished or taken over meanwhile: nothing to keep
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                log.warning("%s failed: %s", self._what, exc)


__all__ = ["Renewal"]
