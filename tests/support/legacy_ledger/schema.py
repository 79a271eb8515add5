"""The ledger tables exactly as commit 2c06e69 (before the frozen migrations) defined them.

Verbatim copies of the old ``export_lib/ledger/schema.py`` tables and the table part of the old
``export_lib/ledger/deliveries.py``: the old Alembic revisions (``tests/support/legacy_ledger/versions``)
created the schema by calling ``table.create`` on these objects, so this is what existing
installations hold. Never edit to follow the live schema: that would defeat the comparison.
"""

# ruff: noqa: E501
from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
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

delivery_metadata = sa.MetaData()

STATES = ("pending", "attempting", "acknowledged", "exhausted", "refused")

deliveries = sa.Table(
    "deliveries",
    delivery_metadata,
    sa.Column("delivery_id", sa.String(80), primary_key=True),
    sa.Column("run_key", sa.String(400), nullable=False),
    sa.Column("artifact_version", sa.Integer, nullable=False),
    sa.Column("destination_id", sa.String(64), nullable=False),
    sa.Column("destination_type", sa.String(16), nullable=False),
    sa.Column("destination_config", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("artifact_name", sa.String(400), nullable=False),
    sa.Column("artifact_sha256", sa.String(64), nullable=False),
    sa.Column("artifact_bytes", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    # attempts made before the last operator requeue: the retry budget counts from here.
    sa.Column("budget_base", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text),
    sa.Column("receipt", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("attempt_started_at", sa.DateTime(timezone=True)),
    sa.Column("acknowledged_at", sa.DateTime(timezone=True)),
    sa.UniqueConstraint("run_key", "artifact_version", "destination_id", name="uq_delivery_triple"),
    sa.CheckConstraint(f"state IN {STATES!r}", name="ck_delivery_state"),
    sa.Index("ix_deliveries_run_key", "run_key"),
    sa.Index("ix_deliveries_state", "state"),
)

delivery_attempts = sa.Table(
    "delivery_attempts",
    delivery_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "delivery_id",
        sa.String(80),
        sa.ForeignKey("deliveries.delivery_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("duration_ms", sa.Integer),
    sa.Column("outcome", sa.String(24), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("receipt", sa.Text),
    sa.UniqueConstraint("delivery_id", "attempt", name="uq_delivery_attempt"),
)


