"""The one throw-away "world" every test builds on: a copy of the shipped DAG folder (loaders
and ``config/``), a seeded demo source, a ledger (SQLite file or a session PostgreSQL database),
an artifact root and an outbox, all under one directory.

``build_world`` makes it; ``World.environment`` is what the CLI and the library read (the same
variables ``make run`` sets); ``World.use(monkeypatch)`` puts it into this process for library
and ``dag.test()`` tests; ``World.exportctl`` runs the CLI with only that environment
(in this process, as a subprocess would see it: ``tests/support/cli.py``). Layout under ``root``::

    dags/                 company_<id>.py loaders, manual_export.py, ... and config/*.yaml
    home/                 EXPORT_HOME: demo_source.db, ledger.db (SQLite worlds)
    home/exports/artifacts, home/exports/outbox
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from export_lib.checksums import sha256_file
from tests.support.cli import exportctl

REPO = Path(__file__).resolve().parent.parent
SEEDED_AT = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
COMPANIES = ("acme", "dentsu-happiness", "kiwi-outdoors")
DAILY = "acme/daily-spend"
DAILY_SLOT = "2026-03-29T05:00Z"  # 07:00 Berlin on the day summer time starts


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment minus every setting the CLI reads, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EXPORT_", "AIRFLOW_CONN_")) and k != "AIRFLOW_HOME"}
    return {**env, "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "plugins"))), **extra}




@dataclass(frozen=True)
class World:
    root: Path
    ledger_url: str
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. another connection

    @property
    def dags(self) -> Path:
        return self.root / "dags"

    @property
    def config(self) -> Path:
        return self.dags / "config"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def demo_source(self) -> Path:
        return self.home / "demo_source.db"

    @property
    def artifacts(self) -> Path:
        return self.home / "exports" / "artifacts"

    @property
    def outbox(self) -> Path:
        return self.home / "exports" / "outbox"

    @property
    def store(self):
        from export_lib.storage.stores import LocalStore

        return LocalStore(self.artifacts)

    @property
    def environment(self) -> dict[str, str]:
        return {
            "EXPORT_HOME": str(self.home), "EXPORT_LEDGER_URL": self.ledger_url,
            "EXPORT_ARTIFACT_ROOT": str(self.artifacts), "EXPORT_CONFIG_DIR": str(self.config),
            "AIRFLOW_CONN_DEMO_SOURCE": f"sqlite:///{self.demo_source}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags), **self.extra_env,
        }

    @property
    def env(self) -> dict[str, str]:
        """The complete environment of an ``exportctl`` subprocess."""
        return clean_env(**self.environment)

    def use(self, monkeypatch: pytest.MonkeyPatch) -> World:
        for key, value in self.environment.items():
            monkeypatch.setenv(key, value)
        return self

    def allow_table(self, source: str, table: str, *, tenant_column: str = "company_id",
                    table_schema: str | None = None) -> None:
        """Add a table to the ``sources:`` allowlist of this world's ``defaults.yaml``."""
        import yaml

        path = self.config / "defaults.yaml"
        data = yaml.safe_load(path.read_text())
        entry = {"tenant_column": tenant_column}
        if table_schema:
            entry["table_schema"] = table_schema
        data["sources"].setdefault(source, {"tables": {}})["tables"][table] = entry
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    def grant_connection(self, conn_id: str, use: str, companies: tuple[str, ...] = ("acme",)
                         ) -> None:
        """Grant ``companies`` connection ``conn_id`` for ``use`` in this world's
        ``defaults.yaml`` (``connections:``)."""
        import yaml

        path = self.config / "defaults.yaml"
        data = yaml.safe_load(path.read_text())
        grant = data.setdefault("connections", {}).setdefault(
            conn_id, {"use": [], "companies": []})
        grant["use"] = sorted({*grant["use"], use})
        grant["companies"] = sorted({*grant["companies"], *companies})
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    # -- the library's view ----------------------------------------------------------------
    def schedule(self, schedule_id: str = DAILY):
        from export_lib.config.loader import load_catalog

        return load_catalog(self.config, only=schedule_id.split("/")[0]).schedule(schedule_id)

    def ledger(self):
        from export_lib.ledger import open_ledger

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
        """Every file a consumer could pick up (final names: no hidden temp or staging names),
        relative to ``home``, with its sha256."""
        found = {}
        for top in (self.artifacts, self.outbox):
            for path in sorted(top.rglob("*")):
                rel = path.relative_to(top)
                if path.is_file() and not any(p.startswith(".") for p in rel.parts):
                    found[str(path.relative_to(self.home))] = sha256_file(path)
        return found

    def staging_files(self) -> list[str]:
        staging = self.artifacts / ".staging"
        return sorted(p.name for p in staging.iterdir()) if staging.exists() else []

    # -- the command line's view -----------------------------------------------------------
    def exportctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return exportctl(*args, cwd=self.home, env=self.env, timeout=timeout)

    def run(self, schedule: str = DAILY, slot: str = DAILY_SLOT, **kw: Any) -> dict[str, Any]:
        result = self.exportctl("run", str(self.config), "--schedule", schedule, "--slot", slot,
                                "--json", **kw)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def runs(self) -> list[dict[str, Any]]:
        result = self.exportctl("runs", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def build_world(root: Path, ledger_url: str | None = None, *, days: int = 5,
                **extra_env: str) -> World:
    """Copy the shipped DAG folder, seed ``days`` of demo data up to :data:`SEEDED_AT` and create
    the ledger's tables. ``ledger_url`` defaults to an SQLite file under ``home``; ``extra_env``
    adds to (or overrides) the world's environment."""
    from export_lib.ledger import open_ledger
    from export_lib.source.demo import seed

    world = World(root, ledger_url or f"sqlite:///{root / 'home' / 'ledger.db'}", extra_env)
    shutil.copytree(REPO / "dags", world.dags, ignore=shutil.ignore_patterns("__pycache__"))
    world.home.mkdir(parents=True, exist_ok=True)
    seed(world.demo_source, list(COMPANIES), now=SEEDED_AT, days=days)
    ledger = open_ledger(world.ledger_url)
    ledger.upgrade()
    ledger.engine.dispose()
    return world


def acme_library_world(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any, Any]:
    """The library's view without the command line: acme's shipped files in ``root/config``,
    10 days of demo rows up to :data:`SEEDED_AT` in ``root/demo.db`` (``AIRFLOW_CONN_DEMO_SOURCE``),
    an upgraded SQLite ledger and a local store under ``root``. Returns (config, ledger, store)."""
    from export_lib.ledger import open_ledger
    from export_lib.source.demo import seed
    from export_lib.storage.stores import LocalStore

    config = root / "config"
    config.mkdir()
    for name in ("defaults.yaml", "acme.yaml"):
        (config / name).write_text((REPO / "dags/config" / name).read_text())
    monkeypatch.setenv("AIRFLOW_CONN_DEMO_SOURCE", f"sqlite:///{root}/demo.db")
    monkeypatch.setenv("EXPORT_HOME", str(root))
    seed(root / "demo.db", ["acme"], now=SEEDED_AT, days=10)
    ledger = open_ledger(f"sqlite:///{root}/ledger.db")
    ledger.upgrade()
    return config, ledger, LocalStore(root / "artifacts")
