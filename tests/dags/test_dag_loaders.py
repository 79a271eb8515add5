"""The hostile config corpus in a DAG folder, parsed the way the dag-processor does (DagBag):
each hostile company's DAG file shows exactly one import error carrying the same reason as
``exportctl validate``, and every shipped company's DAGs still load."""

from __future__ import annotations

import shutil
from pathlib import Path

from export_lib.config.dag_loaders import loader_path, sync_loaders
from tests.unit.hostile.test_configs import CORPUS, expected
from tests.world import REPO


def test_one_import_error_per_hostile_company_and_the_others_load(tmp_path: Path):
    from airflow.dag_processing.dagbag import DagBag

    dags = tmp_path / "dags"
    shutil.copytree(REPO / "dags", dags, ignore=shutil.ignore_patterns("__pycache__"))
    for path in CORPUS:
        shutil.copy(path, dags / "config" / path.name)
    written, _, _ = sync_loaders(dags)
    assert len(written) == len(CORPUS)

    bag = DagBag(dag_folder=str(dags))
    loaders = {str(loader_path(dags, p.stem)): p for p in CORPUS}
    assert set(bag.import_errors) == set(loaders)
    for loader, path in loaders.items():
        error = bag.import_errors[loader]
        assert f"1 config error(s) in {dags / 'config'}:" in error
        assert f"{dags / 'config' / path.name}: {expected(path)}" in error
    companies = {dag_id.split("__")[1] for dag_id in bag.dag_ids if "__" in dag_id}
    assert companies == {"acme", "dentsu-happiness", "kiwi-outdoors"}
    exports = [d for d in bag.dag_ids if d.startswith(("widget_export__", "data_export__"))]
    assert len(exports) == 10
    assert sorted(d for d in bag.dag_ids if d.startswith("manual_export__")) == [
        "manual_export__acme", "manual_export__dentsu-happiness", "manual_export__kiwi-outdoors"]
