"""Fixtures: worlds for ``exportctl`` (the one builder: :mod:`tests.world`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.world import World, build_world


@pytest.fixture(params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    """One world per ledger backend: the embedded SQLite file and a fresh PostgreSQL DB."""
    url = None if request.param == "sqlite" else \
        request.getfixturevalue("pg_database").replace("+psycopg", "")
    return build_world(tmp_path / "world", url)


@pytest.fixture()
def pg_world(pg_database: str, tmp_path: Path) -> World:
    return build_world(tmp_path / "world", pg_database)


@pytest.fixture()
def sqlite_world(tmp_path: Path) -> World:
    """An SQLite world whose paths hold a space (file:// URIs percent-encode it)."""
    return build_world(tmp_path / "my world")
