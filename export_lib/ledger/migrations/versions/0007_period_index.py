"""Runs are found by their period: ix_export_runs_period.

"A period is exported once, whatever its slot": before a run exports, the ledger is asked for
the schedule's delivered runs whose window overlaps the run's (export_lib.ledger.periods).

Revision ID: 0007_period_index
Revises: 0006_alerts

Frozen like 0001–0006: literal DDL, no import of the live tables.
"""

from alembic import op

revision = "0007_period_index"
down_revision = "0006_alerts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_export_runs_period", "export_runs", ["schedule_id", "window_start"])


def downgrade() -> None:
    op.drop_index("ix_export_runs_period", table_name="export_runs")
