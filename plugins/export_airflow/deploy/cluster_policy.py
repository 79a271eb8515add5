"""Cluster policy: catch-up work gets its own budget so it cannot delay on-time exports, and
manual exports get a lane of their own so neither delays them.

Installed by ``make setup`` as ``$AIRFLOW_HOME/config/airflow_local_settings.py`` (see
``deploy/airflow_local_settings.py``). Airflow calls ``task_instance_mutation_hook`` in the
scheduler when it creates a task instance. Render tasks of backfill runs (the recovery of missed
slots, ADR 0006, and operators' backfills) move to the ``export_catchup`` pool, while the renders
of scheduled runs share ``export_render``. Every task of a backfill run also loses priority, so
when executor slots are scarce today's task is queued first (Airflow breaks priority ties by
the older logical date, i.e. the backlog's). A scheduled run is always a schedule's newest due
slot (``catchup=False``), however late it was created (a new company, a scheduler back from an
outage): today's report, which seed 001 says catch-up must not block. Until 4 Dec a scheduled
run queued over an hour after its slot counted as catch-up, and a new company's first export
waited behind another company's backlog in the 2-slot catch-up pool (3–4 min on the test
suite's shared stack, while one module's backfill renders were held at their source).
``recover_missed`` is created skipped outside scheduled runs. Tasks of a
``manual_export__<company>`` DAG are never touched here: they run in their own lane (below).

The manual lane (ADR 0018, seed 000: "a dedicated deployment processes manual exports"): every
task of a manual DAG is in the ``export_manual`` pool, which nothing else uses, and carries
:data:`MANUAL_PRIORITY` (absolute), so when an executor slot frees the scheduler hands it to
manual work before any scheduled or catch-up task (scheduled tasks weigh a few units, catch-up
ones lose :data:`CATCHUP_PRIORITY_PENALTY`). The pool bounds the lane to 2 tasks at once, so
the priority never starves scheduled work of more than 2 executor slots.

Queues (``task_policy``, applied by the dag-processor to every parsed task): the render task of
a ``size: large`` channel goes to the ``exports_large`` Celery queue (a worker with concurrency
1, and on Kubernetes a larger pod, see :data:`LARGE_POD_OVERRIDE`), every task of a
``manual_export__<company>`` DAG to ``exports_manual`` (seed 000: manual work runs apart, on a
worker of its own: ``worker-manual`` in ``make cluster``, ``airflow-worker-manual`` in compose),
the rest stays on ``default``. ``make cluster`` starts its workers with matching ``--queues``;
under the LocalExecutor (``make run``) queues are ignored and the pool and the priority alone
keep the lane (sizing: ``scripts/airflow-env.sh``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

RENDER_POOL = "export_render"
CATCHUP_POOL = "export_catchup"
MANUAL_POOL = "export_manual"
# Above any scheduled task's weight (the default "downstream" rule sums a DAG's few tasks) and
# far above catch-up's (penalised by CATCHUP_PRIORITY_PENALTY): a freed executor slot goes to
# a waiting manual task first. Absolute, so it does not depend on the manual DAG's shape.
MANUAL_PRIORITY = 1000
EXPORT_DAG_PREFIXES = ("widget_export__", "data_export__")
CATCHUP_PRIORITY_PENALTY = 100
RECOVER_TASK = "recover_missed"
MANUAL_DAG_PREFIX = "manual_export__"
DEFAULT_QUEUE = "default"
LARGE_QUEUE = "exports_large"
MANUAL_QUEUE = "exports_manual"
QUEUES = (DEFAULT_QUEUE, MANUAL_QUEUE, LARGE_QUEUE)
# KubernetesExecutor: what a large channel's render pod asks for (seed 000: large channels get
# more memory). executor_config={"pod_override": k8s.V1Pod(...)} is built from this mapping by
# large_pod_override(); docs/kubernetes/large-render-pod.yaml is the same spec as YAML.
LARGE_POD_OVERRIDE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"export-channel-size": "large"}},
    "spec": {"containers": [{
        "name": "base",
        "resources": {"requests": {"memory": "2Gi", "cpu": "1"}, "limits": {"memory": "4Gi"}},
    }]},
}


def queue_for(dag_id: str, task_id: str, channel_size: str | None) -> str | None:
    """The Celery queue of an export task; None for a DAG that is not ours."""
    if dag_id.startswith(MANUAL_DAG_PREFIX):
        return MANUAL_QUEUE
    if not dag_id.startswith(EXPORT_DAG_PREFIXES):
        return None
    if task_id == "render" and channel_size == "large":
        return LARGE_QUEUE
    return DEFAULT_QUEUE


def task_policy(task: Any) -> None:
    """Route export tasks to their queue (see the module docstring); large renders also get
    :data:`LARGE_POD_OVERRIDE` when the executor is the KubernetesExecutor."""
    queue = queue_for(str(task.dag_id), str(task.task_id), getattr(task, "channel_size", None))
    if queue is None:
        return
    task.queue = queue
    if queue == LARGE_QUEUE and _kubernetes_executor():
        task.executor_config = {**(task.executor_config or {}),
                                "pod_override": large_pod_override()}


def _kubernetes_executor() -> bool:
    from export_lib import settings

    return "Kubernetes" in settings.executor()


def large_pod_override() -> Any:
    """:data:`LARGE_POD_OVERRIDE` as the ``kubernetes`` client's V1Pod (what the
    KubernetesExecutor's ``pod_override`` takes)."""
    import json

    from kubernetes.client import ApiClient, V1Pod

    class _Response:  # ApiClient.deserialize reads ``.data``
        data = json.dumps(LARGE_POD_OVERRIDE)

    return ApiClient().deserialize(_Response(), V1Pod)


def is_catch_up(run_type: str) -> bool:
    """A backfill run's tasks are catch-up work; a scheduled or manual run's are not."""
    return str(run_type).split(".")[-1].lower() == "backfill"


def task_instance_mutation_hook(task_instance: Any, dag_run: Any = None) -> None:
    if not str(task_instance.dag_id).startswith(EXPORT_DAG_PREFIXES):
        return
    if dag_run is None:
        return
    if task_instance.task_id == RECOVER_TASK:
        _skip_recovery_outside_scheduled_runs(task_instance, dag_run)
        return
    if not is_catch_up(dag_run.run_type):
        return
    task_instance.priority_weight = (task_instance.priority_weight or 1) - CATCHUP_PRIORITY_PENALTY
    if task_instance.task_id == "render":
        task_instance.pool = CATCHUP_POOL
        task_instance.pool_slots = 1


def _skip_recovery_outside_scheduled_runs(task_instance: Any, dag_run: Any) -> None:
    """Only scheduled runs recover missed slots (ADR 0006). In a backfill or manual run the
    task would start a worker process just to skip itself (``RecoverMissedOperator`` does so
    too, e.g. after a clear): created skipped instead, 29 backfill runs launch 29 processes
    fewer on a 2-core machine."""
    if str(dag_run.run_type).split(".")[-1].lower() == "scheduled" or task_instance.state:
        return
    now = datetime.now(UTC)
    task_instance.state = "skipped"
    task_instance.start_date = task_instance.end_date = now
