"""One artifact per object: a unique index on export_artifacts.uri.

Revision ID: 0004_unique_artifact_uri
Revises: 0003_delivery_window

Frozen like 0001–0003: literal DDL, no import of the live tables. Artifact names are derived
from the run key, so no two runs ever recorded the same URI; should an old ledger hold a
duplicate anyway, the upgrade fails on it (naming the index) instead of hiding it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_unique_artifact_uri"
down_revision = "0003_delivery_window"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("export_artifacts")}
    if "uq_export_artifacts_uri" not in existing:
        op.create_index("uq_export_artifacts_uri", "export_artifacts", ["uri"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_export_artifacts_uri", table_name="export_artifacts")
