"""export_lib's layers and the Airflow edge's packages hold (``.importlinter``,
docs/explanation/architecture.md "Layers"), and the checks really catch a violation: the same
contracts run on a copy of export_lib and plugins/export_airflow with one import added.

``lint-imports`` runs in a subprocess with the packages' parent directories first on
``PYTHONPATH``: in this process ``export_lib`` is already imported (and the editable install
would point at another checkout), so the subprocess is the only way to be sure which copy of
the code the contracts see.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / ".importlinter"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the export_lib and plugins/export_airflow in ``root`` with the
    contracts in ``root``."""
    script = Path(sys.executable).parent / "lint-imports"
    assert script.is_file(), f"{script} is missing: install the lock (make venv, or " \
                             "pip install -r requirements-dev.txt)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(root), str(root / "plugins"))),
           "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([str(script), "--config", str(root / ".importlinter"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(REPO / "export_lib", root / "export_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(REPO / "plugins" / "export_airflow", root / "plugins" / "export_airflow",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(CONFIG, root / ".importlinter")
    return root


def test_export_lib_keeps_its_import_contracts():
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 7 kept, 0 broken." in result.stdout
    for name in ("export_lib layers: each layer imports only the layers below it KEPT",
                 "no import cycles between the modules or packages of any export_lib package KEPT",
                 "export_lib never imports Airflow or the Airflow edge KEPT",
                 "export_airflow layers: each package or module imports only the layers below it "
                 "KEPT",
                 "the pages never import DAG building KEPT",
                 "DAG building never imports the pages KEPT",
                 "no import cycles between the modules or packages of any export_airflow package "
                 "KEPT"):
        assert name in result.stdout


def test_an_upward_import_breaks_the_layers_and_is_named(tmp_path):
    root = _copy(tmp_path)
    limits = root / "export_lib" / "config" / "limits.py"
    line = len(limits.read_text().splitlines()) + 1
    with limits.open("a") as fh:  # config (the bottom layer but one) imports the pipeline
        fh.write("import export_lib.pipeline  # noqa: F401\n")

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "export_lib layers: each layer imports only the layers below it BROKEN" in out
    assert "export_lib.config is not allowed to import export_lib.pipeline:" in out
    assert f"- export_lib.config.limits -> export_lib.pipeline (l.{line})" in out
    # pipeline imports config, so the same line also closes a cycle between the two packages
    assert "no import cycles between the modules or packages of any export_lib package BROKEN" \
        in out
    assert "- .config -> .pipeline (1 import)" in out


def test_a_type_checking_import_of_a_higher_layer_is_refused_too(tmp_path):
    root = _copy(tmp_path)
    names = root / "export_lib" / "periods" / "names.py"
    text = names.read_text()
    assert "if TYPE_CHECKING:\n" in text
    names.write_text(text.replace("if TYPE_CHECKING:\n",
                                  "if TYPE_CHECKING:\n    from export_lib.ledger import Ledger\n",
                                  1))

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "export_lib.periods is not allowed to import export_lib.ledger:" in result.stdout
    assert "- export_lib.periods.names -> export_lib.ledger" in result.stdout


def test_every_top_level_module_has_a_layer(tmp_path):
    root = _copy(tmp_path)
    (root / "export_lib" / "newthing.py").write_text('"""A module nobody placed."""\n')

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "export_lib.newthing" in result.stdout + result.stderr


def _append(path: Path, line: str) -> int:
    """Append ``line`` to ``path``; its line number."""
    number = len(path.read_text().splitlines()) + 1
    with path.open("a") as fh:
        fh.write(line + "\n")
    return number


def test_a_page_that_imports_dag_building_is_refused(tmp_path):
    root = _copy(tmp_path)
    page = root / "plugins" / "export_airflow" / "pages" / "company_ui.py"
    line = _append(page, "from export_airflow.building.dag_factory import EPOCH  # noqa: F401")

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "the pages never import DAG building BROKEN" in out
    assert "export_airflow.pages is not allowed to import export_airflow.building:" in out
    assert f"export_airflow.pages.company_ui -> export_airflow.building.dag_factory (l.{line})" in out
    # pages and dags are one layer's independent siblings, so the layers say it too
    assert "export_airflow layers: each package or module imports only the layers below it " \
           "BROKEN" in out
    assert "DAG building never imports the pages KEPT" in out


def test_dag_building_that_imports_a_page_is_refused(tmp_path):
    root = _copy(tmp_path)
    operators = root / "plugins" / "export_airflow" / "tasks" / "operators.py"
    line = _append(operators, "from export_airflow.pages.ui_access import secret  # noqa: F401")

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "DAG building never imports the pages BROKEN" in out
    assert "export_airflow.tasks is not allowed to import export_airflow.pages:" in out
    assert f"export_airflow.tasks.operators -> export_airflow.pages.ui_access (l.{line})" in out
    assert "the pages never import DAG building KEPT" in out


def test_the_old_circle_between_the_dag_factory_and_restatement_is_refused(tmp_path):
    root = _copy(tmp_path)
    restatement = root / "plugins" / "export_airflow" / "building" / "restatement.py"
    text = restatement.read_text()
    target = "    from export_airflow.building.retry_policy import delivery_policy\n"
    assert target in text  # a lazy import, as the circle was: those count too
    restatement.write_text(text.replace(
        target, target + "    from export_airflow.building.dag_factory import EPOCH  # noqa: F401\n", 1))

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "no import cycles between the modules or packages of any export_airflow package " \
           "BROKEN" in out
    assert "No cycles are allowed in export_airflow.building." in out
    # the factory imports restatement twice, so the one new import is the edge to remove
    assert "- .restatement -> .dag_factory (1 import)" in out


def test_every_top_level_module_of_the_airflow_edge_has_a_layer(tmp_path):
    root = _copy(tmp_path)
    (root / "plugins" / "export_airflow" / "newthing.py").write_text('"""Nobody placed it."""\n')

    result = _lint_imports(root)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "export_airflow.newthing" in result.stdout + result.stderr
