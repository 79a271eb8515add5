"""``recover_missed``: a scheduled run hands its DAG's missed slots to an Airflow backfill.

ADR 0006. Export DAGs use ``catchup=False``: the scheduler always creates the newest due slot
at once, so the current slot never waits behind a backlog. Missed slots (an outage, a new DAG
within the lookback) are recovered by this task, in scheduled runs of ``recovery: each``
schedules only: it finds the slots before its own that have no run and creates **one Airflow
backfill** over them through the public REST API (``POST /api/v2/backfills``, the same path as
the UI's backfill dialog; client: export_lib.pipeline.backfills), oldest first,
``max_active_runs`` = the catch-up budget, ``reprocess_behavior=none``. More missed periods
than ``EXPORT_BATCH_RECOVERY_THRESHOLD`` (or settled ones among them) are recovered in batches
instead: runs of the company's ``recovery_batch__<company>`` DAG (ADR 0032). Backfill runs are
ordered after scheduled runs by the scheduler, and the cluster policy sends their renders to
the ``export_catchup`` pool.

No task touches the metadata database: the API is reached with the credentials of the Airflow
connection ``export_airflow_api`` (``make run`` defines it; in production an operator creates it
in the UI or a secrets backend). Idempotent: a dry run first lists the slots still without a run;
none → nothing to do; Airflow allows one active backfill per DAG and never creates a second run
for a logical date.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from export_airflow.runtime.metrics import emit
from export_lib import settings
from export_lib.logfmt import bind, get_logger, scope
from export_lib.pipeline.backfills import API_CONN_ID, AirflowApi

log = get_logger(__name__)  # not self.log: our records carry the run's fields (logfmt)


def catchup_lookback(schedule: Any = None) -> timedelta:
    """How far back a scheduled run looks for missed slots at least: the schedule's
    ``catchup.lookback``, else the deployment's ``EXPORT_CATCHUP_LOOKBACK_HOURS``, else 48 h
    (ADR 0015; it reaches further back to the previous run after an outage)."""
    own = schedule.policies.catchup if schedule is not None else None
    if own is not None and own.lookback is not None:
        return own.lookback  # 0 is a value here: look back only to the previous run
    return settings.catchup_lookback()


def batch_threshold(schedule: Any = None) -> int:
    """More missed periods than this are recovered in batches (ADR 0032): the schedule's
    ``catchup.batch_over``, else ``EXPORT_BATCH_RECOVERY_THRESHOLD``, else 8."""
    own = schedule.policies.catchup if schedule is not None else None
    if own is not None and own.batch_over is not None:
        return own.batch_over
    return settings.batch_recovery_threshold()


def api_from_airflow(conn_id: str = API_CONN_ID) -> AirflowApi:
    """The REST client (export_lib.pipeline.backfills) with the credentials of the Airflow
    connection ``conn_id`` (UI, secrets backend or ``AIRFLOW_CONN_*``), logged in."""
    from export_airflow.tasks.operators import export_errors

    with export_errors():
        return AirflowApi.from_connection(BaseHook.get_connection(conn_id)).login()


class RecoverMissedOperator(BaseOperator):
    """Backfill the missed slots before this scheduled run's slot (recovery ``each``).

    :param schedule_id: e.g. ``acme/daily-spend`` (templated)
    :param config_dir: the config catalog directory (templated)
    :param lookback_seconds: how far back to look at least (the DAG factory passes the
        schedule's :func:`catchup_lookback`; None: the deployment's)
    """

    template_fields: Sequence[str] = ("schedule_id", "config_dir")
    ui_color = "#f0f0f0"

    def __init__(self, *, schedule_id: str, config_dir: str,
                 lookback_seconds: float | None = None, **kwargs: Any) -> None:
        # Its own retry budget, not the export's 5-day one (default_args are merged in before
        # __init__, so these are set, not defaulted): one retry for an unreachable API (an
        # incident), none for a slow one (the client waits above the server's work and defers
        # to the next scheduled run, issue 25), so the run holds its max_active_runs slot for
        # minutes at most. The timeout is above the client's longest wait (2 x 240 s + 60 s).
        kwargs.update(retries=1, retry_delay=timedelta(minutes=1), retry_exponential_backoff=0,
                      execution_timeout=timedelta(minutes=10))
        super().__init__(**kwargs)
        self.schedule_id = schedule_id
        self.config_dir = config_dir
        self.lookback_seconds = lookback_seconds

    @scope
    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.tasks.operators import export_errors
        from export_lib.ledger.seniority import open_catalog
        from export_lib.periods.recovery import recovery_range
        from export_lib.pipeline import slot_log_context

        dag_run = context["dag_run"]
        run_type = str(dag_run.run_type).split(".")[-1].lower()
        if run_type != "scheduled":
            raise AirflowSkipException(f"{run_type} run: only scheduled runs recover missed slots")
        company = self.schedule_id.split("/", 1)[0]
        bind(company=company, schedule=self.schedule_id)
        schedule = open_catalog(self.config_dir, only=company).schedule(self.schedule_id)
        slot = dag_run.logical_date
        # This DAG run's own run (resolve_window registers it alongside): a plain datetime,
        # not Airflow's pendulum instant.
        bind(**slot_log_context(schedule, datetime.fromtimestamp(slot.timestamp(), UTC)))
        fields = (company, self.schedule_id, f"{slot:%Y-%m-%dT%H:%MZ}")
        api = api_from_airflow()
        dag_id = dag_run.dag_id
        with export_errors():
            previous = api.previous_automated_slot(dag_id, slot)
        wanted = recovery_range(schedule.timing, slot, previous=previous,
                                lookback=catchup_lookback() if self.lookback_seconds is None
                                else timedelta(seconds=self.lookback_seconds),
                                effective_from=schedule.effective_from)
        if wanted is None:
            log.info("company=%s schedule=%s period=%s: no missed slots", *fields)
            emit("gauge", "catchup.backlog", company, self.schedule_id, 0)
            return {"backfill_id": None, "missed": 0}
        with export_errors():
            plan = self._plan(api, dag_id, company, wanted, schedule)
        if plan.kind == "batch":
            return self._batches(api, company, plan, fields)
        if plan.kind == "none":
            log.info("company=%s schedule=%s period=%s: %s missed, %s", *fields,
                     wanted.count, plan.describe())
            emit("gauge", "catchup.backlog", company, self.schedule_id, 0)
            return {"backfill_id": None, "missed": 0}
        with export_errors():
            outcome = api.request_backfill(dag_id, [plan.todo[0], plan.todo[-1]])
        # The backlog: slots still without a run (all wanted ones while a backfill waits).
        emit("gauge", "catchup.backlog", company, self.schedule_id,
             wanted.count if outcome.deferred else len(outcome.created))
        if outcome.deferred:
            # One active backfill per DAG (an operator's, or an earlier recovery): the next
            # scheduled run looks again (the range always covers the lookback).
            log.warning("company=%s schedule=%s period=%s: %s", *fields, outcome.describe())
            return {"backfill_id": None, "missed": wanted.count, "deferred": True}
        if not outcome.created:
            log.info("company=%s schedule=%s period=%s: every slot of %s has a run",
                     *fields, wanted.describe())
            return {"backfill_id": None, "missed": 0}
        log.info("company=%s schedule=%s period=%s: %s", *fields, outcome.describe())
        return {"backfill_id": outcome.backfill_id, "missed": len(outcome.created),
                "first": f"{outcome.created[0]:%Y-%m-%dT%H:%M:%SZ}",
                "last": f"{outcome.created[-1]:%Y-%m-%dT%H:%M:%SZ}"}

    def _plan(self, api: AirflowApi, dag_id: str, company: str, wanted: Any,
              schedule: Any) -> Any:
        """Backfill or batches (ADR 0032): the missed slots not settled in the ledger and not
        in flight (a queued or running backfill run, or batch)."""
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.ledger.batches import settled_slots
        from export_lib.periods.recovery import plan_recovery
        from export_lib.pipeline.batch_requests import batch_slots_in_flight

        in_flight = api.active_slots(dag_id, wanted.first, wanted.last + timedelta(seconds=1))
        in_flight |= batch_slots_in_flight(api, company, self.schedule_id)
        return plan_recovery(wanted.slots, settled=settled_slots(task_ledger(), self.schedule_id,
                                                                 wanted.slots),
                             in_flight=in_flight, threshold=batch_threshold(schedule),
                             size=settings.batch_recovery_size())

    def _batches(self, api: AirflowApi, company: str, plan: Any,
                 fields: tuple[str, ...]) -> dict[str, Any]:
        from export_airflow.tasks.operators import export_errors
        from export_lib.pipeline.batch_requests import request_batches

        with export_errors():
            outcomes = request_batches(api, company, self.schedule_id, plan.batches)
        emit("gauge", "catchup.backlog", company, self.schedule_id, len(plan.todo))
        log.info("company=%s schedule=%s period=%s: %s: %s", *fields, plan.describe(),
                 ", ".join(f"{run_id} {state}" for run_id, state in outcomes))
        return {"backfill_id": None, "missed": len(plan.todo), "batches": [
            run_id for run_id, _ in outcomes]}
