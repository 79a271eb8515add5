"""Airflow-edge fixtures: an isolated export world (ledger, demo source, exports dir) per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture()
def export_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of dags/ plus its own ledger, demo source and exports root under tmp_path."""
    from export_lib.demo import seed
    from export_lib.ledger import open_ledger

    home = tmp_path / "home"
    dags = tmp_path / "dags"
    shutil.copytree(REPO / "dags", dags, ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        "EXPORT_HOME": str(home),
        "EXPORT_LEDGER_URL": f"sqlite:///{home}/ledger.db",
        "EXPORT_ARTIFACT_ROOT": str(home / "exports" / "artifacts"),
        "EXPORT_CONFIG_DIR": str(dags / "config"),
        "AIRFLOW_CONN_DEMO_SOURCE": f"sqlite:///{home}/demo_source.db",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    open_ledger().upgrade()
    seed(home / "demo_source.db", ["acme", "dentsu-happiness", "kiwi-outdoors"],
         now=datetime.fromisoformat("2026-03-30T12:00:00+00:00"), days=10)
    yield home
    os.environ.pop("EXPORT_LEDGER_URL", None)
