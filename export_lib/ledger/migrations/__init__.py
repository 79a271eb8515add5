"""Alembic migrations of the export ledger, run programmatically (``exportctl ledger upgrade``).

The revisions under ``versions/`` are frozen (literal DDL). ``context_options`` is how env.py
configures Alembic, and what a comparison of the live ``schema.metadata`` with a migrated
database uses, so "autogenerate proposes nothing" is checked exactly as Alembic would see it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

HERE = Path(__file__).parent
VERSION_TABLE = "export_alembic_version"  # not alembic_version: the DB may be shared


def compare_type(context, inspected_column, metadata_column, inspected_type, metadata_type):
    """Alembic ``compare_type`` hook: the live ``UtcDateTime`` equals a reflected timestamp.

    The revisions create ``DateTime(timezone=True)`` (the type behind UtcDateTime); PostgreSQL
    reflects that as ``TIMESTAMP WITH TIME ZONE``, SQLite as a ``DATETIME`` that cannot record
    the zone. Anything else is left to Alembic's own comparison (None).
    """
    from export_lib.ledger.schema import UtcDateTime

    if not isinstance(metadata_type, UtcDateTime):
        return None
    if not isinstance(inspected_type, sa.DateTime):
        return True
    return context.dialect.name != "sqlite" and not inspected_type.timezone


def context_options(connection: Connection) -> dict[str, Any]:
    """Alembic context options for ``connection``: all ledger tables, our version table."""
    from export_lib.ledger.schema import metadata

    return {
        "target_metadata": metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        "render_as_batch": connection.dialect.name == "sqlite",
        "version_table": VERSION_TABLE,
        "compare_type": compare_type,
        "compare_server_default": True,
    }


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
