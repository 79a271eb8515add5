"""Fixtures: worlds for ``exportctl`` (helpers in :mod:`tests.cli.world`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.world import World, make_world


@pytest.fixture(params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    """One world per ledger backend: the embedded SQLite file and a fresh PostgreSQL DB."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = request.getfixturevalue("pg_database").replace("+psycopg", "")
    return make_world(tmp_path / "world", url)


@pytest.fixture()
def pg_world(pg_database: str, tmp_path: Path) -> World:
    return make_world(tmp_path / "world", pg_database)


@pytest.fixture()
def sqlite_world(tmp_path: Path) -> World:
    """An SQLite world whose paths hold a space (file:// URIs percent-encode it)."""
    return make_world(tmp_path / "my world", f"sqlite:///{tmp_path / 'ledger.db'}")
