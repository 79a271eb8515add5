"""Riding out a ledger that went away: a PostgreSQL restart, a minor upgrade, a failover.

A driver error is sorted into one of two kinds. *Unavailable* — the server refused or dropped
the connection (nothing answered, ``57P01`` administrator shutdown, ``57P03`` starting up, the
``08`` connection class) — is :class:`~export_lib.errors.LedgerUnavailable`; anything else (a
statement timeout, a constraint) stays a plain LedgerError. :func:`reconnecting` calls a ledger
operation again, with backoff and jitter, while it is unavailable, for at most
``EXPORT_LEDGER_RECONNECT_SECONDS``, then raises one LedgerUnavailable line for the task's own
retry. Only operations that are safe to repeat are wrapped (each is one transaction that an
ended connection rolled back, or that finds its own earlier commit); the pool's pre-ping
(``database.make_engine``) drops the connections the restart killed, so the repeat gets a live
one.
"""

from __future__ import annotations

import contextvars
import functools
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from export_lib import settings
from export_lib.errors import LedgerError, LedgerUnavailable
from export_lib.ledger.database import masked
from export_lib.logfmt import get_logger

log = get_logger(__name__)

T = TypeVar("T")
# SQLSTATEs of a server that is going or coming: admin shutdown, crash shutdown, starting up.
GOING_OR_COMING = ("57P01", "57P02", "57P03")
FIRST_PAUSE, LONGEST_PAUSE = 0.5, 5.0  # seconds between tries: doubling, capped
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("ledger_reconnecting",
                                                               default=False)


def is_unavailable(exc: BaseException) -> bool:
    """True for a driver error that says the server is not there (rather than a bad
    statement): a retry on a new connection may succeed once it is back."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    state = getattr(exc.orig, "sqlstate", None)
    # No SQLSTATE: refused, reset or timed out before the server said anything (SQLite's
    # "database is locked" too: worth waiting for as well).
    return state is None or state.startswith("08") or state in GOING_OR_COMING


def first_line(exc: BaseException) -> str:
    """The driver's own first line (psycopg adds hints on further lines)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def ledger_error(url: str, exc: DBAPIError) -> LedgerError:
    """The driver error as one line naming the ledger's host (masked)."""
    if is_unavailable(exc):
        return LedgerUnavailable(f"the export ledger at {masked(url)} is unavailable: "
                                 f"{first_line(exc)}")
    return LedgerError(f"ledger {masked(url)} failed: {first_line(exc)}")


def reconnecting(call: Callable[[], T], *, what: str, seconds: float | None = None,
                 again: Callable[[], bool] = lambda: True,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> T:
    """``call()``, called again while it raises LedgerUnavailable (and ``again()`` says a
    repeat is safe) for up to ``seconds`` (default ``EXPORT_LEDGER_RECONNECT_SECONDS``).
    Nested calls do not wait again: the outermost one owns the wait."""
    if _inside.get():
        return call()
    budget = settings.ledger_reconnect() if seconds is None else seconds
    token = _inside.set(True)
    try:
        started, pause, warned = clock(), FIRST_PAUSE, False
        while True:
            try:
                result = call()
            except LedgerUnavailable as exc:
                waited = clock() - started
                if not again():  # e.g. an object was already moved: the task's retry decides
                    raise
                if waited >= budget:
                    raise LedgerUnavailable(
                        f"{exc}; {what} gave up after {waited:.0f} s of reconnecting "
                        f"(EXPORT_LEDGER_RECONNECT_SECONDS={budget:g}); the task's retry "
                        "continues from what the ledger holds") from exc
                if not warned:
                    log.warning("%s: %s; reconnecting for up to %g s", what, exc, budget)
                    warned = True
                # jitter: workers do not stampede; the last pause ends with the budget
                sleep(min(pause * random.uniform(0.5, 1.0), budget - waited))
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            if warned:
                log.warning("%s: the export ledger answered again after %.1f s", what,
                            clock() - started)
            return result
    finally:
        _inside.reset(token)


def waits_for_ledger(method: Callable[..., T]) -> Callable[..., T]:
    """A ledger method (one repeatable transaction) that rides out a ledger restart."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        return reconnecting(lambda: method(self, *args, **kwargs),
                            what=f"ledger {method.__name__}")

    return wrapper


def repeatable(engine: Engine, work: Callable[[], T], *, what: str) -> T:
    """``work()`` — ledger statements on ``engine`` that are safe to repeat (it opens its own
    transactions) — with driver errors turned into one LedgerError line, repeated while the
    ledger is unavailable (:func:`reconnecting`)."""

    def once() -> T:
        try:
            return work()
        except (OperationalError, InterfaceError) as exc:
            raise ledger_error(str(engine.url), exc) from exc

    return reconnecting(once, what=what)
