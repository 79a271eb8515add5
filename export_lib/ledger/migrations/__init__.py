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


def known(revision: str) -> bool:
    """Whether this package ships ``revision`` (None, an empty ledger, counts as known)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        ScriptDirectory.from_config(_config(None)).get_revision(revision)
    except (CommandError, KeyError):
        return False
    return True


def package_version() -> str:
    """This package's distribution and version, as ``pip`` names it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{DISTRIBUTION} {version(DISTRIBUTION)}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        from export_lib import __version__

        return f"{DISTRIBUTION} {__version__}"


DISTRIBUTION = "airflow-scheduled-exports"


def newer_than_package(have: str | None, where: str) -> str | None:
    """Why a ledger at revision ``have`` cannot be used (or upgraded) by this package: a newer
    release migrated it. None when this package knows ``have``."""
    if have is None or known(have):
        return None
    return (f"the export ledger at {where} is at schema revision {have}, newer than this "
            f"package ({package_version()}) knows: its newest is {head()}. A newer release "
            "upgraded it, and a ledger is never downgraded: install that release (or a newer "
            "one) of airflow-scheduled-exports on this machine, with the same lock, and run "
            "the command again")


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate to ``revision``; (revision before, revision after). One transaction: a
    migration that fails leaves the ledger as it was. Refuses (LedgerError) a ledger a newer
    release already migrated: Alembic would fail on the unknown revision with less to say."""
    from alembic import command

    from export_lib.errors import LedgerError
    from export_lib.ledger.database import masked

    with engine.begin() as conn:
        context = _context(conn)
        before = context.get_current_revision()
        refusal = newer_than_package(before, masked(str(engine.url)))
        if refusal:
            raise LedgerError(refusal)
        command.upgrade(_config(conn), revision)
        return before, _context(conn).get_current_revision()


def _context(conn: Connection):
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})


def current(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def head() -> str | None:
    """The newest revision shipped with this code."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config(None)).get_current_head()
