"""``late_data: restate`` as its own short DAG run, so a period waiting for its restatement holds
no ``max_active_runs`` slot of its export DAG (docs/adr/0007-restatement-runs.md).

The export DAG run ends with ``restate_later`` right after its first delivery (so its deadline
is judged on that delivery): it triggers a run of its company's ``restatement__<company>`` DAG
whose ``run_after`` is the window end + grace, with the run key as its only ``conf``. The DAG is
the company's (its roles only, ADR 0023) and takes the run from the ledger: a key of another
company is refused, whatever the ``conf`` of a hand-triggered run says. Airflow's scheduler
starts no DAG run before its ``run_after``, so the restatement waits as a queued run, using no
worker, pool or run slot of the export DAG. Then ``restate_due`` checks the time (a run
triggered early by hand waits, rescheduling), ``restate_render`` re-renders with a fresh source
cutoff within the render budget, ``restate_publish`` publishes changed content as version N+1
marked as a correction (unchanged content keeps version N) and ``restate_deliver`` delivers it
to the run's captured destinations. The restatement run id is derived from the run key, so a
cleared or retried ``restate_later`` finds the existing run and succeeds without restating
twice.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param

from export_airflow.tasks.assets import corrections_alias
from export_airflow.tasks.limits import task_timeout
from export_airflow.tasks.operators import (
    SUMMARY,
    DeliverOperator,
    PublishOperator,
    RenderCsvOperator,
    export_errors,
)
from export_airflow.tasks.sensors import RestateDueSensor
from export_lib.logfmt import get_logger

log = get_logger(__name__)  # not self.log: our records carry the run's fields (logfmt)

RESTATEMENT_PREFIX = "restatement__"


def restatement_dag_id(company: str) -> str:
    """``restatement__acme``: the company's restatement DAG."""
    return RESTATEMENT_PREFIX + company
_RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.~:+-]")


def restatement_run_id(run_key: str) -> str:
    """``restate__acme_daily-spend_2026-03-29T05:00Z``: one restatement run per export run."""
    return "restate__" + _RUN_ID_UNSAFE.sub("_", run_key)


class RestateLaterOperator(TriggerDagRunOperator):
    """Trigger this period's restatement run, to start at window end + grace.

    :param run: the summary pushed by ResolveWindowOperator (templated / XComArg)
    :param grace_seconds: the schedule's late-data grace
    """

    template_fields = (*TriggerDagRunOperator.template_fields, "run")

    def __init__(self, *, run: Any, grace_seconds: float, **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", task_timeout("small"))
        # The trigger_dag_id is the run's company's, set in execute().
        super().__init__(trigger_dag_id=RESTATEMENT_PREFIX, skip_when_already_exists=True,
                         logical_date=None, openlineage_inject_parent_info=False, **kwargs)
        self.run = run
        self.grace_seconds = grace_seconds

    def execute(self, context: Any) -> Any:
        from export_lib.pipeline import RunSummary

        with export_errors():
            summary = RunSummary.from_xcom(self.run)
        due = summary.window.end + timedelta(seconds=self.grace_seconds)
        self.trigger_dag_id = restatement_dag_id(summary.company)
        self.trigger_run_id = restatement_run_id(summary.run_key)
        self.run_after = max(due, datetime.now(UTC))
        self.conf = {"run_key": summary.run_key}
        if context["ti"].get_dr_count(self.trigger_dag_id, run_ids=[self.trigger_run_id]):
            # A cleared or retried task: the restatement is already scheduled, once.
            log.info("company=%s schedule=%s period=%s: restatement run %s exists already",
                     *summary.log_fields(), self.trigger_run_id, extra=summary.log_context())
            return None
        log.info("company=%s schedule=%s period=%s: restatement run %s of %s starts at %s "
                 "(window end + grace)", *summary.log_fields(), self.trigger_run_id,
                 self.trigger_dag_id, due.isoformat(), extra=summary.log_context())
        return super().execute(context)


def build_restatement_dag(config_dir: str, company: str) -> DAG:
    """``company``'s restatement DAG (built by its loader when one of its exports restates)."""
    from export_airflow.access import access_control, quiet_access_control
    from export_airflow.building.retry_policy import delivery_policy
    from export_lib.config.destinations import DEFAULT_RETRY_WINDOW

    with quiet_access_control(), DAG(
        dag_id=restatement_dag_id(company),
        schedule=None,
        tags=[f"company:{company}", "kind:restatement"],
        doc_md=__doc__,
        access_control=access_control(company),
        render_template_as_native_obj=True,
        params={"run_key": Param("", type="string", title="Run key",
                                 description=f"The {company} run to restate, e.g. "
                                             f"{company}/<export>/<slot>; it is read from the "
                                             "ledger.")},
        default_args={"owner": "exports", "retries": 3, "retry_delay": timedelta(minutes=10)},
        max_active_runs=8,
    ) as dag:
        due = RestateDueSensor(task_id="restate_due", run_key="{{ params.run_key }}",
                               company=company, poke_interval=60)
        again = RenderCsvOperator(task_id="restate_render", run=due.output,
                                  regenerate=True, pool="export_catchup")
        corrected = PublishOperator(task_id="restate_publish", rendered=again.output,
                                    correction=True, asset_alias=corrections_alias(company),
                                    config_dir=config_dir)
        # The run's captured destinations (pushed by publish), retried like the export's own
        # deliveries (inside the default retry window; the ledger decides when a delivery's
        # window has closed).
        policy = delivery_policy()
        DeliverOperator.partial(
            task_id="restate_deliver", published=corrected.output[SUMMARY], pool="export_deliver",
            execution_timeout=task_timeout("deliver"), config_dir=config_dir,
            retries=policy.retries_for(DEFAULT_RETRY_WINDOW), retry_delay=policy.base,
            retry_exponential_backoff=2.0, max_retry_delay=policy.cap, retry_policy=policy,
        ).expand(destination_id=corrected.output)
    return dag
