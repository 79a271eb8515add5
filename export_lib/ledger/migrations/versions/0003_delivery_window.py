"""Deliveries retry inside a window: deliveries.retry_until.

Revision ID: 0003_delivery_window
Revises: 0002_deliveries

Frozen: literal DDL, no import of the live tables. Records made before this revision keep
NULL; the engine then takes created_at + the destination's retry window.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_delivery_window"
down_revision = "0002_deliveries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("retry_until", sa.DateTime(timezone=True),
                                          nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("retry_until")
