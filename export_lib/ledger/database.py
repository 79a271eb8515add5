"""The ledger's database: its URL (``EXPORT_LEDGER_URL`` or the embedded default), a masked form
for messages, and an engine configured per backend."""

from __future__ import annotations

import os

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url

from export_lib import settings
from export_lib.masking import mask_uri


def ledger_url(explicit: str | None = None) -> str:
    """``EXPORT_LEDGER_URL``, else the embedded SQLite ledger of ``make run``."""
    if explicit:
        return explicit
    configured = settings.ledger_url()
    if configured:
        return configured
    from export_lib.source.connections import project_root

    home = settings.airflow_home() or project_root() / ".airflow"
    return f"sqlite:///{os.path.abspath(home)}/ledger.db"


def masked(url: str) -> str:
    """Scheme, host and port of the ledger URL (the one masking function; SQLite keeps its path)."""
    return mask_uri(url)


def make_engine(url: str) -> Engine:
    """An engine for the ledger URL (psycopg 3 for PostgreSQL; SQLite locks at BEGIN)."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(u.database)), exist_ok=True)
        engine = create_engine(u, connect_args={"timeout": 60})

        # SQLite: take the write lock at BEGIN so read-check-write sequences cannot interleave.
        @event.listens_for(engine, "connect")
        def _no_implicit_begin(dbapi_conn, _record):  # pragma: no cover - driver hook
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin_immediate(conn):  # pragma: no cover - driver hook
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(u, pool_pre_ping=True)
