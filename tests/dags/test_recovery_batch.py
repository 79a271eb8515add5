"""The batched-recovery DAG (ADR 0032) as plain data: one task in the recovery lane, one batch
of a company at a time, its params, and the company's publish aliases as its outlets."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CONFIG = REPO / "dags" / "config"


def test_the_batch_dag_runs_one_task_in_the_catch_up_pool_below_todays_work():
    from export_airflow.building.recovery_batch import build_recovery_batch_dag

    from export_lib.ledger.seniority import open_catalog

    schedules = [s for s in open_catalog(str(CONFIG), only="acme").for_company("acme")
                 if s.policies.recovery == "each"]
    dag = build_recovery_batch_dag(str(CONFIG), "acme", schedules)

    assert (dag.dag_id, dag.schedule, dag.max_active_runs) == ("recovery_batch__acme", None, 1)
    assert sorted(dag.tags) == ["company:acme", "kind:recovery"]
    assert set(dag.params) == {"schedule_id", "periods"}
    (task,) = dag.tasks
    assert (task.task_id, task.pool, task.priority_weight, task.weight_rule) == (
        "export_periods", "export_catchup", -100, "absolute")
    assert task.company == "acme"
    assert task.aliases == {s.schedule_id: f"export-alias:{s.schedule_id}"
                            for s in schedules} != {}
    assert task.retries == 11


def test_the_batch_task_alerts_its_undone_periods_when_it_fails_for_good():
    from export_airflow.building.recovery_batch import build_recovery_batch_dag
    from export_airflow.tasks.batch_alerts import BatchFailureNotifier

    dag = build_recovery_batch_dag(str(CONFIG), "acme", [])
    (task,) = dag.tasks
    callbacks = task.on_failure_callback
    (notifier,) = callbacks if isinstance(callbacks, list) else [callbacks]
    assert isinstance(notifier, BatchFailureNotifier)
    assert (notifier.company, notifier.config_dir) == ("acme", str(CONFIG))
    assert not task.on_retry_callback  # a retry is silent, as for every export task


def test_the_batch_task_retries_its_periods_as_their_own_exports_say(tmp_path):
    """An export's own ``retries`` (ADR 0015) reach its batched periods: with two ``recovery:
    each`` exports, the task takes the most retries, the shortest first delay and the shortest
    longest delay of the two, so neither export's periods are retried later or given up
    sooner than its own runs would be."""
    import shutil
    from datetime import timedelta

    from export_airflow.building.recovery_batch import build_recovery_batch_dag

    from export_lib.ledger.seniority import open_catalog

    config = tmp_path / "config"
    config.mkdir()
    shutil.copy(CONFIG / "defaults.yaml", config)
    text = (CONFIG / "acme.yaml").read_text()
    hourly = "    recovery: latest\n"
    assert text.count(hourly) == 1
    text = text.replace("    recovery: each\n",
                        "    recovery: each\n    retries: {count: 2, delay: 5s, max_delay: 1h}\n")
    text = text.replace(hourly, "    recovery: each\n    retries: {count: 4, delay: 30s, "
                                "max_delay: 2h}\n")
    (config / "acme.yaml").write_text(text)
    catalog = open_catalog(str(config), only="acme")
    schedules = [catalog.schedule("acme/daily-spend"), catalog.schedule("acme/hourly-clicks")]
    assert {s.policies.recovery for s in schedules} == {"each"}

    (task,) = build_recovery_batch_dag(str(config), "acme", schedules).tasks

    assert (task.retries, task.retry_delay, task.max_retry_delay, task.retry_exponential_backoff
            ) == (4, timedelta(seconds=5), timedelta(hours=1), 2.0)
    (one,) = build_recovery_batch_dag(str(config), "acme", schedules[:1]).tasks
    assert (one.retries, one.retry_delay, one.max_retry_delay) == (
        2, timedelta(seconds=5), timedelta(hours=1))
