"""Manual exports' own lane (ADR 0018, issue 22 item 7): every task of a manual DAG is in the
``export_manual`` pool at the top priority (and on the ``exports_manual`` queue under Celery),
nothing else uses that pool, the cluster policy never moves manual work into the catch-up pool,
and the deployment's numbers leave room for the lane while catch-up saturates its pool.
(The timing itself, on a real scheduler: tests/system/scheduler/test_manual_lane.py.)"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from tests.conftest import REPO

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
COMPANIES = ("acme", "dentsu-happiness", "kiwi-outdoors")


def _shipped_dags() -> dict:
    from export_airflow.building.dag_factory import company_dags

    return {dag.dag_id: dag for company in COMPANIES
            for dag in company_dags(REPO / "dags" / "config", company)}


def _weight(dag, task) -> int:
    """The priority weight the scheduler gives ``task`` (Airflow's weight rules)."""
    if str(task.weight_rule) in ("absolute", "WeightRule.ABSOLUTE"):
        return task.priority_weight
    below = task.get_flat_relative_ids(upstream=False)
    return task.priority_weight + sum(dag.task_dict[t].priority_weight for t in below)


def test_every_manual_task_is_in_the_manual_pool_at_the_top_priority(monkeypatch):
    from export_airflow.deploy.cluster_policy import (
        MANUAL_POOL,
        MANUAL_PRIORITY,
        MANUAL_QUEUE,
        task_policy,
    )

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    dags = _shipped_dags()
    manual = {d: dag for d, dag in dags.items() if d.startswith("manual_export__")}
    assert sorted(manual) == [f"manual_export__{c}" for c in COMPANIES]
    for dag in manual.values():
        assert {t.task_id for t in dag.tasks} == {"resolve_window", "render", "publish",
                                                  "deliver"}
        for task in dag.tasks:  # deliver is mapped: its partial carries the lane too
            task_policy(task)
            assert (task.pool, task.pool_slots, task.queue) == (MANUAL_POOL, 1, MANUAL_QUEUE)
            assert (_weight(dag, task), str(task.weight_rule)) == (MANUAL_PRIORITY, "absolute")
    scheduled = {d: dag for d, dag in dags.items() if d not in manual}
    # Above every scheduled task (catch-up ones weigh less still: the policy's penalty), so a
    # freed executor slot goes to manual work first; and the pool is manual work's alone.
    assert max(_weight(dag, t) for dag in scheduled.values() for t in dag.tasks) < MANUAL_PRIORITY
    assert {t.pool for dag in scheduled.values() for t in dag.tasks}.isdisjoint({MANUAL_POOL})


def test_the_restatement_dag_stays_out_of_the_manual_pool():
    from export_airflow.building.restatement import build_restatement_dag
    from export_airflow.deploy.cluster_policy import MANUAL_POOL

    dag = build_restatement_dag(str(REPO / "dags" / "config"), "acme")
    assert MANUAL_POOL not in {t.pool for t in dag.tasks}


@pytest.mark.parametrize(("run_type", "lag"), [
    ("manual", timedelta(minutes=1)), ("manual", timedelta(days=7)),
    ("backfill", timedelta(minutes=5)), ("scheduled", timedelta(days=3)),
])
@pytest.mark.parametrize("task_id", ["resolve_window", "render", "publish", "deliver"])
def test_the_cluster_policy_never_moves_manual_work_into_the_catch_up_pool(run_type, lag,
                                                                           task_id):
    """Whatever the run looks like (a manual run days after its window, or a run type a manual
    DAG never has), the mutation hook leaves a manual task's pool and priority alone, while the
    same hook does move an export DAG's render of a backfill run (the control)."""
    from export_airflow.deploy.cluster_policy import (
        CATCHUP_POOL,
        MANUAL_POOL,
        MANUAL_PRIORITY,
        task_instance_mutation_hook,
    )

    run = SimpleNamespace(run_type=run_type, logical_date=SLOT, queued_at=SLOT + lag)
    ti = SimpleNamespace(dag_id="manual_export__acme", task_id=task_id, pool=MANUAL_POOL,
                         pool_slots=1, priority_weight=MANUAL_PRIORITY, state=None)
    task_instance_mutation_hook(ti, run)
    assert (ti.pool, ti.pool_slots, ti.priority_weight, ti.state) == (
        MANUAL_POOL, 1, MANUAL_PRIORITY, None)
    if run_type != "manual":
        export = SimpleNamespace(dag_id="widget_export__acme__daily-spend", task_id="render",
                                 pool="export_render", pool_slots=1, priority_weight=3)
        task_instance_mutation_hook(export, run)
        # A scheduled run, however late, is the newest due slot: today's, not catch-up.
        assert export.pool == (CATCHUP_POOL if run_type == "backfill" else "export_render")


def _pools() -> dict[str, int]:
    data = json.loads((REPO / "deploy" / "pools.json").read_text())
    return {name: pool["slots"] for name, pool in data.items()}


def _run_environ(tmp_path, cluster: bool) -> dict[str, str]:
    """What scripts/airflow-env.sh exports for `make run` / `make cluster` (nothing started)."""
    script = (f"{'CLUSTER=1 ' if cluster else ''}PGPORT=5999 REDISPORT=6999 S3PORT=9999 "
              f"PORT=8999 source {shlex.quote(str(REPO / 'scripts' / 'airflow-env.sh'))} "
              "&& env -0")
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


@pytest.mark.parametrize("cluster", [False, True], ids=["make-run", "make-cluster"])
def test_parallelism_leaves_the_manual_lane_room_beside_every_render(tmp_path, cluster):
    """The sizing of scripts/airflow-env.sh: the scheduler queues at most `parallelism` tasks
    at once; renders (catch-up's at most export_catchup of them) can hold at most the render
    budget of those slots for long, so the rest, at least the manual pool's size, keep turning
    over and go to the highest priority first."""
    from export_lib import settings

    env = _run_environ(tmp_path, cluster)
    parallelism = int(env["AIRFLOW__CORE__PARALLELISM"])
    budget, _per_company = settings.render_budget(env)
    pools = _pools()
    assert pools["export_catchup"] <= budget  # catch-up's long holders are renders within it
    assert parallelism >= budget + pools["export_manual"], (parallelism, budget, pools)
    assert (parallelism, budget, pools["export_manual"]) == (6, 4, 2)  # as documented


def test_the_manual_worker_has_one_process_per_manual_pool_slot():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    args = supervise.CLUSTER_WORKERS["worker-manual"]
    assert args[args.index("--queues") + 1] == "exports_manual"
    assert int(args[args.index("--concurrency") + 1]) == _pools()["export_manual"]
