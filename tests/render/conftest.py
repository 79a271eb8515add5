"""Render fixtures: an ad-metrics table in the per-test PostgreSQL schema and a SQLite twin."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from export_lib.config.query import QuerySpec
from export_lib.source.connections import Connection, parse_connection
from export_lib.source.database import Source, open_source

T0 = datetime(2026, 3, 1, tzinfo=UTC)
T1 = datetime(2026, 3, 2, tzinfo=UTC)
CUTOFF = datetime(2026, 3, 3, tzinfo=UTC)

COLUMNS = ("company_id", "event_time", "campaign", "clicks", "spend", "ctr", "active",
           "ingested_at")
PG_DDL = ("CREATE TABLE {t} (company_id text, event_time timestamptz, campaign text, "
          "clicks bigint, spend numeric(12,2), ctr double precision, active boolean, "
          "ingested_at timestamptz)")
SQLITE_DDL = ("CREATE TABLE {t} (company_id TEXT, event_time TIMESTAMP, campaign TEXT, "
              "clicks INTEGER, spend NUMERIC(12,2), ctr REAL, active BOOLEAN, "
              "ingested_at TIMESTAMP)")

# (company, event_time, campaign, clicks, spend, ctr, active, ingested_at)
ROWS = [
    ("acme", datetime(2026, 3, 1, 0, 0, tzinfo=UTC), "spring, sale", 10, Decimal("12.50"), 0.25,
     True, datetime(2026, 3, 1, 1, tzinfo=UTC)),
    ("acme", datetime(2026, 3, 1, 5, 30, 0, 500000, tzinfo=UTC), 'say "hi"\nbye', 0,
     Decimal("0.00"), 1e-07, False, datetime(2026, 3, 1, 6, tzinfo=UTC)),
    ("acme", datetime(2026, 3, 1, 23, 59, 59, 999999, tzinfo=UTC), "", None, None, 1.5e20,
     None, datetime(2026, 3, 2, 1, tzinfo=UTC)),
    ("acme", datetime(2026, 3, 1, 12, tzinfo=UTC), None, 3, Decimal("-7.10"), -2.5e-05, True,
     datetime(2026, 3, 2, 2, tzinfo=UTC)),
    ("acme", T1, "at end: excluded", 99, Decimal("1.00"), 1.0, True, T1),
    ("acme", datetime(2026, 2, 28, 23, 59, 59, tzinfo=UTC), "before start", 98, Decimal("1.00"),
     1.0, True, T1),
    ("acme", datetime(2026, 3, 1, 8, tzinfo=UTC), "late arrival", 7, Decimal("3.00"), 2.0, True,
     datetime(2026, 3, 4, tzinfo=UTC)),
    ("globex", datetime(2026, 3, 1, 9, tzinfo=UTC), "GLOBEX SECRET", 1000, Decimal("999.99"),
     0.5, True, datetime(2026, 3, 1, 10, tzinfo=UTC)),
]
ACME_IN_WINDOW = 4  # rows 0-3: end, before-start, late (cutoff) and globex are excluded


def spec(**overrides) -> QuerySpec:
    fields = dict(source="src", table="ad_metrics", columns=COLUMNS, timestamp_column="event_time",
                  tenant_column="company_id", ingested_column="ingested_at")
    fields.update(overrides)
    return QuerySpec(**fields)


@pytest.fixture()
def pg_connection(postgres_server, pg_schema) -> Connection:
    import psycopg

    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(PG_DDL.format(t=f'"{pg_schema}".ad_metrics'))
        with conn.cursor() as cur:
            cur.executemany(f'INSERT INTO "{pg_schema}".ad_metrics VALUES '
                            "(%s, %s, %s, %s, %s, %s, %s, %s)", ROWS)
    return parse_connection("src", postgres_server.dsn)


@pytest.fixture()
def pg_source(pg_connection) -> Iterator[Source]:
    with open_source(pg_connection) as source:
        yield source


@pytest.fixture()
def sqlite_connection(tmp_path: Path) -> Connection:
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as db:
        db.execute(SQLITE_DDL.format(t="ad_metrics"))
        db.executemany("INSERT INTO ad_metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
            (c, ts.isoformat(), camp, clicks, None if spend is None else float(spend), ctr,
             None if active is None else int(active), ing.isoformat())
            for c, ts, camp, clicks, spend, ctr, active, ing in ROWS])
    db.close()
    return parse_connection("src", f"sqlite:///{path}")


@pytest.fixture()
def sqlite_source(sqlite_connection) -> Iterator[Source]:
    with open_source(sqlite_connection) as source:
        yield source
