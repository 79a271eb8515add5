"""Smoke test of ``bench/parse.py`` (a benchmark, so nothing here asserts on speed): its probes
are fresh Airflow processes importing and parsing a generated folder, and a parse child forked
after the dag-processor's preload (~9 CPU-s). Its ``--dag-processor`` mode, a real
dag-processor's passes, is test_dag_processor_bench.py beside it; both in the deploy tier since
5 Dec (this one was in tests/dags, the gate before a commit, until then)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_parse_bench_prints_the_documented_figures_for_three_companies():
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "parse.py"), "--companies", "3", "--repeat", "1",
         "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)

    assert set(figures) == {"dags", "parse_seconds", "ms_per_dag", "import_seconds",
                            "plugin_import_seconds", "serialize_seconds", "worker_parse_seconds",
                            "serialize_ms_per_dag", "child_plugin_import_seconds",
                            "child_file_seconds", "child_serialize_seconds"}
    # 2 widget exports + 3 channels x 2 kinds each + manual_export__<company> +
    # recovery_batch__<company>, plus one DAG per
    # other shipped DAG file
    # (config_check.py defines none: it only fails when a company file lacks its loader)
    others = [p for p in (REPO / "dags").glob("*.py")
              if not p.name.startswith("company_") and p.name != "config_check.py"]
    assert figures["dags"] == 3 * 10 + len(others)
    # Import and parse are read in one subprocess: the parse includes the import.
    assert figures["parse_seconds"] > figures["import_seconds"] > 0
    assert figures["worker_parse_seconds"] > 0
    assert 0 < figures["plugin_import_seconds"] < figures["import_seconds"]
    assert figures["serialize_seconds"] > 0
    per_dag = (figures["parse_seconds"] - figures["import_seconds"]) / figures["dags"] * 1000
    assert figures["ms_per_dag"] == pytest.approx(per_dag, abs=0.05)  # inputs rounded to ms
    assert figures["ms_per_dag"] > 0
    assert figures["serialize_ms_per_dag"] == pytest.approx(
        figures["serialize_seconds"] / figures["dags"] * 1000, abs=0.05)
    # A parse child forked after the dag-processor's preload (export_airflow.deploy.preload) finds the
    # plugin and the factory imported: far below a fresh process's import of them.
    assert 0 <= figures["child_plugin_import_seconds"] < figures["plugin_import_seconds"] / 5
    assert figures["child_file_seconds"] > figures["child_plugin_import_seconds"]
    assert 0 < figures["child_serialize_seconds"] < figures["child_file_seconds"]
