"""Spent form tokens: each change made on the company page spends its form's token once, so a
replayed request (the same form posted again, by the user or by someone who saw it) is refused.

Revision ID: 0009_form_tokens
Revises: 0008_schema_contracts

Frozen like 0001–0008: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_form_tokens"
down_revision = "0008_schema_contracts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "export_form_tokens",
        sa.Column("mac", sa.String(64), primary_key=True),
        sa.Column("who", sa.String(200), nullable=False),
        sa.Column("spent_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("export_form_tokens")
