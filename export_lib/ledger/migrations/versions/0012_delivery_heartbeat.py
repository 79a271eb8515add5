"""A delivery attempt's heartbeat: delivery_attempts.heartbeat_at.

The worker sending a delivery renews it (the database's ``now()``) while it sends and records
the outcome, so another worker takes the attempt over once it has gone silent (the worker
died, or gave up on a ledger that was away), not 30 minutes after it started. NULL on attempts
started by an earlier release, which keep the 30-minute rule.

Revision ID: 0012_delivery_heartbeat
Revises: 0011_attempt_tail

Frozen like 0001–0011: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_delivery_heartbeat"
down_revision = "0011_attempt_tail"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("delivery_attempts", sa.Column("heartbeat_at", sa.DateTime(timezone=True),
                                                 nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_attempts") as batch:
        batch.drop_column("heartbeat_at")
