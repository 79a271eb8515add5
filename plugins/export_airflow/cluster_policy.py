"""Cluster policy: catch-up work gets its own budget so it cannot delay on-time exports.

Installed by ``make setup`` as ``$AIRFLOW_HOME/config/airflow_local_settings.py`` (see
``deploy/airflow_local_settings.py``). Airflow calls ``task_instance_mutation_hook`` in the
scheduler when it creates a task instance. Render tasks of backfill runs (the recovery of missed
slots, ADR 0006, and operators' backfills), and of scheduled runs queued long after their slot,
move to the ``export_catchup`` pool, while on-time renders share ``export_render``. Every task of
such a catch-up run also loses priority, so when executor slots are scarce an on-time task is
queued first (Airflow breaks priority ties by the older logical date, i.e. the catch-up run).
``recover_missed`` is created skipped outside scheduled runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

RENDER_POOL = "export_render"
CATCHUP_POOL = "export_catchup"
CATCHUP_AFTER = timedelta(hours=1)
EXPORT_DAG_PREFIXES = ("widget_export__", "data_export__")
CATCHUP_PRIORITY_PENALTY = 100
RECOVER_TASK = "recover_missed"


def is_catch_up(run_type: str, logical_date: datetime | None, queued_at: datetime | None,
                now: datetime) -> bool:
    kind = str(run_type).split(".")[-1].lower()
    if kind == "backfill":
        return True
    if kind != "scheduled" or logical_date is None:
        return False
    return (queued_at or now) - logical_date > CATCHUP_AFTER


def task_instance_mutation_hook(task_instance: Any, dag_run: Any = None) -> None:
    if not str(task_instance.dag_id).startswith(EXPORT_DAG_PREFIXES):
        return
    if dag_run is None:
        return
    if task_instance.task_id == RECOVER_TASK:
        _skip_recovery_outside_scheduled_runs(task_instance, dag_run)
        return
    if not is_catch_up(dag_run.run_type, dag_run.logical_date, dag_run.queued_at,
                       datetime.now(UTC)):
        return
    task_instance.priority_weight = (task_instance.priority_weight or 1) - CATCHUP_PRIORITY_PENALTY
    if task_instance.task_id == "render":
        task_instance.pool = CATCHUP_POOL
        task_instance.pool_slots = 1


def _skip_recovery_outside_scheduled_runs(task_instance: Any, dag_run: Any) -> None:
    """Only scheduled runs recover missed slots (ADR 0006). In a backfill or manual run the
    task would start a worker process just to skip itself (``RecoverMissedOperator`` does so
    too, e.g. after a clear): created skipped instead, 29 backfill runs launch 29 processes
    fewer on a 2-core machine."""
    if str(dag_run.run_type).split(".")[-1].lower() == "scheduled" or task_instance.state:
        return
    now = datetime.now(UTC)
    task_instance.state = "skipped"
    task_instance.start_date = task_instance.end_date = now
