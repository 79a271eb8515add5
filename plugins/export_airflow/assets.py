"""Compatibility path of the export assets, which live in :mod:`export_airflow.tasks.assets`.

Kept because DAG files outside this package use these two as their API (the example consumer
dags/example_asset_consumer.py; a consumer scheduled on ``schedule_asset(company, schedule)``,
docs/explanation/runs-in-airflow.md), and a deployment's DAG folder keeps those files across
upgrades of the package.
"""

from export_airflow.tasks.assets import consumer_dag, schedule_asset

__all__ = ["consumer_dag", "schedule_asset"]
