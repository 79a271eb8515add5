"""Late-data sensors, rescheduling (no worker sleeps while waiting).

* :class:`WatermarkSensor` — ``late_data: wait_for_watermark``: render only once the source's
  ingestion watermark passed the window end + grace, or at the run's deadline at the latest.
* :class:`RestateDueSensor` — ``late_data: restate``: in the company's ``restatement__<id>`` DAG
  (export_airflow/building/restatement.py), wait until window end + grace, then the restatement tasks
  re-render the period with a fresh cutoff; different content becomes version N+1, marked as a
  correction that supersedes the earlier version.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator

from export_airflow.tasks.limits import task_timeout
from export_airflow.tasks.operators import CancelsSourceQueries, export_errors
from export_lib import settings
from export_lib.logfmt import get_logger

log = get_logger(__name__)  # not self.log: our records carry the run's fields (logfmt)


def poke_interval(schedule: Any = None) -> timedelta:
    """How often ``wait_for_watermark`` looks: the schedule's ``late_data.poke_interval``, else
    the deployment's ``EXPORT_WATERMARK_POKE_SECONDS``, else 5 minutes (ADR 0015)."""
    own = schedule.policies.late_data.poke_interval if schedule is not None else None
    return own or settings.watermark_poke_interval()


class WatermarkSensor(CancelsSourceQueries, BaseSensorOperator):
    """:param run: the summary pushed by ResolveWindowOperator (templated / XComArg)"""

    template_fields = ("run",)

    def __init__(self, *, run: Any, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("execution_timeout", task_timeout("sensor"))  # per poke
        kwargs.setdefault("poke_interval", poke_interval().total_seconds())
        super().__init__(**kwargs)
        self.run = run

    def poke(self, context: Any) -> bool:
        from export_airflow.runtime.connections import airflow_resolver
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.pipeline import RunSummary, watermark_ready

        with export_errors():
            run = RunSummary.from_xcom(self.run)
            ready, reason = watermark_ready(task_ledger(), run.run_key, now=datetime.now(UTC),
                                            resolver=airflow_resolver())
        log.info("company=%s schedule=%s period=%s: window end %s: %s", *run.log_fields(),
                 run.window.end.isoformat(), reason, extra=run.log_context())
        return ready


class RestateDueSensor(BaseSensorOperator):
    """Wait until the restated run's window end + grace, then push its summary for the
    restatement's render. The run comes from the ledger by its key (ADR 0023), never from the
    trigger's ``conf``, and must be this DAG's company's.

    :param run_key: the run to restate (templated: ``{{ params.run_key }}``)
    :param company: the company of this restatement DAG
    """

    template_fields = ("run_key",)

    def __init__(self, *, run_key: str, company: str, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("execution_timeout", task_timeout("sensor"))  # per poke
        kwargs.setdefault("poke_interval", 600)
        super().__init__(**kwargs)
        self.run_key = run_key
        self.company = company

    def poke(self, context: Any) -> Any:
        from airflow.sdk import PokeReturnValue

        from export_airflow.runtime.ledger import task_ledger
        from export_lib.pipeline.restatement import restated_run

        with export_errors():
            run, grace = restated_run(task_ledger(), self.run_key, self.company)
        due = run.window.end + grace
        now = datetime.now(UTC)
        log.info("company=%s schedule=%s period=%s: restatement %s at %s", *run.log_fields(),
                 "due" if now >= due else "waits until", due.isoformat(), extra=run.log_context())
        return PokeReturnValue(is_done=now >= due, xcom_value=run.as_xcom())
