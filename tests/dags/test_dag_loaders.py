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


def test_links_pipes_and_unhashable_keys_are_the_newcomers_import_errors(tmp_path: Path):
    """Issue 23: a broken symlink, a symlink out of the folder, a FIFO and a file with a list as
    a key each get their loader and fail in it with one line; nothing of the linked file shows
    and the shipped companies load."""
    import os

    from airflow.dag_processing.dagbag import DagBag

    dags = tmp_path / "dags"
    shutil.copytree(REPO / "dags", dags, ignore=shutil.ignore_patterns("__pycache__"))
    config = dags / "config"
    secret = tmp_path / "elsewhere.yaml"
    secret.write_text("planted_secret_key: hunter2-planted\n")
    (config / "ghost.yaml").symlink_to(config / "nowhere.yaml")
    (config / "leak.yaml").symlink_to(secret)
    os.mkfifo(config / "pipe.yaml")
    (config / "unhashable.yaml").write_text("company: {id: unhashable}\n? [a, b]\n: x\n")
    written, _, _ = sync_loaders(dags)
    assert sorted(p.name for p in written) == [
        "company_ghost.py", "company_leak.py", "company_pipe.py", "company_unhashable.py"]

    bag = DagBag(dag_folder=str(dags))
    expected_lines = {
        "ghost": "(file): a symbolic link whose target does not exist (or loops)",
        "leak": f"(file): a symbolic link to a file outside {config}; nothing of it was read",
        "pipe": "(file): a named pipe (FIFO), not a regular file; nothing was read",
        "unhashable": "line 2 column 3: not valid YAML: the mapping key ['a', 'b'] is a list",
    }
    assert set(bag.import_errors) == {str(loader_path(dags, c)) for c in expected_lines}
    for company, line in expected_lines.items():
        error = bag.import_errors[str(loader_path(dags, company))]
        assert f"1 config error(s) in {config}:\n{config / company}.yaml: {line}" in error
        assert "hunter2" not in error and "planted_secret_key" not in error
    companies = {dag_id.split("__")[1] for dag_id in bag.dag_ids if "__" in dag_id}
    assert companies == {"acme", "dentsu-happiness", "kiwi-outdoors"}
