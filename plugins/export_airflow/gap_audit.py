"""Compatibility path of the gap audit DAG's builder, in :mod:`export_airflow.building.gap_audit`.

Kept because dags/export_gap_audit.py is copied into a deployment's DAG folder at install time
(docs/how-to/deploy.md) and copies made before the plugin was laid out in packages import
``build_gap_audit_dag`` from here.
"""

from export_airflow.building.gap_audit import build_gap_audit_dag

__all__ = ["build_gap_audit_dag"]
