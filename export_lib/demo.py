"""The embedded demo reporting database: a few weeks of generated ad metrics in SQLite.

Hourly rows per company × channel × campaign, deterministic (the same hour always gets the same
numbers), so re-seeding only appends the hours that are new since the last run. Timestamps are
stored as ISO 8601 UTC text, which sorts and compares correctly as text.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

CHANNELS = ("facebook", "google_ads", "adjust")
CAMPAIGNS = ("brand", "prospecting", "retargeting")
TS_FORMAT = "%Y-%m-%d %H:%M:%S"

SCHEMA = """
CREATE TABLE IF NOT EXISTS ad_metrics (
    company_id   TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    campaign     TEXT    NOT NULL,
    event_time   TEXT    NOT NULL,
    ingested_at  TEXT    NOT NULL,
    impressions  INTEGER NOT NULL,
    clicks       INTEGER NOT NULL,
    spend        NUMERIC NOT NULL,
    PRIMARY KEY (company_id, channel, campaign, event_time)
)
"""


def _numbers(company: str, channel: str, campaign: str, hour: datetime) -> tuple[int, int, str]:
    seed = hashlib.sha256(f"{company}|{channel}|{campaign}|{hour:%Y%m%d%H}".encode()).digest()
    impressions = 200 + int.from_bytes(seed[:2], "big") % 5000
    clicks = impressions * (1 + seed[2] % 9) // 100
    spend = f"{impressions * (5 + seed[3] % 40) / 10000:.2f}"
    return impressions, clicks, spend


def rows(companies: Iterable[str], start: datetime, end: datetime) -> Iterator[tuple]:
    hour = start.replace(minute=0, second=0, microsecond=0)
    while hour < end:
        ts = hour.strftime(TS_FORMAT)
        # Data lands in the reporting store ~20 minutes after the hour it describes.
        ingested = (hour + timedelta(minutes=80)).strftime(TS_FORMAT)
        for company in companies:
            for channel in CHANNELS:
                for campaign in CAMPAIGNS:
                    yield (company, channel, campaign, ts, ingested,
                           *_numbers(company, channel, campaign, hour))
        hour += timedelta(hours=1)


def seed(path: Path, companies: Iterable[str], *, now: datetime, days: int = 21) -> int:
    """Create/extend the demo table up to ``now``; returns the number of rows added."""
    companies = sorted(companies)
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(SCHEMA)
        before = conn.execute("SELECT count(*) FROM ad_metrics").fetchone()[0]
        start = (now - timedelta(days=days)).astimezone(UTC)
        conn.executemany("INSERT OR IGNORE INTO ad_metrics VALUES (?,?,?,?,?,?,?,?)",
                         rows(companies, start, now.astimezone(UTC)))
        after = conn.execute("SELECT count(*) FROM ad_metrics").fetchone()[0]
    return after - before
