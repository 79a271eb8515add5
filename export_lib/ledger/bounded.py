"""A ledger read its caller cannot afford to wait for: the at-risk point's median delivery time,
read by Airflow's scheduler each time it creates a run. Whatever the ledger does (its host down,
a connection that is never answered, a statement stuck on a lock), the caller has an answer or
:class:`~export_lib.errors.LedgerUnavailable` within ``seconds``; a failure is remembered for a
short while so the next runs created do not wait on the same dead host again.

The read runs in a daemon thread the caller stops waiting for; the connect timeout and the
statement timeout set here end that thread soon after, and only one such read is in flight per
:class:`FailureMemory` at a time, so a dead host never piles threads up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import OperationalError

from export_lib.errors import LedgerError, LedgerUnavailable
from export_lib.ledger.database import masked

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from export_lib.ledger.access import LedgerAccess

T = TypeVar("T")
QUIET = 60.0  # seconds a failure is remembered: the runs created in the next minute don't wait


class FailureMemory:
    """The last failure of a kind of read, per process, for ``quiet`` seconds (``clock`` is
    monotonic seconds; tests pass their own), and the read still in flight, if any."""

    def __init__(self, quiet: float = QUIET, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet = quiet
        self.clock = clock
        self._failed: tuple[float, str] | None = None
        self.in_flight: threading.Thread | None = None

    def check(self) -> None:
        """LedgerUnavailable while a failure is remembered or the last read still waits."""
        if self._failed is not None:
            at, why = self._failed
            age = self.clock() - at
            if age < self.quiet:
                raise LedgerUnavailable(f"{why} ({age:.0f} s ago; not asked again for another "
                                        f"{self.quiet - age:.0f} s)")
            self._failed = None
        if self.in_flight is not None and self.in_flight.is_alive():
            raise LedgerUnavailable("the previous read of the export ledger has not answered "
                                    "yet; not asked again until it has")

    def failed(self, why: str) -> None:
        self._failed = (self.clock(), why)

    def succeeded(self) -> None:
        self._failed = None


def bounded_read(locate: Callable[[], str], open_ledger: Callable[[str], LedgerAccess],
                 read: Callable[[Connection], T], *, seconds: float, memory: FailureMemory) -> T:
    """``read(conn)`` on a connection of ``open_ledger(locate())`` (the URL looked up, the
    ledger opened), answered within ``seconds`` or :class:`LedgerUnavailable` naming the
    ledger's host (masked). On PostgreSQL the read's transaction has ``statement_timeout`` =
    what is left of ``seconds`` (``SET LOCAL``: the pooled connection keeps its own). A ledger
    that cannot be reached is remembered in ``memory``; any other error of ``read`` is raised
    as it is, not remembered."""
    memory.check()
    ends = time.monotonic() + seconds
    where = ["(its connection still being looked up)"]
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            url = locate()
            where[0] = masked(url)
            with open_ledger(url).engine.connect() as conn:
                if conn.dialect.name == "postgresql":  # what is left of the wait, no more
                    left = max(1, int((ends - time.monotonic()) * 1000))
                    conn.exec_driver_sql(f"SET LOCAL statement_timeout = {left}")
                outcome["value"] = read(conn)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=work, name="ledger-bounded-read", daemon=True)
    memory.in_flight = thread
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        why = f"the export ledger at {where[0]} did not answer within {seconds:g} s"
        memory.failed(why)
        raise LedgerUnavailable(why)
    error = outcome.get("error")
    if isinstance(error, LedgerError):
        memory.failed(str(error))
        raise error
    if isinstance(error, OperationalError):  # lost connection, statement timeout
        reason = str(error.orig or error).strip().splitlines()[0]
        why = f"the export ledger at {where[0]} did not answer: {reason}"
        memory.failed(why)
        raise LedgerUnavailable(why) from error
    if error is not None:
        raise error
    memory.succeeded()
    return outcome["value"]
