"""The ``export_gap_audit`` DAG: once a day, the gap audit (ADR 0009) over the last 7 days.

One thin task calls :func:`export_lib.pipeline.audit_apply.run_audit`, the same function as
``exportctl audit``: expected slots versus the ledger, each gap backfilled, recorded skipped or
recorded unrecoverable per its schedule's recovery policy, slots Airflow is running left alone.
Backfills go through the REST API with the ``export_airflow_api`` connection (ADR 0006). Every
unrecoverable period is logged on one line naming its owner, alerted once to the exports team
and the owner through the alerts notifier (``export_airflow.alerts``), and returned in the XCom
(``unrecoverable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseOperator

from export_airflow.building.dag_factory import EPOCH
from export_airflow.tasks.operators import export_errors
from export_lib.logfmt import get_logger

log = get_logger(__name__)  # not self.log: our records carry the run's fields (logfmt)

GAP_AUDIT_DAG_ID = "export_gap_audit"
LOOKBACK = timedelta(days=7)


class GapAuditOperator(BaseOperator):
    """Run the gap audit over ``lookback`` up to now.

    :param config_dir: the config catalog directory (templated)
    """

    template_fields: Sequence[str] = ("config_dir",)
    ui_color = "#fdf3e8"

    def __init__(self, *, config_dir: str, lookback: timedelta = LOOKBACK, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_dir = config_dir
        self.lookback = lookback

    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.alerts import notify_unrecoverable
        from export_airflow.runtime.ledger import task_ledger
        from export_airflow.tasks.recovery import api_from_airflow
        from export_lib.ledger.seniority import open_catalog
        from export_lib.pipeline.audit_apply import run_audit

        now = datetime.now(UTC)
        with export_errors():
            catalog = open_catalog(self.config_dir)
            for path in sorted(catalog.errors):  # a company file's lines name its company
                company = None if Path(path).name == "defaults.yaml" else Path(path).stem
                for line in catalog.errors[path]:
                    log.warning("config error, not audited: %s", line, extra={"company": company})
            ti = context.get("ti")
            who = f"{GAP_AUDIT_DAG_ID}/{getattr(ti, 'run_id', '?')}"
            result = run_audit(catalog, task_ledger(), since=now - self.lookback, until=now,
                               now=now, api=api_from_airflow(),
                               notify=notify_unrecoverable(self.config_dir, who))
        lines = result.plan.lines()  # one per action, in order, then the notes
        for action, line in zip(result.plan.actions, lines, strict=False):
            log.info("%s", line, extra=_gap_fields(catalog, action.gap))
        for line in lines[len(result.plan.actions):]:
            log.info("%s", line)
        gaps = result.plan.backfills
        for outcome in result.backfills:
            first = gaps[outcome.dag_id][0] if gaps.get(outcome.dag_id) else None
            log.info("%s", outcome.describe(), extra={"company": first and first.company,
                                                       "schedule": first and first.schedule_id})
        log.info("%s", result.summary())  # over every company: no run's fields
        return {"changed": result.changed, "recorded": result.recorded,
                "unrecoverable": [{"run": g.label, "owner": g.owner}
                                  for g in result.plan.unrecoverable],
                "backfills": [{"dag_id": b.dag_id, "created": len(b.created),
                               "deferred": bool(b.deferred)} for b in result.backfills]}


def _gap_fields(catalog: Any, gap: Any) -> dict[str, str]:
    """The log fields of a gap's run (registered by the audit or not: the same key and
    period); company, schedule and key if its window cannot be worked out."""
    from export_lib.periods.names import run_key
    from export_lib.pipeline import slot_log_context

    try:
        return slot_log_context(catalog.schedule(gap.schedule_id), gap.slot)
    except Exception:  # noqa: BLE001 - a log line never fails the audit
        return {"company": gap.company, "schedule": gap.schedule_id,
                "run": run_key(gap.schedule_id, gap.slot)}


def build_gap_audit_dag(config_dir: str) -> DAG:
    with DAG(
        dag_id=GAP_AUDIT_DAG_ID,
        schedule="30 1 * * *",
        start_date=EPOCH,
        catchup=False,
        max_active_runs=1,
        tags=["kind:audit"],
        doc_md=__doc__,
        default_args={"owner": "exports", "retries": 2, "retry_delay": timedelta(minutes=10)},
    ) as dag:
        GapAuditOperator(task_id="audit", config_dir=config_dir,
                         execution_timeout=timedelta(minutes=30))
    return dag
