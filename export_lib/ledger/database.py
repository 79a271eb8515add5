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


def url_from_fields(conn_type: str, *, host: str | None, port: int | None, login: str | None,
                    password: str | None, schema: str | None, conn_id: str,
                    options: dict[str, str] | None = None) -> str:
    """The ledger's SQLAlchemy URL from a connection's fields (Airflow's ``export_ledger``):
    PostgreSQL (``schema`` is the database; ``options``, the connection's extras, are libpq
    parameters such as ``sslmode``) or SQLite (the file's absolute path in ``host``, or in
    ``schema`` when the connection came from a ``sqlite:////abs/path`` URI)."""
    from sqlalchemy.engine import URL

    kind = (conn_type or "").lower()
    if kind in ("postgres", "postgresql"):
        return URL.create("postgresql+psycopg", username=login or None, password=password or None,
                          host=host or None, port=port or None, database=schema or None,
                          query={k: str(v) for k, v in (options or {}).items()}
                          ).render_as_string(hide_password=False)
    path = host or schema  # the UI puts the file in host, a sqlite:////abs/path URI in schema
    if kind == "sqlite" and path:
        return f"sqlite:///{path}"
    from export_lib.errors import ConfigError

    raise ConfigError(f"connection {conn_id!r} is of type {conn_type!r}; the ledger needs a "
                      "postgres connection (its schema is the database) or a sqlite one (its "
                      "host is the file's absolute path)")


def masked(url: str) -> str:
    """Scheme, host and port of the ledger URL (the one masking function; SQLite keeps its path)."""
    return mask_uri(url)


def make_engine(url: str) -> Engine:
    """An engine for the ledger URL (psycopg 3 for PostgreSQL, with a connect timeout;
    SQLite locks at BEGIN)."""
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
    # libpq waits for a host that does not answer until the OS gives up (minutes): bounded
    # here, unless the URL (or the connection's extras) says otherwise.
    timeout = {} if "connect_timeout" in u.query else {
        "connect_timeout": settings.ledger_connect_timeout()}
    return create_engine(u, pool_pre_ping=True, connect_args=timeout)
