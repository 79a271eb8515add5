"""bench/cluster_figures.py: the benchmark's pure figures (no cluster is started here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench.cluster_figures import (
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
    statsd_samples,
    table,
    task_figures,
    worker_figures,
)

RUN = "manual__2026-11-28T06:00:00+00:00"


def workload(task: str, try_number: int = 1, map_index: int = -1, dag: str = "d") -> str:
    return ("2026-11-30T18:05:16Z [info] [0e8a] Executing workload in Celery: dag_rel_path="
            "PurePosixPath('company_acme.py') log_path='dag_id=d/…' ti=TaskInstanceDTO(id=UUID("
            f"'01a2'), task_id='{task}', dag_id='{dag}', run_id='{RUN}', try_number={try_number}, "
            f"dag_version_id=UUID('01a3'), map_index={map_index}, hostname='', queue='default')")


def ti(task: str, map_index: int = -1, queued: str = "06:00:00", start: str = "06:00:02",
       duration: float = 1.5, try_number: int = 1, end: str | None = None,
       scheduled: str | None = None) -> dict:
    return {"dag_id": "d", "dag_run_id": RUN, "task_id": task, "map_index": map_index,
            "try_number": try_number, "queued_when": f"2026-11-30T{queued}Z",
            "start_date": f"2026-11-30T{start}Z", "duration": duration,
            "end_date": f"2026-11-30T{end}Z" if end else None,
            "scheduled_when": f"2026-11-30T{scheduled}Z" if scheduled else None}


def test_executions_and_worker_shares_from_worker_log_lines():
    executed = executions({
        "worker-default": [workload("render"), "noise", workload("deliver", map_index=0)],
        "worker-bench-2": [workload("publish"), workload("render", try_number=2)],
    })
    assert executed[("d", RUN, "render", -1)] == [(1, "worker-default"), (2, "worker-bench-2")]
    figures = worker_figures([ti("render"), ti("publish"), ti("deliver", 0), ti("other")],
                             executed)
    assert figures == {"tasks_per_worker": {"worker-bench-2": 1, "worker-default": 2},
                       "share": {"worker-bench-2": 0.333, "worker-default": 0.667},
                       "unattributed": 1, "ran_more_than_once": [f"d/{RUN}/render/-1"]}


def test_task_and_run_figures_from_rest_records():
    tasks = task_figures([ti("a", start="06:00:01", duration=1.0, end="06:00:02"),
                          ti("b", start="06:00:03", duration=3.0, scheduled="06:00:02.5"),
                          {"task_id": "skipped", "start_date": None, "queued_when": None}])
    assert tasks["tasks"] == 2
    assert tasks["upstream_end_to_scheduled_s"] == {"median": 0.5, "p90": 0.5, "max": 0.5}
    assert tasks["queued_to_start_s"] == {"median": 1.0, "p90": 3.0, "max": 3.0}
    assert tasks["median_duration_s_by_task"] == {"a": 1.0, "b": 3.0}
    runs = run_figures([
        {"state": "success", "queued_at": "2026-11-30T06:00:00Z",
         "start_date": "2026-11-30T06:00:10Z", "end_date": "2026-11-30T06:00:40Z"},
        {"state": "success", "queued_at": "2026-11-30T06:00:00Z",
         "start_date": "2026-11-30T06:00:20Z", "end_date": "2026-11-30T06:01:00Z"}])
    assert runs == {"runs": 2, "succeeded": 2, "span_s": 60.0, "runs_per_minute": 2.0,
                    "run_s": {"median": 30.0, "p90": 40.0, "max": 40.0}}


def test_ratio_extrapolation_and_acceptance():
    assert ratio(3, 2) == 1.5 and ratio(None, 2) is None and ratio(1, 0) is None
    assert extrapolate(120.0, 10, 365) == {"slots": 365, "seconds": 4380.0, "minutes": 73.0,
                                           "per_slot_s": 12.0, "extrapolated": True,
                                           "from_slots": 10}
    assert extrapolate(60.0, 5, 5)["extrapolated"] is False

    def phase(rate: float, share: dict, twice: list) -> dict:
        return {"exports": {"runs": {"runs_per_minute": rate}},
                "workers": {"share": share, "ran_more_than_once": twice}}

    checks = acceptance({1: phase(10.0, {"a": 1.0}, []),
                         2: phase(12.0, {"a": 0.7, "b": 0.3}, [])})
    assert [c["passed"] for c in checks] == [True, True, True]
    checks = acceptance({1: phase(10.0, {"a": 1.0}, []),
                         2: phase(9.0, {"a": 0.75, "b": 0.25}, ["d/r/t/-1"])})
    assert [c["passed"] for c in checks] == [False, False, False]
    assert checks[1]["value"] == ["d/r/t/-1"]


@pytest.mark.parametrize("phases", [{1: {"exports": {"runs": {"runs_per_minute": 5.0}},
                                         "workers": {"share": {"a": 1.0},
                                                     "ran_more_than_once": []}}}])
def test_acceptance_with_one_worker_count_checks_only_duplicates(phases):
    assert [c["check"] for c in acceptance(phases)] == ["no task executed twice"]


def test_statsd_timers_and_gauges_and_loop_figures():
    datagram = ("airflow.scheduler.scheduler_loop_duration:12.5|ms\n"
                "airflow.dag_processing.total_parse_time:3.25|g\n"
                "airflow.ti.finish.d.t.success:1|c\nother.metric:4|ms\nairflow.bad:x|ms")
    assert statsd_samples(datagram) == [("scheduler.scheduler_loop_duration", 12.5),
                                        ("dag_processing.total_parse_time", 3.25)]
    assert loop_figures([10.0, 20.0, 30.0, 400.0]) == {"loops": 4, "median": 20.0, "p90": 400.0,
                                                       "max": 400.0}


def _cpu(task: str, cpu: float, run: str = RUN, dag: str = "d", rss: float = 150.0) -> dict:
    return {"dag_id": dag, "run_id": run, "task_id": task, "map_index": -1, "cpu_s": cpu,
            "maxrss_mb": rss}


def test_cpu_figures_take_the_median_per_task_of_the_runs_asked_for_only():
    records = [_cpu("render", 0.5), _cpu("render", 0.7), _cpu("render", 0.9),
               _cpu("deliver", 0.4, rss=160.0), _cpu("render", 9.0, run="other"),
               _cpu("render", 9.0, dag="other")]
    figures = cpu_figures(records, [("d", RUN)])
    assert figures == {"tasks": 4, "median_cpu_s_by_task": {"deliver": 0.4, "render": 0.7},
                       "median_rss_mb_by_task": {"deliver": 160.0, "render": 150.0}}


def test_cpu_ratios_divide_each_export_task_by_the_median_noop_task():
    floor = {"noop_0": 0.5, "noop_1": 0.4, "noop_2": 0.4, "noop_3": 0.6}
    assert cpu_ratios({"render": 0.6, "publish": 0.44, "deliver": None}, floor) == {
        "render": 1.5, "publish": 1.1, "deliver": None}


def _bench_result(companies: int = 40, slots: int = 365, catchup: float = 1.2,
                  burst: float = 1.1, cpu: dict | None = None) -> dict:
    cpu = cpu or {"render": 1.1, "publish": 1.0, "deliver": 1.19, "resolve_window": 1.5}
    runs = {"runs": companies, "span_s": 100.0}
    return {"companies": companies, "runs_per_company": 1,
            "phases": {"1": {"exports": {"runs": {**runs, "span_s": 100.0 * burst},
                                         "cpu": {"median_cpu_s_by_task": {"render": 0.55},
                                                 "median_rss_mb_by_task": {"render": 180.0}}},
                             "floor": {"runs": runs,
                                       "cpu": {"median_cpu_s_by_task": {"noop_0": 0.5},
                                               "median_rss_mb_by_task": {"noop_0": 120.0}}},
                             "least_io": {"median_cpu_s_by_task": {"io_floor": 0.6}},
                             "export_to_floor_span": burst,
                             "task_cpu_to_noop": {**cpu, "io_floor": 1.2}}},
            "catchup": {"slots_measured": slots, "target_slots": 365,
                        "export_to_floor": catchup,
                        "exports": {"runs": {"span_s": 1200.0 * catchup}},
                        "floor": {"runs": {"span_s": 1200.0}}},
            "worker_rss_mb": {"worker-default": {"processes": 3, "rss": 610, "peak": 700}}}


def test_lighter_tasks_checks_pass_a_run_within_every_bar():
    checks = lighter_tasks_checks(_bench_result())
    assert [c["passed"] for c in checks] == [True] * 5
    assert checks[0]["value"] == {"slots_measured": 365, "ratio": 1.2}
    assert checks[1]["value"] == {"schedules": 40, "ratio": 1.1}


@pytest.mark.parametrize(("changes", "failing"), [
    ({"slots": 10}, "365-slot catch-up measured"),      # extrapolated figures never pass
    ({"catchup": 1.3}, "365-slot catch-up measured"),
    ({"companies": 39}, "burst of >= 40 schedules"),
    ({"burst": 1.26}, "burst of >= 40 schedules"),
    ({"cpu": {"render": 1.1, "publish": 1.21, "deliver": 1.0}}, "publish CPU"),
    ({"cpu": {"render": 1.1, "publish": 1.0}}, "deliver CPU"),  # not measured: not passed
])
def test_lighter_tasks_checks_fail_the_bar_that_is_missed(changes, failing):
    checks = lighter_tasks_checks(_bench_result(**changes))
    assert [c["check"] for c in checks if not c["passed"]] == [
        next(c["check"] for c in checks if c["check"].startswith(failing))]


def test_table_lists_burst_cpu_catchup_and_worker_memory():
    text = table(_bench_result())
    lines = text.splitlines()
    assert lines[0].split() == ["figure", "exports", "floor", "ratio"]
    assert any(line.startswith("burst: 40 runs, 1 worker(s), drain s") and
               line.split()[-3:] == ["110.0", "100.0", "1.1"] for line in lines)
    assert any("CPU s per task: render" in line and line.split()[-3:] == ["0.55", "0.5", "1.1"]
               for line in lines)
    assert any("CPU s per task: io_floor (least I/O, no export code)" in line and
               line.split()[-3:] == ["0.6", "0.5", "1.2"] for line in lines)
    assert any(line.startswith("catch-up 365 slots (measured), s") and
               line.split()[-3:] == ["1440.0", "1200.0", "1.2"] for line in lines)
    assert any(line.startswith("worker worker-default: RSS / peak MB") and
               line.split()[-2:] == ["610", "700"] for line in lines)


@pytest.mark.parametrize(("now", "expected"), [
    # After the day's slot: the newest due is today's, the bench's runs start yesterday.
    (datetime(2026, 12, 4, 23, 0, tzinfo=UTC), datetime(2026, 12, 3, 6, 0, tzinfo=UTC)),
    (datetime(2026, 12, 4, 6, 0, tzinfo=UTC), datetime(2026, 12, 3, 6, 0, tzinfo=UTC)),
    # Before it (00:00-05:59 UTC): the newest due is yesterday's, so one day earlier (the
    # 00:15 run of 5 Dec took the newest scheduled run's date: HTTP 409).
    (datetime(2026, 12, 5, 0, 15, tzinfo=UTC), datetime(2026, 12, 3, 6, 0, tzinfo=UTC)),
    (datetime(2026, 12, 5, 5, 59, tzinfo=UTC), datetime(2026, 12, 3, 6, 0, tzinfo=UTC)),
])
def test_daily_slot_one_day_back_is_never_the_newest_slot_due(now, expected):
    assert daily_slot(now, 6, 1) == expected
    assert daily_slot(now, 6, 3) == expected - timedelta(days=2)
