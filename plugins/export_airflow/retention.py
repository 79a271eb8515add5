"""Compatibility path of the retention DAG's builder, in :mod:`export_airflow.building.retention`.

Kept because dags/export_retention.py is copied into a deployment's DAG folder at install time
(docs/how-to/deploy.md) and copies made before the plugin was laid out in packages import
``build_retention_dag`` from here.
"""

from export_airflow.building.retention import build_retention_dag

__all__ = ["build_retention_dag"]
