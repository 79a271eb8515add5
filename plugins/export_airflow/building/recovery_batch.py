"""``recovery_batch__<company>``: batched recovery of missed periods (ADR 0032).

Built for a company with at least one ``recovery: each`` export. ``recover_missed`` triggers
one run per batch (``conf``: the schedule and up to ``EXPORT_BATCH_RECOVERY_SIZE`` slots; the
note says which), when a schedule has more missed periods than
``EXPORT_BATCH_RECOVERY_THRESHOLD``; its one task ``export_periods`` exports them oldest first,
each period with its own ledger run, artifact and deliveries.

The recovery lane: the task runs in the ``export_catchup`` pool at a priority below every
on-time task, and the DAG runs one batch at a time (``max_active_runs=1``): batches of a
company go in period order, hold at most one executor slot and one place of the company's
render budget (for one period's render at a time), so today's runs keep starting on time.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, Param

from export_airflow.tasks.limits import task_timeout
from export_lib import settings
from export_lib.pipeline.batch_requests import BATCH_TASK, batch_dag_id

# Below any on-time task (those weigh a few units) and any backfill task (-97 and so on): a
# freed executor slot goes to today's work first.
BATCH_PRIORITY = -100


def batch_retry_args(schedules: list[Any]) -> dict[str, Any]:
    """The batch task's retries: a failed period waits for the batch's retry as a failed task
    of its own run would, so each export's own ``retries`` (ADR 0015; else the deployment's
    ``EXPORT_RETRIES`` and friends) apply to its periods. One task serves every ``recovery:
    each`` export of the company, so it takes the most retries, the shortest first delay and
    the shortest longest delay among them: no period is given up sooner, or waits longer
    between tries, than its own export allows."""
    from export_airflow.building.retry_policy import retry_args

    own = [retry_args(s) for s in schedules]
    if not own:
        return {"retries": settings.task_retries(), "retry_delay": settings.retry_delay(),
                "retry_exponential_backoff": 2.0, "max_retry_delay": settings.max_retry_delay()}
    return {"retries": max(a["retries"] for a in own),
            "retry_delay": min(a["retry_delay"] for a in own),
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": min(a["max_retry_delay"] for a in own)}


def build_recovery_batch_dag(config_dir: str, company: str, schedules: list[Any]) -> DAG:
    """``company``'s batched-recovery DAG; ``schedules``: its ``recovery: each`` exports."""
    from export_airflow.access import access_control, quiet_access_control
    from export_airflow.deploy.cluster_policy import CATCHUP_POOL
    from export_airflow.tasks.assets import publish_alias
    from export_airflow.tasks.batch import ExportPeriodsOperator
    from export_airflow.tasks.batch_alerts import BatchFailureNotifier

    example = schedules[0].schedule_id if schedules else f"{company}/<export>"
    with quiet_access_control(), DAG(
        dag_id=batch_dag_id(company),
        schedule=None,
        tags=[f"company:{company}", "kind:recovery"],
        doc_md=__doc__,
        access_control=access_control(company),
        params={
            "schedule_id": Param(example, type="string", title="Export",
                                 description=f"The {company} export whose periods to recover."),
            "periods": Param([], type="array", title="Slots",
                             description="The slots to export, UTC, e.g. 2026-03-28T05:00Z."),
        },
        default_args={"owner": "exports", **batch_retry_args(schedules)},
        max_active_runs=1,
    ) as dag:
        ExportPeriodsOperator(
            task_id=BATCH_TASK, company=company, config_dir=config_dir,
            aliases={s.schedule_id: publish_alias(s.schedule_id) for s in schedules},
            pool=CATCHUP_POOL, priority_weight=BATCH_PRIORITY, weight_rule="absolute",
            execution_timeout=task_timeout("render"),
            # Failed for good: each period left not done alerts as its own run would.
            on_failure_callback=BatchFailureNotifier(company=company, config_dir=config_dir),
        )
    return dag
