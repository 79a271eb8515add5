"""Alerts and once-only metrics are announced once per run: export_notices.

Revision ID: 0006_alerts
Revises: 0005_operator_controls

Frozen like 0001–0004: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_alerts"
down_revision = "0005_operator_controls"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "export_notices",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("notice_key", sa.String(500), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("run_key", sa.String(300), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("recipients", sa.Text(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("claims", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("uq_export_notices_key", "export_notices", ["notice_key"], unique=True)
    op.create_index("ix_export_notices_run_key", "export_notices", ["run_key"])


def downgrade() -> None:
    op.drop_table("export_notices")
