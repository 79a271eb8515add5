"""A year's backfill dry-run through the REST API: our timetable against Airflow's own cron.

``python bench/backfill_dry_run.py [--repeat 3] [--days 365]`` starts ``make run`` in a copy of
the project (its own PostgreSQL), adds company ``drco`` with an hourly data export (cron
``0 * * * *``, UTC) and an hourly widget export (``interval_hours: 1``, Europe/Berlin, so DST
is in the range) and a floor DAG on the same cron with Airflow's own timetable, then times
``POST /api/v2/backfills/dry_run`` over ``--days`` for each (``--repeat`` times, interleaved).
Prints one JSON object: per DAG the slots listed, the median seconds and each run's, and the
ratio to the floor. The bar, ≤ 2 s for a year of an hourly cron, is read, not enforced.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.system.soak.stack import Stack, scratch_dir, stop_and_sweep, wait_for  # noqa: E402

COMPANY = """company: {id: drco, name: Dry run Co, timezone: Europe/Berlin, owner: o@drco.example}
widget_exports:
  - id: hourly
    export_hour: 0
    interval_hours: 1
    window: {kind: trailing_hours, hours: 1}
    query:
      source: demo_source
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
    destinations:
      - {id: box, type: local, path: outbox/drco/hourly}
data_exports:
  - channel: ads
    primary: {cron: "0 * * * *", timezone: UTC}
    secondary: {cron: "0 0 * * *", timezone: UTC}
"""
FLOOR = '''"""bench/backfill_dry_run.py's floor: the same hourly cron on Airflow's own timetable."""
from datetime import datetime, timezone

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="bench_dry_run_floor", schedule="0 * * * *", catchup=False,
         start_date=datetime(2020, 1, 1, tzinfo=timezone.utc)) as dag:
    EmptyOperator(task_id="noop")
'''
DAGS = {"floor": "bench_dry_run_floor", "cron": "data_export__drco__ads__primary",
        "local_hours": "widget_export__drco__hourly"}


def say(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def dry_run(api, dag_id: str, days: int) -> tuple[float, int]:
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    body = {"dag_id": dag_id, "from_date": (end - timedelta(days=days)).isoformat(),
            "to_date": end.isoformat(), "run_backwards": False, "reprocess_behavior": "none",
            "max_active_runs": 1, "dag_run_conf": {}}
    started = time.perf_counter()
    answer = api.ok("POST", "/api/v2/backfills/dry_run", body)
    return time.perf_counter() - started, answer["total_entries"]


def measure(repeat: int, days: int) -> dict:
    stack = Stack.in_copy(scratch_dir("bench-dry-run-") / "project", local_pg=True)
    dags = stack.root / "dags"
    (dags / "config" / "drco.yaml").write_text(COMPANY)
    (dags / "company_drco.py").write_text(
        (dags / "company_acme.py").read_text().replace("acme", "drco"))
    (dags / "bench_dry_run_floor.py").write_text(FLOOR)
    say(f"make run in {stack.root}")
    try:
        stack.start()
        api = stack.api()
        for dag_id in DAGS.values():
            wait_for(lambda d=dag_id: api.call("GET", f"/api/v2/dags/{d}")[0] == 200, 300, 2,
                     what=f"{dag_id} to be parsed")
        seconds: dict[str, list[float]] = {name: [] for name in DAGS}
        slots: dict[str, int] = {}
        for round_ in range(repeat):
            order = list(DAGS) if round_ % 2 == 0 else list(reversed(DAGS))
            for name in order:
                took, slots[name] = dry_run(api, DAGS[name], days)
                seconds[name].append(round(took, 3))
                say(f"{name}: {slots[name]} slots in {took:.2f} s")
    finally:
        stop_and_sweep(stack)
    floor = statistics.median(seconds["floor"])
    return {"days": days, "repeat": repeat, "dags": {
        name: {"dag_id": DAGS[name], "slots": slots[name],
               "median_seconds": statistics.median(runs), "seconds": runs,
               "ratio_to_floor": round(statistics.median(runs) / floor, 2)}
        for name, runs in seconds.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.repeat, args.days), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
