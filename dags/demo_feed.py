"""demo_feed: keeps the embedded demo source growing (new hourly metrics) so `make run` keeps
exporting fresh periods. Only touches a SQLite demo source; a no-op against anything else."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, DeltaDataIntervalTimetable, task

with DAG(dag_id="demo_feed", schedule=DeltaDataIntervalTimetable(timedelta(minutes=30)),
         start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False,
         tags=["demo"], doc_md=__doc__):

    @task
    def ingest() -> int:
        from export_lib.source.connections import get_connection
        from export_lib.source.demo import seed

        conn = get_connection("demo_source")
        if conn.conn_type != "sqlite" or not conn.schema:
            return 0
        companies = sorted(p.stem for p in (Path(__file__).parent / "config").glob("*.yaml")
                           if p.stem != "defaults")
        return seed(Path(conn.schema), companies, now=datetime.now(UTC), days=2)

    ingest()
