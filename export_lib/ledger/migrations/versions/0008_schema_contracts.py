"""Schema contracts (ADR 0025): export_schemas, the schema each attempt staged,
the contract each run compares with, and each artifact's schema fingerprint, major and change.

Revision ID: 0008_schema_contracts
Revises: 0007_period_index

Frozen like 0001–0007: literal DDL, no import of the live tables. Runs, attempts and artifacts
made before this revision keep NULL (an artifact without a schema; a run that has not checked
one yet).
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_schema_contracts"
down_revision = "0007_period_index"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "export_schemas",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("schedule_id", sa.String(200), nullable=False),
        sa.Column("company", sa.String(100), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("major", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("change", sa.String(16), nullable=False),
        sa.Column("previous_fingerprint", sa.String(64), nullable=True),
        sa.Column("diff", sa.Text(), nullable=True),
        sa.Column("run_key", sa.String(300), nullable=False),
        sa.Column("period", sa.String(100), nullable=False),
        sa.Column("slot", TS, nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.UniqueConstraint("schedule_id", "seq", name="uq_export_schemas_seq"),
    )
    op.add_column("export_runs", sa.Column("schema_baseline", sa.Integer(), nullable=True))
    op.add_column("export_attempts", sa.Column("file_schema", sa.JSON(), nullable=True))
    for name, kind in (("schema_fingerprint", sa.String(64)), ("schema_major", sa.Integer()),
                       ("schema_change", sa.String(16)), ("schema_diff", sa.Text())):
        op.add_column("export_artifacts", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("export_artifacts") as batch:
        for name in ("schema_diff", "schema_change", "schema_major", "schema_fingerprint"):
            batch.drop_column(name)
    with op.batch_alter_table("export_attempts") as batch:
        batch.drop_column("file_schema")
    with op.batch_alter_table("export_runs") as batch:
        batch.drop_column("schema_baseline")
    op.drop_table("export_schemas")
