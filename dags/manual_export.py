"""The manual_export DAG (one-off exports from the trigger form). Thin loader; see
plugins/export_airflow/manual_dag.py."""

from pathlib import Path

from airflow.sdk import DAG  # noqa: F401  (Airflow's safe-mode discovery looks for "DAG")
from export_airflow.manual_dag import build_manual_dag

manual_export = build_manual_dag(Path(__file__).parent / "config")
