"""A source column's type changes between two runs of an export DAG under ``schema_policy:
warn`` (ADR 0025, dag.test() against a real SMTP server): publish announces the changed file
with its marker and the exports team and the owner get one e-mail; the next run, already under
the new contract, is plain and sends nothing."""

from __future__ import annotations

import html
import sqlite3
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.dags.test_reruns import _asset_events
from tests.dags.test_walking_skeleton import SLOT, _company_dag
from tests.services.smtp import SmtpRelay, start_smtp, stop_smtp

RETYPED = "column value: type decimal(14,2) → string"


@pytest.fixture()
def smtp_server(monkeypatch) -> Iterator[SmtpRelay]:
    relay = start_smtp()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT",
                       f"smtp://127.0.0.1:{relay.port}/?from_email=airflow%40example.com"
                       "&disable_ssl=true&disable_tls=true&retry_limit=0&timeout=10")
    yield relay
    stop_smtp(relay)


def _retype_value_column(demo_source) -> None:
    """SQLite cannot ALTER a column's type: the table is rebuilt with ``value TEXT``."""
    with sqlite3.connect(demo_source) as conn:
        conn.executescript(
            "ALTER TABLE widget_metrics RENAME TO widget_metrics_old;"
            "CREATE TABLE widget_metrics (company_id TEXT NOT NULL, widget_id TEXT NOT NULL, "
            "event_time TIMESTAMP NOT NULL, value TEXT NOT NULL, ingested_at TIMESTAMP NOT NULL,"
            " PRIMARY KEY (company_id, widget_id, event_time));"
            "INSERT INTO widget_metrics SELECT * FROM widget_metrics_old;")


def _forget_dag(dag_id: str) -> None:
    """Airflow's own "Delete DAG": every row of ``dag_id`` in the metadata database."""
    from airflow.api.common.delete_dag import delete_dag
    from airflow.exceptions import DagNotFound

    try:
        delete_dag(dag_id, keep_records_in_log=False)
    except DagNotFound:
        pass


def _subjects(relay: SmtpRelay) -> list[str]:
    return [str(m["Subject"]) for m in relay.messages]


def test_warn_publishes_the_change_announces_it_and_alerts_once(airflow_db, export_world,
                                                                 tmp_path, smtp_server):
    from airflow.utils.state import DagRunState

    company = tmp_path / "dags" / "config" / "acme.yaml"
    company.write_text(company.read_text().replace(
        "    recovery: each\n", "    recovery: each\n    schema_policy: warn\n", 1))
    # This worker may have run this DAG id before under another config; Airflow keeps every
    # serialized version, and dag.test() of a changed one then failed on the run's DAG
    # ("Multiple rows returned ... DagRun.serialized_dag", make test, 3 Dec): start from none.
    _forget_dag("widget_export__acme__daily-spend")
    dag = _company_dag(tmp_path / "dags", "acme", "widget_export__acme__daily-spend")

    assert dag.test(logical_date=SLOT).state == DagRunState.SUCCESS
    (first,) = _asset_events(export_world.artifacts)
    assert (first["schema_major"], first["schema_change"], first["schema_diff"]) == (1, None, [])

    _retype_value_column(export_world.demo_source)
    assert dag.test(logical_date=SLOT + timedelta(days=1)).state == DagRunState.SUCCESS
    changed = _asset_events(export_world.artifacts)[1]
    assert (changed["period"], changed["schema_major"], changed["schema_change"],
            changed["schema_diff"]) == ("2026-03-29", 1, "warn", [RETYPED])
    assert changed["schema_fingerprint"] != first["schema_fingerprint"]
    assert _subjects(smtp_server) == [
        "[exports] published with a changed schema: acme/daily-spend 2026-03-29"]
    (_, rcpts), = smtp_server.handler.envelopes
    assert sorted(rcpts) == ["data-team@acme.example", "exports-team@example.com"]
    body = html.unescape(next(p for p in smtp_server.messages[0].walk()
                              if p.get_content_type() == "text/html")
                         .get_payload(decode=True).decode())
    assert "run:     acme/daily-spend/2026-03-30T05:00Z" in body
    assert ("reason:  the file's schema changed and was published under schema_policy: warn; "
            f"it is the schedule's contract now ({changed['schema_fingerprint'][:12]}, was "
            f"{first['schema_fingerprint'][:12]}): {RETYPED}") in body
    assert "  exportctl schema acme/daily-spend" in body

    # The next period is published under the new contract: no marker, no second e-mail.
    assert dag.test(logical_date=SLOT + timedelta(days=2)).state == DagRunState.SUCCESS
    later = _asset_events(export_world.artifacts)[2]
    assert (later["schema_change"], later["schema_fingerprint"]) == (
        None, changed["schema_fingerprint"])
    assert len(smtp_server.messages) == 1
