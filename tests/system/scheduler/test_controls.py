"""Operator controls on a real scheduler (issue 13): ``exportctl cancel`` while the render of a
scheduled run is reading its source fences the attempt off — the render task fails, nothing is
published or delivered, and the cancel is in the audit trail; the daily ``export_retention``
DAG loads and runs.

The source is a view in the shared stack's fixture database (``fixture_source``) whose rows cost
``slowco_knob.seconds`` each to read: slow while the test cancels, instant afterwards, so the render
ends right after the cancel instead of after minutes.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.system.scheduler.harness import SchedulerStack, SlotClock, company_file
from tests.world import REPO

DAG = "widget_export__slowco__daily"
EXPORT = {
    "id": "daily", "interval_hours": 24, "window": {"kind": "calendar_day"},
    "query": {"source": "fixture_source", "table": "slow_metrics",
              "columns": ["company_id", "event_time", "value"],
              "timestamp_column": "event_time", "tenant_column": "company_id"},
    "format": "csv",
    "destinations": [{"id": "box", "type": "local", "path": "outbox/slowco/daily"}],
    "deadline": "20h", "recovery": "latest",
}


def _seed(dsn: str) -> None:
    """72 rows a day for the last 4 days behind a view that sleeps slowco_knob.seconds per row
    (in the shared stack's fixture database: every name is slowco's)."""
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE slowco_metrics (company_id text, event_time timestamptz, "
                     "value numeric(12, 2))")
        conn.execute("INSERT INTO slowco_metrics SELECT 'slowco', %s + g * interval '20 min', g "
                     "FROM generate_series(0, 4 * 72 - 1) g", (start,))
        conn.execute("CREATE TABLE slowco_knob (seconds float8 NOT NULL)")
        conn.execute("INSERT INTO slowco_knob VALUES (3)")
        conn.execute("CREATE FUNCTION slowco_slow(v numeric) RETURNS numeric VOLATILE LANGUAGE sql AS "
                     "$$ SELECT pg_sleep((SELECT seconds FROM slowco_knob)); SELECT v $$")
        conn.execute("CREATE VIEW slow_metrics AS SELECT company_id, event_time, "
                     "slowco_slow(value) AS value FROM slowco_metrics")


def COMPANIES(clock: SlotClock) -> dict[str, dict]:  # noqa: N802 (the fixture's name for it)
    return {"slowco": company_file("slowco", [{**EXPORT, "export_hour": clock.hour}])}


@pytest.fixture(scope="module")
def fixture_dsn(shared_stack) -> str:
    return shared_stack.fixture_dsn


def prepare_stack(stack: SchedulerStack) -> None:
    """slowco's source tables, fixture_source's allowlist, and the retention DAG."""
    _seed(stack.env["AIRFLOW_CONN_FIXTURE_SOURCE"])
    stack.add_sources(fixture_source={"slow_metrics": "company_id"})
    shutil.copy(REPO / "dags" / "export_retention.py", stack.root / "dags" / "export_retention.py")


@pytest.fixture(scope="module")
def stack(scheduler_stack: SchedulerStack) -> SchedulerStack:
    return scheduler_stack


def _run(stack: SchedulerStack) -> dict | None:
    """slowco's run of the module's newest due slot (a later slot may fall due mid-test)."""
    newest = f"{stack.clock.newest:%Y-%m-%dT%H:%M:%SZ}"
    runs = [r for r in stack.ledger_runs() if r["company"] == "slowco"
            and r["slot_utc"] == newest]
    return runs[0] if runs else None


def test_cancel_during_render_publishes_nothing_and_is_audited(stack, fixture_dsn):
    stack.wait_for_dags(DAG, timeout=240)  # on a busy machine the first parse comes late
    run_id = stack.wait_for_run_id(DAG, timeout=180)
    stack.wait_for_task(DAG, run_id, "render", states=("running",), timeout=240)
    deadline = time.monotonic() + 120
    while (_run(stack) or {}).get("state") != "rendering":
        assert time.monotonic() < deadline, f"the run never reached rendering: {_run(stack)}"
        time.sleep(1)
    key = _run(stack)["run_key"]

    cancelled = stack.exportctl("cancel", key, "--by", "ops@slowco.example",
                                "--why", "wrong window", check=False)
    with psycopg.connect(fixture_dsn, autocommit=True) as conn:
        conn.execute("UPDATE slowco_knob SET seconds = 0")  # the render may finish now

    why = stack._describe(DAG, run_id, "the cancel")  # the tasks and their logs, if it failed
    assert cancelled.stdout.startswith(f"run {key} cancelled (was rendering)"), (
        f"{cancelled.stdout}{cancelled.stderr}\n{why}")
    run = stack.wait_for_run(DAG, run_id, state="failed", timeout=240)
    states = stack.task_states(DAG, run["dag_run_id"])
    log = stack.task_log(DAG, run_id, "render", lines=200)
    assert states["render"] == "failed", f"{states}\n{log}"
    assert all(states[t] == "upstream_failed" for t in states if t.startswith(("publish",
                                                                              "deliver"))), states
    assert "was cancelled (cancelled by ops@slowco.example at " in log, log
    cancelled_run = _run(stack)
    assert cancelled_run["state"] == "cancelled", cancelled_run
    assert cancelled_run["deliveries"] == [], cancelled_run
    ledger = stack.ledger()
    try:
        assert ledger.latest_artifact(key) is None
    finally:
        ledger.engine.dispose()
    slot = f"slot-{stack.clock.newest:%Y%m%dT%H%MZ}"
    assert [p for p in (stack.outbox / "slowco").rglob(f"*{slot}*") if p.is_file()] == []
    trail = json.loads(stack.exportctl("actions", "--company", "slowco", "--json").stdout)
    assert [(a["who"], a["action"], a["target_id"], a["changed"]) for a in trail] == [
        ("ops@slowco.example", "cancel", key, True)]


def test_the_retention_dag_runs(stack):
    stack.wait_for_dags("export_retention")
    run_id = stack.wait_for_run_id("export_retention", timeout=120)
    stack.wait_for_run("export_retention", run_id, timeout=180)
    dry = json.loads(stack.exportctl("retention", "--dry-run", "--json").stdout)
    assert (dry["deleted"], dry["failed"]) == ([], [])
