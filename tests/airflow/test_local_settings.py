"""deploy/airflow_local_settings.py: the processes that fork task and parse children import the
DAG factory once (ADR 0015); the others do not; a broken factory never stops the process.

Each case runs the settings file in a fresh interpreter as Airflow would (plugins folder on
sys.path, ``sys.argv`` of the command), so one case's imports cannot leak into another's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETTINGS = REPO / "deploy" / "airflow_local_settings.py"
PROBE = """
import json, runpy, sys
sys.argv = ["airflow", *sys.argv[1:]]
runpy.run_path({settings!r}, run_name="airflow_local_settings")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("export_airflow", "export_lib")))))
"""

pytestmark = pytest.mark.airflow


def settings_imports(plugins: Path, *argv: str) -> tuple[list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(settings=str(SETTINGS)), *argv],
        cwd=plugins, env={"PYTHONPATH": f"{plugins}:{REPO}", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, check=True)
    # Airflow's logging (structlog) writes to stdout: the error is read from both streams.
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


@pytest.mark.parametrize("argv", [("scheduler",), ("dag-processor",), ("celery", "worker")])
def test_a_forking_process_imports_the_dag_factory_once(argv):
    modules, _ = settings_imports(REPO / "plugins", *argv)
    assert {"export_airflow.dag_factory", "export_airflow.operators",
            "export_lib.pipeline"} <= set(modules), modules


@pytest.mark.parametrize("argv", [("api-server",), ("db", "migrate"), ("pools", "list"), ()])
def test_other_commands_import_only_the_cluster_policy(argv):
    modules, _ = settings_imports(REPO / "plugins", *argv)
    assert "export_airflow.cluster_policy" in modules
    assert not {"export_airflow.dag_factory", "export_airflow.operators"} & set(modules), modules


def test_a_broken_dag_factory_is_logged_and_the_process_still_starts(tmp_path):
    plugins = tmp_path / "plugins"
    shutil.copytree(REPO / "plugins", plugins, ignore=shutil.ignore_patterns("__pycache__"))
    factory = plugins / "export_airflow" / "dag_factory.py"
    factory.write_text(factory.read_text() + "\nraise RuntimeError('broken on purpose')\n")

    modules, output = settings_imports(plugins, "scheduler")

    assert "export_airflow.cluster_policy" in modules
    assert "export_airflow.dag_factory" not in modules
    assert "Pre-importing export_airflow.dag_factory in `airflow scheduler` failed" in output
    assert "RuntimeError: broken on purpose" in output
