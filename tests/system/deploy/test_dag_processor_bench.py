"""Smoke test of ``bench/parse.py --dag-processor`` (a benchmark, so nothing here asserts on
speed): two passes of a real ``airflow dag-processor -n 1`` over a generated folder, writing to
a copy of the session's migrated metadata database. In the system tier, as a real Airflow
component run as deployed (~10 CPU-s); the figures of fresh processes and parse children are
test_parse_bench.py beside it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_parse_bench_times_a_real_dag_processor_pass_end_to_end(airflow_db):
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "parse.py"), "--companies", "2", "--repeat", "1",
         "--dag-processor", "--metadata-db", str(airflow_db / "airflow.db"), "--json"],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout)["dag_processor"]
    others = [p for p in (REPO / "dags").glob("*.py")
              if not p.name.startswith("company_") and p.name != "config_check.py"]
    assert run["dags"] == 2 * 10 + len(others)  # every DAG stored by the dag-processor
    assert run["pass_cpu_seconds"] > 0 and run["pass_wall_seconds"] > 0
    assert run["cpu_ms_per_dag"] == pytest.approx(
        run["pass_cpu_seconds"] / run["dags"] * 1000, rel=0.05)
    assert run["steady_pass_cpu_seconds"] > 0
    assert run["steady_cores_at_600s"] == pytest.approx(
        run["steady_pass_cpu_seconds"] / 600, abs=0.001)
