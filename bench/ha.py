"""One and two dag-processors, one and two schedulers, at thousands of DAGs (same run, same
metadata database: the ratios are what to read on a shared machine).

Run from the repository root (needs PostgreSQL's server binaries, as the tests do)::

    .venv/bin/python bench/ha.py --companies 444 --json     # 444 companies = 4,000 DAGs

bench/parse.py's generated companies (9 DAGs each) in a temporary dags folder; a PostgreSQL
server of its own (tests/services/postgres.py) holds the metadata database (``airflow db
migrate``), as several schedulers need (HA relies on its row locks).

**Dag-processors.** For each count in ``--dag-processors`` (default 1 then 2): that many
``airflow dag-processor -n 1`` at once, 1 over Airflow's dags-folder bundle, 2 each with
``--bundle-name dags-N`` over its part of the folder (export_airflow/deploy/bundles.py, as
``make cluster DAG_PROCESSORS=2``); two passes each, the first writing (every DAG new, or moved
to its new bundle), the second the steady state (nothing changed). Per pass: the wall time
until the last dag-processor exits and each one's CPU seconds (its own and its parse
children's, ``wait4``). Both run on this machine's cores: the wall time of two is not what two
hosts would take; each one's CPU is what its own host would spend.

**Schedulers.** The metadata database after parsing is copied once per count in
``--schedulers`` (default 1 then 2); that many ``airflow scheduler`` run against their copy
with an executor that accepts tasks and runs none (bench/null_executor.py: the scheduler's own
work, no task process competes for the cores). Every unpaused DAG is due (its newest past slot,
the export timetable's first run), so the schedulers face a burst of as many DAG runs as due
DAGs: the figures are the seconds until every due DAG has its run created and until every run
is running, and each scheduler's loop time (``scheduler.scheduler_loop_duration`` from StatsD,
one prefix per scheduler), median and 95th percentile. ``--burst-timeout`` caps each phase; a
burst cut short reports the runs made so far and their rate.

Prints one JSON object with ``--json``; ``--record`` stores bench/results/ha.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "bench")]

from bench.parse import DAGS_PER_COMPANY, probe_env, probe_python, write_config  # noqa: E402
from tests.services.postgres import start_postgres, stop_postgres  # noqa: E402

LOOP = "scheduler.scheduler_loop_duration"
SYNC_BUNDLES = ("from airflow.dag_processing.bundles.manager import DagBundlesManager; "
                "DagBundlesManager().sync_bundles_to_db(deactivate_missing=False)")


def bundle_list(dags: Path, parts: int) -> str:
    return json.dumps([{"name": f"dags-{n}",
                        "classpath": "export_airflow.deploy.bundles.DagsPartBundle",
                        "kwargs": {"dags_folder": str(dags), "part": n, "parts": parts}}
                       for n in range(1, parts + 1)])


def run_together(argvs: list[list[str]], envs: list[dict], logs: list[Path], timeout: float
                 ) -> tuple[float, list[float]]:
    """Start every command at once; (wall seconds until the last exits, CPU seconds of each
    with its waited-for children)."""
    started = time.perf_counter()
    procs = []
    for argv, env, log in zip(argvs, envs, logs, strict=True):
        with log.open("a") as out:
            procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
    cpu = []
    for proc, log in zip(procs, logs, strict=True):
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                raise SystemExit(f"{proc.args} did not finish within {timeout:.0f} s: {log}")
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{proc.args} exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        cpu.append(round(usage.ru_utime + usage.ru_stime, 1))
    return round(time.perf_counter() - started, 1), cpu


def query(dsn: str, sql: str, *params):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description else []


def dag_processors(count: int, env: dict, dags: Path, airflow: str, logs: Path,
                   dsn: str, expected: int) -> dict:
    env = dict(env)
    argvs = [[airflow, "dag-processor", "-n", "1"]]
    if count > 1:
        env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = bundle_list(dags, count)
        argvs = [[airflow, "dag-processor", "-n", "1", "--bundle-name", f"dags-{n}"]
                 for n in range(1, count + 1)]
    files = [logs / f"dag-processor-{count}-{n}.log" for n in range(1, count + 1)]
    if count > 1:
        # Each dag-processor registers the configured bundles as it starts; two starting at
        # once on a database that lacks them race on the same INSERT and one exits
        # (UniqueViolation on dag_bundle_pkey). Registered once first, as a deployment does.
        subprocess.run([str(Path(airflow).parent / "python"), "-c", SYNC_BUNDLES], env=env,
                       check=True, capture_output=True, timeout=300)
    out = {}
    for name in ("first_pass", "steady_pass"):
        wall, cpu = run_together(argvs, [env] * count, files, 7200)
        out[name] = {"wall_seconds": wall, "cpu_seconds": cpu,
                     "cpu_seconds_total": round(sum(cpu), 1)}
    stored = dict(query(dsn, "SELECT bundle_name, count(*) FROM dag WHERE NOT is_stale "
                             "GROUP BY bundle_name"))
    if sum(stored.values()) < expected or len(stored) != count:
        raise SystemExit(f"{count} dag-processor(s) left DAGs per bundle {stored}; expected "
                         f"{expected} over {count} bundle(s): {files}")
    out["dags_per_bundle"] = stored
    return out


class Statsd:
    """Loop durations per scheduler (``--statsd-prefix`` s1, s2, …) on a local UDP port."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.loops: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535).decode(errors="replace")
            except TimeoutError:
                continue
            for line in data.splitlines():
                name, _, rest = line.partition(":")
                prefix, _, metric = name.partition(".")
                if metric == LOOP:
                    self.loops.setdefault(prefix, []).append(float(rest.partition("|")[0]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def watch_burst(dsn: str, due: int, procs: list, started: float, timeout: float, logs: Path
                ) -> tuple[dict[str, float], int, int]:
    """Poll the DAG runs until every due DAG's run is running (or ``timeout``): the seconds of
    the first run, of all created and of all running; the counts reached."""
    marks: dict[str, float] = {}
    made = running = 0
    while time.perf_counter() - started < timeout:
        made, running = query(dsn, "SELECT count(*), count(*) FILTER (WHERE state = "
                                   "'running') FROM dag_run")[0]
        now = round(time.perf_counter() - started, 1)
        if made and "first_run_seconds" not in marks:  # start-up done: the burst begins
            marks["first_run_seconds"] = now
        if made >= due and "all_created_seconds" not in marks:
            marks["all_created_seconds"] = now
        if running >= due:
            marks["all_running_seconds"] = now
            break
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a scheduler exited: {logs}")
        time.sleep(1)
    return marks, made, running


def schedulers(count: int, env: dict, airflow: str, logs: Path, server_dsn: str,
               template: str, timeout: float) -> dict:
    """``count`` schedulers on a copy of ``template`` until the burst is created and running."""
    db = f"sched{count}"
    query(server_dsn + "/postgres", f'DROP DATABASE IF EXISTS "{db}"')
    query(server_dsn + "/postgres", f'CREATE DATABASE "{db}" TEMPLATE "{template}"')
    dsn = f"{server_dsn}/{db}"
    due = query(dsn, "SELECT count(*) FROM dag WHERE NOT is_paused AND NOT is_stale AND "
                     "next_dagrun_create_after <= now()")[0][0]
    statsd = Statsd()
    procs = []
    started = time.perf_counter()
    for n in range(1, count + 1):
        penv = {**env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
                env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].rsplit("/", 1)[0] + f"/{db}",
                "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST":
                "127.0.0.1", "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
                "AIRFLOW__METRICS__STATSD_PREFIX": f"s{n}"}
        with (logs / f"scheduler-{count}-{n}.log").open("a") as out:
            procs.append(subprocess.Popen([airflow, "scheduler"], env=penv, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))
    try:
        marks, made, running = watch_burst(dsn, due, procs, started, timeout, logs)
        ended = time.perf_counter()
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        statsd.close()
    # The rate over the burst itself (after the first run), not the schedulers' start-up.
    elapsed = ended - started - marks.get("first_run_seconds", 0.0)
    loops = {}
    for prefix, values in sorted(statsd.loops.items()):
        ordered = sorted(values)
        loops[prefix] = {"loops": len(values), "median_ms": round(statistics.median(values)),
                         "p95_ms": round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)])}
    return {"due_dags": due, "runs_created": made, "runs_running": running, **marks,
            "timed_out": "all_running_seconds" not in marks,
            "runs_created_per_minute": round(made / elapsed * 60), "loop": loops}


def measure(companies: int, processor_counts: list[int], scheduler_counts: list[int],
            timeout: float) -> dict:
    server = start_postgres()
    try:
        server_dsn = f"postgresql://{server.user}:{server.password}@127.0.0.1:{server.port}"
        query(server_dsn + "/postgres", "CREATE DATABASE airflow")
        with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
            root = Path(tmp)
            dags, home, logs = root / "dags", root / "home", root / "logs"
            for d in (home / "config", logs):
                d.mkdir(parents=True)
            write_config(dags, companies)
            shutil.copy(ROOT / "deploy" / "airflow_local_settings.py",
                        home / "config" / "airflow_local_settings.py")
            env = {**probe_env(home, dags), "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                   "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
                       f"postgresql+psycopg2://{server_dsn.split('://', 1)[1]}/airflow",
                   "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "600",
                   "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH": str(home / "bundles"),
                   "AIRFLOW__CORE__EXECUTOR": "bench.null_executor.NullExecutor",
                   "AIRFLOW__CORE__PARALLELISM": "100000"}
            airflow = str(Path(probe_python()).parent / "airflow")
            started = time.perf_counter()
            subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True,
                           timeout=1200)
            out: dict = {"companies": companies, "dags": (DAGS_PER_COMPANY + 1) * companies,
                         "migrate_seconds": round(time.perf_counter() - started, 1)}
            last = 1
            for count in processor_counts:
                out[f"dag_processors_{count}"] = dag_processors(
                    count, env, dags, airflow, logs, f"{server_dsn}/airflow", out["dags"])
                # The DAGs Airflow stored (a company's recovery_batch DAG and the project's
                # own DAG files come on top of the generated exports).
                out["dags"] = sum(out[f"dag_processors_{count}"]["dags_per_bundle"].values())
                last = count
            if last > 1:  # the schedulers see the bundles the DAGs were last parsed in
                env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = bundle_list(dags, last)
            for count in scheduler_counts:
                out[f"schedulers_{count}"] = schedulers(count, env, airflow, logs, server_dsn,
                                                        "airflow", timeout)
            return out
    finally:
        stop_postgres(server)


def figures(result: dict) -> list:
    from results import Figure

    rows = []
    one, two = result.get("dag_processors_1"), result.get("dag_processors_2")
    if one and two:
        a, b = one["steady_pass"], two["steady_pass"]
        rows.append(Figure("dag-processor pass, 2 bundles", f"steady pass over {result['dags']:,}"
                           " DAGs: CPU of the busier of 2 dag-processors (one bundle each)",
                           max(b["cpu_seconds"]), "CPU-s", f"one over all {a['cpu_seconds'][0]:g}"
                           " CPU-s", round(max(b["cpu_seconds"]) / a["cpu_seconds"][0], 3)))
        rows.append(Figure("dag-processor pass wall, 2 on 1 host", "both at once on this "
                           "machine's cores (wall)", b["wall_seconds"], "s",
                           f"one {a['wall_seconds']:g} s", round(b["wall_seconds"]
                                                                 / a["wall_seconds"], 3)))
    s1, s2 = result.get("schedulers_1"), result.get("schedulers_2")
    if s1 and s2:
        rows.append(Figure("burst rate, 2 schedulers", f"{s2['due_dags']:,} DAGs due at once: "
                           "DAG runs created per minute after the first", s2[
                               "runs_created_per_minute"], "runs/min",
                           f"1 scheduler {s1['runs_created_per_minute']:g} runs/min",
                           round(s2["runs_created_per_minute"]
                                 / max(1, s1["runs_created_per_minute"]), 3)))
        l1 = s1["loop"].get("s1", {}).get("median_ms")
        l2 = [v["median_ms"] for v in s2["loop"].values()]
        if l1 and l2:
            rows.append(Figure("scheduler loop, 2 schedulers", "median loop time of each during "
                               "the burst (the slower)", max(l2), "ms", f"1 scheduler {l1} ms",
                               round(max(l2) / l1, 3)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--companies", type=int, default=444, help="9 DAGs each (444: 4,000)")
    parser.add_argument("--dag-processors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--schedulers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--burst-timeout", type=float, default=900,
                        help="seconds each scheduler count gets for the burst (default 900)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--name", default="ha", help="the results file --record writes "
                        "(bench/results/<name>.json; ha-20000 for the 20,000-DAG run)")
    from results import add_record_flag

    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.companies < 1 or min(args.dag_processors + args.schedulers) < 1:
        parser.error("--companies, --dag-processors and --schedulers must be at least 1")
    result = measure(args.companies, args.dag_processors, args.schedulers, args.burst_timeout)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    if args.record:
        from results import record

        record(args.name, figures(result), summary=result,
               argv=sys.argv[1:] if argv is None else argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
