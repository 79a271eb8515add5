"""Throughput of the `make cluster` topology: exports per minute with 1 and 2 Celery workers,
per-task scheduling overhead and a catch-up, each against Airflow's own floor, same run.

Run from the repository root (needs what `make cluster` needs; a few minutes per phase)::

    .venv/bin/python bench/cluster.py --companies 10 --workers both --json

A copy of the project (tests/system/cluster/stack.py) gets ``--companies`` generated companies (one
daily widget export each, 06:00 UTC, one local destination; the shipped companies removed; the
demo source seeded with hourly rows back past the oldest slot measured, at least 21 days)
and one "floor" DAG per company: 4 chained no-op ``PythonOperator`` tasks, same schedule and
``max_active_runs``; and one least-I/O DAG per company (one task: the artifact connection's S3
client and one PUT, the ledger connection and one statement, no export code), run after the
floor runs of each phase: its CPU over a no-op task's is the lowest an export task can reach.
Everything starts paused; then each DAG is unpaused (the export DAGs create their newest slot)
and runs one warm-up run (not measured).

Per worker count (``--workers 1``, ``2`` or ``both``; 1 = the cluster's ``worker-default``
alone on the default queue, 2 = plus a second ``airflow celery worker --queues default`` with
the same settings, started by this script; each with ``--concurrency`` task slots, by default
one per core of this machine, as if each worker were a host like it): ``--runs-per-company``
export runs of past slots per company are triggered at once through the REST API and awaited,
then the same number of floor runs. Figures (REST records): runs per minute from the first
queued to the last finished run, run time, per task the queued→start latency (``start_date -
queued_when``: broker, worker pick-up, task process start) and duration; which worker executed
each task and whether any ran twice (the workers' "Executing workload" log lines).

Catch-up (``--catchup-slots K``, 0 to skip): one Airflow backfill of K missed daily slots of
one export schedule (as recover_missed requests it: ``max_active_runs`` = the catch-up budget,
renders in the export_catchup pool), then the same for a floor DAG; both are linear in K, so
the time for ``--catchup-target`` slots (365) is extrapolated from K and marked as such.
``--catchup-slots 365`` measures it (48 minutes here: 30.3 exports, 17.7 floor).

Afterwards the ledger is checked (tests/system/soak/stack.py check_ledger: one artifact version per
period, one acknowledged delivery per destination, one ledger run per export DAG run) and the
files in each company's outbox are counted. Prints one JSON object with ``--json``.

The files it writes into the copy are bench/cluster_dags.py's, its figures bench/
cluster_figures.py's. Just over 400 lines on purpose: the steps of one run share the cluster it
starts, and reading them in order is reading the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from bench.cluster_dags import COMPANY_YAML, FLOOR_DAGS, IO_FLOOR_DAGS  # noqa: E402
from bench.cluster_figures import (  # noqa: E402
    acceptance,
    cpu_figures,
    cpu_ratios,
    daily_slot,
    executions,
    extrapolate,
    lighter_tasks_checks,
    loop_figures,
    ratio,
    run_figures,
    table,
    task_figures,
    worker_figures,
)
from bench.cluster_statsd import StatsdListener  # noqa: E402
from export_lib.periods.recovery import CATCHUP_BUDGET  # noqa: E402
from tests.system.cluster.stack import Cluster  # noqa: E402
from tests.system.soak.stack import check_ledger, scratch_dir, stop_and_sweep, wait_for  # noqa: E402

EXPORT_ID = "daily-widgets"
SLOT_HOUR = 6
EXTRA_WORKER = "worker-bench-2"
TASK_CPU_FILE = "task-cpu.jsonl"
ENV = {
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
    "EXPORT_CATCHUP_LOOKBACK_HOURS": "1",  # the warm-up runs recover nothing
}
def say(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def export_dag(cid: str) -> str:
    return f"widget_export__{cid}__{EXPORT_ID}"


def floor_dag(cid: str) -> str:
    return f"bench_floor__{cid}"


def io_floor_dag(cid: str) -> str:
    return f"bench_io_floor__{cid}"


def write_companies(root: Path, count: int) -> list[str]:
    """Replace the copy's companies with ``count`` generated ones and add the floor DAGs."""
    dags = root / "dags"
    for loader in dags.glob("company_*.py"):
        (dags / "config" / f"{loader.stem.removeprefix('company_')}.yaml").unlink(missing_ok=True)
        loader.unlink()
    template = (ROOT / "dags" / "company_acme.py").read_text(encoding="utf-8")
    ids = [f"bc{n:03d}" for n in range(count)]
    for n, cid in enumerate(ids):
        (dags / "config" / f"{cid}.yaml").write_text(COMPANY_YAML.format(
            cid=cid, n=n, export=EXPORT_ID, hour=SLOT_HOUR), encoding="utf-8")
        (dags / f"company_{cid}.py").write_text(template.replace("acme", cid), encoding="utf-8")
    (dags / "bench_floor.py").write_text(FLOOR_DAGS.format(companies=ids, hour=SLOT_HOUR),
                                         encoding="utf-8")
    (dags / "bench_io_floor.py").write_text(IO_FLOOR_DAGS.format(companies=ids),
                                            encoding="utf-8")
    shutil.copy(ROOT / "bench" / "task_cpu_listener.py", root / "plugins" / "bench_task_cpu.py")
    return ids


def task_cpu_records(stack: Cluster) -> list[dict]:
    path = stack.root / TASK_CPU_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def slot(days_ago: int) -> datetime:
    return daily_slot(datetime.now(UTC), SLOT_HOUR, days_ago)


def worker_logs(stack: Cluster) -> dict[str, list[str]]:
    return {p.stem: p.read_text(errors="replace").splitlines()
            for p in sorted(stack.run_dir.glob("worker-*.log"))}


def start_extra_worker(stack: Cluster) -> subprocess.Popen:
    """A second worker on the default queue, with the cluster's environment (marked as the
    stack's, so `make cluster-stop` would sweep it too)."""
    env = {**stack.stack_environ(), "EXPORT_RUN_SUPERVISOR": str(stack.run_dir),
           "EXPORT_RUN_COMPONENT": EXTRA_WORKER}
    log_path = stack.run_dir / f"{EXTRA_WORKER}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(stack.root / ".venv" / "bin" / "airflow"), "celery", "worker", "--queues",
             "default", "--celery-hostname", f"{EXTRA_WORKER}@%h", "--skip-serve-logs"],
            cwd=stack.root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    wait_for(lambda: f"{EXTRA_WORKER}@" in log_path.read_text(errors="replace")
             and " ready." in log_path.read_text(errors="replace"), 180, 1,
             what=f"{EXTRA_WORKER} to be ready")
    return proc


def stop_extra_worker(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 40), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def set_workers(stack: Cluster, extra: subprocess.Popen | None, count: int) -> subprocess.Popen | None:
    """Start or stop the second worker so that ``count`` workers serve the default queue."""
    if count == 2 and extra is None:
        say(f"starting {EXTRA_WORKER}")
        return start_extra_worker(stack)
    if count == 1 and extra is not None:
        say(f"stopping {EXTRA_WORKER}")
        stop_extra_worker(extra)
        return None
    return extra


def collect(api, runs: list[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
    """The DAG runs and their task instances that went through the executor (REST records;
    not recover_missed, which the cluster policy creates skipped outside scheduled runs)."""
    records, tis = [], []
    for dag_id, run_id in runs:
        records.append(api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"))
        page = api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        tis.extend(t for t in page["task_instances"] if t.get("queued_when"))  # executed
    return records, tis


def pages(api, path: str, key: str) -> list[dict]:
    """Every record of a paginated list endpoint (pages of 100, the API's maximum)."""
    items: list[dict] = []
    sep = "&" if "?" in path else "?"
    while True:
        page = api.ok("GET", f"{path}{sep}limit=100&offset={len(items)}")
        items.extend(page[key])
        if not page[key] or len(items) >= page["total_entries"]:
            return items


def with_cpu(stack: Cluster, figures: dict, runs: list[dict]) -> dict:
    return {**figures, "cpu": cpu_figures(task_cpu_records(stack),
                                          [(r["dag_id"], r["dag_run_id"]) for r in runs])}


def batch(api, dag_ids: list[str], days: list[int], timeout: float) -> tuple[list, list]:
    """Trigger one run per DAG and day at once, wait until none is active, collect."""
    runs = [(dag_id, api.ok("POST", f"/api/v2/dags/{dag_id}/dagRuns", {
        "logical_date": slot(day).isoformat(), "conf": {}})["dag_run_id"])
        for day in days for dag_id in dag_ids]
    wait_for(lambda: api.active_runs() == 0, timeout, 2, what=f"{len(runs)} runs to finish")
    return collect(api, runs)


def phase(stack: Cluster, api, ids: list[str], days: list[int], timeout: float) -> dict:
    say(f"exports: {len(ids) * len(days)} runs")
    exp_runs, exp_tis = batch(api, [export_dag(c) for c in ids], days, timeout)
    say(f"floor: {len(ids) * len(days)} runs")
    floor_runs, floor_tis = batch(api, [floor_dag(c) for c in ids], days, timeout)
    say(f"least I/O: {len(ids) * len(days)} runs")
    io_runs, _ = batch(api, [io_floor_dag(c) for c in ids], days, timeout)
    executed = executions(worker_logs(stack))
    exports = with_cpu(stack, {"runs": run_figures(exp_runs), "tasks": task_figures(exp_tis)},
                       exp_runs)
    floor = with_cpu(stack, {"runs": run_figures(floor_runs), "tasks": task_figures(floor_tis)},
                     floor_runs)
    say(f"exports {exports['runs']['runs_per_minute']}/min, floor "
        f"{floor['runs']['runs_per_minute']}/min")
    least_io = with_cpu(stack, {}, io_runs)["cpu"]
    return {"exports": exports, "floor": floor, "least_io": least_io,
            "export_to_floor_span": ratio(exports["runs"]["span_s"], floor["runs"]["span_s"]),
            "task_cpu_to_noop": cpu_ratios({**exports["cpu"]["median_cpu_s_by_task"],
                                            **least_io["median_cpu_s_by_task"]},
                                           floor["cpu"]["median_cpu_s_by_task"]),
            "workers": worker_figures(exp_tis + floor_tis, executed),
            "workers_exports_only": worker_figures(exp_tis, executed)}


def backfill(api, dag_id: str, days: list[int], timeout: float) -> dict:
    body = {"dag_id": dag_id, "from_date": slot(max(days)).isoformat(),
            "to_date": slot(min(days)).isoformat(), "run_backwards": False,
            "reprocess_behavior": "none", "max_active_runs": CATCHUP_BUDGET, "dag_run_conf": {}}
    created = api.ok("POST", "/api/v2/backfills", body)
    wait_for(lambda: api.ok("GET", f"/api/v2/backfills/{created['id']}").get("completed_at"),
             timeout, 2, what=f"the backfill of {dag_id}")
    wait_for(lambda: api.active_runs() == 0, timeout, 2, what=f"{dag_id}'s backfill runs to finish")
    runs = [(dag_id, r["dag_run_id"]) for r in pages(
        api, f"/api/v2/dags/{dag_id}/dagRuns?run_type=backfill", "dag_runs")]
    records, tis = collect(api, runs)
    return {"runs": run_figures(records), "tasks": task_figures(tis)}


def catch_up(api, cid: str, days: list[int], target: int, timeout: float) -> dict:
    say(f"catch-up: {len(days)} slots of {export_dag(cid)}, then of {floor_dag(cid)}")
    exports = backfill(api, export_dag(cid), days, timeout)
    floor = backfill(api, floor_dag(cid), days, timeout)
    return {"slots_measured": len(days), "target_slots": target,
            "budget_max_active_runs": CATCHUP_BUDGET,
            "exports": exports, "floor": floor,
            "export_to_floor": ratio(exports["runs"]["span_s"], floor["runs"]["span_s"]),
            "target": {"exports": extrapolate(exports["runs"]["span_s"], len(days), target),
                       "floor": extrapolate(floor["runs"]["span_s"], len(days), target)}}


def worker_rss(stack: Cluster) -> dict[str, dict[str, float]]:
    """Each Celery worker's memory at the end of the run, main process and pool children
    together (MB): resident now (``VmRSS``) and the sum of each process's peak (``VmHWM``)."""
    found: dict[str, dict[str, float]] = {}
    for pid in stack.processes():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = dict(line.split(":", 1) for line in
                          Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        name = next((w for w in ("worker-default", "worker-manual", "worker-large",
                                 EXTRA_WORKER) if w in cmd), None)
        if name is None or "celery" not in cmd:
            continue
        mb = found.setdefault(name, {"processes": 0, "rss": 0.0, "peak": 0.0})
        mb["processes"] += 1
        mb["rss"] += int(status.get("VmRSS", "0 kB").split()[0]) / 1024
        mb["peak"] += int(status.get("VmHWM", "0 kB").split()[0]) / 1024
    return {k: {"processes": v["processes"], "rss": round(v["rss"]), "peak": round(v["peak"])}
            for k, v in sorted(found.items())}


def outbox_counts(stack: Cluster, ids: list[str], ledger_runs: list[dict]) -> dict:
    files = {cid: len(list((stack.root / "exports" / "outbox" / cid / EXPORT_ID).glob("*.csv")))
             for cid in ids}
    expected = {cid: sum(r["run_key"].startswith(f"{cid}/") and r["state"] != "skipped"
                         for r in ledger_runs) for cid in ids}
    return {"files": sum(files.values()), "ledger_exported": sum(expected.values()),
            "mismatched": {c: (files[c], expected[c]) for c in ids if files[c] != expected[c]}}


def measure(args: argparse.Namespace) -> dict:
    counts = [1, 2] if args.workers == "both" else [int(args.workers)]
    if args.reverse:
        counts.reverse()
    statsd = StatsdListener()
    # Demo rows reach back past the oldest slot measured, so no catch-up slot renders empty.
    oldest = 2 + args.runs_per_company * len(counts) + args.catchup_slots
    root = scratch_dir("bench-cluster-") / "project"
    stack = Cluster.in_copy(root, **ENV, **{
        "EXPORT_DEMO_DAYS": str(max(21, oldest + 2)),
        "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        "BENCH_TASK_CPU_FILE": str(root / TASK_CPU_FILE),
        **({"AIRFLOW__CELERY__WORKER_CONCURRENCY": str(args.concurrency)}
           if args.concurrency else {})})
    ids = write_companies(stack.root, args.companies)
    result: dict = {"companies": args.companies, "runs_per_company": args.runs_per_company,
                    "order": counts, "concurrency_per_worker": args.concurrency or "cluster.env",
                    "cpus": os.cpu_count(), "load_at_start": os.getloadavg()[0]}
    extra = None
    try:
        say(f"make cluster in {stack.root}")
        started = time.monotonic()
        stack.start()
        result["cluster_up_s"] = round(time.monotonic() - started, 1)
        api = stack.api()
        wanted = {f(c) for c in ids for f in (export_dag, floor_dag, io_floor_dag)}
        wait_for(lambda: wanted <= {d["dag_id"] for d in pages(api, "/api/v2/dags", "dags")},
                 300, 2, what="every benchmark DAG to be parsed")
        for dag_id in sorted(wanted):
            api.ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        say("warm-up: one run per DAG (and the export DAGs' newest scheduled slot)")
        time.sleep(5)
        batch(api, sorted(wanted), [1], args.timeout)
        day, phases = 2, {}
        for count in counts:
            extra = set_workers(stack, extra, count)
            days = list(range(day, day + args.runs_per_company))
            day += args.runs_per_company
            say(f"phase: {count} worker(s)")
            began = time.monotonic()
            phases[count] = {"worker_count": count, **phase(stack, api, ids, days, args.timeout)}
            phases[count]["scheduler_loop_ms"] = loop_figures(statsd.values(
                "scheduler.scheduler_loop_duration", began, time.monotonic()))
        result["phases"] = {str(k): v for k, v in phases.items()}
        rates = {k: v["exports"]["runs"]["runs_per_minute"] for k, v in phases.items()}
        result["exports_per_minute"] = {str(k): v for k, v in rates.items()}
        result["two_to_one"] = ratio(rates.get(2), rates.get(1))
        if args.catchup_slots:
            days = list(range(day, day + args.catchup_slots))
            result["catchup"] = {"worker_count": counts[-1], **catch_up(
                api, ids[0], days, args.catchup_target, args.timeout)}
        ledger_runs = stack.ledger_runs()
        result["acceptance"] = acceptance(phases)
        try:
            result["ledger"] = check_ledger(ledger_runs, api.dag_runs())
            problems = ""
        except AssertionError as exc:  # report it with the figures, do not lose them
            problems = str(exc)[:3000]
        result["acceptance"].append({"check": "ledger: one artifact version per period, one "
                                     "acknowledged delivery per destination, one ledger run "
                                     "per export DAG run", "value": problems,
                                     "passed": not problems})
        result["acceptance"] += lighter_tasks_checks(result)
        result["worker_rss_mb"] = worker_rss(stack)
        result["outbox"] = outbox_counts(stack, ids, ledger_runs)
        result["acceptance"].append({"check": "one file per exported period in each outbox",
                                     "value": result["outbox"]["mismatched"],
                                     "passed": not result["outbox"]["mismatched"]})
        result["scheduler_loop_ms_whole_run"] = loop_figures(statsd.values(
            "scheduler.scheduler_loop_duration"))
        parse_times = statsd.values("dag_processing.total_parse_time")
        result["dag_processor_total_parse_s"] = {
            "samples": len(parse_times), "last": parse_times[-1] if parse_times else None,
            "max": max(parse_times, default=None)}
        result["load_at_end"] = os.getloadavg()[0]
    except Exception as exc:  # noqa: BLE001 - the partial figures are still printed
        result["error"] = f"{type(exc).__name__}: {exc}"[:3000]
        say(f"failed: {result['error']}")
    finally:
        statsd.close()
        if extra is not None:
            stop_extra_worker(extra)
        if args.keep:
            say(f"kept running: {stack.root} (make -C {stack.root} cluster-stop)")
        else:
            say("stopping the cluster")
            stop_and_sweep(stack)
    return result


def figures(result: dict) -> list:
    """The table rows (bench/RESULTS.md): per worker count the burst's drain time and rate
    against Airflow's no-op floor in the same run, and the catch-up against its floor."""
    from results import Figure

    rows = []
    for count, phase in (result.get("phases") or {}).items():
        exp, flo = phase["exports"]["runs"], phase["floor"]["runs"]
        rows.append(Figure(f"burst, {count} worker(s)", f"drain {exp['runs']} export runs",
                           exp["span_s"], "s", f"no-op floor {flo['span_s']} s",
                           phase.get("export_to_floor_span")))
        rows.append(Figure(f"rate, {count} worker(s)", "export runs per minute",
                           exp["runs_per_minute"], "runs/min"))
    catchup = result.get("catchup")
    if catchup:
        rows.append(Figure("catch-up", f"{catchup.get('target_slots')} daily slots "
                           f"({catchup.get('slots_measured')} measured)",
                           catchup["exports"]["runs"]["span_s"], "s",
                           f"no-op floor {catchup['floor']['runs']['span_s']} s",
                           catchup.get("export_to_floor")))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--companies", type=int, default=10)
    parser.add_argument("--workers", choices=("1", "2", "both"), default="both",
                        help="Celery workers on the default queue; both = 1 then 2, same run")
    parser.add_argument("--reverse", action="store_true",
                        help="with --workers both: 2 workers first, then 1 (order effects)")
    parser.add_argument("--runs-per-company", type=int, default=2,
                        help="export (and floor) runs per company and phase (default 2)")
    parser.add_argument("--catchup-slots", type=int, default=10,
                        help="daily slots backfilled for the catch-up figure (0: skip; "
                             "default 10, extrapolated to --catchup-target)")
    parser.add_argument("--catchup-target", type=int, default=365)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 2,
                        help="task slots per default-queue worker, both workers (default: this "
                             "machine's cores, a worker sized like a host of its own; 0: "
                             "deploy/cluster.env's AIRFLOW__CELERY__WORKER_CONCURRENCY, 4)")
    parser.add_argument("--timeout", type=float, help="seconds per batch (default 1200, or 6 "
                        "per catch-up slot when that is more)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--record", action="store_true",
                        help="store the figures in bench/results/ and regenerate "
                             "bench/RESULTS.md")
    args = parser.parse_args(argv)
    if args.companies < 1 or args.runs_per_company < 1 or args.catchup_slots < 0:
        parser.error("--companies and --runs-per-company must be at least 1")
    args.timeout = args.timeout or max(1200.0, args.catchup_slots * 6.0)  # ~5 s a slot seen
    result = measure(args)
    print(json.dumps(result, indent=None if args.json else 2))
    # The short table on stderr, so stdout stays one JSON object.
    print(table(result), file=sys.stderr)
    if args.record and "error" not in result:
        from results import record

        record("cluster", figures(result), summary=result,
               argv=sys.argv[1:] if argv is None else argv)
    passed = "error" not in result and all(c["passed"] for c in result["acceptance"])
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
