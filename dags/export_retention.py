"""The export_retention DAG (daily: delete artifacts past retention_days unless held). Thin
loader; see plugins/export_airflow/building/retention.py."""

from pathlib import Path

from airflow.sdk import DAG  # noqa: F401  (Airflow's safe-mode discovery looks for "DAG")
from export_airflow.building.retention import build_retention_dag

export_retention = build_retention_dag(str(Path(__file__).resolve().parent / "config"))
