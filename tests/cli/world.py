"""A throw-away 'world' for ``exportctl`` as a user runs it: a copy of ``dags/config``, a demo
source, a ledger (SQLite or the session PostgreSQL), an artifact root and an outbox, all under
``tmp_path``. The CLI runs as a subprocess (``python -m export_lib``) from the repo root on
``PYTHONPATH``, with an environment that holds only what the test sets.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from export_lib.ledger import Ledger, open_ledger
from export_lib.source.demo import seed

REPO = Path(__file__).resolve().parents[2]
SEEDED_AT = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
DAILY = "acme/daily-spend"
DAILY_SLOT = "2026-03-29T05:00Z"  # 07:00 Berlin on the day summer time starts


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment minus every setting the CLI reads, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EXPORT_", "AIRFLOW_CONN_")) and k != "AIRFLOW_HOME"}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class World:
    home: Path
    env: dict[str, str]
    ledger_url: str
    config: Path = field(init=False)

    def __post_init__(self) -> None:
        self.config = self.home / "config"

    @property
    def artifacts(self) -> Path:
        return self.home / "artifacts"

    @property
    def outbox(self) -> Path:
        return self.home / "exports" / "outbox"

    def exportctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "export_lib", *args], capture_output=True,
                              text=True, env=self.env, cwd=self.home, timeout=timeout,
                              check=False)

    def run(self, schedule: str = DAILY, slot: str = DAILY_SLOT, **kw: Any) -> dict[str, Any]:
        result = self.exportctl("run", str(self.config), "--schedule", schedule, "--slot", slot,
                                "--json", **kw)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def runs(self) -> list[dict[str, Any]]:
        result = self.exportctl("runs", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def ledger(self) -> Ledger:
        return open_ledger(self.ledger_url)

    def counts(self) -> dict[str, int]:
        ledger = self.ledger()
        out = {t: ledger.count(t) for t in ("runs", "attempts", "artifacts", "events")}
        with ledger.engine.connect() as conn:
            for table in ("deliveries", "delivery_attempts"):
                out[table] = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
        ledger.engine.dispose()
        return out

    def visible_files(self) -> dict[str, str]:
        """Every file a consumer could pick up (final names: no hidden temp/staging names),
        relative to home, with its sha256."""
        found = {}
        for root in (self.artifacts, self.outbox):
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root)
                if path.is_file() and not any(p.startswith(".") for p in rel.parts):
                    found[str(path.relative_to(self.home))] = sha256_file(path)
        return found

    def staging_files(self) -> list[Path]:
        staging = self.artifacts / ".staging"
        return sorted(staging.iterdir()) if staging.exists() else []


def make_world(home: Path, ledger_url: str, **extra_env: str) -> World:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "dags" / "config", home / "config")
    demo = home / "demo_source.db"
    seed(demo, ["acme", "dentsu-happiness", "kiwi-outdoors"], now=SEEDED_AT, days=5)
    env = clean_env(**{"EXPORT_HOME": str(home), "EXPORT_LEDGER_URL": ledger_url,
                       "EXPORT_ARTIFACT_ROOT": str(home / "artifacts"),
                       "AIRFLOW_CONN_DEMO_SOURCE": f"sqlite:///{demo}", **extra_env})
    world = World(home, env, ledger_url)
    result = world.exportctl("ledger", "upgrade")
    assert result.returncode == 0, result.stderr
    return world
