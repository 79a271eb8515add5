"""One demo widget export through the four operators with dag.test(), against the demo source."""

from __future__ import annotations

import csv
import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

# 07:00 Europe/Berlin on 2026-03-29, the spring-forward day (CEST, +02:00): slot 05:00 UTC.
SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)


def _company_dag(dags: Path, company: str, dag_id: str):
    from export_airflow.dag_factory import company_dags

    dag = next(d for d in company_dags(dags / "config", company) if d.dag_id == dag_id)
    # Airflow 3.3.2's dag.test() path passes the authoring DAG to DagRun.update_state, whose
    # deadline list then holds alert dicts instead of alert ids ("'dict' object has no attribute
    # 'hex'" on success). The scheduler path uses the serialized DAG and is unaffected; deadline
    # alerts are covered by tests/dags/test_edge_policies.py instead.
    dag.deadline = []
    return dag


def test_daily_widget_export_delivers_exactly_the_window_rows(airflow_db, export_world, tmp_path):
    from export_lib.ledger import open_ledger

    dag = _company_dag(tmp_path / "dags", "acme", "widget_export__acme__daily-spend")
    dag_run = dag.test(logical_date=SLOT)
    assert dag_run.state == "success", [(t.task_id, t.state) for t in dag_run.get_task_instances()]

    # Calendar day 2026-03-28 in Berlin: [2026-03-27T23:00Z, 2026-03-28T23:00Z).
    with sqlite3.connect(export_world.demo_source) as conn:
        expected = conn.execute(
            "SELECT widget_id, event_time, value FROM widget_metrics WHERE company_id = 'acme' "
            "AND event_time >= '2026-03-27 23:00:00' AND event_time < '2026-03-28 23:00:00' "
            "ORDER BY event_time, widget_id").fetchall()
    delivered = (export_world.outbox / "acme/daily-spend"
                 / "acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv")
    with open(delivered, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(expected) == 72
    assert [(r["widget_id"], Decimal(r["value"])) for r in rows] == [
        (w, Decimal(str(v))) for w, _, v in expected]
    assert {r["company_id"] for r in rows} == {"acme"}

    ledger = open_ledger()
    run = ledger.get_run("acme/daily-spend/2026-03-29T05:00Z")
    assert (run.state, run.window_start, run.window_end) == (
        "ready", datetime(2026, 3, 27, 23, tzinfo=UTC), datetime(2026, 3, 28, 23, tzinfo=UTC))
    assert [a.version for a in ledger.artifacts(run.run_key)] == [1]


def test_airflow_dags_test_on_an_export_dag_exits_0_with_the_artifact_published(
        airflow_db, export_world, tmp_path):
    """``airflow dags test`` as a user runs it (issue 24 item 5): Airflow 3.3.2 crashes after a
    successful run of a DAG with deadline alerts (apache/airflow#73428), so the DAG factory
    leaves them out in that command (export_airflow.deadlines.under_dags_test)."""
    import os
    import subprocess
    import sys

    from export_lib.ledger import open_ledger

    dags = tmp_path / "dags"
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "widget_export__acme__daily-spend",
         SLOT.isoformat(), "--dagfile-path", str(dags / "company_acme.py")],
        env={**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}, capture_output=True,
        text=True, timeout=300, check=False)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    assert "'dict' object has no attribute 'hex'" not in result.stdout + result.stderr
    run = open_ledger().get_run("acme/daily-spend/2026-03-29T05:00Z")
    assert run.state == "ready"
    assert [a.version for a in open_ledger().artifacts(run.run_key)] == [1]
    assert (export_world.outbox / "acme/daily-spend"
            / "acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv").exists()


def test_only_the_dags_test_command_leaves_the_deadline_alerts_out():
    from export_airflow.deadlines import under_dags_test

    assert under_dags_test(["airflow", "dags", "test", "x", "2026-03-29"])
    assert under_dags_test(["/venv/bin/airflow", "--verbose", "dags", "test", "x"])
    for argv in (["airflow", "scheduler"], ["airflow", "dag-processor"], ["airflow", "dags",
                 "list"], ["airflow", "tasks", "test", "x", "t"], ["python", "-m", "pytest"]):
        assert not under_dags_test(argv), argv
