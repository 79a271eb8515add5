"""Clearing and retrying any task on a real scheduler leaves one run, one artifact version and
one delivery per destination (issue 11, items 2 and "Bad input").

One stack, one scheduled run per DAG (``recovery: latest`` runs the latest slot once; a later
slot that falls due mid-test runs beside it and is not counted), then
clears in sequence — alone, with downstream, with upstream, after a failure, through the REST
API and ``airflow tasks clear`` — in three lanes (three DAGs) at once, checking the ledger's
counts after each. Each company holds
one export, so the per-company render limit (2) never makes a render wait."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

import sqlalchemy as sa

from tests.system.scheduler.harness import SchedulerStack, SlotClock, company_file, widget_export
from tests.system.soak.stack import wait_for

DAILY = "widget_export__clearco__daily"
WATERMARK = "widget_export__markco__daily"
RESTATE = "widget_export__restco__daily"
FLAKY = "widget_export__flakyco__daily"
# restco's restatement: a run of its own (ADR 0007), started at once (grace 0m).
RESTATEMENT = "restatement__restco"
ALL_DAGS = (DAILY, WATERMARK, RESTATE, FLAKY)
COUNTED = ("runs", "artifacts", "deliveries", "delivery_attempts")


def _company(company: str, hour: int, **fields) -> dict:
    """One daily export whose failed tries Airflow retries 4-8 s later (the default first
    delay is 10 minutes): the export's own ``retries``, not the stack's."""
    return company_file(company, [widget_export("daily", export_hour=hour, company=company,
                                                retries={"delay": "4s"}, **fields)])


def COMPANIES(clock: SlotClock) -> dict[str, dict]:  # noqa: N802 (the fixture's name for it)
    hour = clock.hour
    return {
        "clearco": _company("clearco", hour, destinations=["box-a", "box-b"]),
        "markco": _company("markco", hour,
                           late_data={"policy": "wait_for_watermark", "grace": "0m"}),
        "restco": _company("restco", hour, late_data={"policy": "restate", "grace": "0m"}),
        # its publish is retried; its company is removed at the end
        "flakyco": _company("flakyco", hour),
    }


def prepare_stack(stack: SchedulerStack) -> None:
    """flakyco's first publish meets a storage error: a file where its artifact directory goes."""
    stack.artifact_root.mkdir(parents=True, exist_ok=True)
    (stack.artifact_root / "flakyco").write_text("in the way of the artifact directory")


def _counts(stack: SchedulerStack) -> dict[str, int]:
    """The counts of the runs of the module's newest due slot."""
    counts = stack.counts(slot=stack.clock.newest)
    return {k: counts[k] for k in COUNTED}


def _run_id(stack: SchedulerStack, dag_id: str) -> str:
    """The DAG's scheduled run of the newest due slot (the one every test clears); restco's
    restatement run of it."""
    newest = stack.clock.newest
    restated = f"restate__restco_daily_{newest:%Y-%m-%dT%H:%M}Z"
    (run,) = [r for r in stack.dag_runs(dag_id)
              if (r["run_type"] == "scheduled" and r["logical_date"]
                  and datetime.fromisoformat(r["logical_date"]) == newest)
              or (dag_id == RESTATEMENT and r["dag_run_id"] == restated)]
    return run["dag_run_id"]


def _newest_runs(stack: SchedulerStack) -> list[dict]:
    """The ledger's runs of the newest due slot."""
    return [r for r in stack.ledger_runs()
            if r["slot_utc"] == f"{stack.clock.newest:%Y-%m-%dT%H:%M:%SZ}"]


def test_every_scheduled_run_succeeds_and_a_publish_retry_after_a_storage_error_publishes_once(
        scheduler_stack: SchedulerStack):
    stack = scheduler_stack
    stack.wait_for_dags(*ALL_DAGS)
    # The injected storage error fails publish's first try; Airflow retries it 8-16 s later.
    stack.wait_for_task(FLAKY, stack.wait_for_run_id(FLAKY), "publish", states=("up_for_retry",),
                        timeout=240, interval=0.5)
    (stack.artifact_root / "flakyco").unlink()  # the storage is back
    for dag_id in ALL_DAGS:
        stack.wait_for_run(dag_id, timeout=240)
    # restco's restatement run is the one named after its run key.
    wait_for(lambda: any(r["dag_run_id"].startswith("restate__restco_")
                         for r in stack.dag_runs(RESTATEMENT)), 240, 1, "restco's restatement run")
    wait_for(lambda: _run_id(stack, RESTATEMENT), 60, 1, "restco's restatement run of its slot")
    stack.wait_for_run(RESTATEMENT, _run_id(stack, RESTATEMENT), timeout=240)

    publish = stack.task_instance(FLAKY, _run_id(stack, FLAKY), "publish")
    assert publish["state"] == "success" and publish["try_number"] >= 2, publish
    runs = {r["run_key"].split("/")[0]: r for r in _newest_runs(stack)}
    assert sorted(runs) == ["clearco", "flakyco", "markco", "restco"]
    for run in runs.values():
        assert run["state"] == "ready", run
        assert [a["version"] for a in run["artifacts"]] == [1], run
        assert {d["state"] for d in run["deliveries"]} == {"acknowledged"}, run
    assert len(runs["clearco"]["deliveries"]) == 2
    assert _counts(stack) == {"runs": 4, "artifacts": 4, "deliveries": 5,
                              "delivery_attempts": 5}
    assert stack.counts(slot=stack.clock.newest)["staging_objects"] == 0


def test_every_line_of_ours_in_the_task_logs_carries_its_run_as_fields(
        scheduler_stack: SchedulerStack):
    """Issue 22 item 5, read as a user would, through the REST API: on the shared stack
    (EXPORT_LOG_FORMAT=json) each record of ours (loggers export_lib.* and export_airflow.*) in
    every try of every task of the runs above — flakyco's failed publish, markco's sensor,
    restco's restatement run — has company, schedule, run and period as keys of its own, with
    the run's values, and status, a run state (render's "N rows, N bytes" lines: rendering, the
    state render leaves the run in); its message is text, not JSON; Airflow's own records get none of them."""
    from export_lib.ledger.states import RunState

    stack = scheduler_stack  # the runs the first test waited for
    newest = stack.clock.newest
    periods = {r["company"]: r["period"] for r in _newest_runs(stack)}
    silent = []
    for dag_id in (*ALL_DAGS, RESTATEMENT):
        run_id = _run_id(stack, dag_id)
        company = "restco" if dag_id == RESTATEMENT else dag_id.split("__")[1]
        fields = {"company": company, "schedule": f"{company}/daily",
                  "run": f"{company}/daily/{newest:%Y-%m-%dT%H:%MZ}", "period": periods[company]}
        for ti in stack.task_instances(dag_id, run_id):
            for attempt in range(1, ti["try_number"] + 1):
                records = stack.api.ok(
                    "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                           f"{ti['task_id']}/logs/{attempt}?map_index={ti['map_index']}"
                           "&full_content=true")["content"]
                ours = [r for r in records
                        if str(r.get("logger")).startswith(("export_lib.", "export_airflow."))]
                where = (company, ti["task_id"], ti["map_index"], attempt)
                assert [(r["event"], {k: r.get(k) for k in fields}) for r in ours] == [
                    (r["event"], fields) for r in ours], where
                assert [r["event"] for r in ours if r["event"].lstrip().startswith("{")] == [], \
                    where
                assert [(r["event"], r.get("status")) for r in ours
                        if r.get("status") not in set(RunState)] == [], where
                if ti["task_id"] == "render":  # the engine's, the stage's, the operator's
                    rendered = [r["status"] for r in ours if " rows, " in r["event"]]
                    assert rendered == ["rendering"] * 3, (where, rendered)
                assert [r for r in records if r not in ours and "company" in r] == [], where
                if not ours:
                    silent.append(where)
                elif (company, ti["task_id"]) == ("clearco", "render"):
                    print("a render record of ours:", json.dumps(ours[-1]))
    # Every try logged lines of ours but the publish that met the storage error (it failed
    # before its first line), so the checks above are not vacuous.
    assert silent == [("flakyco", "publish", -1, 1)]


# (what, task ids, downstream, upstream); a task id is a name (every map index) or (name, index)
LANES = {  # balanced: each lane takes ~45 s on 2 busy cores
    DAILY: [
        ("render alone after publish", ["render"], False, False),
        ("deliver[1] alone", [("deliver", 1)], False, False),
        ("resolve_window alone with `airflow tasks clear`", "cli:^resolve_window$", False, False),
        ("render with downstream", ["render"], True, False),
        ("publish with downstream", ["publish"], True, False),
    ],
    WATERMARK: [
        ("wait_for_watermark alone", ["wait_for_watermark"], False, False),
        ("wait_for_watermark with upstream", ["wait_for_watermark"], False, True),
        ("wait_for_watermark with downstream", ["wait_for_watermark"], True, False),
        ("deliver with upstream (the whole run)", ["deliver"], False, True),
        ("publish after it failed (marked failed, cleared only_failed)", "failed:publish",
         False, False),
    ],
    # restco's export run, then its restatement run (one lane: both move the same ledger run).
    RESTATE: [
        ("publish alone (the reported IllegalTransitionError)", ["publish"], False, False),
        ("restate_later alone (the restatement run exists)", ["restate_later"], False, False),
        ("render with upstream", ["render"], False, True),
        ("publish with upstream", ["publish"], False, True),
        ("restate_render alone", ["restate_render"], False, False, RESTATEMENT),
        ("restate_publish alone", ["restate_publish"], False, False, RESTATEMENT),
        ("restate_deliver alone", ["restate_deliver"], False, False, RESTATEMENT),
        ("restate_due with downstream", ["restate_due"], True, False, RESTATEMENT),
    ],
}


def _clear(stack: SchedulerStack, dag_id: str, run_id: str, tasks, downstream: bool,
           upstream: bool) -> str:
    """Act; returns the run to wait for."""
    if isinstance(tasks, str) and tasks.startswith("cli:"):
        slot = run_id.split("__", 1)[1]
        stack.airflow("tasks", "clear", dag_id, "-t", tasks[4:], "-s", slot, "-e", slot, "-y")
    elif isinstance(tasks, str) and tasks.startswith("failed:"):
        stack.mark(dag_id, run_id, tasks[7:], "failed")
        cleared = stack.clear(dag_id, run_id, [tasks[7:]], only_failed=True)
        assert cleared == [tasks[7:]]
    else:
        stack.clear(dag_id, run_id, tasks, downstream=downstream, upstream=upstream)
    return run_id


def test_clearing_any_task_alone_or_with_downstream_or_upstream_changes_no_count(
        scheduler_stack: SchedulerStack):
    stack = scheduler_stack
    before = _counts(stack)
    problems: list[str] = []
    done: list[str] = []

    def lane(lane_dag: str) -> None:
        for what, tasks, downstream, upstream, *other in LANES[lane_dag]:
            dag_id = other[0] if other else lane_dag
            run_id = _run_id(stack, dag_id)
            started = time.monotonic()
            try:
                acted_on = _clear(stack, dag_id, run_id, tasks, downstream, upstream)
                stack.wait_for_clear(dag_id, acted_on, timeout=150)
                after = _counts(stack)
                if after != before:
                    problems.append(f"{dag_id}: {what}: counts {before} -> {after}")
                done.append(f"{dag_id}: {what}: {time.monotonic() - started:.0f} s")
            except AssertionError as exc:
                problems.append(f"{dag_id}: {what}: {exc}")
                return

    threads = [threading.Thread(target=lane, args=(dag_id,)) for dag_id in LANES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    print("\n".join(done))
    assert not problems, "\n\n".join(problems)
    assert len(done) == sum(len(steps) for steps in LANES.values())
    counts = stack.counts(slot=stack.clock.newest)
    assert counts["staging_objects"] == 0
    for run in _newest_runs(stack):
        assert (run["state"], [a["version"] for a in run["artifacts"]]) == ("ready", [1]), run


def test_clearing_a_deliver_task_whose_delivery_gave_up_or_was_refused_requeues_and_delivers_it(
        scheduler_stack: SchedulerStack):
    """Whatever made it exhausted or refused (here: the record says so and the file is gone),
    a clear of its deliver task is the operator's decision: requeued (recorded with who and
    why), then delivered once."""
    stack = scheduler_stack
    run_id = _run_id(stack, DAILY)
    run_key = next(r["run_key"] for r in _newest_runs(stack) if r["run_key"].startswith("clearco"))
    ledger = stack.ledger()
    gave_up = {"box-a": ("refused", "owner no longer authorised"),
               "box-b": ("exhausted", "disk full")}
    with ledger.engine.begin() as conn:
        for dest, (state, error) in gave_up.items():
            conn.execute(sa.text(
                "UPDATE deliveries SET state = :s, last_error = :e, receipt = NULL, "
                "acknowledged_at = NULL WHERE run_key = :k AND destination_id = :d"),
                {"s": state, "e": error, "k": run_key, "d": dest})
    slot_files = f"*slot-{stack.clock.newest:%Y%m%dT%H%MZ}*"
    for dest in gave_up:
        for path in (stack.outbox / "clearco" / "daily" / dest).glob(slot_files):
            path.unlink()
    before = _counts(stack)

    stack.clear(DAILY, run_id, [("deliver", 0), ("deliver", 1)])
    stack.wait_for_clear(DAILY, run_id)

    from export_lib.pipeline import operator_actions

    actions = sorted(a["detail"] for a in operator_actions(ledger, run_key))
    assert len(actions) == 2, actions
    for detail, (index, dest) in zip(actions, enumerate(sorted(gave_up)), strict=True):
        state, error = gave_up[dest]
        assert detail.startswith(f"operator action: requeued delivery dlv-{dest}-"), detail
        assert (f"(was {state} after 1 attempt(s); last error: {error}) by airflow:"
                f"{DAILY}/{run_id}/deliver[{index}]/try") in detail, detail
        assert detail.endswith(": the deliver task was run again (cleared) in Airflow")
    (run,) = [r for r in stack.ledger_runs() if r["run_key"] == run_key]
    assert {d["destination"]: d["state"] for d in run["deliveries"]} == {
        "box-a": "acknowledged", "box-b": "acknowledged"}
    for dest in gave_up:
        assert len(list((stack.outbox / "clearco" / "daily" / dest).glob(f"{slot_files}.csv"))) == 1
    assert _counts(stack) == {**before, "delivery_attempts": before["delivery_attempts"] + 2}


def test_a_task_of_a_removed_company_fails_in_one_line_and_exports_nothing(
        scheduler_stack: SchedulerStack):
    stack = scheduler_stack
    run_id = _run_id(stack, FLAKY)
    outbox = stack.outbox / "flakyco"
    slot_files = f"*slot-{stack.clock.newest:%Y%m%dT%H%MZ}*"
    delivered = sorted(p.name for p in outbox.rglob(slot_files))
    before = _counts(stack)

    stack.remove_company("flakyco")  # the loader stays: it is what Airflow parses
    # Wait for the dag-processor's re-parse: without the stand-ins it would mark the DAG stale
    # and the cleared task would sit queued forever.
    wait_for(lambda: "removed-company" in {
        t["name"] for t in stack.api.ok("GET", f"/api/v2/dags/{FLAKY}")["tags"]},
        timeout=120, interval=3, what=f"the re-parse of {FLAKY} after its company was removed")
    stack.clear(FLAKY, run_id, ["render"], downstream=True)
    render = stack.wait_for_task(FLAKY, run_id, "render", states=("failed",), timeout=120)

    log = stack.task_log(FLAKY, run_id, "render")
    expected = ("company 'flakyco' was removed from the config (dags/config/flakyco.yaml is "
                "gone): this run is not rendered, published or delivered; restore "
                "dags/config/flakyco.yaml to export it")
    assert [line.strip() for line in log.splitlines() if "flakyco.yaml" in line] == [
        f"AirflowFailException: {expected}"], log
    assert render["try_number"] == 2  # failed at once: no retry
    states = stack.task_states(FLAKY, run_id)
    assert states["publish"] in ("upstream_failed", None), states
    assert _counts(stack) == before
    assert sorted(p.name for p in outbox.rglob(slot_files)) == delivered
