"""Sources: open a read-only connection to the database an export reads, and introspect it.

PostgreSQL goes through psycopg 3 (read-only session, so rendering can never write), SQLite
through the standard library (``mode=ro``). A source that cannot be reached raises
:class:`SourceError` (retryable) naming the connection id with the password masked; a table
or column that disappeared raises :class:`SchemaDriftError` (not retryable).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from export_lib.config.query import Dialect, QuerySpec
from export_lib.errors import (
    ConfigError,
    ExportError,
    RenderError,
    SchemaDriftError,
    SourceError,
)
from export_lib.logfmt import get_logger
from export_lib.source import session
from export_lib.source.connections import Connection
from export_lib.source.sql import quote_sqlite

if TYPE_CHECKING:
    from export_lib.source.session import DBConnection

log = get_logger(__name__)

POSTGRES_TYPES = ("postgres", "postgresql")
# libpq parameters a connection's extras may carry through to psycopg.
LIBPQ_EXTRAS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options",
                "target_session_attrs", "application_name", "tcp_user_timeout")

# libpq parameters every source session gets unless the connection sets its own.
LIBPQ_DEFAULTS: dict[str, Any] = {"connect_timeout": 10, "application_name": "export_lib",
                                  "client_encoding": "UTF8"}

UNORDERED = ("json", "xml", "point", "line", "lseg", "box", "path", "polygon", "circle")
Kind = Literal["int", "decimal", "float4", "float8", "bool", "timestamptz", "timestamp", "date",
               "string"]


@dataclass(frozen=True)
class SqlType:
    """A source column type reduced to what rendering needs."""

    kind: Kind
    precision: int | None = None
    scale: int | None = None
    unordered: bool = False  # no ordering operator (json, xml): never a sort tie-breaker
    text: bool = False  # character data (text, varchar, char): CSV formula neutralisation


@dataclass
class Source:
    """An open source: a DB-API connection plus what error messages need to name it."""

    conn_id: str
    dialect: Dialect
    connection: DBConnection
    masked_uri: str
    password: str | None = field(default=None, repr=False)
    cancelled: str | None = None  # why this process cancelled the running query, if it did

    def cancel(self, reason: str) -> None:
        """Stop the query running on this source (from another thread or a signal handler)."""
        self.cancelled = reason
        session.cancel_connection(self.connection, self.dialect)

    def error(self, exc: BaseException, doing: str) -> ExportError:
        """Map a driver exception to the export hierarchy, password scrubbed from the text."""
        text = str(exc).strip()
        if self.password:
            text = text.replace(self.password, "***")
        msg = f"source {self.conn_id!r} ({self.masked_uri}): {doing} failed: {text}"
        if self.cancelled:
            return SourceError(f"{msg}; the query was cancelled ({self.cancelled}), "
                               "nothing is left running on the source")
        if _is_drift(exc):
            return SchemaDriftError(msg + "; the source schema changed, update the config")
        if _is_unreachable(exc):
            return SourceError(msg + "; will retry (is the database up and reachable?)")
        return RenderError(msg)

    @contextmanager
    def guarded(self, doing: str) -> Iterator[None]:
        try:
            yield
        except ExportError:
            raise
        except Exception as exc:  # driver errors only reach here; ours pass through above
            if not _is_driver_error(exc):
                raise
            # "from None": a driver message can echo connection details; ours is scrubbed.
            raise self.error(exc, doing) from None


def _is_driver_error(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.Error | sqlite3.Error)


def _is_drift(exc: BaseException) -> bool:
    import psycopg.errors as pe

    if isinstance(exc, pe.UndefinedColumn | pe.UndefinedTable):
        return True
    return isinstance(exc, sqlite3.OperationalError) and (
        "no such column" in str(exc) or "no such table" in str(exc))


def _is_unreachable(exc: BaseException) -> bool:
    import psycopg

    if isinstance(exc, psycopg.OperationalError):
        return True
    return isinstance(exc, sqlite3.OperationalError) and any(
        s in str(exc) for s in ("unable to open", "locked", "disk I/O"))


@contextmanager
def open_source(conn: Connection) -> Iterator[Source]:
    """Open ``conn`` read-only; closes it on exit. Unreachable → SourceError (retryable)."""
    if conn.conn_type in POSTGRES_TYPES:
        opener = _open_postgres
    elif conn.conn_type == "sqlite":
        opener = _open_sqlite
    else:
        raise ConfigError(
            f"connection {conn.conn_id!r}: conn_type {conn.conn_type!r} cannot be a query source; "
            f"valid options are: {', '.join(POSTGRES_TYPES)}, sqlite"
        )
    source = opener(conn)
    session.register(source)
    try:
        yield source
    finally:
        session.unregister(source)
        try:
            source.connection.close()
        except Exception:  # closing a broken connection must not hide the real error
            log.debug("closing source %s failed", conn.conn_id, exc_info=True)


def _open_postgres(conn: Connection) -> Source:
    import psycopg

    # No runaway work (export_lib/source/session.py): statement_timeout, keepalives both ways.
    settings = {"TimeZone": "UTC", "DateStyle": "ISO, YMD", "extra_float_digits": "1",
                **session.session_settings(conn.conn_id, conn.extra)}
    defaults = {**LIBPQ_DEFAULTS, **session.keepalive_params(conn.extra)}
    source = Source(conn.conn_id, "postgresql", None, conn.masked_uri(), conn.password)
    with source.guarded("connecting"):
        if "postgres" in conn.clients:  # the resolver's own (e.g. Airflow's PostgresHook)
            pg = conn.clients["postgres"](**defaults)
            if not isinstance(pg, psycopg.Connection):
                pg.close()
                raise ConfigError(
                    f"source {conn.conn_id!r}: the connection's resolver returned a "
                    f"{type(pg).__module__}.{type(pg).__name__}; rendering needs psycopg 3 "
                    "(COPY); install psycopg[binary]>=3 beside SQLAlchemy 2")
            # Whatever the client's owner configured (a hook's dict rows, autocommit), this
            # session reads plain tuples inside read-only transactions.
            from psycopg.rows import tuple_row

            pg.row_factory = tuple_row
            pg.autocommit = False
        else:
            params: dict[str, Any] = {
                "host": conn.host or "localhost", "port": conn.port or 5432,
                "user": conn.login, "password": conn.password, "dbname": conn.schema,
                **defaults,
            }
            params.update({k: v for k, v in conn.extra.items() if k in LIBPQ_EXTRAS})
            pg = psycopg.connect(**{k: v for k, v in params.items() if v is not None})
        pg.read_only = True
        if pg.info.server_version < 140000:  # client_connection_check_interval is 14+
            settings.pop("client_connection_check_interval")
        # Timestamps cross the wire as UTC; render sets the company zone where asked.
        pg.execute("SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings),
                   [v for item in settings.items() for v in item])
        pg.commit()
    source.connection = pg
    return source


def _open_sqlite(conn: Connection) -> Source:
    source = Source(conn.conn_id, "sqlite", None, conn.masked_uri(), conn.password)
    path = Path(conn.schema or "")
    if not conn.schema or not path.is_file():
        raise SourceError(
            f"source {conn.conn_id!r} ({conn.masked_uri()}): SQLite file {str(path)!r} does not "
            "exist; will retry (check the path in the connection URI, sqlite:////abs/file.db)"
        )
    with source.guarded("opening"):
        source.connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    return source


def source_columns(source: Source, table: str, schema: str | None = None) -> dict[str, str]:
    """Column name → declared type, in table order; empty when the table does not exist."""
    return {name: declared for name, (declared, _) in
            describe_columns(source, table, schema).items()}


def describe_columns(source: Source, table: str, schema: str | None = None
                     ) -> dict[str, tuple[str, bool]]:
    """Column name → (declared type, nullable), in table order; empty when the table does not
    exist. A column is nullable unless the source declares it NOT NULL (a view's columns
    always are: neither PostgreSQL nor SQLite carries NOT NULL through a view)."""
    with source.guarded(f"reading the columns of {table!r}"):
        if source.dialect == "sqlite":
            prefix = f"{quote_sqlite(schema)}." if schema else ""
            rows = source.connection.execute(
                f"PRAGMA {prefix}table_info({quote_sqlite(table)})").fetchall()
            return {r[1]: ((r[2] or "").lower(), not r[3]) for r in rows}
        from psycopg import sql

        pg = source.connection
        name = (sql.Identifier(schema, table) if schema else sql.Identifier(table)).as_string(pg)
        rows = pg.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
            "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum", (name,)).fetchall()
        pg.rollback()
        return {r[0]: (r[1], not r[2]) for r in rows}


_NUMERIC = re.compile(r"^(?:numeric|decimal)\s*(?:\(\s*(\d+)\s*(?:,\s*(-?\d+)\s*)?\))?$")


def classify(type_name: str, dialect: Dialect = "postgresql") -> SqlType:
    """Reduce a PostgreSQL ``format_type`` or SQLite declared type to a rendering kind.

    SQLite REAL is 8 bytes (float8, PostgreSQL's ``real`` is float4); SQLite
    TIMESTAMP/DATETIME columns hold ISO-8601 text, naive values meaning UTC.
    """
    t = type_name.strip().lower()
    if m := _NUMERIC.match(t):
        return SqlType("decimal", int(m[1]) if m[1] else None, int(m[2] or 0) if m[1] else None)
    if t in ("real", "float4") and dialect == "postgresql":
        return SqlType("float4")
    if t.startswith(("real", "double", "float")):
        return SqlType("float8")
    if t in ("boolean", "bool"):
        return SqlType("bool")
    if t == "date":
        return SqlType("date")
    if t.startswith("timestamp without"):
        return SqlType("timestamp")
    if t.startswith(("timestamp", "datetime")):
        return SqlType("timestamptz")
    if t in ("smallint", "integer", "bigint", "int", "int2", "int4", "int8") or (
            dialect == "sqlite" and "int" in t):
        return SqlType("int")
    return SqlType("string", unordered=dialect == "postgresql" and t in UNORDERED,
                   text=_is_text(t, dialect))


def _is_text(t: str, dialect: Dialect) -> bool:
    """Character types: PostgreSQL's text/varchar/char/citext/name; SQLite's TEXT affinity."""
    if dialect == "sqlite":
        return any(word in t for word in ("char", "clob", "text"))
    return t in ("text", "citext", "name", "bpchar") or t.startswith(
        ("character", "varchar", "char"))


def watermark(source: Source, spec: QuerySpec, *, company_id: str | None = None) -> datetime | None:
    """The source's ingestion watermark: max(``ingested_column``), UTC-aware; None if unknown.

    Ingestion runs for all tenants, so by default the max is table-wide; pass ``company_id``
    to scope it to one company.
    """
    if not spec.ingested_column:
        return None
    with source.guarded(f"reading the watermark of {spec.table!r}"):
        if source.dialect == "sqlite":
            column, table = quote_sqlite(spec.ingested_column), quote_sqlite(spec.table)
            text = f"SELECT max({column}) FROM {table}"
            args: list[Any] = []
            if company_id is not None:
                text += f" WHERE {quote_sqlite(spec.tenant_column)} = ?"
                args.append(company_id)
            value = source.connection.execute(text, args).fetchone()[0]
            return None if value is None else parse_sqlite_timestamp(value)
        from psycopg import sql

        table = (sql.Identifier(spec.table_schema, spec.table) if spec.table_schema
                 else sql.Identifier(spec.table))
        query = sql.SQL("SELECT max({}) FROM {}").format(sql.Identifier(spec.ingested_column),
                                                         table)
        if company_id is not None:
            query += sql.SQL(" WHERE {} = {}").format(sql.Identifier(spec.tenant_column),
                                                      sql.Literal(company_id))
        value = source.connection.execute(query).fetchone()[0]
        source.connection.rollback()
        if value is not None and value.tzinfo is None:
            # ``timestamp without time zone`` holds UTC, as the render bounds assume.
            value = value.replace(tzinfo=UTC)
        return value


def watermark_passed(
    source: Source, spec: QuerySpec, *, window_end: datetime, grace: timedelta, now: datetime
) -> bool:
    """True when late data for the window can no longer arrive (``wait_for_watermark``).

    With an ingestion column: the watermark has reached ``window_end + grace``. Without one,
    the only evidence is the clock: ``now >= window_end + grace``.
    """
    due = window_end + grace
    if not spec.ingested_column:
        return now >= due
    mark = watermark(source, spec)
    log.info("source %s watermark %s, due %s", source.conn_id, mark, due)
    return mark is not None and mark >= due


def parse_sqlite_timestamp(value: Any) -> datetime:
    """SQLite's ISO text (``T`` or space, ``Z`` or offset, naive = UTC) or Unix seconds."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
