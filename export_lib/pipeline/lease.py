"""Keep a render's lease (its place in the render budget) alive while it reads the source.

A daemon thread renews the attempt's ``lease_expires_at`` every third of the lease, so a long
render keeps its place and a worker killed without a word (SIGKILL, a lost host) gives its place
back within one lease. Renewing is best effort: a ledger hiccup is logged, the next tick tries
again; the render itself is never stopped by it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType

from export_lib.ledger import Ledger

log = logging.getLogger(__name__)


class LeaseKeeper:
    """``with LeaseKeeper(ledger, attempt_id, lease):`` renews the lease until the block ends."""

    def __init__(self, ledger: Ledger, attempt_id: str, lease: timedelta,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._ledger, self._attempt_id, self._lease, self._clock = ledger, attempt_id, lease, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{attempt_id[:8]}",
                                        daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        every = self._lease.total_seconds() / 3
        while not self._stop.wait(every):
            try:
                if not self._ledger.renew_lease(self._attempt_id, self._clock() + self._lease):
                    return  # staged, failed or abandoned meanwhile: nothing to keep
            except Exception as exc:  # the next tick tries again
                log.warning("attempt %s: renewing the render lease failed: %s",
                            self._attempt_id[:12], exc)
