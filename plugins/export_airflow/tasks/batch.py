"""``export_periods``: one task of a batched recovery exports the periods its DAG run lists
(ADR 0032) — a thin adapter over :func:`export_lib.pipeline.batch.export_batch`.

The run's ``conf`` names the schedule and its slots; the schedule must be the DAG's company's
(a hand-triggered run naming another company's export is refused, as for the manual DAG). Each
period gets what its own DAG run would have given it: its ledger run (with this task as its
batch), its artifact, an asset event for each new version, its deliveries and its metrics.
Periods that fail leave the task failed after the others are done, so Airflow's retry (or a
clear) exports only the periods that are not done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from export_airflow.runtime.metrics import delivery_metrics, emit
from export_airflow.tasks.operators import _ctx, _now, export_errors
from export_lib.logfmt import bind, get_logger, scope

log = get_logger(__name__)


class ExportPeriodsOperator(BaseOperator):
    """Export every period of the run's ``conf`` (``schedule_id``, ``periods``), oldest first.

    :param company: the DAG's company; a conf naming another company's export is refused
    :param config_dir: the config catalog directory (templated)
    :param aliases: schedule id → its publish asset alias (the task's outlets)
    """

    template_fields: Sequence[str] = ("config_dir",)
    ui_color = "#e8f0fd"

    def __init__(self, *, company: str, config_dir: str, aliases: dict[str, str],
                 **kwargs: Any) -> None:
        if aliases:
            from airflow.sdk import AssetAlias

            kwargs.setdefault("outlets", [AssetAlias(a) for a in sorted(aliases.values())])
        super().__init__(**kwargs)
        self.company = company
        self.config_dir = config_dir
        self.aliases = aliases

    @scope
    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.runtime.connections import airflow_resolver
        from export_airflow.runtime.ledger import task_ledger
        from export_airflow.tasks.batch_alerts import send_batch_alerts
        from export_lib.config.loader import allowlist
        from export_lib.errors import AuthorizationError
        from export_lib.ledger.seniority import open_catalog
        from export_lib.pipeline.batch import Batch, BatchIncomplete, export_batch
        from export_lib.pipeline.batch_requests import parse_periods
        from export_lib.storage.stores import open_store

        ti = context["ti"]
        ref = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}"
        with export_errors():
            schedule_id, slots = parse_periods(dict(context["dag_run"].conf or {}),
                                               f"{ti.dag_id} run {ti.run_id}")
            if schedule_id.split("/", 1)[0] != self.company:
                raise AuthorizationError(
                    f"{ti.dag_id} run {ti.run_id}: conf.schedule_id {schedule_id!r} is not a "
                    f"{self.company} export; another company's periods are recovered by its "
                    "own recovery_batch DAG (nothing was exported)")
            bind(company=self.company, schedule=schedule_id)
            schedule = open_catalog(self.config_dir, only=self.company).schedule(schedule_id)
            resolver = airflow_resolver()
            ledger, store = task_ledger(), open_store(resolver=resolver)
            batch = Batch(ref=ref, ctx=_ctx(context, trigger="batch"),
                          config_dir=self.config_dir, resolver=resolver,
                          allowlist=allowlist(self.config_dir))
        started = time.monotonic()
        outcome = export_batch(ledger, store, schedule, slots, batch)
        self._report(context, ledger, schedule_id, outcome)
        # A delivery that gave up (exhausted, refused) fails its period and is final whatever
        # this task does next (a retry passes the period over as done): alerted now. Only the
        # failed periods can hold one, so a batch without failures reads nothing more.
        if outcome.failed:
            send_batch_alerts(ledger, self.company, self.config_dir, schedule_id,
                              [p.slot for p in outcome.failed],
                              where=f"{ref} try {ti.try_number}", given_up=False)
        log.info("company=%s schedule=%s period=-: %s in %.1f s", self.company, schedule_id,
                 outcome.describe(), time.monotonic() - started)
        if outcome.failed:
            raise BatchIncomplete(outcome)  # retryable: the retry exports only the not-done
        return {"schedule_id": schedule_id,
                **{o: len(outcome.of(o)) for o in ("exported", "done", "skipped", "failed")}}

    def _report(self, context: Any, ledger: Any, schedule_id: str, outcome: Any) -> None:
        """Per period, what its own run's tasks would have reported: the asset event of a new
        version, the render figures and the delivery metrics."""
        from export_airflow.tasks.assets import announce

        alias = self.aliases.get(schedule_id)
        now = _now()
        for period in outcome.periods:
            if period.published is not None:
                emit("incr", "render.rows", self.company, schedule_id, period.published.rows)
                emit("incr", "render.bytes", self.company, schedule_id, period.published.bytes)
            if period.outcome in ("exported", "failed"):
                delivery_metrics(ledger, period.run_key, now)
        if alias:
            for event in self._events(context, ledger, outcome):
                announce(context, alias, event)
        emit("gauge", "catchup.backlog", self.company, schedule_id, len(outcome.failed))

    def _events(self, context: Any, ledger: Any, outcome: Any) -> list[Any]:
        """The asset events this try adds: every version a try of this task published that
        Airflow has no event of. Airflow records outlet events only when a task succeeds, so
        the versions of a try that failed (a period of it failed) or was killed were never
        announced, and this try finds their periods done: it announces them too, once each
        (the events Airflow holds for the task are read through its REST API)."""
        from export_lib.pipeline.asset_events import owed_batch_events, published_event

        ti = context["ti"]
        mine = [e for e in (published_event(ledger, p.published)
                            for p in outcome.periods if p.published is not None) if e]
        if ti.try_number == 1:  # no earlier try: what this one published is all
            return mine
        try:
            announced = _announced(ti.dag_id, ti.run_id, ti.task_id)
        except Exception as exc:  # noqa: BLE001 - the events of this try still go out
            log.warning("company=%s schedule=%s period=-: the asset events of earlier tries of "
                        "%s/%s/%s could not be read (%s); announcing only the versions this "
                        "try published", self.company, outcome.schedule_id, ti.dag_id,
                        ti.run_id, ti.task_id, exc)
            return mine
        return owed_batch_events(ledger, [p.run_key for p in outcome.periods],
                                 f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}/", announced)


def _announced(dag_id: str, run_id: str, task_id: str) -> set[tuple[str, int]]:
    """(run key, version) of every asset event Airflow recorded for the task's tries."""
    from export_airflow.tasks.recovery import api_from_airflow

    events = api_from_airflow().pages("/api/v2/assets/events", "asset_events", [
        ("source_dag_id", dag_id), ("source_run_id", run_id), ("source_task_id", task_id)])
    return {(e["extra"]["run_key"], int(e["extra"]["version"])) for e in events
            if isinstance(e.get("extra"), dict) and "run_key" in e["extra"]}
