"""The export_restatement DAG (late_data: restate, one short run per restated period). Thin
loader; see plugins/export_airflow/restatement.py."""

from pathlib import Path

from airflow.sdk import DAG  # noqa: F401  (Airflow's safe-mode discovery looks for "DAG")
from export_airflow.restatement import build_restatement_dag

export_restatement = build_restatement_dag(str(Path(__file__).parent / "config"))
