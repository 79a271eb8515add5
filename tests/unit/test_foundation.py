"""The project's promises about itself: import boundary, pinned lock, compose file."""

from __future__ import annotations

import ast
import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


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
    assert "airflow.sdk" in _imported_modules(REPO / "plugins/export_airflow/tasks/operators.py")


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
            "airflow-worker-large", "airflow-init"} <= services
    env = spec["x-airflow-common"]["environment"]
    assert spec["x-airflow-common"]["env_file"] == ["deploy/cluster.env"]
    assert "AIRFLOW__CORE__EXECUTOR=CeleryExecutor" in (
        REPO / "deploy" / "cluster.env").read_text().splitlines()
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    # Company-scoped users in what ships (ADR 0023): FAB, roles made before the DAGs parse.
    assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith("fab_auth_manager.FabAuthManager")
    assert "SIMPLE_AUTH_MANAGER_USERS" not in str(spec)
    assert "python -m export_airflow.access sync" in " ".join(
        spec["services"]["airflow-init"]["command"])
    # The ledger the Airflow way (issue 24 item 5) and, for exportctl, the same database.
    assert env["AIRFLOW_CONN_EXPORT_LEDGER"].replace("postgresql://", "postgresql+psycopg://"
                                                     ).replace(":5432/", "/") == env[
        "EXPORT_LEDGER_URL"]


def test_compose_runs_our_image_with_the_code_in_it_not_the_stock_image():
    """Issue 23 item 4 / issue 24 item 4: every Airflow service builds and runs the Dockerfile's
    image (the stock image made the lock plus our wheel); only the DAG folder is mounted, and
    nothing installs packages at start."""
    spec = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
    common = spec["x-airflow-common"]
    assert common["build"] == {"context": ".",
                               "args": {"AIRFLOW_IMAGE": "apache/airflow:3.3.2-python3.11"}}
    assert common["image"] == "${EXPORT_IMAGE_NAME:-airflow-scheduled-exports:0.1.0}"
    airflow_services = [name for name in spec["services"] if name.startswith("airflow-")]
    assert len(airflow_services) == 8
    for name in airflow_services:  # each merges the anchor: one image, built here
        assert (spec["services"][name]["image"], spec["services"][name]["build"]) == (
            common["image"], common["build"]), name
    mounts = [volume.split(":")[0] for volume in common["volumes"]]
    assert mounts == ["./dags", "./logs", "./exports"]
    assert {"PYTHONPATH", "_PIP_ADDITIONAL_REQUIREMENTS"} & set(common["environment"]) == set()
    assert "PYTHONPATH" not in " ".join(spec["services"]["airflow-init"]["command"])


def test_the_image_extends_the_stock_airflow_of_the_lock_and_installs_by_the_script():
    """The Dockerfile's base is the stock image of the Airflow the lock pins (the sync then
    changes only what the lock pins differently), and its RUN steps are scripts/install.sh's two
    steps, which tests/system/deploy/test_install.py runs in a fresh venv."""
    text = (REPO / "Dockerfile").read_text()
    lines = [line for line in text.replace("\\\n", " ").splitlines()
             if line and not line.startswith("#")]
    (arg,) = [line for line in lines if line.startswith("ARG ")]
    assert arg == f"ARG AIRFLOW_IMAGE=apache/airflow:{_lock()['apache-airflow']}-python3.11"
    assert [line for line in lines if line.startswith("FROM ")] == [
        "FROM ${AIRFLOW_IMAGE} AS wheel", "FROM ${AIRFLOW_IMAGE}"]
    runs = [" ".join(line.split()) for line in lines if line.startswith("RUN ")]
    assert runs == [
        "RUN bash /opt/airflow/src/scripts/install.sh wheel /opt/airflow/src /opt/airflow/dist",
        "RUN bash /opt/airflow/install/install.sh lock /opt/airflow/install/requirements.txt "
        "/opt/airflow/install/dist/airflow_scheduled_exports-0.1.0-py3-none-any.whl "
        "&& rm -rf /home/airflow/.cache"]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".airflow", "exports", "build", "dist"} <= set(ignored)


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def _compose(cmd: list[str], *args: str, env_file: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``compose config`` of the project's file, from an empty directory (no stray .env)."""
    files = ["-f", str(REPO / "docker-compose.yaml")]
    if env_file is not None:
        files += ["--env-file", str(env_file)]
    env = {k: v for k, v in os.environ.items() if k not in COMPOSE_SECRETS}
    return subprocess.run([*cmd, *files, "config", *args], cwd=env_file.parent if env_file
                          else REPO / "deploy", capture_output=True, text=True, env=env)


COMPOSE_SECRETS = ("POSTGRES_PASSWORD", "REDIS_PASSWORD", "MINIO_ROOT_USER",
                   "MINIO_ROOT_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET",
                   "AIRFLOW_API_SECRET_KEY", "AIRFLOW_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD")


def test_compose_config_validates(tmp_path: Path):
    """With the .env that scripts/compose-env.sh generates, the file validates; every secret
    comes from it (none is written in the file) and every published port is on 127.0.0.1."""
    cmd = _compose_cmd()
    if cmd is None:
        pytest.fail("neither 'docker compose' nor 'docker-compose' is installed; "
                    "run scripts/ensure-debian-packages.sh")
    generated = subprocess.run(["bash", str(REPO / "scripts" / "compose-env.sh")],
                               capture_output=True, text=True, check=True).stdout
    values = dict(line.split("=", 1) for line in generated.splitlines() if "=" in line)
    assert set(values) == set(COMPOSE_SECRETS)
    fernet = base64.urlsafe_b64decode(values["AIRFLOW_FERNET_KEY"])
    assert len(fernet) == 32
    env_file = tmp_path / ".env"
    env_file.write_text(generated)
    result = _compose(cmd, "-q", env_file=env_file)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(_compose(cmd, env_file=env_file).stdout)
    common = resolved["services"]["airflow-scheduler"]["environment"]
    assert common["AIRFLOW__CORE__FERNET_KEY"] == values["AIRFLOW_FERNET_KEY"]
    assert common["AIRFLOW_CONN_EXPORT_AIRFLOW_API"] == (
        f"http://admin:{values['AIRFLOW_ADMIN_PASSWORD']}@airflow-apiserver:8080")
    assert values["POSTGRES_PASSWORD"] in common["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    published = [(name, port) for name, svc in resolved["services"].items()
                 for port in svc.get("ports", [])]
    assert {name for name, _ in published} >= {"minio", "airflow-apiserver", "statsd-exporter"}
    assert {name for name, _ in published} <= {"minio", "airflow-apiserver", "statsd-exporter",
                                               "prometheus", "grafana"}
    # docker compose prints ports long-form (host_ip), docker-compose v1 as "ip:host:container".
    assert all(port.get("host_ip") == "127.0.0.1" if isinstance(port, dict)
               else str(port).startswith("127.0.0.1:") for _, port in published), published

    missing = _compose(cmd, "-q")
    assert missing.returncode != 0
    assert re.search(r"set (POSTGRES_PASSWORD|REDIS_PASSWORD|MINIO_ROOT_\w+|(AIRFLOW|GRAFANA)_\w+) "
                     r"in \.env", missing.stderr), missing.stderr

    text = (REPO / "docker-compose.yaml").read_text()
    for default in ("airflow:airflow@", "minio-secret", "POSTGRES_PASSWORD: airflow",
                    'FERNET_KEY: ""', "_AIRFLOW_WWW_USER_PASSWORD"):
        assert default not in text
