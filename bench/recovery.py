"""Recovery of missed periods: batched (ADR 0032) against per-run (one Airflow backfill run a
period, ADR 0006) and against Airflow's floor (four chained no-op tasks a run, backfilled over
the same slots), all in one run on one stack: `make run`'s (``--executor local``, the default:
LocalExecutor) or `make cluster`'s with exactly one Celery worker serving every queue
(``--executor celery``: ``make cluster CELERY_WORKERS=1``; the batch, floor and export tasks
all go to its ``default`` queue).

Run from the repository root (needs what `make run` / `make cluster` needs; ~45 minutes at the
defaults, most of it the daily floor over all 365 slots)::

    .venv/bin/python bench/recovery.py --json --record                     # recovery.json
    .venv/bin/python bench/recovery.py --executor celery --json --record   # recovery-celery.json

A copy of the project (tests/system/scheduler/harness.py) gets one company ``rb`` (UTC) with
four widget exports of the demo ``widget_metrics`` table, one local destination each:
``daily-b`` and ``daily-r`` (07:00 daily, calendar day), ``hourly-b`` and ``hourly-r`` (hourly,
interval windows); ``-b`` recovers in batches (``catchup.batch_over: 0``), ``-r`` one backfill
run a slot. Two floor DAGs (``bench_floor_daily``, ``bench_floor_hourly``) have the same slots.
Demo rows reach back past the oldest slot. Everything starts paused; what is measured is
unpaused and has nothing of its own to recover (``catchup.lookback: 0s``).

Per cadence (``--daily`` slots, 365; ``--hourly`` slots, 720), in this order:

* batched: the batch runs ``recover_missed`` would ask for (``recovery_batch__rb``, 50 slots a
  run, one task each) over every slot, awaited;
* floor: one Airflow backfill of the floor DAG as ``recover_missed`` asks for it (2 runs at a
  time), awaited, over every daily slot (``--floor-sample-daily 0``, the default) and the
  newest 30 hourly ones (``--floor-sample-hourly``; 0: all 720, ~50 minutes more);
* per-run: the same backfill of the ``-r`` export over the newest ``--sample`` slots (30;
  0: every slot).
  A backfill is linear in its slots (one run a slot, the same budget), so a sample's figures
  are scaled to all slots and marked ``extrapolated``; a figure over every slot is not.

Figures: wall time from the request to the last run finished; task processes started (task
instances that went through the executor); CPU seconds of the task processes (user + system
of each, from bench/task_cpu_listener.py, copied into the stack's plugins) and the largest
peak RSS of one. The bar: batched wall time <= 0.5 x the floor's for
the same slots, and the ledger afterwards holds, for the N batched slots, N runs (state
ready), N artifacts version 1 (one a run), N delivery records (one a run, acknowledged,
version 1), each run's window the cadence's length and its own, and each period's exported rows
equal to its window's rows counted in the source. The machine may be shared: the ratios are
what counts (same run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from export_lib.periods.recovery import CATCHUP_BUDGET  # noqa: E402
from export_lib.pipeline.batch_requests import (  # noqa: E402
    batch_conf,
    batch_dag_id,
    batch_note,
    batch_run_id,
)
from tests.system.cluster.stack import Cluster  # noqa: E402
from tests.system.scheduler.harness import SchedulerStack, company_file, widget_export  # noqa: E402
from tests.system.soak.stack import Stack, scratch_dir, wait_for  # noqa: E402

COMPANY = "rb"
TASK_CPU_FILE = "task-cpu.jsonl"
SIZE = 50  # EXPORT_BATCH_RECOVERY_SIZE's default
# --executor: the stack, what it is called in the figures and the results file it records into.
# celery: `make cluster` with one Celery worker serving every queue (CELERY_WORKERS=1,
# scripts/supervise.py); the batch, floor and export DAGs' tasks all go to its `default` queue.
EXECUTORS = {
    "local": (Stack, {}, "LocalExecutor (make run)", "recovery"),
    "celery": (Cluster, {"CELERY_WORKERS": "1"},
               "CeleryExecutor, 1 worker (make cluster CELERY_WORKERS=1)", "recovery-celery"),
}
FLOOR_DAGS = '''"""bench/recovery.py's floor: 4 chained no-op tasks a run (Airflow's own cost)."""
from datetime import datetime, timezone

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def noop():
    return None


for name, cron in (("daily", "0 7 * * *"), ("hourly", "0 * * * *")):
    with DAG(dag_id="bench_floor_" + name, schedule=cron,
             start_date=datetime(2020, 1, 1, tzinfo=timezone.utc), catchup=False,
             max_active_runs=2) as dag:
        a, b, c, d = (PythonOperator(task_id=f"noop_{i}", python_callable=noop)
                      for i in range(4))
        a >> b >> c >> d
    globals()[dag.dag_id] = dag
'''


def say(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def _export(export_id: str, *, hourly: bool, batched: bool) -> dict:
    fields = {"interval_hours": 1, "window": {"kind": "interval"}} if hourly else {}
    return widget_export(export_id, export_hour=0 if hourly else 7, company=COMPANY,
                         recovery="each", deadline="30m" if hourly else "2h",
                         catchup={"lookback": "0s", "batch_over": 0 if batched else 100000},
                         **fields)


def company() -> dict:
    return company_file(COMPANY, [_export("daily-b", hourly=False, batched=True),
                                  _export("daily-r", hourly=False, batched=False),
                                  _export("hourly-b", hourly=True, batched=True),
                                  _export("hourly-r", hourly=True, batched=False)])


def slots(count: int, hourly: bool, now: datetime) -> list[datetime]:
    """``count`` slots, oldest first, ending two periods before now (never the newest)."""
    if hourly:
        newest = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
        return [newest - timedelta(hours=i) for i in range(count - 1, -1, -1)]
    newest = now.replace(hour=7, minute=0, second=0, microsecond=0) - timedelta(days=2)
    return [newest - timedelta(days=i) for i in range(count - 1, -1, -1)]


def _runs(api, dag_id: str, query: str = "") -> list[dict]:
    found: list[dict] = []
    while True:
        page = api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&offset={len(found)}"
                             f"&order_by=id{query}")
        found.extend(page["dag_runs"])
        if not page["dag_runs"] or len(found) >= page["total_entries"]:
            return found


def _tis(api, dag_id: str, run_ids: set[str]) -> list[dict]:
    found: list[dict] = []
    while True:
        page = api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/~/taskInstances?limit=100"
                             f"&offset={len(found)}")
        found.extend(page["task_instances"])
        if not page["task_instances"] or len(found) >= page["total_entries"]:
            return [t for t in found if t["dag_run_id"] in run_ids and t.get("queued_when")]


def _await(api, dag_id: str, run_ids: set[str], timeout: float) -> list[dict]:
    def done():
        runs = [r for r in _runs(api, dag_id) if r["dag_run_id"] in run_ids]
        return runs if len(runs) == len(run_ids) and all(
            r["state"] in ("success", "failed") for r in runs) else None

    return wait_for(done, timeout, 2, what=f"{len(run_ids)} run(s) of {dag_id}")


def _figures(stack: SchedulerStack, api, dag_id: str, runs: list[dict], began: float,
             ended: float) -> dict:
    ids = {r["dag_run_id"] for r in runs}
    tis = _tis(api, dag_id, ids)
    cpu = [c for c in _cpu_records(stack) if c["dag_id"] == dag_id and c["run_id"] in ids]
    return {"runs": len(runs), "failed_runs": sum(r["state"] != "success" for r in runs),
            "wall_s": round(ended - began, 1), "task_processes": len(tis),
            "cpu_s": round(sum(c["cpu_s"] for c in cpu), 1),
            "peak_rss_mb": max((c["maxrss_mb"] for c in cpu), default=None)}


def _cpu_records(stack: SchedulerStack) -> list[dict]:
    path = stack.root / TASK_CPU_FILE
    return [json.loads(line) for line in path.read_text().splitlines()
            if line.strip()] if path.is_file() else []


def batched(stack: SchedulerStack, api, schedule_id: str, wanted: list[datetime],
            timeout: float) -> dict:
    dag_id = batch_dag_id(COMPANY)
    began = time.monotonic()
    run_ids = set()
    for i in range(0, len(wanted), SIZE):
        chunk = wanted[i:i + SIZE]
        run_id = batch_run_id(schedule_id, chunk)
        api.ok("POST", f"/api/v2/dags/{dag_id}/dagRuns", {
            "dag_run_id": run_id, "logical_date": None, "conf": batch_conf(schedule_id, chunk),
            "note": batch_note(schedule_id, chunk)})
        run_ids.add(run_id)
    runs = _await(api, dag_id, run_ids, timeout)
    return {"slots": len(wanted), **_figures(stack, api, dag_id, runs, began,
                                             time.monotonic())}


def backfilled(stack: SchedulerStack, api, dag_id: str, wanted: list[datetime],
               total: int, timeout: float) -> dict:
    began = time.monotonic()
    created = api.ok("POST", "/api/v2/backfills", {
        "dag_id": dag_id, "from_date": wanted[0].isoformat(), "to_date": wanted[-1].isoformat(),
        "run_backwards": False, "reprocess_behavior": "none",
        "max_active_runs": CATCHUP_BUDGET, "dag_run_conf": {}})
    wait_for(lambda: api.ok("GET", f"/api/v2/backfills/{created['id']}").get("completed_at"),
             timeout, 2, what=f"the backfill of {dag_id}")
    runs = [r for r in _runs(api, dag_id, "&run_type=backfill")
            if r["logical_date"] and datetime.fromisoformat(r["logical_date"]) >= wanted[0]]
    runs = _await(api, dag_id, {r["dag_run_id"] for r in runs}, timeout)
    measured = _figures(stack, api, dag_id, runs, began, time.monotonic())
    scale = total / len(wanted)
    out = {"slots": total, "slots_measured": len(wanted), "measured": measured}
    if scale == 1:
        return {**out, **measured, "extrapolated": False}
    return {**out, "extrapolated": True,
            **{k: round(measured[k] * scale, 1) for k in ("wall_s", "cpu_s")},
            "task_processes": round(measured["task_processes"] * scale),
            "peak_rss_mb": measured["peak_rss_mb"], "runs": total}


def _ledger_runs(stack: SchedulerStack, schedule_id: str) -> list[dict]:
    """Every ledger run of ``schedule_id`` as ``exportctl runs --json`` shows it (pages of the
    views' largest page)."""
    from export_lib.ledger import open_ledger
    from export_lib.views.reports import MAX_LIMIT, run_filter, runs_page

    ledger = open_ledger(stack.stack.stack_environ()["EXPORT_LEDGER_URL"])
    found: list[dict] = []
    try:
        while True:
            page = runs_page(ledger.engine, run_filter(schedule_id=schedule_id, limit=MAX_LIMIT,
                                                       offset=len(found)),
                             now=datetime.now(UTC))
            found.extend(json.loads(json.dumps(list(page.runs))))
            if not page.runs or len(found) >= page.total:
                return found
    finally:
        ledger.engine.dispose()


def _source_rows(stack: SchedulerStack, windows: list[tuple[str, str]]) -> list[int]:
    """The demo source's ``widget_metrics`` rows of company ``rb`` in each ``[start, end)``
    window (what the export selects: its tenant, its timestamp column), counted apart from the
    export."""
    import psycopg

    with psycopg.connect(stack.stack.database_url("demo")) as conn:
        return [conn.execute("SELECT count(*) FROM widget_metrics WHERE company_id = %s AND "
                             "event_time >= %s AND event_time < %s",
                             (COMPANY, start, end)).fetchone()[0] for start, end in windows]


def ledger_check(stack: SchedulerStack, schedule_id: str, wanted: list[datetime],
                 hourly: bool) -> dict:
    """The acceptance's counts over the batched slots: one ledger run a slot (state ready), one
    artifact a run and it version 1, one delivery record a run (acknowledged, version 1), each
    run's window the cadence's length and its own, and each artifact's rows equal to the
    source's rows of that window."""
    runs = {r["slot_utc"]: r for r in _ledger_runs(stack, schedule_id)}
    mine = [(s, runs.get(f"{s:%Y-%m-%dT%H:%M:%SZ}")) for s in wanted]
    found = [(s, r) for s, r in mine if r is not None]
    windows = [(r["window_start_utc"], r["window_end_utc"]) for _, r in found]
    source = _source_rows(stack, windows)
    length = timedelta(hours=1 if hourly else 24)
    bad: list[str] = [f"{s:%Y-%m-%dT%H:%MZ}: no ledger run" for s, r in mine if r is None]
    artifacts_v1 = deliveries = rows_equal = 0
    for (slot, run), (start, end), rows in zip(found, windows, source, strict=True):
        versions = [a["version"] for a in run["artifacts"]]
        artifacts_v1 += versions == [1]
        deliveries += len(run["deliveries"])
        exported = [a["rows"] for a in run["artifacts"]]
        rows_equal += exported == [rows]
        why = [w for w, wrong in (
            (f"state {run['state']}", run["state"] != "ready"),
            (f"artifact versions {versions}", versions != [1]),
            (f"deliveries {[(d['state'], d['version']) for d in run['deliveries']]}",
             [(d["state"], d["version"]) for d in run["deliveries"]] != [("acknowledged", 1)]),
            (f"window {start}..{end}", datetime.fromisoformat(end)
             - datetime.fromisoformat(start) != length),
            (f"rows {exported}, the window has {rows}", exported != [rows])) if wrong]
        if why:
            bad.append(f"{slot:%Y-%m-%dT%H:%MZ}: " + ", ".join(why))
    distinct = len(set(windows))
    if distinct != len(windows):
        bad.append(f"{len(windows) - distinct} window(s) exported twice")
    return {"wanted": len(wanted), "ledger_runs": len(found), "artifacts_v1": artifacts_v1,
            "from_a_batch": sum(r["batch"] is not None for _, r in found),
            "delivery_records": deliveries, "periods_rows_equal_window": rows_equal,
            "rows_exported": sum(sum(a["rows"] for a in r["artifacts"]) for _, r in found),
            "rows_in_windows": sum(source), "not_exactly_once": bad[:10],
            "not_exactly_once_count": len(bad)}


def ledger_passed(ledger: dict) -> bool:
    """The acceptance: N slots, N ledger runs, N artifacts version 1, N delivery records, every
    period's rows its window's, nothing else wrong."""
    n = ledger["wanted"]
    return (ledger["ledger_runs"] == ledger["artifacts_v1"] == ledger["delivery_records"]
            == ledger["periods_rows_equal_window"] == n and not ledger["not_exactly_once_count"])


def cadence(stack: SchedulerStack, api, name: str, count: int, floor_sample: int,
            sample: int, timeout: float) -> dict:
    hourly = name == "hourly"
    wanted = slots(count, hourly, datetime.now(UTC))
    say(f"{name}: batched over {len(wanted)} slots")
    result = {"batched": batched(stack, api, f"{COMPANY}/{name}-b", wanted, timeout)}
    part = wanted[-floor_sample:] if floor_sample else wanted
    say(f"{name}: floor over {len(part)} slots")
    result["floor"] = backfilled(stack, api, f"bench_floor_{name}", part, count, timeout)
    part = wanted[-sample:] if sample else wanted
    say(f"{name}: per-run over {len(part)} slots")
    result["per_run"] = backfilled(stack, api, f"widget_export__{COMPANY}__{name}-r", part,
                                   count, timeout)
    result["ledger"] = ledger_check(stack, f"{COMPANY}/{name}-b", wanted, hourly)
    floor, per_run, batch = (result[k]["wall_s"] for k in ("floor", "per_run", "batched"))
    result["batched_to_floor"] = round(batch / floor, 3) if floor else None
    result["per_run_to_floor"] = round(per_run / floor, 3) if floor else None
    result["passed"] = bool(floor and batch <= 0.5 * floor and ledger_passed(result["ledger"])
                            and not result["batched"]["failed_runs"])
    say(f"{name}: batched {batch} s, per-run {per_run} s, floor {floor} s "
        f"(batched/floor {result['batched_to_floor']}); ledger {result['ledger']}")
    return result


def measure(args: argparse.Namespace) -> dict:
    stack_class, executor_env, executor, _ = EXECUTORS[args.executor]
    root = scratch_dir("bench-recovery-") / "project"
    stack = SchedulerStack.prepare(root, {COMPANY: company()}, {
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "EXPORT_DEMO_DAYS": str(math.ceil(args.daily + args.hourly / 24) + 4),
        "BENCH_TASK_CPU_FILE": str(root / TASK_CPU_FILE), **executor_env},
        stack_class=stack_class)
    (stack.root / "dags" / "bench_floor.py").write_text(FLOOR_DAGS, encoding="utf-8")
    shutil.copy(ROOT / "bench" / "task_cpu_listener.py",
                stack.root / "plugins" / "bench_task_cpu.py")
    result: dict = {"daily_slots": args.daily, "hourly_slots": args.hourly,
                    "sample": args.sample, "floor_sample_daily": args.floor_sample_daily,
                    "floor_sample_hourly": args.floor_sample_hourly, "cpus": os.cpu_count(),
                    "load_at_start": os.getloadavg()[0], "executor": executor}
    try:
        say(f"{'make cluster' if args.executor == 'celery' else 'make run'} in {stack.root}")
        started = time.monotonic()
        stack.start()
        result["stack_up_s"] = round(time.monotonic() - started, 1)
        result["components"] = sorted(json.loads(
            (stack.stack.run_dir / "status.json").read_text())["components"])
        api = stack.api
        dags = [batch_dag_id(COMPANY), "bench_floor_daily", "bench_floor_hourly",
                *(f"widget_export__{COMPANY}__{n}-r" for n in ("daily", "hourly"))]
        stack.wait_for_dags(*dags, timeout=300)
        for dag_id in dags:
            stack.pause(dag_id, paused=False)
        time.sleep(10)  # the unpaused DAGs' newest scheduled slots start (not measured)
        wait_for(lambda: api.active_runs() == 0, 600, 2, what="the newest slots to finish")
        for name, count in (("daily", args.daily), ("hourly", args.hourly)):
            if count:
                floor_sample = getattr(args, f"floor_sample_{name}")
                result[name] = cadence(stack, api, name, count, floor_sample, args.sample,
                                       args.timeout)
        result["load_at_end"] = os.getloadavg()[0]
    except Exception as exc:  # noqa: BLE001 - the partial figures are still printed
        result["error"] = f"{type(exc).__name__}: {exc}"[:3000]
        say(f"failed: {result['error']}")
    finally:
        if args.keep:
            say(f"kept running: {stack.root}")
        else:
            say("stopping the stack")
            stack.stop()
    return result


def _how(fig: dict, what: str) -> str:
    """"floor measured over every slot" or "... extrapolated from the newest 30"."""
    if fig.get("extrapolated"):
        return f"{what} extrapolated from the newest {fig['slots_measured']}"
    return f"{what} measured over every slot"


def figures(result: dict) -> list:
    """The table rows (bench/RESULTS.md): per cadence, batched and per-run against the floor."""
    from results import Figure

    rows = []
    for name in ("daily", "hourly"):
        part = result.get(name)
        if not part:
            continue
        floor, ledger = part["floor"], part["ledger"]
        for kind, label in (("batched", "batched"), ("per_run", "one run a period")):
            fig = part[kind]
            how = [_how(part["floor"], "floor")]
            if kind == "batched":
                how.append(f"ledger: {ledger['ledger_runs']} runs, {ledger['artifacts_v1']} "
                           f"artifacts v1, {ledger['delivery_records']} delivery records, "
                           f"{ledger['periods_rows_equal_window']} periods' rows = their "
                           "window's")
            else:
                how.insert(0, _how(fig, "per-run"))
            rows.append(Figure(f"{name} recovery, {label}",
                               f"{fig['slots']} slots ({'; '.join(how)}): "
                               f"{fig['task_processes']} task processes, {fig['cpu_s']} CPU-s, "
                               f"peak RSS {fig['peak_rss_mb']} MB", fig["wall_s"], "s",
                               f"no-op floor {floor['wall_s']} s",
                               part[f"{kind}_to_floor"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daily", type=int, default=365, help="daily slots (0: skip)")
    parser.add_argument("--hourly", type=int, default=720, help="hourly slots (0: skip)")
    parser.add_argument("--executor", choices=sorted(EXECUTORS), default="local",
                        help="local: make run's stack (LocalExecutor); celery: make cluster "
                             "with one Celery worker serving every queue")
    parser.add_argument("--sample", type=int, default=30,
                        help="newest slots the per-run backfill measures, scaled to all "
                             "(0: every slot)")
    parser.add_argument("--floor-sample-daily", type=int, default=0,
                        help="newest daily slots the floor backfill measures, scaled to all "
                             "(0, the default: every slot)")
    parser.add_argument("--floor-sample-hourly", type=int, default=30,
                        help="newest hourly slots the floor backfill measures, scaled to all "
                             "(0: every slot)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per phase")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--record", action="store_true",
                        help="store the figures in bench/results/ and regenerate "
                             "bench/RESULTS.md")
    args = parser.parse_args(argv)
    result = measure(args)
    print(json.dumps(result, indent=None if args.json else 2))
    if args.record and "error" not in result:
        from results import record

        record(EXECUTORS[args.executor][3], figures(result), summary=result,
               argv=sys.argv[1:] if argv is None else argv)
    passed = "error" not in result and all(result[n]["passed"] for n in ("daily", "hourly")
                                           if result.get(n))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
