"""The ledger's Alembic migrations as the old code shipped them (commit 2c06e69), to prove
that installations created by it keep working with the frozen revisions."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

HERE = Path(__file__).parent


def upgrade_with_old_code(engine: Engine, revision: str = "head") -> None:
    """Run the old revisions, as ``exportctl ledger upgrade`` of commit 2c06e69 did."""
    from alembic import command
    from alembic.config import Config

    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(HERE))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
