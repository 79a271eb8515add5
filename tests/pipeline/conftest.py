"""Fixtures of the pipeline tests."""

from __future__ import annotations

import psycopg
import pytest

from export_lib.source.demo import seed_source
from tests.world import COMPANIES, SEEDED_AT, build_world

SLEEP = 1.0  # every source query lasts at least this long (a one-time InitPlan, no CPU)


@pytest.fixture()
def slow_pg_world(tmp_path, monkeypatch, postgres_server, pg_database):
    """A world whose demo source is a PostgreSQL database where every query sleeps SLEEP s."""
    from export_lib.source.connections import parse_connection

    dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + pg_database.rsplit("/", 1)[1]
    world = build_world(tmp_path, pg_database, days=3, AIRFLOW_CONN_DEMO_SOURCE=dsn)
    seed_source(parse_connection("demo_source", dsn), COMPANIES, now=SEEDED_AT, days=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("widget_metrics", "channel_metrics"):
            conn.execute(f"ALTER TABLE {table} RENAME TO {table}_base")
            conn.execute(f"CREATE VIEW {table} AS SELECT * FROM {table}_base "
                         f"WHERE (SELECT 1 FROM pg_sleep({SLEEP})) = 1")
    return world.use(monkeypatch), dsn
