"""docker-compose.ha.yaml over docker-compose.yaml: two schedulers and two dag-processors, one
per DAG bundle, every Airflow service with the same bundle list as `make cluster
SCHEDULERS=2 DAG_PROCESSORS=2`; the second scheduler and dag-processor resolve exactly as the
first (the overlay repeats the common block)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.dags.test_cluster_env import AIRFLOW_SERVICES, make_cluster_environ
from tests.unit.test_foundation import COMPOSE_SECRETS, REPO, _compose_cmd


def resolved_ha(tmp_path: Path) -> dict:
    cmd = _compose_cmd()
    if cmd is None:
        pytest.fail("neither 'docker compose' nor 'docker-compose' is installed; "
                    "run scripts/ensure-debian-packages.sh")
    env_file = tmp_path / ".env"
    env_file.write_text(subprocess.run(["bash", str(REPO / "scripts" / "compose-env.sh")],
                                       capture_output=True, text=True, check=True).stdout)
    env = {k: v for k, v in os.environ.items() if k not in COMPOSE_SECRETS}
    result = subprocess.run([*cmd, "-f", str(REPO / "docker-compose.yaml"), "-f",
                             str(REPO / "docker-compose.ha.yaml"), "--env-file", str(env_file),
                             "config"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def test_two_schedulers_and_a_dag_processor_per_bundle(tmp_path: Path):
    services = resolved_ha(tmp_path)
    assert {n: services[n]["command"] for n in services if "scheduler" in n or "dag-proc" in n
            } == {"airflow-scheduler": "scheduler", "airflow-scheduler-2": "scheduler",
                  "airflow-dag-processor": "dag-processor --bundle-name dags-1",
                  "airflow-dag-processor-2": "dag-processor --bundle-name dags-2"}
    for first, second in (("airflow-scheduler", "airflow-scheduler-2"),
                          ("airflow-dag-processor", "airflow-dag-processor-2")):
        differ = {k for k in services[first].keys() | services[second].keys()
                  if services[first].get(k) != services[second].get(k)}
        assert differ <= {"command"}, (second, differ)


def test_every_airflow_service_knows_both_bundles_as_make_cluster_does(tmp_path: Path):
    services = resolved_ha(tmp_path)
    local = json.loads(make_cluster_environ(tmp_path, DAG_PROCESSORS="2")[
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    for bundle in local:
        bundle["kwargs"]["dags_folder"] = "/opt/airflow/dags"
    for name in (*AIRFLOW_SERVICES, "airflow-scheduler-2", "airflow-dag-processor-2"):
        bundles = json.loads(services[name]["environment"][
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
        assert bundles == local, name


def test_make_cluster_runs_one_dag_processor_per_bundle(tmp_path: Path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    comps = supervise.airflow_components("airflow", 2, 2)
    assert [(c.name, c.argv[1:]) for c in comps] == [
        ("scheduler-1", ["scheduler"]), ("scheduler-2", ["scheduler"]),
        ("dag-processor-1", ["dag-processor", "--bundle-name", "dags-1"]),
        ("dag-processor-2", ["dag-processor", "--bundle-name", "dags-2"]),
        ("triggerer", ["triggerer"])]
    assert [c.name for c in supervise.airflow_components("airflow", 1, 1)] == [
        "scheduler", "dag-processor", "triggerer"]


def test_make_run_refuses_a_second_scheduler(tmp_path: Path):
    env = make_cluster_environ(tmp_path)
    assert "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST" not in env
    result = subprocess.run(
        ["bash", "-c", f"SCHEDULERS=2 source {REPO / 'scripts' / 'airflow-env.sh'}"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr.strip() == ("SCHEDULERS=2 needs the Celery cluster: make cluster "
                                     "SCHEDULERS=2 (make run runs one of each)")
