"""Repeated triggers, clears and manual exports through Airflow leave exactly one artifact, one
delivery per destination and one asset event (dag.test() runs, kept few: ~10 s each)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.dags.test_walking_skeleton import SLOT, _company_dag


def _counts() -> tuple[int, int, int]:
    from export_lib.delivery import list_deliveries
    from export_lib.ledger import open_ledger

    ledger = open_ledger()
    return (ledger.count("runs"), ledger.count("artifacts"), len(list_deliveries(ledger.engine)))


def _asset_events(artifacts: Path) -> list[dict]:
    """The extras of Airflow's events on asset export:acme/daily-spend that announce artifacts
    under ``artifacts`` (the metadata DB is the worker's, shared by the tests it runs)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(AssetEvent).join(AssetModel, AssetEvent.asset_id
                                                       == AssetModel.id)
                               .where(AssetModel.name == "export:acme/daily-spend")
                               .order_by(AssetEvent.id)).all()
        return [dict(e.extra) for e in rows
                if str(e.extra.get("artifact_uri", "")).startswith(artifacts.resolve().as_uri())]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                  and ".staging" not in p.parts)


def test_retrigger_and_rerun_keep_one_artifact_and_one_delivery(airflow_db, export_world,
                                                                tmp_path):
    from airflow.utils.state import DagRunState

    dag = _company_dag(tmp_path / "dags", "acme", "widget_export__acme__daily-spend")
    first = dag.test(logical_date=SLOT)
    assert first.state == DagRunState.SUCCESS
    counts, files = _counts(), _files(export_world.home / "exports")
    assert counts == (1, 1, 1)
    # publish announced v1 on the schedule's asset, through its alias (ADR 0024).
    (event,) = _asset_events(export_world.artifacts)
    assert (event["period"], event["version"], event["rows"], event["correction"]) == (
        "2026-03-28", 1, 72, False)

    # dag.test() for the same logical date replaces the Airflow run and executes every task
    # again — what clearing the whole run with downstream does.
    again = dag.test(logical_date=SLOT)
    assert again.state == DagRunState.SUCCESS
    assert (_counts(), _files(export_world.home / "exports")) == (counts, files)

    # A manual trigger at 09:12 Berlin maps to that day's 07:00 slot: the same run, reported.
    manual = dag.test(logical_date=datetime(2026, 3, 29, 7, 12, tzinfo=UTC))
    assert manual.state == DagRunState.SUCCESS
    assert (_counts(), _files(export_world.home / "exports")) == (counts, files)
    # Neither re-run published a new version: no consumer hears of the period again.
    assert _asset_events(export_world.artifacts) == [event]


def test_manual_export_from_the_trigger_form(airflow_db, export_world, tmp_path):
    from airflow.utils.state import DagRunState
    from export_airflow.building.dag_factory import company_dags

    from export_lib.ledger import open_ledger

    (dag,) = company_dags(tmp_path / "dags" / "config", "acme", only_dag="manual_export__acme")
    assert dag.params["company"] == "acme"
    conf = {"company": "acme", "base_export": "acme/daily-spend", "reason": "quarterly audit",
            "window_start": "2026-03-27T00:00:00+01:00", "window_end": "2026-03-28T00:00:00+01:00",
            "columns": ["company_id", "widget_id", "value"], "format": "csv"}
    run = dag.test(run_conf=conf, logical_date=datetime(2026, 3, 30, 12, tzinfo=UTC))
    assert run.state == DagRunState.SUCCESS, [(t.task_id, t.state) for t in run.get_task_instances()]
    ledger = open_ledger()
    (manual,) = [r for r in ledger.list_runs("acme") if r.trigger == "manual"]
    assert (manual.window_start, manual.window_end) == (
        datetime(2026, 3, 26, 23, tzinfo=UTC), datetime(2026, 3, 27, 23, tzinfo=UTC))
    (artifact,) = ledger.artifacts(manual.run_key)
    assert artifact.rows == 72
    delivered = list((export_world.outbox / "acme/daily-spend").glob("*manual*.csv"))
    assert len(delivered) == 1
    assert delivered[0].read_text().splitlines()[0] == "company_id,widget_id,value"
    assert any("requested by dag_test (quarterly audit)" in (e["detail"] or "")
               for e in ledger.events(manual.run_key))
