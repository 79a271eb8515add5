"""demo_feed: keeps the embedded demo source growing (new hourly metrics) so `make run` keeps
exporting fresh periods. Only touches the demo source of `make run` (its PostgreSQL database, or a
SQLite file with DB=sqlite); a no-op against any other source."""

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, DeltaDataIntervalTimetable, task

with DAG(dag_id="demo_feed", schedule=DeltaDataIntervalTimetable(timedelta(minutes=30)),
         start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False,
         tags=["demo"], doc_md=__doc__):

    @task(execution_timeout=timedelta(minutes=10))
    def ingest() -> int:
        from export_airflow.runtime.connections import airflow_resolver

        from export_lib.source.demo import seed_source

        conn = airflow_resolver()("demo_source")
        ours = os.environ.get("EXPORT_DEMO_FEED") == "1"  # set by scripts/airflow-env.sh
        if not ours and not (conn.conn_type == "sqlite" and conn.schema):
            return 0  # someone else's database: never write to it
        companies = sorted(p.stem for p in (Path(__file__).resolve().parent / "config").glob("*.yaml")
                           if p.stem != "defaults")
        return seed_source(conn, companies, now=datetime.now(UTC), days=2)

    ingest()
