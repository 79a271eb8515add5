"""The export_gap_audit DAG (daily gap audit, ADR 0009). Thin loader; see
plugins/export_airflow/building/gap_audit.py."""

from pathlib import Path

from airflow.sdk import DAG  # noqa: F401  (Airflow's safe-mode discovery looks for "DAG")
from export_airflow.building.gap_audit import build_gap_audit_dag

export_gap_audit = build_gap_audit_dag(str(Path(__file__).resolve().parent / "config"))
