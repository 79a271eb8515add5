"""Example downstream job (ADR 0024): runs once per newly published version of acme/daily-spend,
scheduled on its asset ``export:acme/daily-spend``; re-runs that publish nothing new do not
trigger it. Copy it for your own schedule (a partner's load, a dashboard refresh)."""

from export_airflow.tasks.assets import consumer_dag

dag = consumer_dag("acme", "acme/daily-spend", dag_id="example_asset_consumer")
