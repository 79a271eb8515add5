"""No runaway work on a real scheduler: clearing a *running* render of a 5 M-row export leaves no
query on the source (seed 002's connection-pool incident, issue 11 item 10).

One `make run` stack (tests/soak/stack.py) in a copy of the project whose catalog holds only
``bigco``: one widget export over ``big_metrics``, 5 M rows of one day, seeded into the stack's
own demo database. A manual export of that day is triggered through the REST API; once its COPY
is active in ``pg_stat_activity`` the render task is cleared through the REST API, as an
operator does in the UI. Airflow's supervisor sees the refused heartbeat, SIGTERMs the task,
``on_kill`` cancels the query.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta

import psycopg
import pytest

from tests.soak.conftest import stop_and_sweep
from tests.soak.stack import Stack, now_utc, scratch_dir, wait_for

pytestmark = [pytest.mark.scheduler, pytest.mark.slow]

ROWS = 5_000_000
BIGCO = """\
company: {id: bigco, name: Big Co, timezone: UTC, owner: data@bigco.example, status: active}
widget_exports:
  - id: full-dump
    export_hour: 7
    interval_hours: 24
    window: {kind: calendar_day}
    query:
      source: demo_source
      table: big_metrics
      columns: [company_id, event_time, n, pad]
      timestamp_column: event_time
      tenant_column: company_id
    format: csv
    destinations:
      - {id: bigco-dir, type: local, path: outbox/bigco}
    deadline: 2h
    recovery: none
"""


def only_bigco(stack: Stack) -> None:
    """The copy's catalog: bigco alone (nothing else catches up and loads the 2 cores)."""
    dags = stack.root / "dags"
    for path in [*dags.glob("company_*.py"), *dags.glob("config/*.yaml")]:
        if path.name != "defaults.yaml":
            path.unlink()
    (dags / "config" / "bigco.yaml").write_text(BIGCO)


@pytest.fixture(scope="module")
def bigco_stack():
    root = scratch_dir("export-runaway-")
    stack = Stack.in_copy(root / "project")
    only_bigco(stack)
    try:
        stack.start()
        yield stack
    finally:
        try:
            stop_and_sweep(stack)
        finally:
            shutil.rmtree(root, ignore_errors=True)


def demo_dsn(stack: Stack) -> str:
    return f"postgresql://exports:exports@127.0.0.1:{stack.pgport}/demo"


def export_queries(dsn: str, day: str) -> list[tuple[int, str]]:
    """(leader pid, state) of every backend whose last query read this day of big_metrics,
    parallel workers counted under the client backend that leads them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT coalesce(leader_pid, pid), state FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND query ILIKE %s AND query LIKE %s",
            ("%big_metrics%", f"%{day}%")).fetchall()


def test_clearing_a_running_render_leaves_no_query_on_the_source(bigco_stack: Stack):
    day = (now_utc() - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    dsn = demo_dsn(bigco_stack)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE UNLOGGED TABLE big_metrics AS SELECT 'bigco'::text AS company_id, "
            "%s::timestamptz + g * interval '17 ms' AS event_time, g::bigint AS n, "
            "md5(g::text) AS pad FROM generate_series(0, %s) g", (day, ROWS - 1))
    api = bigco_stack.api()
    run = api.trigger_manual("bigco", "bigco/full-dump", day, "runaway test")
    run_id = run["dag_run_id"]
    day_text = f"{day:%Y-%m-%d}"

    active = wait_for(lambda: [p for p, s in export_queries(dsn, day_text) if s == "active"],
                      180, interval=0.2, what="the render's COPY to be active on the source")
    (pid,) = set(active)
    ti = api.ok("GET", f"/api/v2/dags/manual_export/dagRuns/{run_id}/taskInstances/render")
    assert ti["state"] == "running", ti
    api.ok("POST", "/api/v2/dags/manual_export/clearTaskInstances",
           {"dry_run": False, "dag_run_id": run_id, "task_ids": ["render"],
            "only_failed": False, "include_downstream": True, "reset_dag_runs": True})
    cleared = time.monotonic()

    def original_gone() -> bool:
        return all(p != pid for p, _ in export_queries(dsn, day_text))

    wait_for(original_gone, 30, interval=0.1, what=f"backend {pid} to leave pg_stat_activity")
    gone_after = time.monotonic() - cleared
    print(f"cleared a running render of {ROWS} rows: backend {pid} gone from "
          f"pg_stat_activity {gone_after:.2f} s after the clear")
    assert gone_after <= 5.0

    # The ledger says why the attempt ended; the cleared task runs again (a new attempt).
    log_dir = (bigco_stack.root / ".airflow" / "logs" / "dag_id=manual_export"
               / f"run_id={run_id}" / "task_id=render")
    first_try = next(log_dir.glob("attempt=1*.log")).read_text(errors="replace")
    assert "on_kill: cancelled 1 running source query" in first_try
    assert os.environ.get("KEEP_RUNAWAY_STACK") is None or print(bigco_stack.root)
