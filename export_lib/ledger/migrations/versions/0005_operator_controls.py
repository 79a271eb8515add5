"""Operator controls: the audit trail, pauses, holds, revoked/deleted artifacts and
the ``cancelled`` delivery state.

Revision ID: 0005_operator_controls
Revises: 0004_unique_artifact_uri

Frozen like 0001–0004: literal DDL, no import of the live tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_operator_controls"
down_revision = "0004_unique_artifact_uri"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
OLD_STATES = "state IN ('pending', 'attempting', 'acknowledged', 'exhausted', 'refused')"
NEW_STATES = ("state IN ('pending', 'attempting', 'acknowledged', 'exhausted', 'refused', "
              "'cancelled')")


def upgrade() -> None:
    op.create_table(
        "operator_actions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("who", sa.String(200), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("target_kind", sa.String(20), nullable=False),
        sa.Column("target_id", sa.String(400), nullable=False),
        sa.Column("company", sa.String(100), nullable=True),
        sa.Column("schedule_id", sa.String(200), nullable=True),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("changed", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
    )
    op.create_index("ix_operator_actions_company", "operator_actions", ["company", "at"])
    op.create_table(
        "export_pauses",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("company", sa.String(100), nullable=False),
        sa.Column("schedule_id", sa.String(200), nullable=True),
        sa.Column("paused_by", sa.String(200), nullable=False),
        sa.Column("paused_at", TS, nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("resumed_by", sa.String(200), nullable=True),
        sa.Column("resumed_at", TS, nullable=True),
    )
    op.create_index("ix_export_pauses_company", "export_pauses", ["company"])
    op.create_table(
        "export_holds",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("export_runs.id"), nullable=False),
        sa.Column("artifact_id", sa.Integer(), sa.ForeignKey("export_artifacts.id"),
                  nullable=True),
        sa.Column("held_by", sa.String(200), nullable=False),
        sa.Column("held_at", TS, nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("released_by", sa.String(200), nullable=True),
        sa.Column("released_at", TS, nullable=True),
    )
    op.create_index("ix_export_holds_run", "export_holds", ["run_id"])
    for name, kind in (("revoked_at", TS), ("revoked_reason", sa.Text()),
                       ("deleted_at", TS), ("deleted_reason", sa.Text())):
        op.add_column("export_artifacts", sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_constraint("ck_delivery_state", type_="check")
        batch.create_check_constraint("ck_delivery_state", NEW_STATES)


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_constraint("ck_delivery_state", type_="check")
        batch.create_check_constraint("ck_delivery_state", OLD_STATES)
    with op.batch_alter_table("export_artifacts") as batch:
        for name in ("deleted_reason", "deleted_at", "revoked_reason", "revoked_at"):
            batch.drop_column(name)
    for table in ("export_holds", "export_pauses", "operator_actions"):
        op.drop_table(table)
