"""A module's view of the shared stack (tests/system/scheduler/harness.SchedulerStack.scoped)
syncs the loaders of its own companies only: another module may keep an orphan loader on
purpose at that moment (a removed company's stand-in DAGs), and a sweep of the whole dags
folder deleted it under that module's feet (CI, 4 Dec: "Dag not found during start up")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from export_lib.config.dag_loaders import LOADER_TEMPLATE, check_loaders
from tests.system.scheduler.harness import SchedulerStack


def _project(tmp_path: Path) -> Path:
    (tmp_path / "dags" / "config").mkdir(parents=True)
    return tmp_path


def _loader(root: Path, company: str) -> Path:
    return root / "dags" / f"company_{company}.py"


def test_a_module_writes_and_removes_only_its_own_companies_loaders(tmp_path):
    root = _project(tmp_path)
    config = root / "dags" / "config"
    # Another module's company, removed with its loader kept on purpose, and a third's live one.
    kept = _loader(root, "flakyco")
    kept.write_text(LOADER_TEMPLATE.format(company="flakyco", config="flakyco.yaml"))
    (config / "liveco.yaml").write_text("company_id: liveco\n")
    # This module's companies: one new (no loader yet), one it removed.
    (config / "mine.yaml").write_text("company_id: mine\n")
    gone = _loader(root, "mine-gone")
    gone.write_text(LOADER_TEMPLATE.format(company="mine-gone", config="mine-gone.yaml"))

    view = SchedulerStack(SimpleNamespace(root=root)).scoped(["mine", "mine-gone"])
    view.sync_loaders()

    assert _loader(root, "mine").read_text() == LOADER_TEMPLATE.format(
        company="mine", config="mine.yaml")
    assert not gone.exists()
    assert kept.exists()  # what a whole-folder sweep would have deleted
    assert not _loader(root, "liveco").exists()  # not this module's to write either
    check = check_loaders(root / "dags")
    assert [p.name for p in check.orphans] == ["company_flakyco.py"]
    assert [p.name for p in check.missing] == ["liveco.yaml"]
