"""Delivery ledger: deliveries and delivery_attempts (old revision, commit 2c06e69).

Revision ID: 0002_deliveries
Revises: 0001_ledger
"""

from alembic import op

from tests.support.legacy_ledger.schema import deliveries, delivery_attempts

revision = "0002_deliveries"
down_revision = "0001_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    for table in (deliveries, delivery_attempts):
        table.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for table in (delivery_attempts, deliveries):
        table.drop(bind, checkfirst=True)
