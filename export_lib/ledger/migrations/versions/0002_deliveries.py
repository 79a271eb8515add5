"""Delivery ledger: deliveries and delivery_attempts.

Revision ID: 0002_deliveries
Revises: 0001_ledger

Frozen like 0001_ledger: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_deliveries"
down_revision = "0001_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # checkfirst, as the first release of this revision: tables made by create_all stay.
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "deliveries" not in existing:
        op.create_table(
            "deliveries",
            sa.Column("delivery_id", sa.String(80), primary_key=True),
            sa.Column("run_key", sa.String(400), nullable=False),
            sa.Column("artifact_version", sa.Integer(), nullable=False),
            sa.Column("destination_id", sa.String(64), nullable=False),
            sa.Column("destination_type", sa.String(16), nullable=False),
            sa.Column("destination_config", sa.Text(), nullable=False),
            sa.Column("target", sa.Text(), nullable=False),
            sa.Column("artifact_name", sa.String(400), nullable=False),
            sa.Column("artifact_sha256", sa.String(64), nullable=False),
            sa.Column("artifact_bytes", sa.BigInteger(), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("budget_base", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("last_error", sa.Text(), nullable=True),
            sa.Column("receipt", sa.Text(), nullable=True),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("attempt_started_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
            sa.UniqueConstraint("run_key", "artifact_version", "destination_id",
                                name="uq_delivery_triple"),
            sa.CheckConstraint(
                "state IN ('pending', 'attempting', 'acknowledged', 'exhausted', 'refused')",
                name="ck_delivery_state",
            ),
        )
        op.create_index("ix_deliveries_run_key", "deliveries", ["run_key"])
        op.create_index("ix_deliveries_state", "deliveries", ["state"])
    if "delivery_attempts" not in existing:
        op.create_table(
            "delivery_attempts",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("delivery_id", sa.String(80),
                      sa.ForeignKey("deliveries.delivery_id", ondelete="CASCADE"),
                      nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("duration_ms", sa.Integer(), nullable=True),
            sa.Column("outcome", sa.String(24), nullable=False),
            sa.Column("error", sa.Text(), nullable=True),
            sa.Column("receipt", sa.Text(), nullable=True),
            sa.UniqueConstraint("delivery_id", "attempt", name="uq_delivery_attempt"),
        )


def downgrade() -> None:
    op.drop_table("delivery_attempts")
    op.drop_table("deliveries")
