"""Several processes loading one company each at once (the dag-processor's parse children,
workers, ``exportctl run``) share one claims index: every load gets the verdict a full load
gives, while the others build, rebuild or update the index, and the index they leave holds what
a fresh one would."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from export_lib.config.claims_index import claims_index
from export_lib.config.loader import load_catalog
from tests.support import children
from tests.support.claims_index import COMPANY, MOUNTS, indexed
from tests.world import REPO

NOW = datetime(2026, 12, 1, tzinfo=UTC)
PROCESSES = 4
FILLERS = [f"co{n:02d}" for n in range(22)]


def _company(config: Path, company: str, path: str) -> None:
    (config / f"{company}.yaml").write_text(COMPANY.format(id=company, path=path))


def _load_each(config: str, index_dir: str, companies: list[str], start, results) -> None:
    """One process: wait for the others, then load each company alone (in a child process)."""
    os.environ["EXPORT_DAG_INDEX_DIR"] = index_dir
    start.wait()
    results.put({company: dict(load_catalog(config, only=company, now=NOW).errors)
                 for company in companies})


def _all_at_once(config: Path, index_dir: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    companies = sorted(path.stem for path in config.glob("*.yaml") if path.stem != "defaults")
    ctx = children.context()
    start, results = ctx.Barrier(PROCESSES), ctx.Queue()
    workers = [children.process(ctx, _load_each, (str(config), str(index_dir),
                                                  companies[n::PROCESSES], start, results))
               for n in range(PROCESSES)]
    for worker in workers:
        worker.start()
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for _ in workers:
        found.update(results.get(timeout=120))
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return found


def _full_verdict(config: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    """Per company, the errors a full load gives its file."""
    full = load_catalog(config, now=NOW)
    return {path.stem: {p: lines for p, lines in full.errors.items() if p == str(path)}
            for path in config.glob("*.yaml") if path.stem != "defaults"}


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    target.mkdir()
    defaults = (REPO / "dags" / "config" / "defaults.yaml").read_text()
    (target / "defaults.yaml").write_text(defaults.replace("local_mounts: []\n", MOUNTS, 1))
    _company(target, "oldco", "/srv/exports/oldco/old")
    _company(target, "newco", "/srv/exports/oldco/newco/in")
    for company in FILLERS:
        _company(target, company, f"/srv/exports/{company}")
    return target


def test_loads_in_several_processes_at_once_share_the_index(config: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    index_dir = tmp_path / "index"
    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(index_dir))

    # No index yet: every process builds it at once.
    verdict = _full_verdict(config)
    assert not any(verdict.values())
    assert _all_at_once(config, index_dir) == verdict

    # Then other files change under them: a widening, an addition, a removal, defaults.
    _company(config, "oldco", "/srv/exports/oldco")
    _company(config, "late", "/srv/exports/oldco/late")
    (config / "co03.yaml").unlink()
    verdict = _full_verdict(config)
    assert sorted(company for company, errors in verdict.items() if errors) == [
        "late", "newco", "oldco"]
    assert _all_at_once(config, index_dir) == verdict
    (config / "defaults.yaml").write_text((config / "defaults.yaml").read_text() + "\n")
    assert _all_at_once(config, index_dir) == verdict

    index = claims_index(config)
    assert index is not None
    with closing(sqlite3.connect(index)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert load_catalog(config, only="co00", now=NOW).ok  # repairs a digest a lost race left
    shared = indexed(index)
    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(tmp_path / "fresh"))
    assert load_catalog(config, only="co00", now=NOW).ok
    fresh_index = claims_index(config)
    assert fresh_index is not None
    assert shared == indexed(fresh_index)
    assert sorted(shared) == sorted(f"{company}.yaml" for company in verdict)
