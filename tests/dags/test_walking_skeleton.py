"""One demo widget export through the four operators with dag.test(), against the demo source."""

from __future__ import annotations

import csv
import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

# 07:00 Europe/Berlin on 2026-03-29, the spring-forward day (CEST, +02:00): slot 05:00 UTC.
SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)


def _company_dag(dags: Path, company: str, dag_id: str):
    from export_airflow.building.dag_factory import company_dags

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


LINEAGE_PASSWORD = "pw-Lineage-Sekret-7c1d"  # the source login's: in no lineage event


@pytest.fixture()
def password_source(postgres_server, pg_database) -> str:
    """acme's demo rows in a PostgreSQL database read by a login of its own with a known
    password: ``AIRFLOW_CONN_DEMO_SOURCE`` for the run."""
    import uuid

    import psycopg

    from export_lib.source.connections import parse_connection
    from export_lib.source.demo import seed_source
    from tests.world import SEEDED_AT

    database = pg_database.rsplit("/", 1)[1]
    admin = postgres_server.dsn.rsplit("/", 1)[0]
    seed_source(parse_connection("demo_source", f"{admin}/{database}"), ["acme"],
                now=SEEDED_AT, days=3)
    login = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{admin}/{database}", autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{LINEAGE_PASSWORD}'")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {login}")
    yield f"postgresql://{login}:{LINEAGE_PASSWORD}@127.0.0.1:{postgres_server.port}/{database}"
    with psycopg.connect(f"{admin}/{database}", autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {login}")
        conn.execute(f"DROP ROLE {login}")


def test_airflow_dags_test_on_an_export_dag_exits_0_with_the_artifact_published(
        airflow_db, export_world, tmp_path, password_source):
    """``airflow dags test`` as a user runs it (issue 24 item 5): Airflow 3.3.2 crashes after a
    successful run of a DAG with deadline alerts (apache/airflow#73428), so the DAG factory
    leaves them out in that command (export_airflow.deadlines.under_dags_test).

    The same run reports OpenLineage (issue 24 item 2) through Airflow's OpenLineage provider
    to a real HTTP receiver: render and publish START and COMPLETE with the source table in and
    the schedule's artifacts out (schema, column lineage, the exportRun facet), deliver the
    artifacts in and the outbox out; no credential of the source's connection in any event."""
    import json
    import os
    import subprocess
    import sys

    from export_lib.ledger import open_ledger
    from tests.services.lineage import start_lineage_receiver, stop_lineage_receiver

    dags = tmp_path / "dags"
    receiver = start_lineage_receiver()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", "dags", "test", "widget_export__acme__daily-spend",
             SLOT.isoformat(), "--dagfile-path", str(dags / "company_acme.py")],
            env={**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                 "AIRFLOW_CONN_DEMO_SOURCE": password_source,
                 "AIRFLOW__OPENLINEAGE__TRANSPORT": receiver.transport(),
                 "AIRFLOW__OPENLINEAGE__NAMESPACE": "exports-test",
                 "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"},
            capture_output=True, text=True, timeout=300, check=False)
    finally:
        stop_lineage_receiver(receiver)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    assert "'dict' object has no attribute 'hex'" not in result.stdout + result.stderr
    run = open_ledger().get_run("acme/daily-spend/2026-03-29T05:00Z")
    assert run.state == "ready"
    (artifact,) = open_ledger().artifacts(run.run_key)
    assert artifact.version == 1
    assert (export_world.outbox / "acme/daily-spend"
            / "acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv").exists()

    database = password_source.rsplit("/", 1)[1]
    source = {"namespace": f"postgres://127.0.0.1:{password_source.rsplit(':', 1)[1].split('/')[0]}",
              "name": f"{database}.public.widget_metrics"}
    artifacts = {"namespace": "file", "name": f"{export_world.artifacts}/acme/daily-spend"}
    columns = ["company_id", "widget_id", "event_time", "value"]
    job = "widget_export__acme__daily-spend"
    for task in ("render", "publish"):
        events = {e["eventType"]: e for e in receiver.of_job(f"{job}.{task}")}
        assert set(events) == {"START", "COMPLETE"}, (task, sorted(events))
        for kind, event in events.items():
            assert [{k: i[k] for k in ("namespace", "name")} for i in event["inputs"]] == [source]
            assert [{k: o[k] for k in ("namespace", "name")} for o in event["outputs"]] == [
                artifacts], (task, kind)
            (out,) = event["outputs"]
            assert [f["name"] for f in out["facets"]["schema"]["fields"]] == columns
            if (task, kind) != ("render", "START"):  # the file's types, once it is staged
                assert [f.get("type") for f in out["facets"]["schema"]["fields"]] == [
                    "string", "string", "timestamptz", "decimal(14,2)"], (task, kind)
            assert out["facets"]["columnLineage"]["fields"]["value"]["inputFields"] == [
                {**source, "field": "value", "transformations": []}]
            facet = event["run"]["facets"]["exportRun"]
            assert (facet["run_key"], facet["period"], facet["window_start"],
                    facet["config_version"]) == (run.run_key, "2026-03-28",
                                                 "2026-03-27T23:00:00+00:00", run.config_version)
    done = {e["eventType"]: e for e in receiver.of_job(f"{job}.publish")}["COMPLETE"]
    assert (done["run"]["facets"]["exportRun"]["version"],
            done["run"]["facets"]["exportRun"]["sha256"]) == ("1", artifact.sha256)
    delivered = [e for e in receiver.of_job(f"{job}.deliver") if e["eventType"] == "COMPLETE"]
    assert [[{k: o[k] for k in ("namespace", "name")} for o in e["outputs"]]
            for e in delivered] == [[{"namespace": "file",
                                      "name": str(export_world.outbox / "acme/daily-spend")}]]
    leaked = [json.loads(body).get("job", {}).get("name") for body in receiver.raw
              if LINEAGE_PASSWORD.encode() in body or b"reader_" in body]
    assert receiver.raw and leaked == []


def test_only_the_dags_test_command_leaves_the_deadline_alerts_out():
    from export_airflow.deadlines import under_dags_test

    assert under_dags_test(["airflow", "dags", "test", "x", "2026-03-29"])
    assert under_dags_test(["/venv/bin/airflow", "--verbose", "dags", "test", "x"])
    for argv in (["airflow", "scheduler"], ["airflow", "dag-processor"], ["airflow", "dags",
                 "list"], ["airflow", "tasks", "test", "x", "t"], ["python", "-m", "pytest"]):
        assert not under_dags_test(argv), argv
