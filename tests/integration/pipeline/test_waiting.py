"""``exportctl explain`` on a task Airflow has not started (issue 14, "Bad input"; ADR 0013):
the pure lines for each case (no worker on the queue, a busy worker, a scheduled task, workers
unknown), the slot a waiting task belongs to, the broker asked for real (a Redis server and a
plain Celery worker; no Airflow) and the command when Airflow cannot be asked. The whole path
on a real cluster with worker-large stopped: tests/system/cluster/test_cluster.py."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from export_lib.pipeline.waiting import (
    WaitingTask,
    Worker,
    Workers,
    tasks_by_slot,
    waiting_lines,
)
from tests.services.ports import free_port, wait_for_port
from tests.world import REPO, build_world

NOW = datetime(2026, 11, 30, 12, 7, 40, tzinfo=UTC)
DAG = "data_export__dentsu-happiness__facebook__primary"
SLOT = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)


def _task(task_id="render", state="queued", queue="exports_large", since=NOW - timedelta(
        minutes=4, seconds=30), run_id="manual__2026-11-30T09:30:00+00:00", **kw):
    return WaitingTask(DAG, run_id, task_id, state, queue, since, pool="export_render",
                       logical_date=SLOT, **kw)


DEFAULT_WORKER = Worker("worker-default@vm", ("default", "exports_manual"), 4, 1)
LARGE_WORKER = Worker("worker-large@vm", ("exports_large",), 1, 1)


def test_a_task_queued_where_no_worker_listens_says_so_and_how_to_fix_it():
    assert waiting_lines([_task()], Workers((DEFAULT_WORKER,)), now=NOW) == [
        f"In Airflow (DAG {DAG}):",
        "  render: queued on exports_large, no worker listening (since 12:03:10 UTC, 4 min) — "
        "start one with: airflow celery worker --queues exports_large",
    ]
    # No worker at all answers the broker: the same, for every queue.
    assert waiting_lines([_task(queue="default", since=NOW - timedelta(seconds=40))],
                         Workers(), now=NOW)[1] == (
        "  render: queued on default, no worker listening (since 12:07:00 UTC, 40 s) — start "
        "one with: airflow celery worker --queues default")


def test_a_task_queued_on_a_served_queue_names_the_workers_and_waits_for_a_slot():
    busy = Workers((DEFAULT_WORKER, LARGE_WORKER, Worker("other@vm2", ("exports_large",))))
    assert waiting_lines([_task(since=datetime(2026, 11, 29, 10, 0, 5, tzinfo=UTC))], busy,
                         now=NOW)[1] == (
        "  render: queued on exports_large (since 2026-11-29 10:00:05 UTC, 26 h 7 min), served "
        "by worker-large@vm (1 of 1 busy), other@vm2: waiting for a free slot")


def test_a_scheduled_task_waits_for_its_pool_and_warns_when_its_queue_has_no_worker():
    scheduled = _task(task_id="publish", state="scheduled", queue="default")
    assert waiting_lines([scheduled], Workers((DEFAULT_WORKER,)), now=NOW)[1] == (
        "  publish: scheduled (since 12:03:10 UTC, 4 min), waiting for a free slot in pool "
        "export_render before it is queued on default")
    assert waiting_lines([_task(state="scheduled")], Workers((DEFAULT_WORKER,)), now=NOW)[1] == (
        "  render: scheduled (since 12:03:10 UTC, 4 min), waiting for a free slot in pool "
        "export_render before it is queued on exports_large; queue exports_large: no worker "
        "listening — start one with: airflow celery worker --queues exports_large")


def test_unknown_workers_are_one_line_and_two_runs_of_a_slot_are_told_apart():
    tasks = [_task(), _task(task_id="deliver", map_index=0, run_id="scheduled__b",
                            since=NOW - timedelta(minutes=9))]
    assert waiting_lines(tasks, Workers.not_celery("LocalExecutor"), now=NOW) == [
        f"In Airflow (DAG {DAG}):",
        "  deliver[0] (run scheduled__b): queued on exports_large (since 11:58:40 UTC, 9 min)",
        "  render (run manual__2026-11-30T09:30:00+00:00): queued on exports_large (since "
        "12:03:10 UTC, 4 min)",
        "  workers not checked: the executor is LocalExecutor, not Celery: it has no worker "
        "queues (a queued task waits for a free executor slot, AIRFLOW__CORE__PARALLELISM, and "
        "a running scheduler).",
    ]
    assert waiting_lines([], Workers(), now=NOW) == []


def test_task_instances_from_the_api_belong_to_the_slot_their_run_stands_for():
    from export_lib.config.loader import load_catalog

    timing = load_catalog(REPO / "dags" / "config", only="dentsu-happiness").schedule(
        "dentsu-happiness/facebook/primary").timing
    api_ti = {"dag_id": DAG, "dag_run_id": "manual__x", "task_id": "render", "state": "queued",
              "queue": "exports_large", "queued_when": "2026-11-30T12:03:10.5Z",
              "scheduled_when": "2026-11-30T12:03:09Z", "pool": "export_render",
              "map_index": -1, "logical_date": "2026-11-30T09:31:00Z",
              "run_after": "2026-11-30T09:31:00Z"}
    dated = WaitingTask.from_api(api_ti)
    assert (dated.since, dated.queue, dated.logical_date) == (
        datetime(2026, 11, 30, 12, 3, 10, 500000, tzinfo=UTC), "exports_large",
        datetime(2026, 11, 30, 9, 31, tzinfo=UTC))
    undated = WaitingTask.from_api({**api_ti, "dag_run_id": "manual__y", "logical_date": None,
                                    "run_after": "2026-11-30T11:00:00+00:00", "queue": None,
                                    "state": "scheduled", "map_index": 0})
    assert (undated.queue, undated.since, undated.map_index) == (
        "default", datetime(2026, 11, 30, 12, 3, 9, tzinfo=UTC), 0)
    yesterday = WaitingTask.from_api({**api_ti, "logical_date": "2026-11-30T09:29:59Z"})
    assert tasks_by_slot([dated, undated, yesterday], timing, [SLOT]) == {
        SLOT: [dated, undated]}
    assert tasks_by_slot([yesterday], timing, [SLOT]) == {}


# --- the broker, for real ------------------------------------------------------------------

@pytest.fixture(scope="module")
def redis_url():
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is missing: bash scripts/ensure-debian-packages.sh")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, what="redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_broker_names_the_workers_of_each_queue_with_their_slots(redis_url):
    from export_lib.pipeline.waiting_sources import celery_workers

    env = {"AIRFLOW__CORE__EXECUTOR": "CeleryExecutor", "AIRFLOW__CELERY__BROKER_URL": redis_url}
    assert celery_workers(["exports_large"], env) == Workers()  # nobody consumes anything
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--broker", redis_url, "worker", "--queues",
         "exports_large", "--concurrency", "1", "--hostname", "probe@%h", "--without-mingle",
         "--without-gossip", "--loglevel", "WARNING"], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (seen := celery_workers(["exports_large"], env)).workers:
            assert worker.poll() is None and time.monotonic() < deadline, worker.stderr.read()
        (probe,) = seen.workers
        assert probe.name.startswith("probe@")
        assert (probe.queues, probe.concurrency, probe.busy, seen.unknown) == (
            ("exports_large",), 1, 0, None)
        line = waiting_lines([_task()], seen, now=NOW)[1]
        assert line.endswith(f"served by {probe.name} (0 of 1 busy): waiting for a free slot")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def test_workers_that_cannot_be_asked_are_named_in_one_line():
    from export_lib.pipeline.waiting_sources import celery_workers

    refused = celery_workers(["default"], {"AIRFLOW__CELERY__BROKER_URL":
                                           f"redis://:s3cret@127.0.0.1:{free_port()}/0"})
    assert refused.workers == () and refused.unknown.startswith(
        "the Celery broker redis://:**@127.0.0.1:"), refused
    assert "s3cret" not in refused.unknown and "Connection refused" in refused.unknown
    assert celery_workers(["default"], {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}) == (
        Workers.not_celery("LocalExecutor"))
    assert celery_workers(["default"], {}) == Workers.no_broker()


def test_exportctl_explain_still_explains_when_airflow_cannot_be_asked(tmp_path):
    world = build_world(tmp_path / "w", AIRFLOW_CONN_EXPORT_AIRFLOW_API=(
        f"http://admin:admin@127.0.0.1:{free_port()}"))
    args = ("explain", "--schedule", "acme/daily-spend", "--date", "2026-03-29")
    result = world.exportctl(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("acme/daily-spend, slot 2026-03-29 07:00 CEST (05:00 UTC): "
                                    "missed: no run was registered")
    (note,) = result.stderr.splitlines()
    assert note.startswith("exportctl: note: Airflow not asked (connection "
                           "'export_airflow_api': the Airflow API at http://127.0.0.1:")
    assert note.endswith("is the api-server up?); tasks waiting there are not shown")
    quiet = world.exportctl(*args, "--no-airflow")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, result.stdout, "")
