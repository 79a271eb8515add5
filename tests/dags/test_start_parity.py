"""``exportctl run`` and the DAG run of the same slot go through the same start policies and
record the same outcome, with the same words, in the ledger."""

from __future__ import annotations

from datetime import UTC, datetime

import yaml

from tests.dags.test_walking_skeleton import SLOT, _company_dag

PAUSED = "company is paused; resume it in its config file to export"


def test_a_paused_company_slot_is_skipped_with_the_same_reason_by_the_cli_and_the_dag(
        airflow_db, export_world, tmp_path, monkeypatch):
    from airflow.utils.state import DagRunState, TaskInstanceState

    from export_lib.cli.commands import run_one
    from export_lib.ledger import open_ledger

    config = tmp_path / "dags" / "config"
    data = yaml.safe_load((config / "acme.yaml").read_text())
    data["company"]["status"] = "paused"
    (config / "acme.yaml").write_text(yaml.safe_dump(data))
    key = "acme/daily-spend/2026-03-29T05:00Z"

    cli = run_one(str(config), "acme/daily-spend", "2026-03-29T05:00Z",
                  now=datetime(2026, 3, 29, 5, 1, tzinfo=UTC))
    assert (cli["state"], cli["skipped"], cli["artifact"]) == ("skipped", PAUSED, None)
    cli_run = open_ledger().get_run(key)

    # The same slot through Airflow, against a fresh ledger.
    monkeypatch.setenv("EXPORT_LEDGER_URL", f"sqlite:///{export_world.home}/ledger-dag.db")
    open_ledger().upgrade()
    dag_run = _company_dag(tmp_path / "dags", "acme", "widget_export__acme__daily-spend") \
        .test(logical_date=SLOT)
    states = {t.task_id: t.state for t in dag_run.get_task_instances()}
    assert dag_run.state == DagRunState.SUCCESS
    assert states["resolve_window"] == TaskInstanceState.SKIPPED
    dag_ledger_run = open_ledger().get_run(key)

    assert (cli_run.state, cli_run.reason) == (dag_ledger_run.state, dag_ledger_run.reason) == (
        "skipped", PAUSED)
    assert open_ledger().count("artifacts") == 0
