"""The project's promises about itself: import boundary, pinned lock, compose file."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return set(out.split())


def test_export_lib_never_loads_airflow():
    every_module = [p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
                    for p in (REPO / "export_lib").rglob("*.py")
                    if "migrations" not in p.parts and p.name != "__main__.py"]
    stmt = "\n".join(f"import {m.removesuffix('.__init__')}" for m in sorted(every_module))
    loaded = _modules_after(stmt)
    leaked = sorted(m for m in loaded if m == "airflow" or m.startswith("airflow."))
    assert leaked == [], f"importing export_lib loaded Airflow modules: {leaked[:5]}"


def test_boundary_check_detects_airflow(tmp_path):
    """The check above can fail: a module importing airflow is seen."""
    loaded = _modules_after("import airflow.sdk")
    assert "airflow" in loaded


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import``/``from ... import`` statement of the file names (the syntax
    tree, so a string that holds import lines, e.g. a file template, is not an import)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_no_source_file_in_export_lib_imports_airflow():
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "export_lib").rglob("*.py")
                 if any(m == "airflow" or m.startswith("airflow.") for m in _imported_modules(p))]
    assert offenders == []
    # The check sees real imports: this module's own would be found.
    assert "airflow.sdk" in _imported_modules(REPO / "plugins/export_airflow/operators.py")


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"requirements.txt line {line!r} is not pinned with =="
        pins[name.lower().replace("_", "-")] = version
    return pins


def test_lock_pins_every_installed_package():
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                            capture_output=True, text=True, check=True).stdout
    installed = {}
    for line in frozen.splitlines():
        if "==" in line:
            name, _, version = line.partition("==")
            installed[name.lower().replace("_", "-")] = version
    installed.pop("airflow-scheduled-exports", None)
    assert installed == _lock()


def test_compose_file_has_the_production_topology():
    spec = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
    services = set(spec["services"])
    assert {"postgres", "redis", "minio", "airflow-apiserver", "airflow-scheduler",
            "airflow-dag-processor", "airflow-triggerer", "airflow-worker",
            "airflow-init"} <= services
    env = spec["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_validates():
    cmd = _compose_cmd()
    if cmd is None:
        pytest.fail("neither 'docker compose' nor 'docker-compose' is installed; "
                    "run scripts/ensure-debian-packages.sh")
    result = subprocess.run([*cmd, "-f", str(REPO / "docker-compose.yaml"), "config", "-q"],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
