"""Run ledger: runs, attempts, artifacts, events (old revision, commit 2c06e69).

Revision ID: 0001_ledger
Revises:
"""

from alembic import op

from tests.support.legacy_ledger.schema import artifacts, attempts, events, runs

revision = "0001_ledger"
down_revision = None
branch_labels = None
depends_on = None

TABLES = (runs, attempts, artifacts, events)


def upgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        table.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for table in reversed(TABLES):
        table.drop(bind, checkfirst=True)
