"""Session-wide fixtures: real servers started once, stopped even when tests fail."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.services.postgres import PostgresServer, start_postgres, stop_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        stop_postgres(server)


@pytest.fixture()
def pg_schema(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh schema per test, dropped afterwards (tests stay independent)."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')
