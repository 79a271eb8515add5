"""Catch-up, backfill and deadlines on a real scheduler (ADR 0006, issue 11 items 3, 4, 7).

catchup-co on the shared stack (see ``_catchup_fixtures``). While its missed daily slots (8; held
at their source until the on-time run has started) are recovered as an Airflow backfill, the
on-time slot of the same DAG must
start within 60 s and meet its deadline; a deadline miss shows in Browse → Deadlines while
catch-up runs do not; an operator's ``airflow backfill create`` over an old range exports
one artifact per slot.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from tests.system.scheduler._catchup_fixtures import (
    BACKFILLED,
    BATCH_DAG,
    BATCH_MISSED,
    BATCHED,
    COMPANY,
    MISSED,
    MISSER,
    ONTIME,
    CatchupStack,
    adjust_edit,
    catchup_stack_fixture,
)
from tests.system.soak.stack import now_utc, wait_for

START_BAR = timedelta(seconds=60)
CATCHUP_BUDGET = 2
OLD_FROM, OLD_TO = timedelta(days=10), timedelta(days=7)

catchup = pytest.fixture(scope="module", name="catchup")(catchup_stack_fixture)


def _t(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _day_slots(first: datetime, last: datetime, hour: int, minute: int) -> list[datetime]:
    day = first.replace(hour=hour, minute=minute, second=0, microsecond=0)
    day = day if day >= first else day + timedelta(days=1)
    out = []
    while day <= last:
        out.append(day)
        day += timedelta(days=1)
    return out


def _max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = cur = 0
    for _, step in events:
        cur += step
        peak = max(peak, cur)
    return peak


@pytest.fixture(scope="module")
def old_backfill(catchup: CatchupStack) -> dict:
    """`airflow backfill create` over 10–7 days ago on a recovery-none DAG, started as soon as
    the DAG is parsed (so it runs alongside the catch-up, sharing the catch-up budget)."""
    wait_for(lambda: catchup.api.call("GET", f"/api/v2/dags/{BACKFILLED}")[0] == 200, 120,
             interval=2, what=f"{BACKFILLED} to be parsed")
    now = now_utc()
    start, end = now - OLD_FROM, now - OLD_TO
    result = catchup.airflow("backfill", "create", "--dag-id", BACKFILLED,
                             "--from-date", start.isoformat(), "--to-date", end.isoformat())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {"slots": _day_slots(start, end, 3, 0), "created": now}


def test_on_time_slot_starts_within_60s_while_missed_slots_recover(catchup, old_backfill):
    try:
        _on_time_slot_starts_within_60s(catchup)
    finally:
        # Whatever happened, the backlog's reads go on: a failure here must not hold every
        # catch-up render at the gate for GATE_MAX_S and fail the next test too.
        catchup.gate.open()


def _on_time_slot_starts_within_60s(catchup: CatchupStack) -> None:
    slot = catchup.slot
    # The scheduler created yesterday's slot at once and its recover_missed the backfill.
    wait_for(lambda: len(catchup.runs(ONTIME)) >= MISSED, 120, interval=2,
             what=f"the {MISSED} missed slots to be queued")
    assert now_utc() < slot, "the catch-up was not under way before the on-time slot"

    def on_time_run():
        runs = [r for r in catchup.runs(ONTIME) if _t(r["logical_date"]) == slot]
        return runs[0] if runs and runs[0]["start_date"] else None

    run = wait_for(on_time_run, (slot - now_utc()).total_seconds() + 120, interval=1,
                   what="the on-time run to start")
    run_started = _t(run["start_date"]) - slot
    tis = catchup.api.ok("GET", f"/api/v2/dags/{ONTIME}/dagRuns/{run['dag_run_id']}"
                                "/taskInstances?task_id=resolve_window")["task_instances"]
    first_task = wait_for(lambda: catchup.api.ok(
        "GET", f"/api/v2/dags/{ONTIME}/dagRuns/{run['dag_run_id']}/taskInstances"
               "?task_id=resolve_window")["task_instances"][0]["start_date"], 120, interval=1,
        what="resolve_window to start")
    task_started = _t(first_task) - slot
    backlog = [r for r in catchup.runs(ONTIME) if r["run_type"] == "backfill"
               and r["state"] in ("queued", "running")]
    batches = [r for r in catchup.runs(BATCH_DAG) if r["state"] in ("queued", "running")]
    print(f"\non-time slot {slot:%H:%M:%S}: run started +{run_started.total_seconds():.1f} s, "
          f"resolve_window started +{task_started.total_seconds():.1f} s, "
          f"{len(backlog)} backfill runs and {len(batches)} batch runs still queued/running, "
          f"tis {len(tis)}")
    assert run_started <= START_BAR and task_started <= START_BAR
    assert backlog, "the backlog was already gone: the bar was not tested under catch-up"
    assert batches, "no batch was under way: the bar was not tested under a batched recovery"
    catchup.gate.open()

    done = wait_for(lambda: (r := on_time_run()) and r["state"] in ("success", "failed") and r,
                    300, interval=3, what="the on-time run to finish")
    assert done["state"] == "success"
    (ledger_run,) = [r for r in catchup.stack.ledger_runs()
                     if r["run_key"].endswith(f"/{slot:%Y-%m-%dT%H:%MZ}")
                     and r["schedule"].endswith("google-ads/primary")]
    assert ledger_run["deadline_status"] == "on_time", ledger_run
    print(f"on-time run delivered at {ledger_run['delivered_at_utc']} "
          f"(deadline {ledger_run['deadline_utc']})")


def test_a_deadline_miss_shows_in_browse_deadlines_and_catch_up_runs_do_not(catchup):
    slot = catchup.slot

    def missed() -> list[dict]:
        return catchup.api.ok("GET", f"/ui/dags/{MISSER}/dagRuns/~/deadlines?missed=true"
                                     "&limit=100")["deadlines"]

    # The deadline's own alert (ADR 0003), not the at-risk one at half of it (ADR 0020): both
    # show in Browse → Deadlines, told apart by their names.
    hits = wait_for(lambda: [d for d in missed() if d["dag_id"] == MISSER and (
        d["alert_name"] or "").startswith("delivered within")], 240, interval=3,
                    what="the facebook run's deadline miss in Browse → Deadlines")
    (miss,) = hits
    misser_runs = {r["dag_run_id"]: r for r in catchup.runs(MISSER)}
    assert _t(misser_runs[miss["dag_run_id"]]["logical_date"]) == slot
    assert _t(miss["deadline_time"]) == slot + timedelta(seconds=30)
    # Every deadline row of catchup-co (missed or not; the shared stack holds other modules')
    # belongs to a run created before its deadline: none for yesterday's catch-up runs, none
    # for backfill runs.
    # Asked DAG by DAG: other modules' rows (their modules run at the same time) could push
    # catchup-co's past a page of every DAG's.
    dags = [d["dag_id"] for d in catchup.api.ok(
        "GET", f"/api/v2/dags?limit=100&dag_id_pattern=__{COMPANY}__")["dags"]]
    assert {ONTIME, MISSER, BACKFILLED} <= set(dags), dags
    every = [d for dag in dags for d in catchup.api.ok(
        "GET", f"/ui/dags/{dag}/dagRuns/~/deadlines?limit=100")["deadlines"]]
    assert {(d["dag_id"], d["dag_run_id"]) for d in every if d["dag_id"] != BACKFILLED} <= {
        (d, r["dag_run_id"]) for d in (ONTIME, MISSER, BATCHED) for r in catchup.runs(d)
        if _t(r["logical_date"]) == slot}
    # adjust's newest 03:00 slot is scheduled when its DAG appears; run between 03:00 and its
    # 2 h deadline that run is on time and has its deadline row like any (CI, 3 Dec, 04:12 UTC).
    # Its backfill runs never have one.
    assert all(d["dag_run_id"].startswith("scheduled__") for d in every
               if d["dag_id"] == BACKFILLED)
    assert all(not d["dag_run_id"].startswith("backfill__") for d in every)
    # yesterday's catch-up run of the same DAG exists and raised no deadline
    assert any(_t(r["logical_date"]) == slot - timedelta(days=1) for r in misser_runs.values())


@pytest.mark.timeout(1200)  # its own 900 s ceiling below, over setup.cfg's 600 s
def test_all_missed_slots_exported_oldest_first_within_the_budget(catchup):
    slot = catchup.slot

    def finished():
        runs = [r for r in catchup.runs(ONTIME) if _t(r["logical_date"]) < slot]
        return runs if len(runs) == MISSED and all(
            r["state"] in ("success", "failed") for r in runs) else None

    catchup.gate.open()  # when this test runs alone
    started = time.monotonic()
    runs = wait_for(finished, 900, interval=5, what=f"the {MISSED} missed slots to be exported")
    print(f"\ncatch-up finished {time.monotonic() - started:.0f} s after the on-time checks")
    assert [r["state"] for r in runs] == ["success"] * MISSED
    backfills = [r for r in runs if r["run_type"] == "backfill"]
    assert len(backfills) == MISSED - 1  # yesterday's slot is the scheduled run
    by_start = sorted(backfills, key=lambda r: (r["start_date"], r["logical_date"]))
    assert [r["logical_date"] for r in by_start] == sorted(r["logical_date"] for r in backfills)
    peak = _max_overlap([(_t(r["start_date"]), _t(r["end_date"])) for r in backfills])
    assert peak <= CATCHUP_BUDGET
    # One announcing publish of the DAG at a time (ADR 0024): two at once raced Airflow's first
    # alias→asset link, and one was failed after publishing (this test, 4 Dec).
    publishes = catchup.api.ok("GET", f"/api/v2/dags/{ONTIME}/dagRuns/~/taskInstances"
                                      "?task_id=publish&limit=100")["task_instances"]
    assert len(publishes) >= MISSED
    assert _max_overlap([(_t(p["start_date"]), _t(p["end_date"])) for p in publishes]) == 1
    ledger = {r["run_key"]: r for r in catchup.stack.ledger_runs()
              if r["schedule"].endswith("google-ads/primary")}
    missed = [r for r in ledger.values() if r["slot_utc"] < f"{slot:%Y-%m-%dT%H:%M:%SZ}"]
    assert len(missed) == MISSED
    assert {len(r["artifacts"]) for r in missed} == {1}
    assert {r["deadline_status"] for r in missed} == {"late"}
    assert min(r["late_by_minutes"] for r in missed) > 0
    table = catchup.stack.exportctl("runs", "--company", "catchup-co").stdout
    oldest = min(missed, key=lambda r: r["slot_utc"])
    (row,) = [line for line in table.splitlines() if line.startswith(oldest["run_key"] + " ")]
    assert f" {oldest['late_by_minutes']} min " in row and oldest["deadline_utc"] in row


def test_backfill_create_over_an_old_range_exports_one_artifact_per_slot(catchup, old_backfill):
    slots = old_backfill["slots"]

    def done():
        runs = [r for r in catchup.runs(BACKFILLED) if r["run_type"] == "backfill"]
        return runs if len(runs) == len(slots) and all(
            r["state"] in ("success", "failed") for r in runs) else None

    runs = wait_for(done, 600, interval=5, what="the operator's backfill to finish")
    assert sorted(_t(r["logical_date"]) for r in runs) == slots
    assert {r["state"] for r in runs} == {"success"}
    renders = catchup.api.ok("GET", f"/api/v2/dags/{BACKFILLED}/dagRuns/~/taskInstances"
                                    "?task_id=render&limit=100")["task_instances"]
    assert {t["pool"] for t in renders if t["dag_run_id"].startswith("backfill__")} == {
        "export_catchup"}
    ledger = [r for r in catchup.stack.ledger_runs() if r["schedule"].endswith("adjust/primary")
              and r["trigger"] == "backfill"]
    assert sorted(r["slot_utc"] for r in ledger) == [f"{s:%Y-%m-%dT%H:%M:%SZ}" for s in slots]
    assert [[a["version"] for a in r["artifacts"]] for r in ledger] == [[1]] * len(slots)
    # Each slot ran with the config version in force for it (ADR 0005): before the edit the
    # window was 2 days, from it on 3 days, and the two versions are recorded apart.
    edit = adjust_edit(catchup.written_at)
    by_version: dict[str, set[int]] = {}
    for r in ledger:
        days = (_t(r["window_end_utc"]) - _t(r["window_start_utc"])).days
        assert days == (2 if _t(r["slot_utc"]) < edit else 3), (edit, r)
        by_version.setdefault(r["config_version"], set()).add(days)
    assert sorted(by_version.values(), key=min) == [{2}, {3}], by_version
    before = {r["run_key"]: (r["artifacts"], r["deliveries"]) for r in ledger}

    # The UI's backfill dialog (the same REST call), reprocessing completed runs (the oldest
    # slot, to keep the test short): the run is cleared and runs again, the period reports its
    # existing artifact, nothing is duplicated.
    wait_for(lambda: all(b["completed_at"] for b in catchup.api.ok(
        "GET", f"/api/v2/backfills?dag_id={BACKFILLED}")["backfills"]), 120, interval=3,
        what="the first backfill to be marked completed")
    again = catchup.api.ok("POST", "/api/v2/backfills", {
        "dag_id": BACKFILLED, "from_date": slots[0].isoformat(), "to_date": slots[0].isoformat(),
        "reprocess_behavior": "completed", "max_active_runs": 2})

    def redone():
        return catchup.api.ok("GET", f"/api/v2/backfills/{again['id']}")["completed_at"]

    wait_for(redone, 300, interval=3, what="the reprocessing backfill to finish")
    rerun = [r for r in catchup.runs(BACKFILLED) if r["run_type"] == "backfill"]
    assert {r["state"] for r in rerun} == {"success"}
    (cleared,) = [r for r in rerun if _t(r["logical_date"]) == slots[0]]
    assert _t(cleared["end_date"]) > _t(again["created_at"])  # it did run again
    assert len(catchup.runs(BACKFILLED)) == len(runs) + 1  # + the scheduled newest slot
    after = {r["run_key"]: (r["artifacts"], r["deliveries"]) for r in catchup.stack.ledger_runs()
             if r["run_key"] in before}
    assert after == before


def test_a_backfill_range_without_a_slot_creates_nothing_and_says_so(catchup):
    day = (now_utc() - timedelta(days=5)).replace(hour=4, minute=0, second=0, microsecond=0)
    before = len(catchup.runs(BACKFILLED))
    result = catchup.airflow("backfill", "create", "--dag-id", BACKFILLED, "--from-date",
                             day.isoformat(), "--to-date", (day + timedelta(hours=20)).isoformat())
    assert result.returncode == 1
    assert f"No runs to create for Dag {BACKFILLED}" in result.stdout + result.stderr
    assert len(catchup.runs(BACKFILLED)) == before


def test_every_schedules_asset_exists_before_its_first_publication(catchup):
    """The dag-processor creates each schedule's asset when it parses the DAG (deliver's inlet,
    ADR 0024): the secondaries (in force from 2030) never ran, and their assets are there.
    Created on the first publication instead, Airflow inserted it inside the task's state
    update, and two backfill runs of one new schedule publishing at once raced: one publish was
    failed after its artifact was published ("duplicate key … idx_asset_name_uri_unique" in
    the api-server's log, adjust's backfill, 4 Dec)."""
    schedules = {f"{COMPANY}/{channel}/{kind}" for channel in ("google-ads", "facebook", "tiktok", "adjust")
                 for kind in ("primary", "secondary")}
    assets = catchup.api.ok("GET", f"/api/v2/assets?name_pattern=export:{COMPANY}/&limit=50"
                            )["assets"]
    by_schedule = {a["name"].removeprefix("export:"): a for a in assets}
    assert set(by_schedule) == schedules, sorted(by_schedule)
    for schedule, asset in by_schedule.items():
        dag_id = f"data_export__{schedule.replace('/', '__')}"
        assert [(t["dag_id"], t["task_id"]) for t in asset["consuming_tasks"]] == [
            (dag_id, "deliver")], asset
        assert asset["uri"].endswith(f"/{COMPANY}/{schedule.split('/', 1)[1].replace('/', '__')}"
                                     ), asset


@pytest.mark.timeout(1500)  # a year of periods in make acceptance
def test_missed_slots_beyond_the_threshold_recover_in_batches_each_period_its_own_run(catchup):
    """ADR 0032: tiktok's BATCH_MISSED - 1 missed slots (more than the threshold, 8) are
    exported by runs of recovery_batch__catchup-co, oldest first, no backfill run at all; the
    ledger holds one run per period, each with artifact v1, its delivery and its window's
    rows, naming the batch that exported it."""
    import math

    import psycopg

    slot = catchup.slot
    catchup.gate.open()  # when this test runs alone
    wanted = [slot - timedelta(days=d) for d in range(BATCH_MISSED, 1, -1)]
    size = 50

    def finished():
        runs = catchup.api.ok("GET", f"/api/v2/dags/{BATCH_DAG}/dagRuns?limit=100"
                                     "&order_by=run_after")["dag_runs"]
        return runs if len(runs) == math.ceil(len(wanted) / size) and all(
            r["state"] in ("success", "failed") for r in runs) else None

    started = time.monotonic()
    runs = wait_for(finished, 1200, interval=5, what=f"the batches of {BATCHED}")
    print(f"\n{len(wanted)} periods in {len(runs)} batch(es) finished "
          f"{time.monotonic() - started:.0f} s after the gate opened")
    assert [r["state"] for r in runs] == ["success"] * len(runs)
    covered = [p for r in runs for p in r["conf"]["periods"]]
    assert covered == [f"{s:%Y-%m-%dT%H:%MZ}" for s in wanted]  # oldest first, each once
    assert all(r["note"].startswith("Batched recovery of catchup-co/tiktok/primary: ")
               for r in runs)
    assert [r for r in catchup.runs(BATCHED) if r["run_type"] == "backfill"] == []
    tis = catchup.api.ok("GET", f"/api/v2/dags/{BATCH_DAG}/dagRuns/~/taskInstances"
                                "?limit=100")["task_instances"]
    assert {(t["task_id"], t["pool"]) for t in tis} == {("export_periods", "export_catchup")}
    ledger = {r["slot_utc"]: r for r in catchup.stack.ledger_runs()
              if r["schedule"] == f"{COMPANY}/tiktok/primary"}
    batched = [ledger[f"{s:%Y-%m-%dT%H:%M:%SZ}"] for s in wanted]
    assert {r["trigger"] for r in batched} == {"batch"}
    assert {r["batch"].rsplit("/", 1)[-1] for r in batched} == {"export_periods"}
    assert [[a["version"] for a in r["artifacts"]] for r in batched] == [[1]] * len(wanted)
    assert {(d["state"], d["version"]) for r in batched for d in r["deliveries"]} == {
        ("acknowledged", 1)}
    assert [len(r["deliveries"]) for r in batched] == [1] * len(wanted)
    with psycopg.connect(catchup.gate.dsn) as conn:
        for r in batched:
            (rows,) = conn.execute(
                "SELECT count(*) FROM catchupco_rows WHERE company_id = %s AND updated_at >= "
                "%s::timestamptz AT TIME ZONE 'UTC' AND updated_at < %s::timestamptz AT TIME "
                "ZONE 'UTC'", (COMPANY, r["window_start_utc"], r["window_end_utc"])).fetchone()
            assert r["artifacts"][0]["rows"] == rows > 0, r["run_key"]
