from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.ledger import Ledger, open_ledger
from export_lib.ledger.records import RunRegistration
from export_lib.storage.stores import LocalStore

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


REPO = Path(__file__).resolve().parents[2]
DEMO_SEEDED_AT = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
DAILY_SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # 07:00 Berlin: acme/daily-spend


@dataclass
class DemoWorld:
    """A copy of ``dags/config``, the demo source it reads, and a local artifact store."""

    config: Path
    store: LocalStore

    def schedule(self, schedule_id: str = "acme/daily-spend"):
        from export_lib.config.loader import load_catalog

        return load_catalog(self.config, only=schedule_id.split("/")[0]).schedule(schedule_id)

    def visible_files(self) -> list[str]:
        """Files under final names (staging and hidden temp names excluded)."""
        root = self.store.root
        return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                      if p.is_file() and not any(part.startswith(".")
                                                 for part in p.relative_to(root).parts))

    def staging_files(self) -> list[str]:
        staging = self.store.root / ".staging"
        return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


@pytest.fixture()
def demo_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoWorld:
    from export_lib.source.demo import seed

    shutil.copytree(REPO / "dags" / "config", tmp_path / "config")
    demo = tmp_path / "demo_source.db"
    seed(demo, ["acme", "dentsu-happiness", "kiwi-outdoors"], now=DEMO_SEEDED_AT, days=5)
    monkeypatch.setenv("AIRFLOW_CONN_DEMO_SOURCE", f"sqlite:///{demo}")
    monkeypatch.setenv("EXPORT_HOME", str(tmp_path))
    return DemoWorld(tmp_path / "config", LocalStore(tmp_path / "artifacts"))
