"""The connection resolver seam: export_lib reads the source the caller's resolver returns, uses
a client the resolver offers, and falls back to ``AIRFLOW_CONN_*`` when no resolver is given."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from export_lib.errors import ConfigError
from export_lib.source.connections import Connection, get_connection, parse_connection
from tests.services.postgres import PostgresServer

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, 07:00 Berlin
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)
CONN_ID = "second_source"
MARKER = "only-in-second-source"


@pytest.fixture()
def second_source(postgres_server: PostgresServer) -> Iterator[str]:
    """A PostgreSQL database with 23 acme rows on 2026-03-28 that the demo source lacks."""
    import psycopg

    name = f"second_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"
    start = datetime(2026, 3, 28, tzinfo=UTC)
    with psycopg.connect(dsn) as conn:
        # With time zone, as the demo's: acme's daily-spend shows local time (timestamps: local).
        conn.execute("CREATE TABLE widget_metrics (company_id TEXT, widget_id TEXT, "
                     "event_time TIMESTAMPTZ, value NUMERIC(14, 2), ingested_at TIMESTAMPTZ)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO widget_metrics VALUES ('acme', %s, %s, %s, %s)",
                            [(MARKER, start + timedelta(hours=h), h, start + timedelta(hours=h + 1))
                             for h in range(23)])
    yield dsn
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _register(world) -> str:
    from export_lib.pipeline import register_run

    schedule = world.schedule()
    schedule = schedule.model_copy(
        update={"query": schedule.query.model_copy(update={"source": CONN_ID})})
    return register_run(world.ledger(), schedule, SLOT, now=NOW).run_key


def _rendered_text(world, result: dict[str, Any]) -> str:
    attempt = world.ledger().get_attempt(result["attempt_id"])
    with world.store.read(attempt.staging_uri) as fh:
        return fh.read().decode()


def test_render_reads_the_source_the_resolver_returns(export_world, second_source):
    from export_lib.pipeline import render_run

    asked: list[str] = []

    def resolver(conn_id: str) -> Connection:
        asked.append(conn_id)
        return parse_connection(conn_id, second_source)

    key = _register(export_world)
    result = render_run(export_world.ledger(), export_world.store, key, now=NOW,
                        resolver=resolver)

    assert asked == [CONN_ID]
    assert result["rows"] == 23
    lines = _rendered_text(export_world, result).splitlines()
    assert len(lines) == 24 and all(MARKER in line for line in lines[1:])


def test_render_uses_the_client_a_resolver_offers(export_world, second_source):
    import psycopg

    from export_lib.pipeline import render_run
    from export_lib.source.database import LIBPQ_DEFAULTS
    from export_lib.source.session import KEEPALIVES

    calls: list[dict[str, Any]] = []

    def open_pg(**defaults: Any) -> psycopg.Connection:
        from psycopg.rows import dict_row

        calls.append(defaults)
        # As a hook configured for dict rows and autocommit would hand it over.
        return psycopg.connect(second_source, **{**defaults, "application_name": "hooked"},
                               row_factory=dict_row, autocommit=True)

    def resolver(conn_id: str) -> Connection:
        # Fields that lead nowhere: only the offered client can reach the data.
        return Connection(conn_id=conn_id, conn_type="postgres", host="192.0.2.1", port=1,
                          clients={"postgres": open_pg})

    key = _register(export_world)
    result = render_run(export_world.ledger(), export_world.store, key, now=NOW,
                        resolver=resolver)

    assert calls == [{**LIBPQ_DEFAULTS, **KEEPALIVES}]  # keepalives asked of the client too
    assert result["rows"] == 23


def test_a_client_that_is_not_psycopg_3_is_refused_and_closed(export_world):
    import sqlite3

    from export_lib.pipeline import render_run

    opened: list[sqlite3.Connection] = []

    def open_wrong(**defaults: Any) -> sqlite3.Connection:
        opened.append(sqlite3.connect(":memory:"))
        return opened[-1]

    key = _register(export_world)
    with pytest.raises(ConfigError, match=r"source 'second_source': the connection's resolver "
                                          r"returned a sqlite3.Connection; rendering needs "
                                          r"psycopg 3"):
        render_run(export_world.ledger(), export_world.store, key, now=NOW,
                   resolver=lambda cid: Connection(cid, "postgres",
                                                   clients={"postgres": open_wrong}))
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")
    assert export_world.ledger().get_run(key).state == "failed"


def test_without_a_resolver_the_environment_is_read(export_world, second_source, monkeypatch):
    from export_lib.pipeline import render_run

    key = _register(export_world)
    with pytest.raises(ConfigError, match=r"connection 'second_source' is not defined: set "
                                          r"AIRFLOW_CONN_SECOND_SOURCE .* 'airflow connections "
                                          r"add second_source --conn-uri \.\.\.'"):
        render_run(export_world.ledger(), export_world.store, key, now=NOW)

    monkeypatch.setenv("AIRFLOW_CONN_SECOND_SOURCE", second_source)
    result = render_run(export_world.ledger(), export_world.store, key, now=NOW)
    assert result["rows"] == 23


def test_a_connection_never_shows_its_secrets():
    conn = parse_connection(
        "hooks", "https://alice:pa55word@hooks.example.com/in?token=t0ken&signing_secret=wh5ec")
    conn = Connection(**{**conn.__dict__, "clients": {"s3": lambda **kw: "pa55word"}})

    shown = repr(conn) + str(conn) + conn.masked_uri()

    assert "pa55word" not in shown and "t0ken" not in shown and "wh5ec" not in shown
    assert "conn_id='hooks'" in repr(conn) and "alice" in repr(conn)
    assert conn.masked_uri() == "https://hooks.example.com"  # scheme, host and port only
    # clients are not part of a connection's identity
    assert conn == parse_connection(
        "hooks", "https://alice:pa55word@hooks.example.com/in?token=t0ken&signing_secret=wh5ec")


def test_the_env_resolver_is_the_default_everywhere(monkeypatch):
    from export_lib.source.connections import env_resolver, resolve

    monkeypatch.setenv("AIRFLOW_CONN_X_DB", "postgresql://u:p@db.example:5433/x")
    assert resolve("x_db") == env_resolver("x_db") == get_connection("x_db")
    assert resolve("x_db", lambda cid: Connection(cid, "sqlite", schema="/tmp/y.db")).schema \
        == "/tmp/y.db"
