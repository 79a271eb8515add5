"""The batch that exported a run (ADR 0032): the Airflow task of a batched recovery, as
``dag_id/run_id/task_id``; NULL for a run exported by its own DAG run (or the CLI).

Revision ID: 0010_run_batch
Revises: 0009_form_tokens

Frozen like 0001–0009: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_run_batch"
down_revision = "0009_form_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("export_runs", sa.Column("batch", sa.String(300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("export_runs") as batch:
        batch.drop_column("batch")
