"""Alembic migrations of the export ledger, run programmatically (``exportctl ledger upgrade``)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

HERE = Path(__file__).parent
VERSION_TABLE = "export_alembic_version"  # not alembic_version: the DB may be shared


def _config(connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    with engine.begin() as conn:
        command.upgrade(_config(conn), revision)


def current(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def head() -> str | None:
    """The newest revision shipped with this code."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config(None)).get_current_head()
