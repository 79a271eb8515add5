"""The files bench/cluster.py writes into its cluster's copy: each generated company's config,
the floor DAGs (Airflow's own cost per task) and the least-I/O DAGs (the lowest CPU an export
task can reach). Templates for ``str.format``: literal braces are doubled."""

COMPANY_YAML = """\
company:
  id: {cid}
  name: Bench company {n}
  timezone: UTC
  owner: data@{cid}.example
  authorized: [analytics@{cid}.example]

widget_exports:
  - id: {export}
    export_hour: {hour}
    window: {{kind: calendar_day}}
    query:
      source: demo_source
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
    destinations:
      - {{id: {cid}-dir, type: local, path: outbox/{cid}/{export}}}
"""
FLOOR_DAGS = '''"""bench/cluster.py's floor: per company, 4 chained no-op tasks (Airflow's own cost)."""
from datetime import datetime, timezone

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def noop():
    return None


for cid in {companies!r}:
    with DAG(dag_id="bench_floor__" + cid, schedule="0 {hour} * * *",
             start_date=datetime(2020, 1, 1, tzinfo=timezone.utc), catchup=False,
             max_active_runs=2) as dag:
        a, b, c, d = (PythonOperator(task_id=f"noop_{{i}}", python_callable=noop)
                      for i in range(4))
        a >> b >> c >> d
    globals()[dag.dag_id] = dag
'''
# In a file of their own: a no-op task parses only the floor's file, as before they existed.
IO_FLOOR_DAGS = '''"""bench/cluster.py's least I/O: per company, one task doing the I/O every export task
does and no export code (the lowest CPU an export task can reach)."""
from datetime import datetime, timezone

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def io_floor():
    """The least I/O an export task does, and no export code: the artifact connection's S3
    client (the hook's session, the worker's shared botocore loader) and one 1 KB PUT; the
    ledger connection and one statement."""
    import os

    import psycopg
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from airflow.sdk import BaseHook
    from export_lib.storage.clients import share_loader

    hook = S3Hook(aws_conn_id=os.environ["EXPORT_ARTIFACT_CONN"])
    session = hook.get_session()
    share_loader(session)
    client = session.client("s3", endpoint_url=hook.conn_config.get_service_endpoint_url("s3"),
                            region_name=hook.conn_config.region_name, verify=hook.verify)
    bucket = os.environ["EXPORT_ARTIFACT_ROOT"].removeprefix("s3://").partition("/")[0]
    client.put_object(Bucket=bucket, Key=f"bench-io-floor/{{os.getpid()}}", Body=b"x" * 1024)
    ledger = BaseHook.get_connection("export_ledger")
    with psycopg.connect(host=ledger.host, port=ledger.port, user=ledger.login,
                         password=ledger.password, dbname=ledger.schema) as conn:
        conn.execute("SELECT 1").fetchone()


for cid in {companies!r}:
    with DAG(dag_id="bench_io_floor__" + cid, schedule=None,
             start_date=datetime(2020, 1, 1, tzinfo=timezone.utc), catchup=False,
             max_active_runs=2) as dag:
        PythonOperator(task_id="io_floor", python_callable=io_floor)
    globals()[dag.dag_id] = dag
'''
