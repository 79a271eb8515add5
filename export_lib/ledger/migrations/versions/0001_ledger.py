"""Run ledger: runs, attempts, artifacts, events.

Revision ID: 0001_ledger
Revises:

Frozen: the DDL is spelled out here (no import of export_lib.ledger.schema), so a later change
to the live tables cannot change what this revision creates. Timestamps are plain
``DateTime(timezone=True)``, the column type behind the live ``UtcDateTime``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_ledger"
down_revision = None
branch_labels = None
depends_on = None

# The first releases created these tables with ``table.create(checkfirst=True)``; a database
# where they already exist (created by ``metadata.create_all``) is therefore left alone.
TABLES = ("export_runs", "export_attempts", "export_artifacts", "export_run_events")


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "export_runs" not in existing:
        op.create_table(
            "export_runs",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("run_key", sa.String(300), nullable=False, unique=True),
            sa.Column("company", sa.String(100), nullable=False),
            sa.Column("schedule_id", sa.String(200), nullable=False),
            sa.Column("slot", sa.DateTime(timezone=True), nullable=False),
            sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
            sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
            sa.Column("timezone", sa.String(64), nullable=False),
            sa.Column("window_kind", sa.String(40), nullable=False),
            sa.Column("config_version", sa.String(64), nullable=False),
            sa.Column("config_snapshot", sa.JSON(), nullable=False),
            sa.Column("source_cutoff", sa.DateTime(timezone=True), nullable=True),
            sa.Column("deadline", sa.DateTime(timezone=True), nullable=True),
            sa.Column("state", sa.String(20), nullable=False),
            sa.Column("reason", sa.Text(), nullable=True),
            sa.Column("owner", sa.String(200), nullable=False),
            sa.Column("trigger", sa.String(40), nullable=False),
            sa.Column("current_generation", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        )
        op.create_index("ix_export_runs_company_schedule", "export_runs",
                        ["company", "schedule_id", "slot"])
    if "export_attempts" not in existing:
        op.create_table(
            "export_attempts",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("attempt_id", sa.String(64), nullable=False, unique=True),
            sa.Column("run_id", sa.Integer(), sa.ForeignKey("export_runs.id"), nullable=False),
            sa.Column("generation", sa.Integer(), nullable=False),
            sa.Column("origin", sa.String(300), nullable=False),
            sa.Column("state", sa.String(20), nullable=False),
            sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("staging_uri", sa.Text(), nullable=False),
            sa.Column("staging_cleaned", sa.Integer(), nullable=False),
            sa.Column("rows", sa.BigInteger(), nullable=True),
            sa.Column("bytes", sa.BigInteger(), nullable=True),
            sa.Column("sha256", sa.String(64), nullable=True),
            sa.Column("error", sa.Text(), nullable=True),
            sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
            sa.UniqueConstraint("run_id", "generation", name="uq_export_attempts_generation"),
        )
    if "export_artifacts" not in existing:
        op.create_table(
            "export_artifacts",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("run_id", sa.Integer(), sa.ForeignKey("export_runs.id"), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("uri", sa.Text(), nullable=False),
            sa.Column("manifest_uri", sa.Text(), nullable=False),
            sa.Column("sha256", sa.String(64), nullable=False),
            sa.Column("rows", sa.BigInteger(), nullable=False),
            sa.Column("bytes", sa.BigInteger(), nullable=False),
            sa.Column("format", sa.String(20), nullable=False),
            sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
            sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
            sa.Column("config_version", sa.String(64), nullable=False),
            sa.Column("attempt_id", sa.String(64), nullable=False),
            sa.Column("generated_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("supersedes", sa.Integer(), nullable=True),
            sa.Column("correction", sa.Integer(), nullable=False),
            sa.UniqueConstraint("run_id", "version", name="uq_export_artifacts_version"),
        )
    if "export_run_events" not in existing:
        op.create_table(
            "export_run_events",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("run_id", sa.Integer(), sa.ForeignKey("export_runs.id"), nullable=False),
            sa.Column("at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("from_state", sa.String(20), nullable=True),
            sa.Column("to_state", sa.String(20), nullable=False),
            sa.Column("attempt_id", sa.String(64), nullable=True),
            sa.Column("detail", sa.Text(), nullable=True),
        )
        op.create_index("ix_export_run_events_run_id", "export_run_events", ["run_id"])


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
