"""Soak: the `make run` stack under load stays up and exports exactly once.

One stack for the module (starting it is the expensive part): catch up the demo slots while
manual exports are triggered and random tasks cleared through the REST API; then a scheduler
SIGKILL; then `make stop` must leave nothing behind. Run as root, the copy is in a mode-700
directory and the stack runs on the cluster setup relocated to postgres's home (issue 21 item 7;
once tests/system/test_home_dir.py, a stack of its own); `make reset-db` deletes it last.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.system.soak.stack import (
    Api,
    Stack,
    check_ledger,
    now_utc,
    percentile,
    relocated_dir,
    wait_for,
)

# Above the test's own ceilings, which setup.cfg's 600 s (stack start included) cut short: in
# CI (2 Dec) the first test's stack took 202 s to start and its runs 398 s to settle under
# TERMINAL_WITHIN's 600 s, and pytest-timeout stopped it at 600 s in all.
pytestmark = pytest.mark.timeout(1500)

# make test: 3 manual exports, each followed by a random clear (CPU the suite is short of: each
# is ~5 task processes); make acceptance: 5 and 4.
TRIGGERS = int(os.environ.get("SOAK_TRIGGERS", "3"))
CLEARS = int(os.environ.get("SOAK_CLEARS", "3"))
# A ceiling, not a target: 64 s alone, 103-336 s beside the fault test's cluster in CI runs.
TERMINAL_WITHIN = float(os.environ.get("SOAK_TERMINAL_WITHIN", "600"))
SEED = int(os.environ.get("SOAK_SEED", "15"))
COMPONENTS = {"postgres", "api-server", "scheduler", "dag-processor", "triggerer"}


def settle(stack: Stack, api: Api, timeout: float) -> tuple[list[dict], list[dict]]:
    """Wait until no DAG run is queued or running (twice in a row), then read Airflow's runs
    and the ledger; re-read when a new scheduled run started in between."""
    deadline = time.monotonic() + timeout
    while True:
        def quiet() -> bool:
            return api.active_runs() == 0 and (time.sleep(3) or api.active_runs() == 0)

        wait_for(quiet, max(1.0, deadline - time.monotonic()), what="every DAG run terminal")
        airflow_runs = api.dag_runs()
        ledger = stack.ledger_runs()
        if api.active_runs() == 0 and len(api.dag_runs()) == len(airflow_runs):
            return airflow_runs, ledger


def assert_all_succeeded(stack: Stack, airflow_runs: list[dict]) -> None:
    bad = [f"{r['dag_id']}/{r['dag_run_id']}: {r['state']}\n{failure_notes(stack, r)}"
           for r in airflow_runs if r["state"] != "success"]
    assert not bad, "DAG runs that did not succeed:\n" + "\n".join(bad)


def failure_notes(stack: Stack, run: dict) -> str:
    """The error lines of the run's task logs, so a CI failure says why: Airflow 3 writes one
    JSON record per line, its exception in ``error_detail`` (type, message, last frame)."""
    logs = stack.root / ".airflow" / "logs" / f"dag_id={run['dag_id']}" / f"run_id={run['dag_run_id']}"
    notes = []
    for path in sorted(logs.glob("task_id=*/**/attempt=*.log")):
        lines = [_log_line(x) for x in path.read_text(errors="replace").splitlines()
                 if any(w in x for w in ("error", "ERROR", "Error", "failed", "Traceback"))]
        if lines:
            notes.append(f"  {path.relative_to(logs)}:\n" + "\n".join(f"    {x}" for x in lines[-6:]))
    return "\n".join(notes) or "  (no error lines in its task logs)"


def _log_line(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line[:400]
    if not isinstance(record, dict):
        return line[:400]
    text = f"{record.get('timestamp', '')} {record.get('level', '')} {record.get('event', '')}"
    for detail in record.get("error_detail") or []:
        frame = (detail.get("frames") or [{}])[-1]
        text += (f" | {detail.get('exc_type')}: {str(detail.get('exc_value'))[:600]}"
                 f" (at {frame.get('filename', '?')}:{frame.get('lineno', '?')})")
    return text


def trigger_manual_exports(api: Api, count: int, tag: str) -> list[str]:
    today = now_utc()
    return [api.trigger_manual("acme", "acme/daily-spend", today - timedelta(days=2 + i),
                               f"{tag} {i}")["dag_run_id"] for i in range(count)]


def consumed_versions(api: Api, airflow_runs: list[dict]) -> list[tuple[str, int]]:
    """(run key, version) of every artifact the example consumer's runs loaded (what their
    ``load`` task returned), sorted."""
    loaded = []
    for run in airflow_runs:
        if run["dag_id"] == "example_asset_consumer":
            loaded += api.ok("GET", f"/api/v2/dags/example_asset_consumer/dagRuns/"
                                    f"{run['dag_run_id']}/taskInstances/load/xcomEntries/"
                                    "return_value")["value"]
    return sorted((x["run_key"], x["version"]) for x in loaded)


def postgres_can_enter(path: Path) -> bool:
    return subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path)],
                          cwd="/", check=False).returncode == 0


def cmdlines_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason=(
    "only root runs PostgreSQL as `postgres`, whose reach decides where the cluster lives"))


@AS_ROOT
def test_the_stack_runs_on_the_cluster_in_postgres_home(soak_stack: Stack):
    """issue 21 item 7: as root from a mode-700 directory the stack comes up on the cluster
    setup relocated to postgres's home (the supervisor once got the unreachable path and
    restarted PostgreSQL forever)."""
    cluster = relocated_dir(soak_stack.root / ".airflow")
    assert not postgres_can_enter(soak_stack.root), "the copy must be out of postgres's reach"
    assert os.readlink(soak_stack.root / ".airflow" / "pg") == str(cluster)
    components = soak_stack.status()["components"]
    assert {name: c["state"] for name, c in components.items()} == dict.fromkeys(COMPONENTS, "up")
    assert components["postgres"]["restarts"] == 0, components["postgres"]["last_restart"]
    server = Path(f"/proc/{components['postgres']['pid']}")
    assert server.stat().st_uid == pwd.getpwnam("postgres").pw_uid
    argv = (server / "cmdline").read_bytes().split(b"\0")
    assert argv[argv.index(b"-D") + 1].decode() == str(cluster)
    with psycopg.connect(host="127.0.0.1", port=soak_stack.pgport, user="exports",
                         password="exports", dbname="exports", connect_timeout=10) as conn:
        assert conn.execute("SHOW data_directory").fetchone()[0] == str(cluster)
        names = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
    assert {"airflow", "exports", "demo"} <= names


def test_soak_catch_up_with_manual_exports_and_clears(soak_stack: Stack):
    api = soak_stack.api()
    rng = random.Random(SEED)
    started = time.monotonic()
    manual_ids, cleared = [], []
    # During catch-up: a manual export every few seconds, a random clear after each of the first.
    for i in range(TRIGGERS):
        manual_ids += trigger_manual_exports(api, 1, f"soak {i}")
        if i < CLEARS:
            # A ceiling: only tasks of finished runs are cleared, and the first run finishes
            # 30-200 s after the stack is up, depending on the machine's load (CI, 3 Dec:
            # none within 60 s once the soak began right after the stack's start).
            hit = wait_for(lambda: api.clear_random_task(rng), 300, interval=2,
                           what="a task of a finished run to clear")
            cleared.append(hit)
        api.active_runs()
        time.sleep(2)
    assert len(cleared) == CLEARS

    airflow_runs, ledger = settle(soak_stack, api, TERMINAL_WITHIN)
    elapsed = time.monotonic() - started
    assert_all_succeeded(soak_stack, airflow_runs)
    by_id = {r["dag_run_id"]: r for r in airflow_runs if r["dag_id"] == "manual_export__acme"}
    assert set(manual_ids) <= set(by_id), "a triggered manual export is missing"
    scheduled = [r for r in airflow_runs if r["run_type"] == "scheduled"
                 and r["dag_id"] != "demo_feed"]
    assert len(scheduled) >= 10, f"only {len(scheduled)} scheduled export runs caught up"

    # Each cleared task really ran again (a clear that selected nothing would pass silently).
    for dag_id, run_id, task_id in cleared:
        ti = api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        assert ti["try_number"] >= 2 and ti["state"] == "success", (dag_id, run_id, ti)

    counts = check_ledger(ledger, airflow_runs)
    assert sum("/manual/" in r["run_key"] for r in ledger) == TRIGGERS
    # The example consumer (dags/example_asset_consumer.py, ADR 0024) took each published
    # version of acme/daily-spend exactly once, whatever was cleared; manual exports never.
    published = sorted((r["run_key"], a["version"]) for r in ledger
                       if r["schedule"] == "acme/daily-spend" and "/manual/" not in r["run_key"]
                       for a in r["artifacts"])
    assert published and consumed_versions(api, airflow_runs) == published

    status = soak_stack.status()["components"]
    assert set(status) == COMPONENTS
    crashed = {n: c["last_restart"] for n, c in status.items() if c["restarts"]}
    assert not crashed, f"components restarted under load: {json.dumps(crashed, indent=1)}"
    assert all(c["state"] == "up" for c in status.values()), status

    p95 = percentile(api.latencies, 0.95)
    print(f"soak: {len(airflow_runs)} runs terminal after {elapsed:.0f} s, {counts}, "
          f"p95 API latency {p95 * 1000:.0f} ms over {len(api.latencies)} calls")
    assert p95 < 2.0, f"p95 API latency {p95:.2f} s"


def test_make_env_reaches_the_running_stack(soak_stack: Stack):
    env = soak_stack.stack_environ()
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith(f"@127.0.0.1:{soak_stack.pgport}/airflow")
    assert env["AIRFLOW_HOME"] == str(soak_stack.root / ".airflow")
    out = subprocess.run(["airflow", "pools", "list", "-o", "json"], env=env, cwd="/",
                         capture_output=True, text=True, check=True, timeout=120).stdout
    pools = {p["pool"]: int(p["slots"]) for p in json.loads(out[out.index("["):])}
    assert pools["export_render"] == 4 and pools["export_catchup"] == 2


def test_scheduler_sigkill_is_restarted_and_runs_finish(soak_stack: Stack):
    api = soak_stack.api()
    manual_ids = trigger_manual_exports(api, 3, "sigkill")
    api.clear_random_task(random.Random(SEED + 1))
    wait_for(lambda: api.ok("GET", "/api/v2/dags/~/dagRuns/~/taskInstances?limit=1&state=queued"
                                   "&state=running&state=scheduled")["total_entries"],
             60, interval=0.5, what="work in flight")

    before = soak_stack.status()["components"]["scheduler"]
    killed_at = datetime.now().astimezone()
    os.kill(before["pid"], signal.SIGKILL)
    t0 = time.monotonic()

    def restarted():
        c = soak_stack.status()["components"]["scheduler"]
        return c if c["state"] == "up" and c["pid"] != before["pid"] else None

    # Ceilings for a loaded 2-core machine (the supervisor restarts after 1 s; the new
    # scheduler's first heartbeat took 27+ s beside three other stacks in CI).
    after = wait_for(restarted, 60, interval=0.5, what="the scheduler to be restarted")
    assert after["restarts"] == before["restarts"] + 1
    assert after["last_restart"]["cause"] == "killed by SIGKILL"
    assert after["last_restart"]["pid"] == before["pid"]

    def heartbeat_after_kill():
        health = api.ok("GET", "/api/v2/monitor/health")["scheduler"]
        beat = health.get("latest_scheduler_heartbeat")
        return health["status"] == "healthy" and beat and datetime.fromisoformat(beat) > killed_at

    wait_for(heartbeat_after_kill, max(1.0, 120 - (time.monotonic() - t0)), interval=0.5,
             what="a scheduler heartbeat after the kill")
    back_in = time.monotonic() - t0
    # Nothing of the killed scheduler survives: every LocalExecutor worker working for this
    # stack is the new scheduler's child (orphans kept the old one's DB locks and log port).
    strays = wait_for_executor_workers_of(soak_stack.root, after["pid"], within=20)
    assert strays == {}, f"LocalExecutor workers not forked by the new scheduler: {strays}"
    shown = soak_stack.make("status").stdout
    line = next(x for x in shown.splitlines() if x.startswith("scheduler"))
    assert "killed by SIGKILL" in line and str(after["pid"]) in line, shown

    airflow_runs, ledger = settle(soak_stack, api, TERMINAL_WITHIN)
    assert_all_succeeded(soak_stack, airflow_runs)
    assert set(manual_ids) <= {r["dag_run_id"] for r in airflow_runs}
    check_ledger(ledger, airflow_runs)
    others = {n: c["restarts"] for n, c in soak_stack.status()["components"].items()
              if n != "scheduler"}
    assert others == dict.fromkeys(others, 0)
    print(f"sigkill: scheduler back (healthy) in {back_in:.1f} s")


def wait_for_executor_workers_of(root: Path, scheduler: int, within: float) -> dict:
    """Wait until this stack has LocalExecutor workers and all of them descend from
    ``scheduler``; return the strays of the last look ({} when none). The scheduler records
    its first heartbeat before its executor forks the workers, so the first looks can see none
    or a half-forked set (CI saw one: workers forked between two /proc scans). An orphan of the
    killed scheduler never goes away on its own, so waiting cannot hide one."""
    deadline = time.monotonic() + within
    while True:
        workers = executor_workers(root)
        parents = process_parents()  # after the worker scan: every live worker is in it
        strays = {w: ancestry(w, parents) for w in workers
                  if w in parents and not descends_from(w, scheduler, parents)}
        if any(w in parents for w in workers) and not strays:
            return {}
        if time.monotonic() > deadline:
            return strays or {"no LocalExecutor worker found": []}
        time.sleep(0.5)


def ancestry(pid: int, parents: dict[int, int]) -> list[int]:
    chain = []
    while pid > 1 and len(chain) < 20:
        chain.append(pid)
        pid = parents.get(pid, 0)
    return chain


def process_parents() -> dict[int, int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
    return parents


def descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parents.get(pid, 0)
    return False


def executor_workers(root: Path) -> list[int]:
    """LocalExecutor worker processes (and the task forks that still carry their title)
    working in ``root``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "cmdline").read_bytes().startswith(b"airflow worker -- LocalExecutor") \
                    and Path(os.readlink(proc / "cwd")) == root:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_make_stop_leaves_nothing(soak_stack: Stack):
    result = soak_stack.stop()
    assert result.returncode == 0, result.stderr
    assert "make run stopped." in result.stdout
    assert soak_stack.processes() == []
    assert not soak_stack.postgres_running()
    for port in (soak_stack.port, soak_stack.pgport):
        assert not listening(port), f"something still listens on {port}"
    assert cmdlines_naming(str(soak_stack.root)) == []
    if os.geteuid() == 0:  # the relocated cluster is stopped too
        cluster = relocated_dir(soak_stack.root / ".airflow")
        assert cmdlines_naming(str(cluster)) == []
        assert not (cluster / "postmaster.pid").exists()


@AS_ROOT
def test_make_reset_db_deletes_the_relocated_cluster(soak_stack: Stack):
    cluster = relocated_dir(soak_stack.root / ".airflow")
    assert (cluster / "PG_VERSION").is_file()
    result = soak_stack.make("reset-db", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"Deleted the make run databases in {soak_stack.root / '.airflow'} and the cluster in "
        f"{cluster}; the next 'make run' starts fresh.")
    assert not cluster.exists()
    assert not os.path.lexists(soak_stack.root / ".airflow" / "pg")


def listening(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:  # refused: nobody listens (TIME_WAIT leftovers do not count)
        return False
