"""DAG bundles of one part of the dags folder each (export_airflow/deploy/bundles.py), as the
dag-processors and workers of `make cluster DAG_PROCESSORS=2` load them: every DAG of the
folder is parsed from exactly one bundle, with the same DAG ids, and the links follow the folder
(a company added or removed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from export_lib.config.bundles import bundle_part
from tests.dags.test_integrity import DAGS, _dag_bag


def _bundles(dags: Path, parts: int, monkeypatch, storage: Path):
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    config = [{"name": f"dags-{n}", "classpath": "export_airflow.deploy.bundles.DagsPartBundle",
               "kwargs": {"dags_folder": str(dags), "part": n, "parts": parts}}
              for n in range(1, parts + 1)]
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(config))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH", str(storage))
    bundles = sorted(DagBundlesManager().get_all_dag_bundles(), key=lambda b: b.name)
    for bundle in bundles:
        bundle.initialize()
    return bundles


@pytest.fixture()
def dags_copy(tmp_path: Path) -> Path:
    target = tmp_path / "dags"
    shutil.copytree(DAGS, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_two_bundles_parse_every_dag_of_the_folder_once(dags_copy, tmp_path, monkeypatch):
    whole = _dag_bag(dags_copy)
    bundles = _bundles(dags_copy, 2, monkeypatch, tmp_path / "storage")
    assert [b.path for b in bundles] == [tmp_path / "storage" / f"dags-{n}" / "files"
                                         for n in (1, 2)]
    bags = [_dag_bag(b.path) for b in bundles]
    assert [bag.import_errors for bag in bags] == [{}, {}]
    ids = [set(bag.dags) for bag in bags]
    assert ids[0].isdisjoint(ids[1]) and ids[0] | ids[1] == set(whole.dags)
    for n, bag in enumerate(bags, start=1):
        for dag_id, dag in bag.dags.items():
            assert bundle_part(Path(dag.fileloc).name, 2) == n, dag_id
            assert Path(dag.fileloc).parent == bundles[n - 1].path  # the link, not dags/


def test_a_company_added_or_removed_follows_at_the_next_refresh(dags_copy, tmp_path,
                                                                  monkeypatch):
    bundles = _bundles(dags_copy, 2, monkeypatch, tmp_path / "storage")
    new = next(f"newco{n}" for n in range(50) if bundle_part(f"company_newco{n}.py", 2) == 2)
    text = ((dags_copy / "config" / "acme.yaml").read_text()
            .replace("id: acme\n", f"id: {new}\n", 1).replace("outbox/acme/", f"outbox/{new}/"))
    (dags_copy / "config" / f"{new}.yaml").write_text(text)
    (dags_copy / f"company_{new}.py").write_text((dags_copy / "company_acme.py").read_text())
    for bundle in bundles:
        bundle.refresh()
    assert (bundles[1].path / f"company_{new}.py").resolve() == dags_copy / f"company_{new}.py"
    assert not (bundles[0].path / f"company_{new}.py").exists()
    assert any(f"__{new}__" in d for d in _dag_bag(bundles[1].path).dags)
    (dags_copy / f"company_{new}.py").unlink()
    bundles[1].refresh()
    assert not (bundles[1].path / f"company_{new}.py").is_symlink()


def test_a_bundle_of_a_missing_folder_names_the_setting(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"DAG bundle dags-1: dags_folder .*/nowhere is "
                       r"not a directory; fix its kwargs in \[dag_processor\] "
                       r"dag_bundle_config_list"):
        _bundles(tmp_path / "nowhere", 2, monkeypatch, tmp_path / "storage")


def test_register_writes_the_bundles_rows_once_before_any_dag_processor(
        airflow_db, dags_copy, tmp_path):
    """``python -m export_airflow.deploy.bundles register`` (make cluster's setup, compose's
    airflow-init): the configured bundles' rows exist before the dag-processors start, so two
    starting together do not race to insert them, any other bundle marked inactive; a
    configuration of one bundle again marks the two parts inactive. On a copy of the migrated
    metadata database (the session's own keeps Airflow's dags-folder bundle)."""
    import os
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "airflow.db"
    shutil.copyfile(airflow_db / "airflow.db", db)

    def register(parts: int) -> subprocess.CompletedProcess:
        config = [{"name": f"dags-{n}", "classpath":
                   "export_airflow.deploy.bundles.DagsPartBundle", "kwargs": {
                       "dags_folder": str(dags_copy), "part": n, "parts": parts}}
                  for n in range(1, parts + 1)] if parts > 1 else [
            {"name": "dags-folder", "classpath":
             "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}}]
        env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}",
               "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(config),
               "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH": str(tmp_path / "storage")}
        return subprocess.run([sys.executable, "-m", "export_airflow.deploy.bundles",
                               "register"], env=env, capture_output=True, text=True,
                              timeout=120, check=False)

    def rows() -> dict[str, bool]:
        with sqlite3.connect(db) as conn:
            return {n: bool(a) for n, a in conn.execute("SELECT name, active FROM dag_bundle")}

    # The session's database may already hold Airflow's own dags-folder bundle (dag.test()).
    before = {n: a for n, a in rows().items() if n == "dags-folder"}
    assert set(rows()) == set(before)
    done = register(2)
    assert (done.returncode, done.stdout.splitlines()[-1]) == (
        0, "DAG bundles registered: dags-1, dags-2"), done.stderr[-2000:]
    assert rows() == {"dags-1": True, "dags-2": True, **{n: False for n in before}}
    done = register(1)
    assert done.stdout.splitlines()[-1] == "DAG bundles registered: dags-folder", (
        done.stderr[-2000:])
    assert rows() == {"dags-1": False, "dags-2": False, "dags-folder": True}


def test_register_is_the_only_command(capsys):
    from export_airflow.deploy.bundles import main

    assert main([]) == 2
    assert capsys.readouterr().err == "usage: python -m export_airflow.deploy.bundles register\n"
