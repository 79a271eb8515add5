from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.ledger import Ledger, open_ledger
from export_lib.ledger.records import RunRegistration
from tests.world import World, build_world

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
NOW = SLOT + timedelta(minutes=3)


def registration(run_key: str = "acme/daily-spend/2026-03-29T05:00Z", *, version: str = "v1",
                 snapshot: dict | None = None) -> RunRegistration:
    return RunRegistration(
        run_key=run_key, company="acme", schedule_id="acme/daily-spend", slot=SLOT,
        window_start=SLOT - timedelta(days=1), window_end=SLOT, timezone="Europe/Berlin",
        window_kind="calendar_day", config_version=version,
        config_snapshot=snapshot or {"columns": ["a", "b"], "version": version},
        owner="owner@acme.example", source_cutoff=NOW, deadline=SLOT + timedelta(hours=2),
    )


@pytest.fixture()
def pg_ledger(pg_database: str) -> Ledger:
    ledger = open_ledger(pg_database)
    ledger.upgrade()
    return ledger


@pytest.fixture()
def sqlite_ledger(tmp_path) -> Ledger:
    ledger = open_ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.upgrade()
    return ledger


DAILY_SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # 07:00 Berlin: acme/daily-spend


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """The shipped config, the demo source it reads and a local artifact store (tests.world);
    the ledger is the test's own (``pg_ledger`` or ``sqlite_ledger``)."""
    return build_world(tmp_path).use(monkeypatch)
