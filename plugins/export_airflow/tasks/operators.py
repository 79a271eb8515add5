"""The four export operators: thin adapters over one ``export_lib.pipeline`` call each.

Each builds its ledger/store in ``execute()`` (never at parse time), calls one library
function, logs for a support reader and returns a small JSON-able summary to XCom. Connection
ids resolve through Airflow (UI, ``airflow connections add``, secrets backends, env vars) via
:func:`export_airflow.runtime.connections.airflow_resolver`, handed to the library call.
Non-retryable export errors (config, authorisation, validation, fencing) fail the task at once
through ``AirflowFailException``; transient ones (source down, ledger unreachable) propagate so
Airflow's retries apply.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
)

from export_airflow.runtime.metrics import delivery_metrics, emit, render_metrics
from export_airflow.tasks.limits import task_timeout
from export_lib.errors import ExportError, LeaseHeldError, RenderBudgetError
from export_lib.logfmt import bind, get_logger, run_context, scope

# Our logger, not the operator's structlog ``self.log``: its records carry the run's fields
# (export_lib.logfmt), which Airflow's task log keeps as keys of each record in JSON mode.
log = get_logger(__name__)

# A render refused by the render budget (export_lib/ledger/budget.py) tries again this much later.
BUDGET_WAIT = timedelta(seconds=60)


@contextmanager
def export_errors() -> Iterator[None]:
    """Map export_lib errors onto Airflow's retry semantics."""
    try:
        yield
    except ExportError as exc:
        if exc.retryable:
            raise
        raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc


def _now() -> datetime:
    return datetime.now(UTC)


def _ctx(context: Any, trigger: str | None = None):
    from export_lib.pipeline import RunContext

    ti = context["ti"]
    origin = f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}/try{ti.try_number}"
    run_type = str(getattr(context["dag_run"], "run_type", "scheduled")).split(".")[-1].lower()
    return RunContext(origin=origin, trigger=trigger or run_type)


class ResolveWindowOperator(BaseOperator):
    """Register (or find) the run of this slot, resolve its reporting window and apply the
    start policies (paused company, owner authorisation, late start, recovery bookkeeping).

    :param schedule_id: the schedule, e.g. ``acme/daily-spend`` (templated); ``None`` for a
        ``manual_export__<company>`` DAG, whose trigger form (``params``) describes the export
    :param config_dir: the config catalog directory (templated)
    :param company: the manual DAG's company; a request for another company is refused
    """

    template_fields: Sequence[str] = ("schedule_id", "config_dir")
    ui_color = "#e8f4fd"

    def __init__(self, *, schedule_id: str | None, config_dir: str, company: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", task_timeout("resolve"))
        super().__init__(**kwargs)
        self.schedule_id = schedule_id
        self.config_dir = config_dir
        self.company = company

    @scope
    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.ledger.seniority import open_catalog
        from export_lib.pipeline import slot_at_or_before, start_manual, start_run

        now, dag_run = _now(), context["dag_run"]
        bind(company=self.company if self.schedule_id is None else self.schedule_id.split("/")[0],
             schedule=self.schedule_id)  # the run is known once it is registered
        with export_errors():
            ledger = task_ledger()
            if self.schedule_id is None:
                summary = start_manual(ledger, self.config_dir, dict(context["params"]),
                                       run_id=dag_run.run_id, requested_at=dag_run.run_after,
                                       now=now, ctx=_ctx(context, "manual"), company=self.company,
                                       requested_by=getattr(dag_run, "triggering_user_name",
                                                            None))
            else:
                company = self.schedule_id.split("/", 1)[0]
                schedule = open_catalog(self.config_dir, only=company).schedule(self.schedule_id)
                # A manual trigger may have no logical date: it stands for the latest slot.
                moment = context.get("logical_date") or dag_run.run_after
                # {"regenerate": true} in the run's conf exports a period delivered earlier.
                regenerate = bool((dag_run.conf or {}).get("regenerate", False))
                summary = start_run(ledger, schedule, slot_at_or_before(schedule.timing, moment),
                                    now=now, ctx=_ctx(context), regenerate=regenerate)
        bind(**summary.log_context())
        log.info("company=%s schedule=%s period=%s: run %s window [%s, %s) UTC, state %s",
                 *summary.log_fields(), summary.run_key, summary.window.start.isoformat(),
                 summary.window.end.isoformat(), summary.state)
        if self.schedule_id is not None:
            if summary.created:
                emit("incr", "runs.expected", summary.company, summary.schedule_id)
            if summary.missed_recorded:
                emit("incr", "slots.skipped", summary.company, summary.schedule_id,
                     summary.missed_recorded)
        if summary.skip_reason:
            raise AirflowSkipException(summary.skip_reason)
        return summary.as_xcom()


class ReportsLineage:
    """OpenLineage (ADR 0027): the provider asks for lineage as a task starts and ends; only
    when OpenLineage is configured, so ``export_airflow.tasks.lineage`` is imported only then."""

    def lineage(self) -> Any:
        from export_airflow.tasks.lineage import export_facets

        return export_facets(self.lineage_run_key())

    def lineage_run_key(self) -> str:
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> Any:
        return self.lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self.lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self.lineage()


class CancelsSourceQueries:
    """``on_kill`` cancels the query this task runs on a source (no runaway work, seed 002).

    Airflow 3.3's task runner calls ``on_kill`` from its SIGTERM handler, in the task's main
    thread, when the task is cleared or marked while running, or its worker shuts down (the
    supervisor's heartbeat is refused and it sends SIGTERM): the handler interrupts the
    render's ``select()`` wait; libpq's cancel request stops the server-side query, the read
    loop then ends with the server's error and the connection is closed. After an
    ``execution_timeout`` the timeout's exception has already unwound through the COPY reader
    (which cancels the query itself) when ``on_kill`` runs, so it finds nothing left.
    """

    run: Any

    def on_kill(self) -> None:
        from export_lib.pipeline import RunSummary
        from export_lib.source.session import cancel_running

        try:  # the rendered template (the run's summary) names the run for the log lines
            fields = RunSummary.from_xcom(self.run).log_context()
        except Exception:  # noqa: BLE001 - killed before its template was rendered
            fields = {}
        with run_context(**fields):
            count = cancel_running(f"Airflow stopped task {getattr(self, 'task_id', '?')}")
            log.warning("on_kill: cancelled %d running source quer%s", count,
                        "y" if count == 1 else "ies")


class RenderCsvOperator(ReportsLineage, CancelsSourceQueries, BaseOperator):
    """Render the run's captured query into its artifact's upload or staging object (CSV or
    Parquet despite the name; ADR 0031).

    :param run: the summary pushed by ResolveWindowOperator (templated / XComArg)
    :param regenerate: publish a new version even if the run has one (templated, e.g.
        ``{{ params.regenerate }}``)
    :param channel_size: the schedule's ``size`` (small, medium, large); the cluster policy
        routes large renders to the ``exports_large`` queue
    :param config_dir: the current config: the captured query is checked against today's
        source allowlist before it reads anything (templated; None skips the check)
    """

    template_fields: Sequence[str] = ("run", "regenerate", "config_dir")
    ui_color = "#fdf5e8"

    def __init__(self, *, run: Any, regenerate: bool | str = False,
                 channel_size: str = "small", config_dir: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", task_timeout("render"))
        super().__init__(**kwargs)
        self.run = run
        self.config_dir = config_dir
        self.regenerate = regenerate
        self.channel_size = channel_size

    def lineage_run_key(self) -> str:
        from export_lib.pipeline import RunSummary

        return RunSummary.from_xcom(self.run).run_key

    @scope
    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.runtime.connections import airflow_resolver
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.config.loader import allowlist
        from export_lib.pipeline import Rendered, RenderSkipped, RunSummary, render_run
        from export_lib.storage.stores import open_store

        regenerate = str(self.regenerate).lower() in ("true", "1", "yes")
        now, started = _now(), time.monotonic()
        with export_errors():
            run = RunSummary.from_xcom(self.run)
        bind(**run.log_context())
        try:
            with export_errors():
                resolver = airflow_resolver()
                allowed = allowlist(self.config_dir) if self.config_dir else None
                result = render_run(task_ledger(), open_store(resolver=resolver), run.run_key,
                                    now=now, ctx=_ctx(context), regenerate=regenerate,
                                    resolver=resolver, allowlist=allowed)
        except RenderBudgetError as exc:
            # Seed 002: at most 4 source queries at once, 2 per company; nothing was claimed.
            log.info("company=%s schedule=%s period=%s: %s; rescheduling in %s",
                     *run.log_fields(), exc, BUDGET_WAIT)
            raise AirflowRescheduleException(now + BUDGET_WAIT) from exc
        except LeaseHeldError as exc:
            # Another attempt renders this run and renews its lease: no second scan of the
            # source. Look again when that lease would lapse (a killed worker), or in a minute.
            when = min(max(exc.until, now) + timedelta(seconds=1), now + BUDGET_WAIT)
            log.warning("company=%s schedule=%s period=%s: %s; rescheduling at %s",
                        *run.log_fields(), exc, when.isoformat(timespec="seconds"))
            raise AirflowRescheduleException(when) from exc
        if isinstance(result, RenderSkipped):
            raise AirflowSkipException(result.skipped)
        if isinstance(result, Rendered):
            seconds = time.monotonic() - started
            render_metrics(run.company, run.schedule_id, result.rows, result.bytes, seconds)
            log.info("company=%s schedule=%s run=%s period=%s: %d rows, %d bytes in %.1f s",
                     run.company, run.schedule_id, run.run_key, run.window.period,
                     result.rows, result.bytes, seconds)
        return result.as_xcom()


SUMMARY = "summary"  # PublishOperator's XCom key for its PublishResult (deliver reads it)


class PublishOperator(ReportsLineage, BaseOperator):
    """Validate the staged object and publish it as an immutable artifact (fenced).

    Returns the run's captured destination ids (its ``return_value``, which ``deliver`` is
    mapped over: Airflow maps only over a return value, and a task of their own cost a process
    per run, issue 25) and pushes the publish summary under XCom key :data:`SUMMARY`.

    :param rendered: the summary pushed by RenderCsvOperator (templated / XComArg)
    :param correction: mark a new version as a correction (late-data restatement)
    :param asset_alias: announce a new artifact version on the schedule's asset through this
        alias (its outlet; export_airflow.tasks.assets, ADR 0024); None: announce nothing
    :param config_dir: the config catalog (its ``alerts:``): the schedule's schema changes
        published under ``schema_policy: warn`` are alerted once each (ADR 0025; templated;
        None: no schema alert, a manual export)
    """

    template_fields: Sequence[str] = ("rendered", "config_dir")
    ui_color = "#eefde8"

    def __init__(self, *, rendered: Any, correction: bool = False,
                 asset_alias: str | None = None, config_dir: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", task_timeout("publish"))
        if asset_alias:
            from airflow.sdk import AssetAlias

            kwargs.setdefault("outlets", [AssetAlias(asset_alias)])
            # One announcing publish of a DAG at a time: Airflow links the alias to the asset
            # on their first event, inside the task's state update, check-then-insert; two runs
            # of one schedule announcing first versions at once (a catch-up) raced, and the
            # loser was failed after publishing ("asset_alias_asset_pkey", 4 Dec; ADR 0024).
            kwargs.setdefault("max_active_tis_per_dag", 1)
        super().__init__(**kwargs)
        self.rendered = rendered
        self.correction = correction
        self.asset_alias = asset_alias
        self.config_dir = config_dir

    def lineage_run_key(self) -> str:
        from export_lib.pipeline import render_result_from_xcom

        return render_result_from_xcom(self.rendered).run_key

    @scope
    def execute(self, context: Any) -> list[str]:
        from export_airflow.runtime.connections import airflow_resolver
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.pipeline import (
            Rendered,
            captured_destinations,
            publish_run,
            render_result_from_xcom,
        )
        from export_lib.storage.stores import open_store

        with export_errors():
            ledger, store = task_ledger(), open_store(resolver=airflow_resolver())
            rendered = render_result_from_xcom(self.rendered)
            bind(**_log_context(ledger, rendered.run_key))
            # Only a new attempt has something to publish; otherwise publish reports the artifact.
            fresh = rendered if isinstance(rendered, Rendered) else None
            published = publish_run(ledger, store, rendered.run_key,
                                    fresh.attempt_id if fresh else None, now=_now(),
                                    columns=list(fresh.columns) if fresh else None,
                                    correction=self.correction)
            # The run's captured destinations: one added to the config later never appears in
            # (and fails) an earlier run.
            ids = captured_destinations(ledger, rendered.run_key)
            if self.asset_alias:
                from export_airflow.tasks.assets import announce
                from export_lib.pipeline.asset_events import published_event

                announce(context, self.asset_alias, published_event(ledger, published))
            if self.config_dir:
                from export_airflow.alerts import send_schema_alerts

                run = ledger.get_run(rendered.run_key)
                send_schema_alerts(ledger, run.schedule_id, run.owner, self.config_dir)
        context["ti"].xcom_push(key=SUMMARY, value=published.as_xcom())
        log.info("delivering to its captured destinations %s", ids)
        return ids


class DeliverOperator(ReportsLineage, BaseOperator):
    """Deliver the published artifact to one destination (map it over the destinations).

    :param published: the summary pushed by PublishOperator (templated / XComArg)
    :param destination_id: a destination configured on the schedule (templated)
    :param config_dir: the current config, for the owner's authorisation recheck (templated)
    """

    template_fields: Sequence[str] = ("published", "destination_id", "config_dir")
    ui_color = "#f3e8fd"

    def __init__(self, *, published: Any, destination_id: str, config_dir: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", task_timeout("deliver"))
        super().__init__(**kwargs)
        self.published = published
        self.destination_id = destination_id
        self.config_dir = config_dir

    def lineage(self) -> Any:
        from export_airflow.tasks.lineage import deliver_facets
        from export_lib.pipeline import PublishResult

        return deliver_facets(PublishResult.from_xcom(self.published).run_key,
                              self.destination_id)

    @scope
    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.runtime.connections import airflow_resolver
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.pipeline import PublishResult, deliver_run, requeue_deliveries

        now = _now()
        with export_errors():
            run_key = PublishResult.from_xcom(self.published).run_key
            ledger = task_ledger()
            bind(**_log_context(ledger, run_key))  # the metrics' lines after delivery too
            # An exhausted or refused delivery fails this task without an Airflow retry, so
            # only a person runs it again (a clear): that is their decision to retry it.
            requeue_deliveries(ledger, run_key, destination_id=self.destination_id,
                               who=_who(context), now=now, strict=False,
                               why="the deliver task was run again (cleared) in Airflow")
            try:
                return deliver_run(ledger, run_key, self.destination_id, now=now,
                                   config_dir=self.config_dir,
                                   resolver=airflow_resolver()).as_xcom()
            finally:
                delivery_metrics(ledger, run_key, _now())


def _log_context(ledger: Any, run_key: str) -> dict[str, str]:
    """A registered run's log fields (its key alone if it is not registered: the stage says)."""
    run = ledger.get_run(run_key)
    return run.log_context() if run is not None else {"run": run_key}


def _who(context: Any) -> str:
    """The Airflow task try that acts, for an operator action recorded in the ledger."""
    ti, dag_run = context["ti"], context["dag_run"]
    index = getattr(ti, "map_index", -1)
    return (f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}"
            + (f"[{index}]" if index is not None and index >= 0 else "")
            + f"/try{ti.try_number} (run cleared {getattr(dag_run, 'clear_number', 0) or 0} "
              "time(s))")


class RemovedCompanyOperator(BaseOperator):
    """Stands in for a task of a company whose config file was removed after its run was
    registered: fails at once, without retries, with one line naming company and file."""

    ui_color = "#fde8e8"

    def __init__(self, *, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def execute(self, context: Any) -> None:
        raise AirflowFailException(self.reason)
