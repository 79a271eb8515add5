"""Alerts of a batched recovery (ADR 0032): each period alerts as its own DAG run would.

:func:`send_batch_alerts` sends what :func:`export_lib.alerts.batch_alerts` finds, through
:class:`export_airflow.alerts.ExportAlertNotifier` (the same recipients, notifier class and
once-per-run-and-reason claim as every other alert). The ``export_periods`` task calls it after
a batch with failed periods, for deliveries that gave up; :class:`BatchFailureNotifier`, the
task's ``on_failure_callback``, calls it when the task fails for good, for every period not
done.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from airflow.sdk import BaseNotifier

from export_airflow.alerts import ExportAlertNotifier
from export_lib.logfmt import get_logger

log = get_logger(__name__)


def send_batch_alerts(ledger: Any, company: str, config_dir: str, schedule_id: str,
                      slots: Sequence[datetime], *, where: str, given_up: bool) -> int:
    """Send the alerts of the batch's periods; a send that fails is logged and left to the
    next report (its claim is ``failed``). Returns how many alerts were due."""
    from export_lib.alerts import batch_alerts
    from export_lib.errors import ConfigError
    from export_lib.ledger.seniority import open_catalog

    alerts = batch_alerts(ledger, schedule_id, slots, where=where, given_up=given_up)
    if not alerts:
        return 0
    try:
        owner = open_catalog(config_dir, only=company).schedule(schedule_id).owner
    except ConfigError:  # the export left the catalog since: the exports team alone
        owner = ""
    for alert in alerts:
        notifier = ExportAlertNotifier(reason=alert.reason.value, schedule_id=schedule_id,
                                       owner=owner, config_dir=config_dir)
        try:
            notifier.notify({"export_alert": alert, "export_ledger": ledger})
        except Exception as exc:  # noqa: BLE001 - recorded in export_notices; next report
            log.error("company=%s schedule=%s run=%s period=%s: alert not sent (%s: %s); the "
                      "batch's next report tries again", company, schedule_id, alert.run_key,
                      alert.period, type(exc).__name__, exc, extra=alert.log_context())
    return len(alerts)


class BatchFailureNotifier(BaseNotifier):
    """The ``export_periods`` task's ``on_failure_callback``: Airflow calls it once the task
    fails for good (after its last retry, a timeout, or its worker lost); every period of the
    run's ``conf`` not done is alerted, each once.

    :param company: the batch DAG's company
    :param config_dir: the catalog directory (``alerts:`` of its defaults.yaml, the owner)
    """

    template_fields = ()

    def __init__(self, *, company: str, config_dir: str, context: Any = None) -> None:
        super().__init__(context=context)
        self.company = company
        self.config_dir = config_dir

    def notify(self, context: Any) -> None:
        from export_airflow.alerts import _ledger
        from export_lib.errors import ConfigError
        from export_lib.pipeline.batch_requests import parse_periods

        ti = context.get("ti")
        dag_run = context.get("dag_run")
        conf = dag_run.get("conf") if isinstance(dag_run, dict) else getattr(dag_run, "conf",
                                                                             None)
        where = (f"{getattr(ti, 'dag_id', '?')}/{getattr(ti, 'run_id', '?')}/"
                 f"{getattr(ti, 'task_id', '?')} try {getattr(ti, 'try_number', '?')}")
        try:
            schedule_id, slots = parse_periods(dict(conf or {}), where)
        except ConfigError as exc:  # the task refused its conf: nothing was exported
            log.warning("company=%s schedule=- period=-: %s; no period to alert", self.company,
                        exc)
            return
        ledger = _ledger()
        if ledger is None:
            log.error("company=%s schedule=%s period=-: the ledger is unreachable; the %d "
                      "period(s) of %s are not alerted (exportctl runs --schedule %s shows "
                      "them)", self.company, schedule_id, len(slots), where, schedule_id)
            return
        sent = send_batch_alerts(ledger, self.company, self.config_dir, schedule_id, slots,
                                 where=where, given_up=True)
        log.warning("company=%s schedule=%s period=-: batch %s failed for good: %d period "
                    "alert(s) due", self.company, schedule_id, where, sent)


__all__ = ["BatchFailureNotifier", "send_batch_alerts"]
