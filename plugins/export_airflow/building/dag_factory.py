"""Build export DAGs from the config catalog: deterministic, sorted, no I/O beyond the YAML.

One loader file per company lives in ``dags/`` (``company_<id>.py``), so a broken company file
surfaces as exactly one Airflow import error naming file and field while every other company's
DAGs keep loading, and a worker parses only the company it runs.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, get_parsing_context

from export_airflow.access import access_control, quiet_access_control
from export_airflow.alerts import failure_notifier
from export_airflow.building.params import param, with_form
from export_airflow.building.retry_policy import delivery_policy, retry_args
from export_airflow.deadlines import deadline_alerts
from export_airflow.tasks.assets import publish_alias, schedule_asset
from export_airflow.tasks.limits import timeout_for
from export_airflow.tasks.operators import (
    SUMMARY,
    DeliverOperator,
    PublishOperator,
    RemovedCompanyOperator,
    RenderCsvOperator,
    ResolveWindowOperator,
)
from export_airflow.tasks.sensors import WatermarkSensor, poke_interval
from export_airflow.timetable import ExportTimetable
from export_lib.config.dag_loaders import (
    LOADER_PREFIX,
    dag_index_dir,
    record_company_dags,
    recorded_company_dags,
    removed_company,
)
from export_lib.logfmt import get_logger

# Channel size → share of the global render budget (pool export_render, 4 slots; seed 000 gives
# large channels more memory, here they also take more of the source's capacity).
log = get_logger(__name__)

POOL_SLOTS = {"small": 1, "medium": 1, "large": 2}
# The earliest slot a backfill may ask for when the schedule has no effective_from. The
# scheduler itself never goes back (catchup=False, ADR 0006): recover_missed bounds recovery
# by the schedule's catchup.lookback (EXPORT_CATCHUP_LOOKBACK_HOURS) and the previous run.
EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


def deliver_args(schedule: Any) -> dict[str, Any]:
    """Retries of the deliver tasks: enough for the longest ``retry_window`` of any version's
    destinations at its pace; the policy paces them and the ledger decides when the window has
    closed."""
    policy = delivery_policy(schedule)
    retries = max(policy.retries_for(d.retry_window, d.id) for version in schedule.versions
                  for d in version.destinations)
    return {"retries": retries, "retry_delay": policy.base,
            "retry_exponential_backoff": 2.0, "max_retry_delay": policy.cap,
            "retry_policy": policy}


@functools.lru_cache(maxsize=256)
def _utc_note(timezone: str, hour: int | None) -> str:
    """`` = 06:00 UTC in standard time (+01:00), 05:00 UTC in daylight time (+02:00)``.

    Read off fixed reference days (15 January / 15 July 2026), never today's date, so the DAG
    (and its serialization) does not change from one parse to the next.
    """
    from zoneinfo import ZoneInfo

    if hour is None or timezone == "UTC":
        return ""
    tz = ZoneInfo(timezone)
    seen: dict[str, tuple[str, str]] = {}
    for month in (1, 7):
        local = datetime(2026, month, 15, hour, tzinfo=tz)
        label = "daylight time" if local.dst() else "standard time"
        offset = local.strftime("%z")
        seen[label] = (f"{local.astimezone(UTC):%H:%M} UTC", f"{offset[:3]}:{offset[3:]}")
    if len(seen) == 1:
        ((_, (utc, offset)),) = seen.items()
        return f" = {utc} ({offset}, no daylight saving)"
    return " = " + ", ".join(f"{seen[lbl][0]} in {lbl} ({seen[lbl][1]})"
                             for lbl in ("standard time", "daylight time"))


def utc_note(timing: Any) -> str:
    if timing.cron is not None:
        return ""  # cron schedules state their own zone in the summary
    return _utc_note(timing.timezone, timing.export_hour)


def doc_for(schedule: Any) -> str:
    timing = schedule.timing
    dests = ", ".join(f"{d.id} ({d.type})" for d in schedule.destinations)
    return (
        f"### {schedule.schedule_id}\n\n"
        f"* **Company**: {schedule.company.name} (`{schedule.company.id}`, "
        f"{schedule.company.timezone}), owner {schedule.owner}\n"
        f"* **Schedule**: {ExportTimetable(timing).summary}{utc_note(timing)}\n"
        f"* **Window**: {schedule.window.kind}"
        + (f" ({schedule.window.days} days)" if getattr(schedule.window, "days", None) else "")
        + f" in {schedule.company.timezone}, half-open [start, end)\n"
        f"* **Deadline**: slot + {schedule.deadline}\n"
        f"* **Destinations**: {dests}\n"
        f"* **Config version**: `{schedule.config_version[:12]}`"
        + (f" from {schedule.effective_from:%Y-%m-%dT%H:%M%z}; earlier: "
           + ", ".join(f"`{v.config_version[:12]}`" for v in schedule.history)
           if schedule.history else "") + "\n\n"
        "Runs are keyed by slot (logical date = slot). Clearing any task never produces a "
        "second artifact or delivery; set the `regenerate` param to publish a new version.\n"
    )


def build_dag(schedule: Any, config_dir: str) -> DAG:
    tags = [f"company:{schedule.company.id}", f"kind:{schedule.kind}"]
    # A task that fails for good (after its last retry) alerts the exports team and the owner,
    # once per run and reason (export_airflow.alerts, ADR 0010); retries are silent. Given to
    # each task, not in default_args: Airflow stores a callable in the DAG's default_args as
    # its class's source code, serialised again on every parse (issue 25 item 3).
    alerting = {"on_failure_callback": failure_notifier(schedule, config_dir)}
    if schedule.channel:
        tags.append(f"channel:{schedule.channel}")
    with quiet_access_control(), DAG(
        dag_id=schedule.dag_id,
        schedule=ExportTimetable(schedule.timing),
        # Earlier versions (``history``) cover the slots before the current effective_from;
        # only the first version's effective_from starts the DAG (ADR 0005).
        start_date=schedule.first_effective or EPOCH,
        # ADR 0006: the scheduler creates the newest due slot only, so the current slot never
        # waits behind a backlog; recover_missed backfills missed slots (recovery: each), the
        # ledger records them skipped (latest / none). Backfill runs are not counted here.
        catchup=False,
        max_active_runs=2,
        tags=sorted(tags),
        # The company's roles (ADR 0023): FAB grants them this DAG and no other company's.
        access_control=access_control(schedule.company.id),
        doc_md=doc_for(schedule),
        default_args={"owner": schedule.owner, **retry_args(schedule)},
        is_paused_upon_creation=schedule.company.status == "paused",
        # The missed deadline and the risk point (ADR 0020); Airflow 3.3 takes a list.
        deadline=deadline_alerts(schedule, config_dir),
    ) as dag:
        resolve = ResolveWindowOperator(task_id="resolve_window",
                                        schedule_id=schedule.schedule_id, config_dir=config_dir,
                                        execution_timeout=timeout_for(schedule, "resolve"),
                                        **alerting)
        if schedule.policies.recovery == "each":
            from export_airflow.tasks.recovery import RecoverMissedOperator, catchup_lookback

            # No upstream: a skipped or held current slot still recovers the missed ones.
            # Its failure does not fail the export: no export alert (its own retries apply).
            RecoverMissedOperator(task_id="recover_missed", schedule_id=schedule.schedule_id,
                                  config_dir=config_dir, on_failure_callback=None,
                                  lookback_seconds=catchup_lookback(schedule).total_seconds())
        late_data = schedule.policies.late_data
        if late_data.policy == "wait_for_watermark":
            wait = WatermarkSensor(task_id="wait_for_watermark", run=resolve.output,
                                   timeout=schedule.deadline.total_seconds() + 3600,
                                   execution_timeout=timeout_for(schedule, "sensor"),
                                   poke_interval=poke_interval(schedule).total_seconds(),
                                   **alerting)
            resolve >> wait
            last = wait
        else:
            last = resolve
        rendered = RenderCsvOperator(task_id="render", run=resolve.output, pool="export_render",
                                     pool_slots=POOL_SLOTS[schedule.size or "small"],
                                     channel_size=schedule.size or "small",
                                     regenerate="{{ params.regenerate }}",
                                     config_dir=config_dir,
                                     execution_timeout=timeout_for(schedule, "render"),
                                     **alerting)
        last >> rendered
        # A new artifact version is an event on the schedule's asset (ADR 0024).
        published = PublishOperator(task_id="publish", rendered=rendered.output,
                                    asset_alias=publish_alias(schedule.schedule_id),
                                    config_dir=config_dir,
                                    execution_timeout=timeout_for(schedule, "publish"),
                                    **alerting)
        # Mapped over the run's own captured destinations, which publish pushes (not today's
        # config): a destination added later applies to later slots only (ADR 0005).
        # deliver reads what publish announced: the schedule's asset is its inlet, which also
        # makes the dag-processor register the asset before its first event (else Airflow
        # creates it on that event, and two runs publishing their first versions at once race
        # to insert it).
        delivered = DeliverOperator.partial(task_id="deliver", published=published.output[SUMMARY],
                                            inlets=[schedule_asset(schedule.company.id,
                                                                   schedule.schedule_id)],
                                            pool="export_deliver", config_dir=config_dir,
                                            execution_timeout=timeout_for(schedule, "deliver"),
                                            **alerting, **deliver_args(schedule)).expand(
            destination_id=published.output)
        if late_data.policy == "restate":
            # Imported here: its TriggerDagRunOperator base pulls in ~25 modules of Airflow
            # core that every other export's task process would otherwise import for nothing.
            from export_airflow.building.restatement import RestateLaterOperator

            # Its own short run of restatement__<company> at window end + grace: this run ends
            # with the first delivery and holds no max_active_runs slot meanwhile.
            delivered >> RestateLaterOperator(task_id="restate_later", run=resolve.output,
                                              grace_seconds=late_data.grace.total_seconds(),
                                              execution_timeout=timeout_for(schedule, "small"),
                                              **alerting)
    with_form(dag, {"regenerate": param(False, type="boolean",
                                        description="Publish a new artifact version even if "
                                                    "this period already has one.")})
    return dag


def company_dags(config_dir: Path, company_id: str, only_dag: str | None = None) -> list[DAG]:
    """The DAGs of one company — its exports, its ``manual_export__<company>`` DAG and, when an
    export restates late data, its ``restatement__<company>`` DAG; a config
    problem raises one ConfigError naming file and field.

    ``only_dag`` builds just that DAG (none if it is not this company's); the whole company
    file is still validated, so a broken file fails a worker exactly as it fails the parser.
    """
    from export_airflow.building.manual_dag import build_manual_dag, manual_dag_id
    from export_lib.ledger.seniority import open_catalog

    catalog = open_catalog(config_dir, only=company_id)
    catalog.raise_for_errors()
    schedules = catalog.for_company(company_id)
    dags = [build_dag(s, str(config_dir)) for s in schedules
            if only_dag is None or s.dag_id == only_dag]
    if only_dag is None or only_dag == manual_dag_id(company_id):
        # A worker running a manual task needs no form enums (see manual_dag.manual_params).
        form = None if only_dag is not None else schedules
        dags.append(build_manual_dag(config_dir, company_id, form))
    recovering = [s for s in schedules if s.policies.recovery == "each"]
    if recovering and only_dag in (None, f"recovery_batch__{company_id}"):
        from export_airflow.building.recovery_batch import build_recovery_batch_dag

        dags.append(build_recovery_batch_dag(str(config_dir), company_id, recovering))
    if any(s.policies.late_data.policy == "restate" for s in schedules) and only_dag in (
            None, f"restatement__{company_id}"):
        # Imported only here: a worker of another DAG never loads the trigger operator.
        from export_airflow.building.restatement import build_restatement_dag

        dags.append(build_restatement_dag(str(config_dir), company_id))
    return dags


def register_company_dags(loader_file: str, namespace: dict[str, Any]) -> None:
    """Called by ``dags/company_<id>.py``: put that company's DAGs into the module namespace.

    A worker running a task sets the parsing context to its DAG: build only that one.
    When the company's file was removed, the same DAG ids and task ids stay (rebuilt from the
    record of the last full parse), every task failing at once with one line naming company
    and file — so a cleared or queued task of a run registered before the removal fails
    visibly instead of waiting forever in a DAG Airflow would otherwise mark stale.
    """
    # Resolved: a loader linked into a DAG bundle's folder (deploy/bundles.py) reads dags/config.
    path = Path(loader_file).resolve()
    company_id = path.stem.removeprefix(LOADER_PREFIX)
    context = get_parsing_context()
    index = dag_index_dir(path.parent)
    gone = removed_company(path.parent, company_id)
    if gone is not None:
        if context.dag_id and context.task_id:
            graphs = {context.dag_id: {context.task_id: []}}
        else:
            graphs = recorded_company_dags(index, company_id)
        for dag_id, graph in graphs.items():
            namespace[dag_id] = _removed_company_dag(dag_id, graph, gone, company_id)
        if graphs:
            return
        # Never recorded (no writable index): the loader's import error says what is wrong.
    dags = company_dags(path.parent / "config", company_id, only_dag=context.dag_id)
    for dag in dags:
        namespace[dag.dag_id] = dag
    if context.dag_id is None and index is not None:
        graphs = {dag.dag_id: {task.task_id: sorted(task.upstream_task_ids) for task in dag.tasks}
                  for dag in dags}
        try:
            record_company_dags(index, company_id, graphs)
        except OSError as exc:  # the DAGs still load; only the after-removal stand-ins are lost
            log.warning("company=%s schedule=- period=-: cannot record its DAG shape in %s (%s); "
                        "if this company is removed, its cleared tasks will not fail visibly",
                        company_id, index, exc, extra={"company": company_id})


def _removed_company_dag(dag_id: str, graph: dict[str, list[str]], reason: str,
                         company_id: str) -> DAG:
    with quiet_access_control(), DAG(dag_id=dag_id, schedule=None, start_date=EPOCH, doc_md=reason,
             tags=["removed-company"], access_control=access_control(company_id)) as dag:
        tasks = {task_id: RemovedCompanyOperator(task_id=task_id, reason=reason)
                 for task_id in graph}
        for task_id, upstream in graph.items():
            for up in upstream:
                if up in tasks:
                    tasks[up] >> tasks[task_id]
    return dag
