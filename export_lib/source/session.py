"""No runaway work on a source: session limits, TCP keepalives and cancelling what is running.

The old system's incident: a worker killed mid-query left its connection (and the query) on the
database until TCP noticed. Every PostgreSQL source session therefore gets

* ``statement_timeout`` (default 30 min; ``EXPORT_SOURCE_STATEMENT_TIMEOUT`` or the connection
  extra ``statement_timeout``, in PostgreSQL's units: ``1800s``, ``30min``, ``2h``, ``0`` = off);
* libpq TCP keepalives (``keepalives_idle`` 60 s, ``keepalives_interval`` 10 s,
  ``keepalives_count`` 5; each overridable as a connection extra) and the same on the server
  side of the socket (``tcp_keepalives_*``), so a dead peer is noticed in ~2 min either way;
* ``client_connection_check_interval`` (5 s): the server checks, even during a long sort that
  sends nothing yet, whether the client is still there, and stops the query if not.

Every open source is registered here while it is open; :func:`cancel_running` (called by the
Airflow render task's ``on_kill``, from a signal handler or another thread) cancels the query
each one is running through libpq's cancel request, i.e. what ``pg_cancel_backend`` does.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from export_lib import settings
from export_lib.errors import ConfigError
from export_lib.logfmt import get_logger

if TYPE_CHECKING:
    import sqlite3

    import psycopg

    # The DB-API connection a source query runs on.
    DBConnection = psycopg.Connection[Any] | sqlite3.Connection

log = get_logger(__name__)

DEFAULT_STATEMENT_TIMEOUT = settings.STATEMENT_TIMEOUT
STATEMENT_TIMEOUT_ENV = settings.STATEMENT_TIMEOUT_ENV
KEEPALIVES = {"keepalives": "1", "keepalives_idle": "60", "keepalives_interval": "10",
              "keepalives_count": "5"}
CLIENT_CHECK_INTERVAL = "5s"
CANCEL_TIMEOUT = 5.0
# Connection extras export_lib reads itself, never handed to libpq.
EXPORT_EXTRAS = ("statement_timeout",)
_DURATION = re.compile(r"^\s*\d+\s*(us|ms|s|min|h|d)?\s*$")

_lock = threading.Lock()
_running: dict[int, Cancellable] = {}


def statement_timeout(conn_id: str, extra: dict[str, Any],
                      environ: Mapping[str, str] | None = None) -> str:
    """The source's ``statement_timeout``: connection extra, else the environment, else 30min."""
    if "statement_timeout" in extra:
        value, where = str(extra["statement_timeout"]), f"connection {conn_id!r} extra statement_timeout"
    else:
        value = settings.statement_timeout(environ) or DEFAULT_STATEMENT_TIMEOUT
        where = STATEMENT_TIMEOUT_ENV
    if not _DURATION.match(value):
        raise ConfigError(f"{where}: {value!r} is not a duration; use PostgreSQL units such as "
                          "'1800s', '30min' or '2h' ('0' turns the limit off)")
    return value.replace(" ", "")


def keepalive_params(extra: dict[str, Any]) -> dict[str, str]:
    """libpq keepalive parameters, the connection's extras overriding the defaults."""
    return {k: str(extra.get(k, v)) for k, v in KEEPALIVES.items()}


def session_settings(conn_id: str, extra: dict[str, Any]) -> dict[str, str]:
    """The ``set_config`` values every PostgreSQL source session starts with."""
    keep = keepalive_params(extra)
    return {
        "statement_timeout": statement_timeout(conn_id, extra),
        "client_connection_check_interval": CLIENT_CHECK_INTERVAL,
        "tcp_keepalives_idle": keep["keepalives_idle"],
        "tcp_keepalives_interval": keep["keepalives_interval"],
        "tcp_keepalives_count": keep["keepalives_count"],
    }


class Cancellable(Protocol):
    """What runs a query this process may have to stop (``database.Source``)."""

    def cancel(self, reason: str) -> None: ...


def register(source: Cancellable) -> None:
    with _lock:
        _running[id(source)] = source


def unregister(source: Cancellable) -> None:
    with _lock:
        _running.pop(id(source), None)


def cancel_connection(connection: DBConnection, dialect: str) -> None:
    """Ask the server to stop what ``connection`` is running (safe from another thread or a
    signal handler: libpq sends the cancel request on a connection of its own)."""
    if dialect == "sqlite":
        connection.interrupt()
        return
    try:
        connection.cancel_safe(timeout=CANCEL_TIMEOUT)
    except Exception:  # an older libpq, or the cancel connection failed: the blocking form
        log.debug("cancel_safe failed; falling back to PQcancel", exc_info=True)
        connection.cancel()


def cancel_running(reason: str) -> int:
    """Cancel the query of every source open in this process; returns how many were asked."""
    with _lock:
        sources = list(_running.values())
    for source in sources:
        try:
            source.cancel(reason)
            log.warning("source %s: cancelled the running query (%s)", source.conn_id, reason)
        except Exception as exc:  # the connection may be gone already: nothing left to stop
            log.warning("source %s: cancel failed (%s): %s", source.conn_id, reason, exc)
    return len(sources)
