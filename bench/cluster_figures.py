"""Pure figures for ``bench/cluster.py``: who executed what (from the Celery workers' logs),
per-task scheduling overhead and run throughput (from REST API records), ratios, the
extrapolation of a measured catch-up and the acceptance checks. No I/O; unit-tested in
``tests/unit/stack/test_bench_figures.py``."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

# "Executing workload in Celery: … ti=TaskInstanceDTO(id=…, task_id='render',
#  dag_id='widget_export__…', run_id='manual__…', try_number=1, dag_version_id=…, map_index=-1, …"
WORKLOAD = re.compile(r"Executing workload in Celery:.*?ti=TaskInstanceDTO\(.*?task_id='([^']+)', "
                      r"dag_id='([^']+)', run_id='([^']+)', try_number=(\d+),.*?map_index=(-?\d+)")
MIN_SHARE = 0.30  # workers share the load: with 2, each runs at least 30 % of the tasks

TaskKey = tuple[str, str, str, int]  # dag_id, run_id, task_id, map_index


def executions(logs: Mapping[str, Iterable[str]]) -> dict[TaskKey, list[tuple[int, str]]]:
    """Every try a worker executed: task key -> [(try_number, worker), …] from each worker's
    log lines (``{worker name: lines}``)."""
    found: dict[TaskKey, list[tuple[int, str]]] = {}
    for worker, lines in logs.items():
        for line in lines:
            m = WORKLOAD.search(line)
            if m:
                task_id, dag_id, run_id, try_number, map_index = m.groups()
                found.setdefault((dag_id, run_id, task_id, int(map_index)), []).append(
                    (int(try_number), worker))
    return found


def instant(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def daily_slot(now: datetime, hour: int, days_ago: int) -> datetime:
    """The daily ``hour``:00 slot ``days_ago`` days before the newest one already due at
    ``now``: the newest is the run a daily DAG creates when it is unpaused, so the bench's own
    runs (``days_ago`` >= 1) never take its logical date, at any hour (before ``hour`` the
    newest is yesterday's)."""
    newest = now.replace(hour=hour, minute=0, second=0, microsecond=0)
    if newest > now:
        newest -= timedelta(days=1)
    return newest - timedelta(days=days_ago)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _stats(values: list[float]) -> dict[str, float | None]:
    return {"median": _round(percentile(values, 0.5)), "p90": _round(percentile(values, 0.9)),
            "max": _round(max(values) if values else None)}


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def task_figures(tis: list[dict]) -> dict:
    """Executed task instances (REST records): queued→start latency (the scheduling overhead
    per task: broker, worker pick-up, task process start) and run time, in seconds."""
    ran = [t for t in tis if t.get("start_date") and t.get("queued_when")]
    waits = [(instant(t["start_date"]) - instant(t["queued_when"])).total_seconds() for t in ran]
    durations = [float(t["duration"]) for t in ran if t.get("duration") is not None]
    per_task: dict[str, list[float]] = {}
    for t in ran:
        if t.get("duration") is not None:
            per_task.setdefault(t["task_id"], []).append(float(t["duration"]))
    return {"tasks": len(ran), "queued_to_start_s": _stats(waits),
            "upstream_end_to_scheduled_s": _stats(reaction_times(ran)),
            "duration_s": _stats(durations),
            "median_duration_s_by_task": {k: _round(percentile(v, 0.5))
                                          for k, v in sorted(per_task.items())}}


def cpu_figures(records: Iterable[Mapping], runs: Iterable[tuple[str, str]]) -> dict:
    """Per-task CPU and peak RSS of the task processes of ``runs`` (``(dag_id, run_id)``), from
    the task-CPU listener's records (``bench/task_cpu_listener.py``: one per successful try,
    ``getrusage`` of the task process: its parse, execute and listener, from its fork on):
    median seconds and MB by task id (a mapped task's instances pooled)."""
    wanted = set(runs)
    cpu: dict[str, list[float]] = {}
    rss: dict[str, list[float]] = {}
    for r in records:
        if (r["dag_id"], r["run_id"]) in wanted:
            cpu.setdefault(r["task_id"], []).append(float(r["cpu_s"]))
            rss.setdefault(r["task_id"], []).append(float(r["maxrss_mb"]))
    return {"tasks": sum(len(v) for v in cpu.values()),
            "median_cpu_s_by_task": {k: _round(percentile(v, 0.5), 3)
                                     for k, v in sorted(cpu.items())},
            "median_rss_mb_by_task": {k: _round(percentile(v, 0.5), 0)
                                      for k, v in sorted(rss.items())}}


def cpu_ratios(exports: Mapping[str, float | None], floor: Mapping[str, float | None]
               ) -> dict[str, float | None]:
    """Each export task's median CPU over the median no-op task's (the bar: ≤ 1.2)."""
    noop = percentile([v for v in floor.values() if v is not None], 0.5)
    return {task: ratio(value, noop) for task, value in exports.items()}


def reaction_times(tis: list[dict]) -> list[float]:
    """The scheduler's reaction in chained runs: for each task instance, ``scheduled_when`` minus
    the end of the task that ran before it in its DAG run (the upstream, in a linear chain) —
    one scheduler loop plus its dependency checks."""
    by_run: dict[tuple[str, str], list[dict]] = {}
    for t in tis:
        by_run.setdefault((t["dag_id"], t["dag_run_id"]), []).append(t)
    gaps = []
    for run in by_run.values():
        run.sort(key=lambda t: t["start_date"])
        for before, after in zip(run, run[1:], strict=False):
            end, scheduled = instant(before.get("end_date")), instant(after.get("scheduled_when"))
            if end and scheduled and scheduled >= end:
                gaps.append((scheduled - end).total_seconds())
    return gaps


def run_figures(runs: list[dict]) -> dict:
    """DAG runs (REST records): how many succeeded, the span from the first queued to the last
    finished, runs per minute over that span, and the median run time (start→end)."""
    done = [r for r in runs if r.get("end_date")]
    first = min((instant(r["queued_at"] or r["start_date"]) for r in done), default=None)
    last = max((instant(r["end_date"]) for r in done), default=None)
    span = (last - first).total_seconds() if first and last else None
    times = [(instant(r["end_date"]) - instant(r["start_date"])).total_seconds() for r in done
             if r.get("start_date")]
    return {"runs": len(runs), "succeeded": sum(r["state"] == "success" for r in runs),
            "span_s": _round(span), "runs_per_minute": _round(len(done) / span * 60 if span else None),
            "run_s": _stats(times)}


def worker_figures(tis: list[dict], executed: Mapping[TaskKey, list[tuple[int, str]]]) -> dict:
    """Which worker executed each of ``tis`` (first try), each worker's share, the tasks no
    worker log names, and any task executed more than once (a retry or a duplicate)."""
    counts: Counter[str] = Counter()
    unattributed, twice = 0, []
    for t in tis:
        key = (t["dag_id"], t["dag_run_id"], t["task_id"], int(t.get("map_index", -1)))
        tries = executed.get(key, [])
        if not tries:
            unattributed += 1
            continue
        counts[min(tries)[1]] += 1
        if len(tries) > 1 or int(t.get("try_number") or 1) > 1:
            twice.append("/".join(map(str, key)))
    total = sum(counts.values())
    return {"tasks_per_worker": dict(sorted(counts.items())),
            "share": {w: round(n / total, 3) for w, n in sorted(counts.items())} if total else {},
            "unattributed": unattributed, "ran_more_than_once": twice}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator rounded to 2 places; None when either is missing or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 2)


def extrapolate(seconds: float, measured: int, target: int) -> dict:
    """A catch-up of ``measured`` slots that took ``seconds``, scaled linearly to ``target``
    slots (a backfill runs a fixed number of slots at a time, so its time is linear in the
    slot count once it is going); ``extrapolated`` is False when nothing was scaled."""
    per_slot = seconds / measured
    return {"slots": target, "seconds": round(per_slot * target, 1),
            "minutes": round(per_slot * target / 60, 1), "per_slot_s": round(per_slot, 2),
            "extrapolated": measured != target, "from_slots": measured}


def statsd_samples(datagram: str, prefix: str = "airflow.") -> list[tuple[str, float]]:
    """``(name, value)`` of each timer or gauge in a StatsD datagram (``name:value|ms`` or
    ``|g``, one per line), ``prefix`` removed; counters and sets are left out."""
    found = []
    for line in datagram.splitlines():
        name, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        if kind.split("|")[0] in ("ms", "g") and name.startswith(prefix):
            try:
                found.append((name.removeprefix(prefix), float(value)))
            except ValueError:
                continue
    return found


def loop_figures(values: list[float]) -> dict:
    """The scheduler's loop durations (ms): how many loops, median, p90 and max."""
    return {"loops": len(values), **{k: _round(v, 1) for k, v in _stats(values).items()}}


def acceptance(phases: Mapping[int, dict]) -> list[dict]:
    """The scale-out bars, from the per-worker-count phases (``{1: …, 2: …}``, each with
    ``exports.runs`` / ``workers`` figures): each worker ≥ 30 % of the tasks with 2 workers,
    nothing run twice, the 2-worker run not slower than the 1-worker run."""
    checks = []
    two = phases.get(2)
    if two:
        shares = two["workers"]["share"]
        low = min(shares.values(), default=0.0) if len(shares) >= 2 else 0.0
        checks.append({"check": f"each of 2 workers ran >= {MIN_SHARE:.0%} of the tasks",
                       "value": shares, "passed": len(shares) == 2 and low >= MIN_SHARE})
    twice = [t for p in phases.values() for t in p["workers"]["ran_more_than_once"]]
    checks.append({"check": "no task executed twice", "value": twice[:10], "passed": not twice})
    if 1 in phases and two:
        one_rate = phases[1]["exports"]["runs"]["runs_per_minute"]
        two_rate = two["exports"]["runs"]["runs_per_minute"]
        checks.append({"check": "2 workers not slower than 1 (exports/min)",
                       "value": {"1": one_rate, "2": two_rate},
                       "passed": bool(one_rate and two_rate and two_rate >= one_rate)})
    return checks


# The lighter-tasks bars (an export task costs close to Airflow's own per task), each against
# Airflow's floor measured in the same run.
CATCHUP_BAR, BURST_BAR, TASK_CPU_BAR = 1.25, 1.25, 1.2
BURST_MIN_SCHEDULES = 40
CPU_TASKS = ("render", "publish", "deliver")


def lighter_tasks_checks(result: Mapping) -> list[dict]:
    """The lighter-tasks acceptance from one run's figures: a 365-slot catch-up *measured* within
    1.25 x the floor's, an hourly burst of >= 40 schedules drained within 1.25 x the floor's,
    and render/publish/deliver each within 1.2 x a no-op task's CPU."""
    checks = []
    catchup = result.get("catchup") or {}
    measured = catchup.get("slots_measured", 0) >= catchup.get("target_slots", 365)
    value = catchup.get("export_to_floor")
    checks.append({"check": f"365-slot catch-up measured, <= {CATCHUP_BAR} x the floor",
                   "value": {"slots_measured": catchup.get("slots_measured"), "ratio": value},
                   "passed": bool(measured and value is not None and value <= CATCHUP_BAR)})
    phases = result.get("phases") or {}
    burst = phases.get("1") or next(iter(phases.values()), None)
    if burst is not None:
        schedules = result.get("companies", 0) * result.get("runs_per_company", 1)
        value = burst.get("export_to_floor_span")
        checks.append({"check": f"burst of >= {BURST_MIN_SCHEDULES} schedules drained in <= "
                                f"{BURST_BAR} x the floor's time",
                       "value": {"schedules": schedules, "ratio": value},
                       "passed": bool(schedules >= BURST_MIN_SCHEDULES and value is not None
                                      and value <= BURST_BAR)})
        ratios = burst.get("task_cpu_to_noop") or {}
        for task in CPU_TASKS:
            value = ratios.get(task)
            checks.append({"check": f"{task} CPU <= {TASK_CPU_BAR} x a no-op task's",
                           "value": value,
                           "passed": value is not None and value <= TASK_CPU_BAR})
    return checks


def table(result: Mapping) -> str:
    """The figures people quote, as a short text table (the JSON has everything)."""
    rows = [("figure", "exports", "floor", "ratio")]
    phases = result.get("phases") or {}
    for count, phase in phases.items():
        exp, flo = phase["exports"], phase["floor"]
        rows.append((f"burst: {exp['runs']['runs']} runs, {count} worker(s), drain s",
                     exp["runs"]["span_s"], flo["runs"]["span_s"],
                     phase.get("export_to_floor_span")))
        noop = percentile([v for v in flo["cpu"]["median_cpu_s_by_task"].values()
                           if v is not None], 0.5)
        for task, cpu in exp["cpu"]["median_cpu_s_by_task"].items():
            rows.append((f"  CPU s per task: {task}", cpu, _round(noop, 3),
                         phase["task_cpu_to_noop"].get(task)))
        # The lowest an export task's CPU can be: one S3 write and one ledger statement, no
        # export code (bench/cluster.py io_floor), over the same no-op median.
        for task, cpu in ((phase.get("least_io") or {}).get("median_cpu_s_by_task") or {}).items():
            rows.append((f"  CPU s per task: {task} (least I/O, no export code)", cpu,
                         _round(noop, 3), phase["task_cpu_to_noop"].get(task)))
        for task, mb in exp["cpu"]["median_rss_mb_by_task"].items():
            rows.append((f"  task process peak RSS MB: {task}", mb, "", ""))
    catchup = result.get("catchup")
    if catchup:
        label = ("measured" if catchup.get("slots_measured", 0) >= catchup.get("target_slots", 0)
                 else f"{catchup.get('slots_measured')} measured, extrapolated")
        rows.append((f"catch-up {catchup.get('target_slots')} slots ({label}), s",
                     catchup["exports"]["runs"]["span_s"], catchup["floor"]["runs"]["span_s"],
                     catchup.get("export_to_floor")))
    for name, mb in (result.get("worker_rss_mb") or {}).items():
        rows.append((f"worker {name}: RSS / peak MB", mb.get("rss"), mb.get("peak"), ""))
    def cell(value: object) -> str:
        return str(_round(value) if isinstance(value, float) else value)

    width = max(len(str(r[0])) for r in rows)
    return "\n".join(f"{a:<{width}}  {cell(b):>9}  {cell(c):>9}  {cell(d):>6}"
                     for a, b, c, d in rows)
