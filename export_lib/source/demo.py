"""The embedded demo reporting database: a few weeks of generated marketing metrics in SQLite
or PostgreSQL (``make run`` serves it from its PostgreSQL, so the demo renders with COPY).

Two tables the demo configs in ``dags/config`` read:

* ``widget_metrics`` — hourly values per company × widget (``event_time``, ``ingested_at``);
* ``channel_metrics`` — daily ad metrics per company × channel (facebook, google-ads, adjust,
  tiktok), ``updated_at`` being when the day's numbers landed.

Deterministic (the same hour always gets the same numbers), so re-seeding only appends what is
new since the last run. Timestamps are ISO 8601 UTC text (``YYYY-MM-DD HH:MM:SS``).

``widget_metrics``' times are ``TIMESTAMPTZ`` (with time zone): the demo's widget exports show
them in the company's local time (``csv: {timestamps: local}``), which a column without time
zone cannot do (``exportctl validate`` refuses it). A PostgreSQL demo database seeded before
that has its columns converted (their values were UTC) the next time it is seeded.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from export_lib.errors import ConfigError

if TYPE_CHECKING:
    from export_lib.source.connections import Connection

CHANNELS = ("facebook", "google-ads", "adjust", "tiktok")
WIDGETS = ("spend", "clicks", "orders")
TS_FORMAT = "%Y-%m-%d %H:%M:%S"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS widget_metrics (
        company_id  TEXT NOT NULL,
        widget_id   TEXT NOT NULL,
        event_time  TIMESTAMPTZ NOT NULL,
        value       NUMERIC(14, 2) NOT NULL,
        ingested_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (company_id, widget_id, event_time))""",
    """CREATE TABLE IF NOT EXISTS channel_metrics (
        company_id  TEXT NOT NULL,
        channel     TEXT NOT NULL,
        metric_date DATE NOT NULL,
        impressions INTEGER NOT NULL,
        clicks      INTEGER NOT NULL,
        spend       NUMERIC(14, 2) NOT NULL,
        updated_at  TIMESTAMP NOT NULL,
        PRIMARY KEY (company_id, channel, metric_date))""",
)


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("|".join(map(str, parts)).encode()).digest()


def widget_rows(companies: Iterable[str], start: datetime, end: datetime) -> Iterator[tuple]:
    hour = start.replace(minute=0, second=0, microsecond=0)
    while hour < end:
        ts = hour.strftime(TS_FORMAT)
        # Data lands in the reporting store ~20 minutes after the hour it describes.
        ingested = (hour + timedelta(minutes=80)).strftime(TS_FORMAT)
        for company in companies:
            for widget in WIDGETS:
                seed = _digest(company, widget, f"{hour:%Y%m%d%H}")
                value = f"{int.from_bytes(seed[:3], 'big') / 1000:.2f}"
                yield company, widget, ts, value, ingested
        hour += timedelta(hours=1)


def channel_rows(companies: Iterable[str], start: datetime, end: datetime) -> Iterator[tuple]:
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while day + timedelta(days=1, hours=2) <= end:  # a day's numbers land at 02:00 next day
        for company in companies:
            for channel in CHANNELS:
                seed = _digest(company, channel, f"{day:%Y%m%d}")
                impressions = 1000 + int.from_bytes(seed[:3], "big") % 90000
                clicks = impressions * (1 + seed[3] % 9) // 100
                spend = f"{impressions * (5 + seed[4] % 40) / 10000:.2f}"
                yield (company, channel, day.strftime("%Y-%m-%d"), impressions, clicks, spend,
                       (day + timedelta(days=1, hours=2)).strftime(TS_FORMAT))
        day += timedelta(days=1)


def seed(path: Path, companies: Iterable[str], *, now: datetime, days: int = 21) -> int:
    """Create/extend the demo tables up to ``now``; returns the number of rows added."""
    companies = sorted(companies)
    path.parent.mkdir(parents=True, exist_ok=True)
    start, end = (now - timedelta(days=days)).astimezone(UTC), now.astimezone(UTC)
    with sqlite3.connect(path) as conn:
        for ddl in SCHEMA:
            conn.execute(ddl)
        before = conn.total_changes
        conn.executemany("INSERT OR IGNORE INTO widget_metrics VALUES (?,?,?,?,?)",
                         widget_rows(companies, start, end))
        conn.executemany("INSERT OR IGNORE INTO channel_metrics VALUES (?,?,?,?,?,?,?)",
                         channel_rows(companies, start, end))
        return conn.total_changes - before


def _with_time_zone(pg) -> None:
    """Convert ``widget_metrics``' times of a demo database seeded when they were ``TIMESTAMP``
    (their values are UTC) to ``TIMESTAMPTZ``; nothing when they already are."""
    naive = [row[0] for row in pg.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = 'widget_metrics' AND column_name IN ('event_time', "
        "'ingested_at') AND data_type = 'timestamp without time zone' ORDER BY column_name"
    ).fetchall()]
    if naive:
        pg.execute("ALTER TABLE widget_metrics " + ", ".join(
            f"ALTER COLUMN {name} TYPE timestamptz USING {name} AT TIME ZONE 'UTC'"
            for name in naive))


def seed_source(conn: Connection, companies: Iterable[str], *, now: datetime, days: int = 21) -> int:
    """Seed the ``demo_source`` connection: a SQLite file or a PostgreSQL database."""
    if conn.conn_type == "sqlite" and conn.schema:
        return seed(Path(conn.schema), companies, now=now, days=days)
    if conn.conn_type not in ("postgres", "postgresql"):
        raise ConfigError(f"demo_source is {conn.masked_uri()}; the demo seeder writes SQLite "
                          "files or PostgreSQL databases")
    import psycopg

    companies = sorted(companies)
    start, end = (now - timedelta(days=days)).astimezone(UTC), now.astimezone(UTC)
    with psycopg.connect(host=conn.host or "localhost", port=conn.port or 5432, user=conn.login,
                         password=conn.password, dbname=conn.schema) as pg:
        added = 0
        pg.execute("SET TIME ZONE 'UTC'")  # the rows' text is UTC, whatever the server's zone
        for ddl in SCHEMA:
            pg.execute(ddl)
        _with_time_zone(pg)
        with pg.cursor() as cur:
            for table, rows in (("widget_metrics", widget_rows(companies, start, end)),
                                ("channel_metrics", channel_rows(companies, start, end))):
                rows = list(rows)
                if not rows:
                    continue
                marks = ", ".join(["%s"] * len(rows[0]))
                cur.executemany(f"INSERT INTO {table} VALUES ({marks}) ON CONFLICT DO NOTHING",
                                rows, returning=False)
                added += max(cur.rowcount, 0)
        return added
