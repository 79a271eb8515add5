"""The daily ``export_retention`` DAG: one thin task that calls
:func:`export_lib.pipeline.retention.apply_retention` (docs/adr/0008-operator-controls.md).

Artifacts older than their schedule's ``retention_days`` (30 by default) are deleted unless the
schedule is under ``legal_hold``, an operator holds them (``exportctl hold``), a delivery of
them is not final or may still be retried, or the company's config file has errors (ADR 0017);
each kept one is logged with its reason, each deletion is recorded in the ledger. An object the
store cannot delete is recorded and the task carries on; the task then fails (non-retryable) so
the exports team sees it, with the list in its log.
``exportctl retention --dry-run`` shows what the next pass would delete.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from export_airflow.tasks.limits import task_timeout
from export_airflow.tasks.operators import export_errors
from export_lib.logfmt import get_logger

log = get_logger(__name__)  # not self.log: our records carry the run's fields (logfmt)

RETENTION_DAG_ID = "export_retention"


class RetentionOperator(BaseOperator):
    """Apply retention once over the whole ledger.

    :param config_dir: the config catalog directory: today's ``retention_days``/``legal_hold``
    :param dry_run: only report what would be deleted (templated)
    """

    template_fields = ("config_dir", "dry_run")
    ui_color = "#f4e8fd"

    def __init__(self, *, config_dir: str, dry_run: bool | str = False, **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", task_timeout("resolve"))
        super().__init__(**kwargs)
        self.config_dir = config_dir
        self.dry_run = dry_run

    def execute(self, context: Any) -> dict[str, Any]:
        from export_airflow.runtime.connections import airflow_resolver
        from export_airflow.runtime.ledger import task_ledger
        from export_lib.ledger.seniority import open_catalog
        from export_lib.pipeline.retention import UndeletableArtifact, apply_retention
        from export_lib.storage.stores import open_store

        dry_run = str(self.dry_run).lower() in ("1", "true", "yes")
        with export_errors():
            report = apply_retention(task_ledger(), open_catalog(self.config_dir),
                                     open_store(resolver=airflow_resolver()),
                                     now=datetime.now(UTC), dry_run=dry_run)
        # The report names each item's company, schedule and run (not its period).
        for item in report.deleted:
            log.info("company=%s schedule=%s run=%s: %s v%s %s", item.company,
                     item.schedule_id, item.run_key,
                     "would delete" if dry_run else "deleted", item.version, item.uri,
                     extra=_fields(item.company, item.schedule_id, item.run_key))
        for kept in report.kept:
            log.info("company=%s schedule=%s run=%s: kept v%s %s: %s", kept.company,
                     kept.schedule_id, kept.run_key, kept.version, kept.uri, kept.reason,
                     extra=_fields(kept.company, kept.schedule_id, kept.run_key))
        for failed in report.failed:
            # A staging leftover names no company or schedule, only its run.
            whose = ((failed.company, failed.schedule_id)
                     if isinstance(failed, UndeletableArtifact) else ("-", "-"))
            log.error("company=%s schedule=%s run=%s: not deleted %s: %s", *whose,
                      failed.run_key, failed.uri, failed.error,
                      extra=_fields(*whose, failed.run_key))
        summary = {"dry_run": dry_run, "deleted": len(report.deleted), "kept": len(report.kept),
                   "failed": len(report.failed), "staging": len(report.staging_deleted),
                   "staging_kept": len(report.staging_kept)}
        log.info("retention: %s", summary)  # over every company: no run's fields
        if report.failed:
            raise AirflowFailException(f"retention could not delete {len(report.failed)} "
                                       "object(s); see the log lines above (each is recorded "
                                       "in 'exportctl actions')")
        return summary


def _fields(company: str, schedule: str, run: str) -> dict[str, str | None]:
    return {"company": None if company == "-" else company,
            "schedule": None if schedule == "-" else schedule, "run": run}


def build_retention_dag(config_dir: str) -> DAG:
    with DAG(
        dag_id=RETENTION_DAG_ID,
        schedule="@daily",
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=["kind:retention"],
        doc_md=__doc__,
        default_args={"owner": "exports", "retries": 2, "retry_delay": timedelta(minutes=10)},
    ) as dag:
        RetentionOperator(task_id="apply_retention", config_dir=config_dir)
    return dag
