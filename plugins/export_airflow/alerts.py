"""Alerts through Airflow's notifier mechanism (issue 13, item 5; ADR 0010).

:class:`ExportAlertNotifier` is a ``BaseNotifier``: the DAG factory sets it as the export
tasks' ``on_failure_callback`` (Airflow calls it when a task *fails for good* — after its last
retry, or at once for a non-retryable error; ``on_retry_callback`` is not set, so retries are
silent) and as the callback of the DAG's ``DeadlineAlert`` (run in the triggerer, awaited).

It builds the :class:`export_lib.alerts.Alert` of the run (run key from the slot, period from
the ledger, the reason from the exception or the delivery's last error), claims the alert's
key in the ledger and only then sends it — through ``SmtpNotifier`` to the exports team and the
schedule's owner by default, or through the notifier class ``alerts.notifier.class`` of
``defaults.yaml`` names (Slack, ...). A key already sent is counted and not sent again: three
retries and a clear of the same failure send one message per recipient.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseNotifier

from export_airflow.runtime.metrics import emit
from export_lib.alerts import Alert, AlertReason, recipients
from export_lib.logfmt import bind, get_logger, scope

log = get_logger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _slot(context: Any) -> datetime | None:
    value = context.get("logical_date")
    if value is None and isinstance(context.get("dag_run"), dict):  # a deadline's context
        value = context["dag_run"].get("logical_date")
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.astimezone(UTC) if value is not None else None


class ExportAlertNotifier(BaseNotifier):
    """Alert the exports team and the owner once per run and reason.

    :param reason: ``failed`` (a task's final failure; a ``deliver`` task's becomes
        ``delivery`` for its destination), ``deadline``, or ``unrecoverable`` (the gap audit:
        context ``logical_date`` = the slot, ``unrecoverable`` = why)
    :param schedule_id: e.g. ``acme/daily-spend``
    :param owner: the schedule's owner (an e-mail address)
    :param config_dir: the catalog directory (``alerts:`` of its defaults.yaml)
    :param deadline: the schedule's deadline, for the words of a deadline alert
    """

    template_fields = ()

    def __init__(self, *, reason: str, schedule_id: str, owner: str, config_dir: str,
                 deadline: str | None = None, manual: bool = False, risk: str | None = None,
                 context: Any = None) -> None:
        super().__init__(context=context)
        self.risk = risk  # at_risk: the export's at_risk.after, or "automatic"
        # manual: a manual_export__<company> DAG (schedule_id is "<company>/manual"): its run
        # key comes from the Airflow run id and its owner from the company file.
        self.manual = manual
        self.reason = AlertReason(reason)
        self.schedule_id = schedule_id
        self.company = schedule_id.split("/", 1)[0]
        self.owner = owner
        self.config_dir = config_dir
        self.deadline = deadline

    # -- what happened --------------------------------------------------------------------
    def alert(self, context: Any) -> Alert | None:
        from export_lib.periods.names import period_label, run_key

        if context.get("export_alert") is not None:  # decided by the library (send_schema_alerts)
            return context["export_alert"]
        if self.manual:
            return self._manual_alert(context)
        slot = _slot(context)
        if slot is None:
            log.warning("company=%s schedule=%s: no logical date in the callback's context; no "
                        "alert (a manually triggered run without a slot)", self.company,
                        self.schedule_id)  # no run: company and schedule only
            return None
        key = run_key(self.schedule_id, slot)
        ledger = _ledger()
        run = ledger.get_run(key) if ledger is not None else None
        period = period_label(run.window_start, run.window_end, run.timezone) if run else None
        reason, destination, detail = self.reason, None, ""
        if self.reason is AlertReason.UNRECOVERABLE:  # from the gap audit, not a task failure
            return Alert(reason=reason, company=self.company, schedule_id=self.schedule_id,
                         run_key=key, slot=slot, period=period,
                         detail=context.get("unrecoverable") or "the period cannot be exported",
                         where=f"the gap audit ({context.get('audited_by') or 'exportctl'})")
        ti = context.get("ti")
        if self.reason is AlertReason.AT_RISK:
            return self._risk_alert(context, ledger, key, slot, run, period)
        if self.reason is AlertReason.DEADLINE:
            detail = (f"not delivered within {self.deadline} of the slot"
                      + (f" (deadline {run.deadline:%Y-%m-%dT%H:%MZ})"
                         if run and run.deadline else "")
                      + (f"; the run is {run.state}" if run else "; the run was never started"))
            dag_run = context.get("dag_run") or {}
            where = f"{dag_run.get('dag_id', '?')}/{dag_run.get('run_id', '?')}"
        else:
            task = getattr(ti, "task_id", "?")
            where = f"{getattr(ti, 'dag_id', '?')}/{getattr(ti, 'run_id', '?')}/{task}" \
                    f" try {getattr(ti, 'try_number', '?')}"
            error = context.get("exception")
            detail = f"{task}: {type(error).__name__}: {error}" if error else f"{task} failed"
            if task == "deliver":
                reason = AlertReason.DELIVERY
                destination = getattr(context.get("task"), "destination_id", None)
                detail = self._delivery_detail(ledger, key, destination) or detail
        return Alert(reason=reason, company=self.company, schedule_id=self.schedule_id,
                     run_key=key, slot=slot, detail=detail, period=period,
                     destination=destination, where=where)

    def _risk_alert(self, context: Any, ledger: Any, key: str, slot: datetime, run: Any,
                    period: str | None) -> Alert | None:
        """Nothing delivered at the risk point: an alert — unless the run was delivered,
        skipped or cancelled meanwhile (then None, and nothing is claimed)."""
        from export_lib.ledger.deliveries import list_deliveries
        from export_lib.views.risk import NOT_AT_RISK

        if run is not None and (run.state in NOT_AT_RISK or (ledger is not None and any(
                d["acknowledged_at"] for d in list_deliveries(ledger.engine, key)))):
            log.info("company=%s schedule=%s run=%s period=%s: at its risk point the run is %s "
                     "or delivered; no at-risk alert", self.company, self.schedule_id, key,
                     period, run.state, extra={"run": key, "period": period})
            return None
        now = _now()
        due = run.deadline if run is not None and run.deadline else None
        point = (self.risk if self.risk not in (None, "automatic")
                 else "half the deadline, or the median delivery time if longer")
        detail = (f"nothing delivered {_span(now - slot)} after the slot (risk point: {point}; "
                  f"deadline: {self.deadline} after the slot)"
                  + (f"; the deadline {due:%Y-%m-%dT%H:%MZ} is {_span(due - now)} away" if due
                     else "")
                  + (f"; the run is {run.state}" if run else
                     "; the ledger has no run for it yet (resolve_window has not registered it)"))
        dag_run = context.get("dag_run") or {}
        return Alert(reason=AlertReason.AT_RISK, company=self.company,
                     schedule_id=self.schedule_id, run_key=key, slot=slot, detail=detail,
                     period=period,
                     where=f"{dag_run.get('dag_id', '?')}/{dag_run.get('run_id', '?')}")

    def _manual_alert(self, context: Any) -> Alert:
        from export_lib.config.manual import manual_run_key
        from export_lib.periods.names import period_label

        ti = context.get("ti")
        key = manual_run_key(self.company, getattr(ti, "run_id", "?"))
        ledger = _ledger()
        run = ledger.get_run(key) if ledger is not None else None
        task = getattr(ti, "task_id", "?")
        error = context.get("exception")
        detail = f"{task}: {type(error).__name__}: {error}" if error else f"{task} failed"
        reason, destination = AlertReason.FAILED, None
        if task == "deliver":
            reason = AlertReason.DELIVERY
            destination = getattr(context.get("task"), "destination_id", None)
            detail = self._delivery_detail(ledger, key, destination) or detail
        return Alert(reason=reason, company=self.company,
                     schedule_id=run.schedule_id if run else self.schedule_id, run_key=key,
                     slot=run.slot if run else _now(), detail=detail,
                     period=period_label(run.window_start, run.window_end, run.timezone)
                     if run else None, destination=destination,
                     where=f"{getattr(ti, 'dag_id', '?')}/{getattr(ti, 'run_id', '?')}/{task} "
                           f"try {getattr(ti, 'try_number', '?')}")

    @staticmethod
    def _delivery_detail(ledger: Any, key: str, destination: str | None) -> str | None:
        if ledger is None or destination is None:
            return None
        from export_lib.ledger.deliveries import list_deliveries

        found = [d for d in list_deliveries(ledger.engine, key)
                 if d["destination_id"] == destination]
        if not found:
            return None
        last = found[-1]
        return (f"delivery to {destination} is {last['state']} after {last['attempts']} "
                f"attempt(s): {last.get('last_error') or 'no error recorded'}")

    # -- sending once -----------------------------------------------------------------------
    def notify(self, context: Any) -> None:
        prepared = self._prepare(context)
        if prepared is None:
            return
        alert, inner, claim_key, ledger = prepared
        try:
            inner.notify(context)
        except Exception as exc:
            self._failed(ledger, alert, claim_key, exc)
            raise
        self._sent(ledger, alert, claim_key)

    async def async_notify(self, context: Any) -> None:
        prepared = await asyncio.to_thread(self._prepare, context)
        if prepared is None:
            return
        alert, inner, claim_key, ledger = prepared
        try:
            if type(inner).async_notify is not BaseNotifier.async_notify:
                await inner.async_notify(context)
            else:
                await asyncio.to_thread(inner.notify, context)
        except Exception as exc:
            await asyncio.to_thread(self._failed, ledger, alert, claim_key, exc)
            raise
        await asyncio.to_thread(self._sent, ledger, alert, claim_key)

    @scope
    def _prepare(self, context: Any) -> tuple[Alert, BaseNotifier, str, Any] | None:
        from export_lib.ledger.notices import claim_notice
        from export_lib.ledger.seniority import open_catalog

        # A callback runs after the task's own context ended: bind the run here again.
        bind(company=self.company, schedule=self.schedule_id)
        alert = self.alert(context)
        if alert is None:
            return None
        bind(**alert.log_context())
        if alert.reason is AlertReason.DEADLINE:
            emit("incr", "runs.missed", alert.company, alert.schedule_id)
        config = open_catalog(self.config_dir, only=self.company).alerts
        owner = self.owner
        if self.manual:  # the company's owner (the worker built the DAG without the catalog)
            company = open_catalog(self.config_dir, only=self.company).companies.get(
                self.company)
            owner = company.owner if company is not None else owner
        to = recipients(config, owner)
        ledger = context.get("export_ledger") or _ledger()
        if ledger is not None:
            claim = claim_notice(ledger.engine, key=alert.key, kind="alert",
                                 run_key=alert.run_key, reason=alert.notice_reason,
                                 recipients=",".join(to), now=_now())
            if not claim.granted:
                log.info("company=%s schedule=%s run=%s period=%s: %s already alerted (%s, "
                         "asked %d times); not sent again", alert.company, alert.schedule_id,
                         alert.run_key, alert.period, alert.headline, claim.state, claim.claims)
                emit("incr", "alerts.suppressed", alert.company, alert.schedule_id)
                return None
        if alert.reason is AlertReason.AT_RISK:  # counted once per run, with its claim
            emit("incr", "runs.at_risk", alert.company, alert.schedule_id)
        inner = build_notifier(config, to, alert)
        return alert, inner, alert.key, ledger

    def _sent(self, ledger: Any, alert: Alert, key: str) -> None:
        from export_lib.ledger.notices import confirm_notice

        if ledger is not None:
            confirm_notice(ledger.engine, key, _now())
        emit("incr", "alerts.sent", alert.company, alert.schedule_id)
        log.warning("company=%s schedule=%s run=%s period=%s: alert sent: %s", alert.company,
                    alert.schedule_id, alert.run_key, alert.period, alert.subject,
                    extra=alert.log_context())

    def _failed(self, ledger: Any, alert: Alert, key: str, exc: BaseException) -> None:
        from export_lib.ledger.notices import fail_notice

        if ledger is not None:
            fail_notice(ledger.engine, key, f"{type(exc).__name__}: {exc}", _now())
        log.error("company=%s schedule=%s run=%s period=%s: alert NOT sent (%s: %s); the next "
                  "failure callback tries again", alert.company, alert.schedule_id,
                  alert.run_key, alert.period, type(exc).__name__, exc, extra=alert.log_context())


def _span(delta: Any) -> str:
    minutes = max(0, int(delta.total_seconds() // 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def build_notifier(config: Any, to: tuple[str, ...], alert: Alert) -> BaseNotifier:
    """``SmtpNotifier`` to ``to`` (``class: smtp``), or the named notifier class with
    ``kwargs`` and the alert's text in ``message_field``."""
    notifier = config.notifier
    if notifier.class_ == "smtp":
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        return SmtpNotifier(to=list(to), from_email=notifier.from_email, subject=alert.subject,
                            html_content=alert.html(), smtp_conn_id=notifier.conn_id)
    cls = _import_class(notifier.class_)
    return cls(**{**notifier.kwargs, notifier.message_field: f"{alert.subject}\n{alert.text()}"})


def _import_class(dotted: str) -> Any:
    """``package.module.Class`` imported (the config validated the dotted form)."""
    import importlib

    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"notifier class {dotted!r} cannot be imported ({exc}); install the "
                          "package that provides it on every Airflow component") from exc


def _ledger() -> Any:
    """The ledger, or None if it cannot be reached (the alert is then sent without dedupe:
    better twice than never)."""
    from export_airflow.runtime.ledger import callback_ledger
    from export_lib.errors import LedgerError

    try:
        return callback_ledger()
    except LedgerError as exc:
        log.error("alerts: the ledger is unreachable (%s); sending without deduplication", exc)
        return None


def manual_failure_notifier(company: str, config_dir: str) -> ExportAlertNotifier:
    """The ``on_failure_callback`` of a ``manual_export__<company>`` DAG's tasks."""
    return ExportAlertNotifier(reason=AlertReason.FAILED.value, schedule_id=f"{company}/manual",
                               owner="", config_dir=config_dir, manual=True)


def failure_notifier(schedule: Any, config_dir: str) -> ExportAlertNotifier:
    """The ``on_failure_callback`` of an export DAG's tasks."""
    return ExportAlertNotifier(reason=AlertReason.FAILED.value, schedule_id=schedule.schedule_id,
                               owner=schedule.owner, config_dir=config_dir)


def deadline_kwargs(schedule: Any, config_dir: str) -> dict[str, Any]:
    """The kwargs of the ``DeadlineAlert`` callback (stored with the DAG: JSON only)."""
    return {"reason": AlertReason.DEADLINE.value, "schedule_id": schedule.schedule_id,
            "owner": schedule.owner, "config_dir": config_dir,
            "deadline": str(schedule.deadline)}


def send_schema_alerts(ledger: Any, schedule_id: str, owner: str, config_dir: str) -> int:
    """After a publication: send the one alert of each ``warn`` schema change of the schedule
    not alerted yet (ADR 0025; the library decides which, :func:`export_lib.pipeline.
    schema_contract.pending_schema_alerts`). A send that fails is logged and left to the
    schedule's next publication (its claim is ``failed``); the publication stands. Returns how
    many were sent."""
    from export_lib.alerts import schema_change_alert
    from export_lib.pipeline.schema_contract import pending_schema_alerts

    sent = 0
    for entry in pending_schema_alerts(ledger, schedule_id):
        alert = schema_change_alert(entry)
        notifier = ExportAlertNotifier(reason=AlertReason.SCHEMA_CHANGE.value,
                                       schedule_id=schedule_id, owner=owner,
                                       config_dir=config_dir)
        try:
            notifier.notify({"export_alert": alert, "export_ledger": ledger})
        except Exception as exc:  # noqa: BLE001 - recorded in export_notices; next publication
            log.error("company=%s schedule=%s run=%s period=%s: schema change alert not sent "
                      "(%s: %s); the schedule's next publication tries again", alert.company,
                      schedule_id, alert.run_key, alert.period, type(exc).__name__, exc,
                      extra=alert.log_context())
            continue
        sent += 1
    return sent


def notify_unrecoverable(config_dir: str, audited_by: str) -> Any:
    """The gap audit's ``notify(gap, reason)``: one alert per unrecoverable period to the
    exports team and the schedule's owner, deduplicated like the others; a send that fails is
    logged and the audit carries on (the period is recorded either way)."""

    def notify(gap: Any, reason: str) -> None:
        notifier = ExportAlertNotifier(reason=AlertReason.UNRECOVERABLE.value,
                                       schedule_id=gap.schedule_id, owner=gap.owner,
                                       config_dir=config_dir)
        try:
            notifier.notify({"logical_date": gap.slot, "unrecoverable": reason,
                             "audited_by": audited_by})
        except Exception as exc:  # noqa: BLE001 - recorded in export_notices; next audit run
            log.error("company=%s schedule=%s period=%s: unrecoverable-period alert not sent: "
                      "%s: %s", *gap.log_fields(), type(exc).__name__, exc,
                      extra={"company": gap.company, "schedule": gap.schedule_id})

    return notify
