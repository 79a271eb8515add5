"""The ledger the Airflow way (issue 24 item 5): connection ``export_ledger`` when Airflow has
one (the UI, ``airflow connections add``, a secrets backend, ``AIRFLOW_CONN_EXPORT_LEDGER``, in
Airflow's order, so rotation and secrets backends reach it like every other connection), else
``EXPORT_LEDGER_URL`` (what ``exportctl`` reads), else the embedded SQLite ledger.

One ledger (engine and pool) per process and URL: a task opened a new engine at each stage
call, and the runs pages one per request. A forked child never uses its parent's pooled
connections (SQLAlchemy's rule for engines across fork).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

from export_lib.ledger import Ledger, open_ledger
from export_lib.ledger.database import ledger_url, url_from_fields
from export_lib.logfmt import get_logger

log = get_logger(__name__)

LEDGER_CONN_ID = "export_ledger"
# A process seldom sees more than one ledger; tests in one process see many (bounded).
_KEEP = 4
_OPEN: OrderedDict[str, Ledger] = OrderedDict()


def _forget_after_fork() -> None:
    for ledger in _OPEN.values():
        ledger.engine.dispose(close=False)  # the parent's connections stay the parent's
    _OPEN.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def task_ledger() -> Ledger:
    """The ledger for a task, a sensor or a callback (Task SDK connection lookup)."""
    return _cached(_task_connection_url())


def callback_ledger() -> Ledger:
    """The ledger for code Airflow calls outside a task's own work: failure and deadline
    notifiers (task process, triggerer) and the risk point's median (scheduler)."""
    return _cached(callback_ledger_url())


def callback_ledger_url() -> str:
    """The URL of :func:`callback_ledger` (not connected): the Task SDK's lookup where it
    answers, else the server-side one; if neither can be asked here, ``EXPORT_LEDGER_URL``:
    alerts then deduplicate in the ledger the runs are in, not in a second one when only the
    connection is configured."""
    for lookup in (_task_connection_url, _server_connection_url):
        try:
            return ledger_url(lookup())
        except ImportError:
            raise
        except Exception as exc:  # noqa: BLE001 - a lookup this process cannot make
            log.info("ledger connection %s not looked up by %s here (%s: %s)", LEDGER_CONN_ID,
                     lookup.__name__, type(exc).__name__, exc)
    return ledger_url(None)


def ledger_at(url: str) -> Ledger:
    """The process's ledger at ``url`` (opened once, kept)."""
    return _cached(url)


def server_ledger() -> Ledger:
    """The ledger for the api-server's pages (server-side connection lookup)."""
    return _cached(_server_connection_url())


def _cached(url: str | None) -> Ledger:
    key = ledger_url(url)
    ledger = _OPEN.get(key)
    if ledger is None:
        ledger = open_ledger(key)
        _OPEN[key] = ledger
        while len(_OPEN) > _KEEP:
            _OPEN.popitem(last=False)[1].engine.dispose()
    _OPEN.move_to_end(key)
    return ledger


def _url(conn: Any) -> str:
    extra = conn.extra_dejson if isinstance(getattr(conn, "extra_dejson", None), dict) else {}
    return url_from_fields(conn.conn_type, host=conn.host, port=conn.port, login=conn.login,
                           password=conn.password, schema=conn.schema, conn_id=LEDGER_CONN_ID,
                           options={k: v for k, v in extra.items() if isinstance(v, str | int)})


def _task_connection_url() -> str | None:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return _url(BaseHook.get_connection(LEDGER_CONN_ID))
    except AirflowNotFoundException:
        return None


def _server_connection_url() -> str | None:
    from export_airflow.airflow_compat import connection_from_secrets

    found = connection_from_secrets(LEDGER_CONN_ID)
    return None if found is None else _url(found)
