"""The tail of an attempt's upload session (ADR 0031): on GCS the render sends every full
256 KiB of the file to a resumable session at the artifact's final name and leaves the rest
(under 256 KiB) here, for publication, in another process, to finalise the session with.
NULL for every other attempt.

Revision ID: 0011_attempt_tail
Revises: 0010_run_batch

Frozen like 0001–0010: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_attempt_tail"
down_revision = "0010_run_batch"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("export_attempts", sa.Column("staging_tail", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("export_attempts") as batch:
        batch.drop_column("staging_tail")
