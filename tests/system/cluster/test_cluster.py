"""`make cluster` for real, one Celery cluster (two schedulers, two dag-processors each parsing one
DAG bundle) for the module: the topology in a fresh copy of the project, its queues (large renders
on worker-large, manual work on its own queue and worker, worker-manual), two DAG runs of one slot
scanning the source once (the run's lease), ``exportctl explain`` on a render no worker listens for;
then the fault scenario (``FAULT_COMPANIES`` generated companies over 2 days, worker-large killed
mid-render and mid-upload, one of the two schedulers and Redis killed, the source stopped and
started; faults_world.py) on the same cluster, each fault company's DAGs from its bundle; last,
`make cluster-stop` leaving nothing behind. The shipped config is trimmed to 2 companies and 3
schedules; the fault companies are added to the running cluster when their test starts.

One cluster instead of two (this module and the fault test had one each) saves a boot, a DAG
parse and a teardown: ~110 s of a pytest worker in `make test`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import yaml

from tests.services.postgres import (
    PostgresServer,
    pause_postgres,
    resume_postgres,
    start_postgres,
    stop_postgres,
)
from tests.system.cluster.faults_support import (
    RENDER_APP,
    SCAN_LOG_OPTIONS,
    SourceSampler,
    descendants,
    sigkill_component,
)
from tests.system.cluster.faults_world import (
    BIG,
    OUTAGE_S,
    SLOW,
    World,
    check_destinations,
    check_ledger,
    check_source,
    company_ids,
    ready,
    seed,
    slow_render_reading,
    write_companies,
)
from tests.system.cluster.stack import Cluster
from tests.system.scheduler.harness import keep_or_remove
from tests.system.soak.stack import scratch_dir, wait_for

pytestmark = pytest.mark.timeout(1800)

LARGE_DAG = "data_export__dentsu-happiness__facebook__primary"
SMALL_DAG = "widget_export__acme__daily-spend"
MANUAL_DAG = "manual_export__acme"
SLOW_RENDER_S = 20
ENV = {
    # Two schedulers (Airflow's HA, make cluster SCHEDULERS=2): the fault test SIGKILLs one
    # while runs are active and the other carries on. Two dag-processors, each parsing one
    # DAG bundle (DAG_PROCESSORS=2): the fault companies fc000 and fc001 fall in different
    # bundles. tests/system/cluster/test_ha.py is the full-size case (make acceptance).
    "SCHEDULERS": "2",
    "DAG_PROCESSORS": "2",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # only what the tests unpause runs
    "EXPORT_RETRY_DELAY_SECONDS": "5",
    "EXPORT_MAX_RETRY_DELAY_SECONDS": "20",  # the fault test's 11 retries outlast its outage
    "EXPORT_RENDER_LEASE_SECONDS": "10",
    # A killed worker's task is found by its missing heartbeat (default 300 s).
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
    # A task whose Celery message was lost with a Redis restart is queued again (default 600 s).
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "60",
    # No recovery backfills beyond the latest slot (the fault companies' exports say 24 h).
    "EXPORT_CATCHUP_LOOKBACK_HOURS": "1",
}


def trim_config(root: Path) -> None:
    """The shipped config minus what this module does not need on a shared 2-core machine:
    acme's daily-spend (small queue, manual DAG) and dentsu's facebook channel (large)."""
    config = root / "dags" / "config"
    (config / "kiwi-outdoors.yaml").unlink()
    (root / "dags" / "company_kiwi-outdoors.py").unlink()
    acme = yaml.safe_load((config / "acme.yaml").read_text())
    acme["widget_exports"] = [w for w in acme["widget_exports"] if w["id"] == "daily-spend"]
    acme.pop("data_exports", None)
    (config / "acme.yaml").write_text(yaml.safe_dump(acme, sort_keys=False))
    dentsu = yaml.safe_load((config / "dentsu-happiness.yaml").read_text())
    dentsu["data_exports"] = [d for d in dentsu["data_exports"] if d["channel"] == "facebook"]
    (config / "dentsu-happiness.yaml").write_text(yaml.safe_dump(dentsu, sort_keys=False))
STARTED: dict[str, float] = {}


@pytest.fixture(scope="module")
def fault_source() -> Iterator[PostgresServer]:
    """The fault companies' source: a PostgreSQL server of its own (stopped and started by the
    fault test), logging every statement (its scans are counted)."""
    source = start_postgres(SCAN_LOG_OPTIONS)
    try:
        yield source
    finally:
        stop_postgres(source)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, fault_source: PostgresServer) -> Iterator[Cluster]:
    failed_before = request.session.testsfailed
    stack = Cluster.in_copy(scratch_dir("export-cluster-") / "project", **ENV,
                            AIRFLOW_CONN_FAULT_SOURCE=fault_source.dsn)
    trim_config(stack.root)
    started = time.monotonic()
    try:
        stack.start()
        STARTED["seconds"] = time.monotonic() - started
        print(f"make cluster: up in {STARTED['seconds']:.0f} s")
        yield stack
    finally:
        stack.stop()
        for pid in stack.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stack.drop_databases()
        log = fault_source.datadir.parent / "server.log"  # kept with the copy, for a failure
        if log.is_file():
            (stack.root / "source-server.log").write_bytes(log.read_bytes())
        keep_or_remove(stack.root.parent, failed=request.session.testsfailed > failed_before)


def _api(cluster: Cluster):
    api = cluster.api()
    # The example consumer too: the company users' check expects it among acme's DAGs (a run
    # on 3 Dec read the users' lists before the dag-processor had reached its file).
    for dag_id in (LARGE_DAG, SMALL_DAG, MANUAL_DAG, "example_asset_consumer"):
        wait_for(lambda d=dag_id: api.call("GET", f"/api/v2/dags/{d}")[0] == 200, 180, 1,
                 what=f"{dag_id} to be parsed")
    return api


def _tis(api, dag_id: str, run_id: str) -> list[dict]:
    return api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100"
                  )["task_instances"]


def ran_on(cluster: Cluster, dag_id: str, run_id: str, task_id: str) -> list[str]:
    """The workers that executed a task's tries, from their logs ("Executing workload in
    Celery: … log_path='dag_id=…/run_id=…/task_id=…/attempt=N.log'"), in try order. A try
    rescheduled (the company's render budget was full: up_for_reschedule, the same try number)
    is executed again under the same attempt: one worker per try and worker (CI 6 Dec: the
    small render listed worker-default twice)."""
    needle = f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/attempt="
    found = []
    for log in sorted(cluster.run_dir.glob("worker-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "Executing workload" in line and needle in line:
                attempt = int(line.split(needle, 1)[1].split(".log", 1)[0])
                found.append((attempt, log.stem))
    return [worker for _, worker in sorted(set(found))]


def _run_state(api, dag_id: str, run_id: str) -> str:
    return api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]


def _trigger(api, dag_id: str, logical_date: datetime | None, conf: dict | None = None) -> str:
    return api.ok("POST", f"/api/v2/dags/{dag_id}/dagRuns", {
        "logical_date": logical_date.isoformat() if logical_date else None,
        "conf": conf or {}})["dag_run_id"]


def test_make_cluster_is_up_within_5_minutes_with_every_component(cluster):
    assert STARTED["seconds"] < 300
    status = cluster.status()["components"]
    # PostgreSQL is the supervisor's only with a cluster of its own (not make cluster
    # PG_SERVER=…, the session's server here).
    own_pg = ["postgres"] if cluster.pg_server is None else []
    assert list(status) == [*own_pg, "redis", "s3", "statsd", "api-server", "scheduler-1",
                            "scheduler-2", "dag-processor-1", "dag-processor-2", "triggerer",
                            "worker-default", "worker-manual", "worker-large"]
    assert {c["state"] for c in status.values()} == {"up"}


def test_company_users_see_and_trigger_only_their_company(cluster):
    """make cluster ships the FAB auth manager and the demo users too (ADR 0023)."""
    import json

    from export_lib.views.visibility import company_of_dag
    from tests.system.soak.stack import Api

    admin = _api(cluster)
    users = json.loads((cluster.home / "demo-users.json").read_text())
    assert set(users) == {f"{c}-{r}" for c in ("acme", "dentsu-happiness")
                          for r in ("viewer", "operator")}
    every = {d["dag_id"] for d in admin.ok("GET", "/api/v2/dags?limit=100")["dags"]}
    for name in ("acme-viewer", "acme-operator"):
        api = Api(admin.base).login(name, users[name]["password"])
        mine = {d["dag_id"] for d in api.ok("GET", "/api/v2/dags?limit=100")["dags"]}
        # acme's export DAGs and the example consumer of acme/daily-spend (granted to acme).
        assert mine == {d for d in every if company_of_dag(d) == "acme"} | {
            "example_asset_consumer"} and MANUAL_DAG in mine
        assert api.call("GET", f"/api/v2/dags/{LARGE_DAG}")[0] == 403
        status, _ = api.call("POST", "/api/v2/dags/manual_export__dentsu-happiness/dagRuns",
                             {"logical_date": None, "conf": {}})
        assert status == 403
        assert {r["company"] for r in api.ok("GET", "/exports/runs.json?limit=500")["runs"]} <= {
            "acme"}


def test_large_renders_run_on_the_large_worker_and_manual_work_on_its_queue(cluster):
    api = _api(cluster)
    slot = datetime.now(UTC).replace(hour=9, minute=30, second=0, microsecond=0) - timedelta(
        days=5)
    runs = {LARGE_DAG: _trigger(api, LARGE_DAG, slot),
            SMALL_DAG: _trigger(api, SMALL_DAG, slot.replace(minute=0) - timedelta(hours=4)),
            MANUAL_DAG: _trigger(api, MANUAL_DAG, None, {
                "company": "acme", "base_export": "acme/daily-spend", "reason": "cluster test",
                "window_start": (slot - timedelta(days=1)).replace(hour=0, minute=0).isoformat(),
                "window_end": slot.replace(hour=0, minute=0).isoformat(), "columns": [],
                "format": "csv", "destinations": [], "regenerate": False})}
    for dag_id in runs:
        api.ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    for dag_id, run_id in runs.items():
        wait_for(lambda d=dag_id, r=run_id: _run_state(api, d, r) in ("success", "failed"), 300,
                 what=f"{dag_id} {run_id} to finish")
        assert _run_state(api, dag_id, run_id) == "success", _tis(api, dag_id, run_id)
    where = {(dag_id, ti["task_id"]): (ti["queue"], *ran_on(cluster, dag_id, run_id,
                                                            ti["task_id"]))
             for dag_id, run_id in runs.items() for ti in _tis(api, dag_id, run_id)
             if ti["state"] == "success"}
    assert where[(LARGE_DAG, "render")] == ("exports_large", "worker-large")
    assert where[(LARGE_DAG, "publish")] == ("default", "worker-default")
    _metrics_and_json_logs_arrived(cluster, runs)
    assert where[(SMALL_DAG, "render")] == ("default", "worker-default")
    manual = {v for (dag, _), v in where.items() if dag == MANUAL_DAG}
    assert {v[0] for v in manual} == {"exports_manual"}
    assert {w for v in manual for w in v[1:]} == {"worker-manual"}  # its own (ADR 0018)
    keys = [o["Key"] for o in cluster.s3().list_objects_v2(
        Bucket="exports", Prefix="artifacts/dentsu-happiness/facebook__primary/")["Contents"]]
    assert any(k.endswith("__v1.csv") for k in keys), keys


def _metrics_and_json_logs_arrived(cluster: Cluster, runs: dict[str, str]) -> None:
    """deploy/cluster.env's StatsD and JSON logs: the cluster's listener received both exports'
    metrics from the workers and Airflow's own that the Grafana dashboard shows; the workers
    wrote JSON lines; each render's line of ours has the run's fields and status."""
    from tests.support.statsd_mapping import airflow_names

    ours = {f"airflow.export.{metric}.{schedule}"
            for schedule in ("acme.daily-spend", "dentsu-happiness.facebook__primary")
            for metric in ("runs.expected", "render.rows", "render.bytes", "render.seconds",
                           "render.rows_per_second", "deliveries.unresolved")}
    wanted = ours | set(airflow_names())
    wait_for(lambda: wanted <= cluster.statsd_names(), 60,
             what=f"StatsD names {sorted(wanted - cluster.statsd_names())}")
    worker = (cluster.run_dir / "worker-large.log").read_text(errors="replace").splitlines()
    assert any(line.startswith("{") and '"event"' in line for line in worker), worker[-5:]
    for dag_id in (LARGE_DAG, SMALL_DAG):
        (path,) = [p for p in (cluster.home / "logs").rglob("task_id=render/attempt=1.log")
                   if f"run_id={runs[dag_id]}" in str(p)]
        records = [json.loads(line) for line in path.read_text().splitlines()]
        # The engine's, the stage's and the operator's "N rows, N bytes" lines.
        rendered = [r for r in records if " rows, " in str(r.get("event"))]
        assert [(r["company"], r["status"]) for r in rendered] == [
            (dag_id.split("__")[1], "rendering")] * 3, rendered
        assert rendered[0]["run"].startswith(rendered[0]["schedule"] + "/") and rendered[0][
            "period"], rendered


def test_two_dag_runs_of_one_slot_scan_the_source_once(cluster):
    """Two DAG runs standing for the same slot (logical dates 06:00 and 06:01 UTC of one day)
    render at the same time on the default worker (acme's scan held 20 s): one holds the run's
    lease and scans, the other's render reschedules ("holds the run") and finds the artifact
    when it comes back.

    The scan is held by a lock on the table, released 20 s after the scan started waiting: a
    view that sleeps (as before) makes every column nullable, a schema change that the
    default ``schema_policy: fail`` refuses (ADR 0025), while the table keeps acme's contract."""
    api = _api(cluster)
    demo = cluster.database_url("demo")
    slot = datetime.now(UTC).replace(hour=6, minute=0, second=0, microsecond=0) - timedelta(
        days=4)
    key = f"acme/daily-spend/{slot:%Y-%m-%dT%H:%MZ}"
    _wait_for_no_other_run(api, SMALL_DAG)
    with SourceSampler(demo) as source, _held_scans(demo, "widget_metrics", SLOW_RENDER_S):
        run_ids = [_trigger(api, SMALL_DAG, slot), _trigger(api, SMALL_DAG,
                                                            slot + timedelta(minutes=1))]
        for run_id in run_ids:
            wait_for(lambda r=run_id: _run_state(api, SMALL_DAG, r) in ("success", "failed"),
                     300, what=f"{SMALL_DAG} {run_id} to finish")
    assert [_run_state(api, SMALL_DAG, r) for r in run_ids] == ["success", "success"]
    assert cluster.ledger_attempts(key) == ["published"]
    (run,) = [r for r in cluster.ledger_runs() if r["run_key"] == key]
    # Scans of this period only: an on-time acme run may fire meanwhile (daily-spend at 06:00
    # UTC; CI at 06:00 saw it as a second acme scan of another period).
    start = datetime.fromisoformat(run["window_start_utc"].replace("Z", "+00:00"))
    assert [w for w in source.windows["acme"] if start in w] != [], source.windows
    assert sum(start in w for w in source.windows["acme"]) == 1, source.windows
    assert [a["version"] for a in run["artifacts"]] == [1]
    assert [(d["state"], d["version"]) for d in run["deliveries"]] == [("acknowledged", 1)]
    logs = "".join(p.read_text(errors="replace") for p in (cluster.home / "logs").rglob(
        "task_id=render/*.log") if any(r in str(p) for r in run_ids))
    assert "holds the run, running" in logs and "rescheduling at" in logs
    print(f"one slot, two DAG runs: attempts {cluster.ledger_attempts(key)}, source scans "
          f"{dict(source.scans)} (all periods)")


@contextmanager
def _held_scans(dsn: str, table: str, seconds: float) -> Iterator[None]:
    """An ACCESS EXCLUSIVE lock on ``table`` for the block, released ``seconds`` after an export
    query first waits on it (or at the block's end): that scan takes as long."""
    holder = psycopg.connect(dsn)
    holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    done = threading.Event()

    def release() -> None:
        with psycopg.connect(dsn, autocommit=True) as watch:
            while not done.is_set() and not watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    f"AND application_name LIKE '{RENDER_APP}%' AND datname = current_database()"
                    ).fetchone()[0]:
                time.sleep(0.2)
        done.wait(seconds)
        holder.rollback()

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        yield
    finally:
        done.set()
        releaser.join(timeout=30)
        holder.close()


def _wait_for_no_other_run(api, dag_id: str, margin: timedelta = timedelta(minutes=4)) -> None:
    """Let the DAG's own on-time runs out of the way: export DAGs have max_active_runs=2, so an
    on-time run beside the first of two test runs queues the second, and they never overlap.
    Seen: the run of the newest slot that the cluster creates at start, and (CI at 06:00 UTC)
    a slot falling due mid-test. Waits out a slot due within ``margin``, then every active run."""
    due = api.ok("GET", f"/api/v2/dags/{dag_id}")["next_dagrun_run_after"]
    wait = (datetime.fromisoformat(due.replace("Z", "+00:00")) - datetime.now(UTC)
            if due else margin)
    if wait < margin:
        time.sleep(max(0.0, wait.total_seconds()) + 15)  # the scheduler creates it meanwhile
    wait_for(lambda: api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?state=queued&state=running"
                                   "&limit=1")["total_entries"] == 0,
             300, 2, what=f"no active run of {dag_id}")


def test_explain_names_a_render_queued_where_no_worker_listens(cluster):
    """Issue 14, "Bad input": worker-large frozen (SIGSTOP on it and its pool: the supervisor
    sees it alive and does not restart it, the broker gets no answer from it), the large
    channel's render stays queued on exports_large and ``exportctl explain`` says so, with the
    fix; once the worker is resumed the run succeeds."""
    api = _api(cluster)
    env = cluster.stack_environ()
    # Undo a slowed source, if any.
    with psycopg.connect(cluster.database_url("demo"), autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('channel_metrics_base')").fetchone()[0]:
            conn.execute("DROP VIEW IF EXISTS channel_metrics")
            conn.execute("ALTER TABLE channel_metrics_base RENAME TO channel_metrics")
    slot = datetime.now(UTC).replace(hour=9, minute=30, second=0, microsecond=0) - timedelta(
        days=7)
    api.ok("PATCH", f"/api/v2/dags/{LARGE_DAG}", {"is_paused": False})
    started = time.monotonic()
    frozen = descendants(cluster.status()["components"]["worker-large"]["pid"])
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        run_id = _trigger(api, LARGE_DAG, slot)

        def render() -> dict:
            return next(t for t in _tis(api, LARGE_DAG, run_id) if t["task_id"] == "render")

        wait_for(lambda: render()["state"] == "queued", 180, 1, what="the render to be queued")
        assert render()["queue"] == "exports_large"
        result = subprocess.run(
            ["exportctl", "explain", "--schedule", "dentsu-happiness/facebook/primary",
             "--date", f"{slot:%Y-%m-%dT%H:%MZ}"], cwd=cluster.root, env=env,
            capture_output=True, text=True, timeout=120, check=False)
        explained = time.monotonic() - started
    finally:
        for pid in reversed(frozen):
            os.kill(pid, signal.SIGCONT)
    print(result.stdout)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.startswith(f"dentsu-happiness/facebook/primary, slot {slot:%Y-%m-%d}")
    assert re.search(
        rf"\nIn Airflow \(DAG {LARGE_DAG}\):\n  render: queued on exports_large, no worker "
        r"listening \(since \d\d:\d\d:\d\d UTC, \d+ (s|min)\) — start one with: airflow celery "
        r"worker --queues exports_large(\n|$)", result.stdout), result.stdout
    wait_for(lambda: _run_state(api, LARGE_DAG, run_id) in ("success", "failed"), 300,
             what=f"{LARGE_DAG} {run_id} to finish once worker-large is back")
    assert _run_state(api, LARGE_DAG, run_id) == "success", _tis(api, LARGE_DAG, run_id)
    assert set(ran_on(cluster, LARGE_DAG, run_id, "render")) == {"worker-large"}
    print(f"explain: the queued render explained {explained:.0f} s after worker-large froze; "
          f"the run succeeded {time.monotonic() - started:.0f} s after")


@pytest.fixture(scope="module")
def world(cluster: Cluster, fault_source: PostgresServer) -> Iterator[World]:
    """The fault companies seeded and written into the running cluster; their export DAGs are
    created unpaused, so their runs start as soon as they are parsed: the source is watched
    from before."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    at, ids = now - timedelta(minutes=3), company_ids()
    seed(fault_source, ids, now)
    with SourceSampler(fault_source.dsn) as sampler:
        world = World(cluster, fault_source, ids, at, sampler)
        try:
            write_companies(cluster.root, ids, at)
            # New company files on a running FAB stack: their roles first (ADR 0023), or the
            # dag-processor refuses their DAGs.
            roles = cluster.make("roles", timeout=300)
            assert roles.returncode == 0 and f"for {len(ids) + 2} companies" in roles.stdout, (
                roles.stdout[-2000:], roles.stderr[-2000:])
            yield world
        finally:
            world.uploads.stop()


def test_companies_two_days_of_faults_exactly_once(world: World):
    cluster, uploads = world.cluster, world.uploads
    expected, events = world.expected(), {}

    def mark(event: str) -> None:
        events[event] = round(time.monotonic() - world.began)

    wait_for(lambda: slow_render_reading(world.source), 600, 0.25,  # it reads for 20 s
             what=f"{SLOW}'s data render to read the source")
    with world.lock:
        sigkill_component(cluster, "worker-large")  # in the middle of the 20 s render
    mark("worker-large killed mid-render")
    # One of the two schedulers, while runs are active (today's and the day before's, which
    # recover_missed backfills): scheduler-2 goes on alone until the supervisor restarts it.
    sigkill_component(cluster, "scheduler-1")
    mark("scheduler-1 killed")
    sigkill_component(cluster, "redis")
    mark("redis restarted")
    pause_postgres(world.source)
    mark("source stopped")
    time.sleep(OUTAGE_S)
    resume_postgres(world.source)
    mark("source started")
    wait_for(lambda: uploads.upload is not None, 600, 1,
             what=f"a multipart upload of {BIG}'s artifact to kill worker-large in")
    mark(f"worker-large killed mid-upload (at {uploads.at} s)")
    wait_for(lambda: ready(cluster, expected), 1200, 5,
             what=f"the {len(expected)} expected runs to be ready and delivered")
    mark("all runs ready")
    api = cluster.api()
    wait_for(lambda: api.active_runs() == 0, 300, 5, what="no active DAG run")
    mark("no active run")
    print(f"faults timeline (s): {events}; sampler missed {world.sampler.missed} samples")

    gc = subprocess.run(["exportctl", "ledger", "gc"], cwd=cluster.root,
                        env=cluster.stack_environ(), capture_output=True, text=True, check=False)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    exported = {r["run_key"]: r for r in cluster.ledger_runs()
                if r["state"] != "skipped" and r["company"] in world.ids}
    check_ledger(world, exported)
    check_destinations(world, exported)
    bundles = cluster.check_bundles(api, {cid: f"data_export__{cid}__facebook__primary"
                                          for cid in world.ids})
    print(f"faults: bundles {bundles}, {check_source(world, exported)}, upload killed {uploads.upload}, "
          f"wall {time.monotonic() - world.began:.0f} s")


def test_make_cluster_stop_leaves_no_process_behind(cluster):
    pids = [c["pid"] for c in cluster.status()["components"].values()]
    result = cluster.stop()
    assert result.returncode == 0, result.stderr
    assert "make cluster stopped." in result.stdout
    assert cluster.processes() == []
    assert not cluster.postgres_running()
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    assert alive == [], alive
