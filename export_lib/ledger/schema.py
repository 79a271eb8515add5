"""Ledger tables (SQLAlchemy Core). Alembic migrations in ``export_lib/migrations`` create them."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

metadata = MetaData()


class UtcDateTime(TypeDecorator):
    """Aware UTC datetimes on every backend (SQLite stores naive UTC; we re-attach the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the ledger; pass an aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


runs = Table(
    "export_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_key", String(300), nullable=False, unique=True),
    Column("company", String(100), nullable=False),
    Column("schedule_id", String(200), nullable=False),
    Column("slot", UtcDateTime, nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("window_end", UtcDateTime, nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("window_kind", String(40), nullable=False),
    Column("config_version", String(64), nullable=False),
    Column("config_snapshot", JSON, nullable=False),
    Column("source_cutoff", UtcDateTime, nullable=True),
    Column("deadline", UtcDateTime, nullable=True),
    Column("state", String(20), nullable=False),
    Column("reason", Text, nullable=True),
    Column("owner", String(200), nullable=False),
    Column("trigger", String(40), nullable=False),
    Column("current_generation", Integer, nullable=False, default=0),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Index("ix_export_runs_company_schedule", "company", "schedule_id", "slot"),
)

attempts = Table(
    "export_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("attempt_id", String(64), nullable=False, unique=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("origin", String(300), nullable=False),
    # running, staged, published, failed or abandoned
    Column("state", String(20), nullable=False),
    Column("lease_expires_at", UtcDateTime, nullable=False),
    Column("staging_uri", Text, nullable=False),
    Column("staging_cleaned", Integer, nullable=False, default=0),
    Column("rows", BigInteger, nullable=True),
    Column("bytes", BigInteger, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("error", Text, nullable=True),
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    UniqueConstraint("run_id", "generation", name="uq_export_attempts_generation"),
)

artifacts = Table(
    "export_artifacts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("uri", Text, nullable=False),
    Column("manifest_uri", Text, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("format", String(20), nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("window_end", UtcDateTime, nullable=False),
    Column("config_version", String(64), nullable=False),
    Column("attempt_id", String(64), nullable=False),
    Column("generated_at", UtcDateTime, nullable=False),
    Column("supersedes", Integer, nullable=True),
    Column("correction", Integer, nullable=False, default=0),
    UniqueConstraint("run_id", "version", name="uq_export_artifacts_version"),
)

events = Table(
    "export_run_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False, index=True),
    Column("at", UtcDateTime, nullable=False),
    Column("from_state", String(20), nullable=True),
    Column("to_state", String(20), nullable=False),
    Column("attempt_id", String(64), nullable=True),
    Column("detail", Text, nullable=True),
)
