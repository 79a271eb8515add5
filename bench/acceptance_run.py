"""Acceptance: `make run` stays up under catch-up plus manual exports.

For each of --starts starts: `make run` (EXPORT_CATCHUP_LOOKBACK_HOURS=--lookback), trigger
--triggers manual exports through the REST API while the catch-up runs, wait until every DAG
run is terminal, check the ledger's counts, read the supervisor's restarts, `make stop`, and
look for leftover processes. --kill-scheduler SIGKILLs the scheduler during the last start and
times its recovery. By default every start gets a fresh copy of the project (free ports, its own
.airflow); --in-place runs in this checkout (its .venv, ports and .airflow; `make reset-db`
before each start unless --keep-db).

    python bench/acceptance_run.py --starts 5 --lookback 168 --triggers 5 --kill-scheduler
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.system.soak.stack import (  # noqa: E402
    REPO,
    Stack,
    check_ledger,
    now_utc,
    percentile,
    scratch_dir,
    wait_for,
)


def one_start(stack: Stack, args: argparse.Namespace, kill: bool) -> dict:
    t0 = time.monotonic()
    stack.start()
    started_in = time.monotonic() - t0
    api = stack.api()
    active_at_trigger = []
    today = now_utc()
    for i in range(args.triggers):
        active_at_trigger.append(api.active_runs())
        api.trigger_manual("acme", "acme/daily-spend", today - timedelta(days=2 + i),
                           f"acceptance {i}")
        time.sleep(args.trigger_every)
    result: dict = {"make_run_s": round(started_in, 1), "active_runs_at_triggers": active_at_trigger}
    if kill:
        before = stack.status()["components"]["scheduler"]
        os.kill(before["pid"], signal.SIGKILL)
        k0 = time.monotonic()
        wait_for(lambda: (c := stack.status()["components"]["scheduler"])["state"] == "up"
                 and c["pid"] != before["pid"], 30, interval=0.5, what="scheduler restart")
        result["scheduler_back_s"] = round(time.monotonic() - k0, 1)
    wait_for(lambda: api.active_runs() == 0 and (time.sleep(3) or api.active_runs() == 0),
             max(1.0, args.terminal_within - (time.monotonic() - t0)) + 300,
             what="every DAG run terminal")
    result["all_terminal_s"] = round(time.monotonic() - t0, 1)  # from the start of make run
    result["loadavg_5m"] = round(os.getloadavg()[1], 2)  # other work on the machine shows here
    runs = api.dag_runs()
    result["dag_runs"] = len(runs)
    result["not_success"] = [f"{r['dag_id']}/{r['dag_run_id']}: {r['state']}" for r in runs
                             if r["state"] != "success"]
    try:
        result["ledger"] = check_ledger(stack.ledger_runs(), runs)
    except AssertionError as exc:
        result["ledger_error"] = str(exc)[:2000]
    comps = stack.status()["components"]
    result["restarts"] = {n: c["restarts"] for n, c in comps.items() if c["restarts"]}
    result["restart_causes"] = {n: c["last_restart"]["cause"] for n, c in comps.items()
                                if c["last_restart"]}
    result["p95_api_s"] = round(percentile(api.latencies, 0.95), 3)
    result["api_calls"] = len(api.latencies)
    stop = stack.stop()
    time.sleep(1)
    result["stop_rc"] = stop.returncode
    result["leftover_pids"] = stack.processes()
    result["postgres_left_running"] = stack.postgres_running()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--starts", type=int, default=5)
    p.add_argument("--lookback", default="168")
    p.add_argument("--triggers", type=int, default=5)
    p.add_argument("--trigger-every", type=float, default=3.0)
    p.add_argument("--terminal-within", type=float, default=300.0,
                   help="seconds from the start of `make run` to every DAG run terminal")
    p.add_argument("--kill-scheduler", action="store_true")
    p.add_argument("--in-place", action="store_true")
    p.add_argument("--keep-db", action="store_true")
    args = p.parse_args()
    results, ok = [], True
    for n in range(args.starts):
        scratch = None
        if args.in_place:
            stack = Stack(REPO, None, None, {"EXPORT_CATCHUP_LOOKBACK_HOURS": args.lookback})
            if not args.keep_db:
                stack.make("reset-db")
                shutil.rmtree(REPO / "exports", ignore_errors=True)
        else:
            scratch = scratch_dir("export-acceptance-")
            stack = Stack.in_copy(scratch / "project", EXPORT_CATCHUP_LOOKBACK_HOURS=args.lookback)
        try:
            res = one_start(stack, args, kill=args.kill_scheduler and n == args.starts - 1)
        except AssertionError as exc:
            res = {"error": str(exc)[:3000]}
        finally:
            stack.stop()
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        bad = (res.get("error") or res.get("not_success") or res.get("ledger_error")
               or res.get("all_terminal_s", 0) > args.terminal_within
               or res.get("leftover_pids") or res.get("postgres_left_running")
               or res.get("p95_api_s", 0) >= 2
               or set(res.get("restarts", {})) - ({"scheduler"} if "scheduler_back_s" in res else set()))
        ok &= not bad
        res["start"] = n + 1
        res["ok"] = not bad
        results.append(res)
        print(json.dumps(res), flush=True)
    print("ALL OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
