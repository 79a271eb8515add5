"""The `make run` supervisor (stdlib only): starts the stack's components, restarts any that
exits, and records what happened so `make status` can show it.

    supervise.py run      run in the foreground (scripts/run.sh starts it in the background)
    supervise.py status   print what is up (pid, since, restarts, last restart reason)
    supervise.py wait-up SECONDS PID   wait until every component of supervisor PID is up
    supervise.py leftovers   pids of this stack's processes (what `make stop` ends)

Order: PostgreSQL (with DB=postgres on the local cluster; never a PG_SERVER), with CLUSTER=1
(`make cluster`) Redis, moto's S3 server and a StatsD listener (scripts/statsd_sink.py), then
the api-server (tasks talk to its Execution API, so a scheduler that starts first sees its
first tasks die with "connection refused"), then
scheduler, dag-processor and triggerer (and with CLUSTER=1 the Celery workers of
:data:`CLUSTER_WORKERS`, or with CELERY_WORKERS=1 the one of :data:`ONE_WORKER`;
SCHEDULERS=N and DAG_PROCESSORS=N run N of those,
:func:`airflow_components`). A component that exits is restarted after a backoff
(1 s, doubling up to 60 s; back to 1 s once it has stayed up for 2 minutes) and the restart is
logged with its cause (exit code or signal and the last lines of its log). SIGTERM/SIGINT stop
everything in reverse order.

Everything lives in $AIRFLOW_HOME/run: supervisor.pid, status.json, supervisor.log and one
<component>.log per component. The environment comes from scripts/airflow-env.sh.

One file of ~540 lines on purpose: it is a standalone script of `make run` (not part of the
export_lib package, which must not carry process management), and its parts (start order,
readiness, restart with backoff, the subreaper's leftover hunt, status) share one state file.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger("supervise")

MAX_BACKOFF = 60.0
STABLE_AFTER = 120.0  # seconds up after which the backoff starts from 1 s again
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 25.0
# Set in every component's environment (and so in every task process): `make stop` finds
# leftovers by it without touching a shell that merely sourced the environment.
MARKER = "EXPORT_RUN_SUPERVISOR"
COMPONENT = "EXPORT_RUN_COMPONENT"
# `make cluster`'s Celery workers: name → `airflow celery worker` arguments. docker-compose.yaml's
# airflow-worker, airflow-worker-manual and airflow-worker-large services run the same
# (tests/dags/test_cluster_env.py). Manual exports have a worker of their own (ADR 0018, seed
# 000), as many processes as the export_manual pool has slots: a backlog on `default` never
# holds them.
CLUSTER_WORKERS = {
    "worker-default": ["--queues", "default"],
    "worker-manual": ["--queues", "exports_manual", "--concurrency", "2"],
    "worker-large": ["--queues", "exports_large", "--concurrency", "1"],
}
# CELERY_WORKERS=1 (`make cluster CELERY_WORKERS=1`): one worker serving every queue above, so a
# bench measures the cluster with exactly one Celery worker (bench/recovery.py --executor celery).
ONE_WORKER = {"worker": ["--queues", ",".join(
    args[args.index("--queues") + 1] for args in CLUSTER_WORKERS.values())]}
S3_BUCKET = "exports"  # EXPORT_ARTIFACT_ROOT=s3://exports/artifacts (deploy/cluster.env)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Component:
    name: str
    argv: list[str]
    user: str | None = None
    ready: str | None = None  # "pg" | "http" | "redis" | "s3" | "udp" | None
    proc: subprocess.Popen | None = None
    state: str = "stopped"  # starting | up | backoff | stopped
    since: str | None = None
    started_at: float = 0.0
    restarts: int = 0
    failures: int = 0  # consecutive quick exits, for the backoff
    next_start: float = 0.0
    last_restart: dict | None = None
    log_path: Path = field(default_factory=Path)

    def status(self) -> dict:
        return {"state": self.state, "pid": self.proc.pid if self.proc else None,
                "since": self.since, "restarts": self.restarts, "last_restart": self.last_restart,
                "log": str(self.log_path)}


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def tail(path: Path, lines: int = 8) -> list[str]:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in deque(text.splitlines(), maxlen=lines)]


class Supervisor:
    def __init__(self, run_dir: Path, components: list[Component], env: dict[str, str]):
        self.run_dir = run_dir
        self.components = components
        self.env = env
        self.root = Path(env["ROOT"]).resolve()
        self.stopping = False
        self.started = now_iso()
        for c in components:
            c.log_path = run_dir / f"{c.name}.log"

    # --- bookkeeping -------------------------------------------------------------------------
    def write_status(self) -> None:
        data = {"supervisor_pid": os.getpid(), "started": self.started,
                "stopping": self.stopping,
                "components": {c.name: c.status() for c in self.components}}
        tmp = self.run_dir / "status.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.run_dir / "status.json")

    # --- starting ----------------------------------------------------------------------------
    def spawn(self, c: Component) -> None:
        with c.log_path.open("ab") as out:
            out.write(f"\n===== {now_iso()} supervise: starting {' '.join(c.argv)}\n".encode())
            out.flush()
            kwargs = {}
            if c.user:  # PostgreSQL refuses to run as root
                import pwd

                pw = pwd.getpwnam(c.user)
                kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}
            c.proc = subprocess.Popen(c.argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL,
                                      env={**self.env, COMPONENT: c.name},
                                      start_new_session=True, **kwargs)
        c.state, c.started_at = "starting", time.monotonic()
        log.info("%s started (pid %s)", c.name, c.proc.pid)
        self.write_status()

    def is_ready(self, c: Component) -> bool:
        if c.ready == "pg":
            pg_isready = Path(c.argv[0]).with_name("pg_isready")
            port = c.argv[c.argv.index("-p") + 1]
            return subprocess.run([str(pg_isready), "-q", "-h", "127.0.0.1", "-p", port],
                                  check=False).returncode == 0
        if c.ready == "redis":
            return redis_ping(int(c.argv[c.argv.index("--port") + 1]))
        if c.ready == "udp":  # the listener holds its port once it is up
            return udp_bound(int(c.argv[-2]))
        if c.ready == "s3":  # moto keeps objects in memory: (re)create the bucket once it is up
            return s3_bucket(int(c.argv[c.argv.index("-p") + 1]), S3_BUCKET)
        if c.ready == "http":
            url = f"http://127.0.0.1:{self.env['PORT']}/api/v2/version"
            try:
                with urllib.request.urlopen(url, timeout=3) as resp:
                    return resp.status == 200
            except OSError:
                return False
        return True

    def start_and_wait(self, c: Component) -> bool:
        """Start ``c`` and wait until it is ready; False if it exited or never got ready."""
        self.spawn(c)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and not self.stopping:
            if c.proc.poll() is not None:
                return False
            if self.is_ready(c):
                self.mark_up(c)
                return True
            time.sleep(0.5)
        return False

    def mark_up(self, c: Component) -> None:
        c.state, c.since = "up", now_iso()
        log.info("%s is up (pid %s)", c.name, c.proc.pid)
        self.write_status()

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        self.start_all()
        while not self.stopping:
            for c in self.components:
                if not self.stopping:
                    self.check(c)
            time.sleep(0.5)
        self.shutdown()
        return 0

    def start_all(self) -> None:
        for c in self.components:  # in order; one that must be ready first is retried first
            if c.ready:
                while not self.stopping and not self.start_and_wait(c):
                    cause = None
                    if c.proc.poll() is None:  # running but never ready: a failed start
                        self.kill(c)
                        cause = f"not ready within {READY_TIMEOUT:.0f} s"
                    self.handle_exit(c, cause)
                    while not self.stopping and time.monotonic() < c.next_start:
                        time.sleep(0.2)
                    c.restarts += 1
            elif not self.stopping:
                self.spawn(c)
                self.mark_up(c)

    def check(self, c: Component) -> None:
        if c.state in ("up", "starting") and c.proc.poll() is not None:
            self.handle_exit(c)
        elif c.state == "backoff" and time.monotonic() >= c.next_start:
            self.restart(c)
        elif c.state == "starting" and self.is_ready(c):
            self.mark_up(c)

    def handle_exit(self, c: Component, cause: str | None = None) -> None:
        code = c.proc.returncode if c.proc.returncode is not None else c.proc.wait()
        up_for = time.monotonic() - c.started_at
        c.failures = 1 if up_for >= STABLE_AFTER else c.failures + 1
        delay = min(MAX_BACKOFF, 2.0 ** (c.failures - 1))
        cause = cause or describe_exit(code)
        last = tail(c.log_path)
        try:
            os.killpg(c.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        leftovers = self.sweep(c)
        c.last_restart = {"at": now_iso(), "cause": cause, "pid": c.proc.pid,
                          "up_seconds": round(up_for, 1), "last_log_lines": last}
        c.state, c.since, c.next_start = "backoff", now_iso(), time.monotonic() + delay
        log.warning("%s (pid %s) exited after %.0f s: %s; killed its process group and %d other "
                    "process(es) it left; "
                    "restarting in %.0f s. Last log lines:\n%s",
                    c.name, c.proc.pid, up_for, cause, len(leftovers), delay,
                    "\n".join(f"    {line}" for line in last))
        self.write_status()

    def sweep(self, c: Component | None = None) -> list[int]:
        """SIGKILL what a dead component left: its process group and every process forked from
        it. Task processes put themselves in process groups of their own, and a scheduler's
        orphaned LocalExecutor workers hold copies of its database connections and its
        log-server port (seen: DAG runs the dead scheduler was scheduling stayed running, most
        likely because PostgreSQL kept its transaction and row locks, which its successor's
        SELECT … FOR UPDATE SKIP LOCKED skips). The supervisor is a child
        subreaper, so orphans are reparented to it: any child that is not a running component
        is such a leftover. ``c=None``: every leftover (shutdown)."""
        running = {x.proc.pid for x in self.components
                   if x.proc and x.proc.poll() is None and x is not c}
        pids = [pid for pid, ppid in proc_table() if ppid == os.getpid() and pid not in running]
        pids += [pid for pid in stack_processes(self.run_dir, self.root,
                                                c.name if c else None) if pid not in running]
        for pid in set(pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.reap(running)
        return sorted(set(pids))

    def reap(self, keep: set[int]) -> None:
        """Collect exited orphans (never a component's pid: Popen reaps those)."""
        time.sleep(0.1)
        for pid, ppid in proc_table():
            if ppid == os.getpid() and pid not in keep and pid not in {
                    x.proc.pid for x in self.components if x.proc}:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def restart(self, c: Component) -> None:
        c.restarts += 1
        log.info("restarting %s (restart #%d)", c.name, c.restarts)
        self.spawn(c)
        if not c.ready:
            self.mark_up(c)

    # --- stopping ----------------------------------------------------------------------------
    def kill(self, c: Component, timeout: float = STOP_TIMEOUT) -> None:
        if not c.proc or c.proc.poll() is not None:
            return
        # PostgreSQL: SIGINT is its "fast" shutdown; Airflow components get SIGTERM (group).
        sig = signal.SIGINT if c.ready == "pg" else signal.SIGTERM
        try:
            if c.ready == "pg":
                c.proc.send_signal(sig)
            else:
                os.killpg(c.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            c.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s; SIGKILL", c.name, timeout)
            try:
                os.killpg(c.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            c.proc.wait()

    def shutdown(self) -> None:
        log.info("stopping")
        self.write_status()
        airflow = [c for c in self.components if c.ready is None]
        for c in airflow:  # scheduler, dag-processor, triggerer together
            if c.proc and c.proc.poll() is None:
                try:
                    os.killpg(c.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for c in reversed(self.components):
            self.kill(c)
            if c.proc:
                self.sweep(c)  # task processes that outlived it (their own process groups)
            c.state, c.since = "stopped", now_iso()
            log.info("%s stopped", c.name)
        left = self.sweep()
        if left:
            log.info("killed %d leftover process(es): %s", len(left), left)
        self.write_status()

    def request_stop(self, signum, _frame) -> None:
        if not self.stopping:
            log.info("received %s", signal.Signals(signum).name)
        self.stopping = True


def redis_ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def udp_bound(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def s3_bucket(port: int, bucket: str) -> bool:
    """True once moto answers and ``bucket`` exists (created here if missing)."""
    url = f"http://127.0.0.1:{port}/{bucket}"
    for method in ("HEAD", "PUT"):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=3):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                return False
        except OSError:
            return False
    return False


def proc_table() -> list[tuple[int, int]]:
    """(pid, parent pid) of every process."""
    table = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table.append((int(stat.parent.name), int(fields[1])))
    return table


def stack_processes(run_dir: Path, root: Path, component: str | None = None) -> list[int]:
    """Processes of this stack that may have lost their parent: the marker in their environment
    (and ``EXPORT_RUN_COMPONENT=component`` if given), or, for processes that renamed
    themselves with setproctitle (which overwrites /proc/PID/environ, e.g. "airflow worker --
    LocalExecutor" or "[celeryd: worker-default@host:MainProcess]"), an ``airflow …`` or
    ``[celeryd: …`` title and the project as working directory, or a ``redis-server …`` title
    and the run directory as working directory."""
    marker = f"{MARKER}={run_dir}".encode()
    tag = f"{COMPONENT}={component}".encode() if component else None
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            if marker in env:
                if tag is None or tag in env:
                    found.append(pid)
                continue
            if component is None and not any(b"=" in e for e in env):  # environ overwritten
                title = (proc / "cmdline").read_bytes()
                cwd = Path(os.readlink(proc / "cwd"))
                # redis-server renames itself too; it runs in the run directory (`make
                # cluster`'s broker, orphaned when a test's fast teardown kills the supervisor).
                # Celery workers (`make cluster`) too, when a fast teardown killed the
                # supervisor that would have stopped them.
                if (title.startswith((b"airflow ", b"[celeryd: ")) and cwd == root) or (
                        title.startswith(b"redis-server ") and cwd == run_dir.resolve()):
                    found.append(pid)
        except OSError:
            continue
    return found


def become_subreaper() -> None:
    """Orphaned descendants (task processes of a dead scheduler) become our children."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        log.warning("could not become a child subreaper; leftovers are found by environment only")


def components_from_env(env: dict[str, str]) -> list[Component]:
    comps: list[Component] = []
    if env.get("DB") == "postgres" and env.get("PG_SERVER", "local") == "local":
        pg_bin = Path(env["PG_BIN"])
        comps.append(Component("postgres", [str(pg_bin / "postgres"), "-D", env["PG_DATA"],
                                            "-p", env["PGPORT"], "-k", env["PG_DATA"]],
                               user=env.get("PG_OWNER") or None, ready="pg"))
    venv = Path(env["ROOT"]) / ".venv" / "bin"
    cluster = env.get("CLUSTER") == "1"
    if cluster:
        run_dir = Path(env["AIRFLOW_HOME"]) / "run"
        comps.append(Component("redis", ["redis-server", "--port", env["REDISPORT"], "--bind",
                                         "127.0.0.1", "--dir", str(run_dir), "--save", "",
                                         "--appendonly", "no"], ready="redis"))
        comps.append(Component("s3", [str(venv / "python"), "-m", "moto.server", "-H",
                                      "127.0.0.1", "-p", env["S3PORT"]], ready="s3"))
        # Before anything that sends metrics (AIRFLOW__METRICS__STATSD_PORT, airflow-env.sh).
        comps.append(Component("statsd", [str(venv / "python"),
                                          str(Path(env["ROOT"]) / "scripts" / "statsd_sink.py"),
                                          env["STATSDPORT"], str(run_dir / "statsd.txt")],
                               ready="udp"))
    airflow = str(venv / "airflow")
    comps.append(Component("api-server", [airflow, "api-server", "--port", env["PORT"]],
                           ready="http"))
    comps += airflow_components(airflow, int(env.get("SCHEDULERS") or 1),
                                int(env.get("DAG_PROCESSORS") or 1))
    if cluster:
        workers = ONE_WORKER if env.get("CELERY_WORKERS") == "1" else CLUSTER_WORKERS
        for name, args in workers.items():
            # Several workers on one machine: distinct Celery node names; the api-server reads
            # task logs from the shared log folder, so the workers serve none.
            comps.append(Component(name, [airflow, "celery", "worker", *args,
                                          "--celery-hostname", f"{name}@%h",
                                          "--skip-serve-logs"]))
    return comps


def airflow_components(airflow: str, schedulers: int, dag_processors: int) -> list[Component]:
    """Scheduler(s), dag-processor(s) and triggerer. One of each keeps the plain names; with
    ``make cluster SCHEDULERS=2`` the schedulers are scheduler-1, scheduler-2 (Airflow's HA:
    they share the work through PostgreSQL row locks), with ``DAG_PROCESSORS=2``
    dag-processor-1 parses bundle dags-1 only, dag-processor-2 dags-2 (the bundles
    scripts/airflow-env.sh configures)."""
    comps = [Component("scheduler" if schedulers == 1 else f"scheduler-{n}",
                       [airflow, "scheduler"]) for n in range(1, schedulers + 1)]
    if dag_processors == 1:
        comps.append(Component("dag-processor", [airflow, "dag-processor"]))
    else:
        comps += [Component(f"dag-processor-{n}", [airflow, "dag-processor", "--bundle-name",
                                                   f"dags-{n}"])
                  for n in range(1, dag_processors + 1)]
    comps.append(Component("triggerer", [airflow, "triggerer"]))
    return comps


def cmd_run(run_dir: Path) -> int:
    env = dict(os.environ)
    env[MARKER] = str(run_dir)
    sup = Supervisor(run_dir, components_from_env(env), env)
    become_subreaper()
    signal.signal(signal.SIGTERM, sup.request_stop)
    signal.signal(signal.SIGINT, sup.request_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    (run_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")
    log.info("supervisor %s starting: %s", os.getpid(), ", ".join(c.name for c in sup.components))
    try:
        return sup.run()
    finally:
        (run_dir / "supervisor.pid").unlink(missing_ok=True)


def read_status(run_dir: Path) -> dict | None:
    pid_file = run_dir / "supervisor.pid"
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmd_status(run_dir: Path, as_json: bool) -> int:
    data = read_status(run_dir)
    if data is None:
        print("make run is not running (start it with: make run)")
        return 3
    if as_json:
        print(json.dumps(data, indent=1))
        return 0
    print(f"supervisor pid {data['supervisor_pid']}, up since {data['started']}"
          + (" (stopping)" if data["stopping"] else ""))
    print(f"{'component':<15}{'state':<10}{'pid':>8}  {'since (UTC)':<22}{'restarts':>8}  last restart")
    for name, c in data["components"].items():
        state = c["state"] if c["state"] != "up" or alive(c["pid"]) else "gone"
        last = "-"
        if c["last_restart"]:
            lr = c["last_restart"]
            last = f"{lr['at']}: {lr['cause']} after {lr['up_seconds']:.0f} s"
            if lr["last_log_lines"]:
                last += f" | {lr['last_log_lines'][-1][:100]}"
        print(f"{name:<15}{state:<10}{c['pid'] or '-':>8}  {c['since'] or '-':<22}"
              f"{c['restarts']:>8}  {last}")
    print(f"logs: {run_dir}/<component>.log, restarts: {run_dir}/supervisor.log")
    return 0


def cmd_wait_up(run_dir: Path, seconds: float, pid: int) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return 1
        data = read_status(run_dir)
        if data and all(c["state"] == "up" for c in data["components"].values()):
            return 0
        time.sleep(1)
    return 1


def main(argv: list[str]) -> int:
    run_dir = Path(os.environ["AIRFLOW_HOME"]) / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    if argv[:1] == ["run"]:
        logging.basicConfig(filename=run_dir / "supervisor.log", level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(message)s")
        return cmd_run(run_dir)
    if argv[:1] == ["status"]:
        return cmd_status(run_dir, "--json" in argv)
    if argv[:1] == ["leftovers"]:  # for `make stop` and the tests
        root = Path(os.environ["ROOT"]).resolve() if "ROOT" in os.environ else Path.cwd()
        print(" ".join(map(str, stack_processes(run_dir, root))))
        return 0
    if argv[:1] == ["wait-up"] and len(argv) == 3:
        return cmd_wait_up(run_dir, float(argv[1]), int(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
