"""Acceptance (issue 13): a 3-day outage of a schedule, then ``exportctl audit`` on a real
scheduler: every missed slot ends exported (ledger and files) or recorded with its reason, per
the recovery policy; a second audit changes nothing.

The outage: both schedules start (``effective_from``) three days before their newest due slot,
and ``catchup: {lookback: 0h}`` keeps ``recover_missed`` from looking back, so the
scheduler runs only the newest due slot and the older ones never get a run, as after an outage
that recover_missed did not cover. ``audit-each/daily`` (recovery each): 3 missed daily slots,
backfilled through the REST API. ``audit-latest/hourly`` (recovery latest): ~71 missed hourly
slots, every one recorded skipped as superseded by the newest.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.system.scheduler.harness import SlotClock, company_file, widget_export
from tests.system.soak.stack import wait_for

EACH, LATEST = "widget_export__audit-each__daily", "widget_export__audit-latest__hourly"
HAND = "widget_export__audit-hand__daily"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Outage:
    """The module's slots, from its clock: the daily newest due slot and the 3 days before it,
    the hourly newest due slot and its 3 days."""

    clock: SlotClock

    @property
    def newest(self) -> datetime:
        return self.clock.newest

    @property
    def daily_from(self) -> datetime:
        return self.newest - timedelta(days=3)

    @property
    def hourly_newest(self) -> datetime:
        return self.clock.now_hour

    @property
    def hourly_from(self) -> datetime:
        return self.hourly_newest - timedelta(days=3)


# No look back: recover_missed leaves the older slots alone, as after an outage it did not
# cover; a failed try is retried 5 s later.
OUTAGE = {"catchup": {"lookback": "0h"}, "retries": {"delay": "5s"}}


def COMPANIES(clock: SlotClock) -> dict[str, dict]:  # noqa: N802 (the fixture's name for it)
    outage = Outage(clock)
    return {
        "audit-each": company_file("audit-each", [widget_export(
            "daily", export_hour=clock.hour, company="audit-each", recovery="each",
            effective_from=_iso(outage.daily_from), **OUTAGE)]),
        # Catch-up delivers its 4 days by itself; then its hour is moved by hand (last test).
        "audit-hand": company_file("audit-hand", [widget_export(
            "daily", export_hour=clock.hour, company="audit-hand", recovery="each",
            effective_from=_iso(outage.daily_from), catchup={"lookback": "72h"},
            retries={"delay": "5s"})]),
        "audit-latest": company_file("audit-latest", [widget_export(
            "hourly", export_hour=0, interval_hours=1, company="audit-latest",
            recovery="latest", window={"kind": "interval"},
            effective_from=_iso(outage.hourly_from), **OUTAGE)]),
    }


def _ledger(stack, outage: Outage, schedule: str) -> dict[str, dict]:
    """The schedule's runs up to the module's newest due slot, by slot: a slot that falls due
    while the module runs (every hour for the hourly schedule; the daily one with
    EXPORT_TEST_HOURS_AHEAD=1) is the scheduler's own, not the audit's business."""
    newest = _iso(outage.newest if schedule == "audit-each/daily" else outage.hourly_newest)
    return {r["slot_utc"]: r for r in stack.ledger_runs()
            if r["schedule"] == schedule and r["slot_utc"] <= newest}


def _skipped(stack, outage: Outage) -> set[tuple[str, str]]:
    return {(r["run_key"], r["reason"])
            for r in _ledger(stack, outage, "audit-latest/hourly").values()
            if r["state"] == "skipped"}


# Every audit names this module's companies: other modules run on the shared stack at the
# same time, and an audit of the whole stack would backfill their missed slots.
AUDITED = ("audit-each", "audit-hand", "audit-latest")


def _audit(stack, outage: Outage, *extra: str) -> str:
    """``exportctl audit --company C`` of each of this module's companies, their outputs
    one after the other."""
    return "\n".join(stack.exportctl("audit", "--company", company, "--since",
                                     _iso(outage.daily_from - timedelta(days=1)), *extra).stdout
                     for company in AUDITED)


def _audit_json(stack, since: datetime, *extra: str) -> dict:
    """The ``--json`` audits of this module's companies as one: actions and records
    concatenated, changes summed, each company's summary."""
    results = [json.loads(stack.exportctl("audit", "--company", company, "--since", _iso(since),
                                          "--json", *extra).stdout) for company in AUDITED]
    return {"actions": [a for r in results for a in r["actions"]],
            "changed": sum(r["changed"] for r in results),
            "recorded": [x for r in results for x in r["recorded"]],
            "summaries": [r["summary"] for r in results]}


def _file_slots(stack, company: str = "audit-each") -> Counter[datetime]:
    """How many files ``company``'s daily outbox holds per slot (``…slot-20261202T0600Z…``)."""
    names = (p.name for p in (stack.outbox / company / "daily" / "box").glob("*.csv"))
    return Counter(datetime.strptime(re.search(r"slot-(\d{8}T\d{4}Z)", n)[1], "%Y%m%dT%H%MZ"
                                     ).replace(tzinfo=UTC) for n in names)


def test_an_outage_is_recovered_by_the_audit_and_a_second_audit_changes_nothing(
        scheduler_stack, clock):
    stack, outage = scheduler_stack, Outage(clock)
    NEWEST, HOURLY_FROM = outage.newest, outage.hourly_from  # noqa: N806
    stack.wait_for_dags(EACH, LATEST)
    first_runs = {d: stack.wait_for_run_id(d) for d in (EACH, LATEST)}
    for dag_id, run_id in first_runs.items():  # the newest due slot runs, the older never did
        stack.wait_for_task(dag_id, run_id, "resolve_window", timeout=240)
    assert list(_ledger(stack, outage, "audit-each/daily")) == [_iso(NEWEST)]

    out = _audit(stack, outage)
    missed = [NEWEST - timedelta(days=d) for d in (3, 2, 1)]
    for slot in missed:
        assert f"backfill      audit-each/daily/{slot:%Y-%m-%dT%H:%MZ}  recovery=each" in out
    assert "skip          audit-latest/hourly/" in out
    assert "superseded by a later slot under recovery=latest" in out
    assert f"backfill      {EACH}: backfill" in out and "runs 3 slot(s)" in out, out

    def backfilled():
        runs = [r for r in stack.dag_runs(EACH) if r["run_type"] == "backfill"]
        return runs if len(runs) == 3 and all(r["state"] in ("success", "failed")
                                              for r in runs) else None

    runs = wait_for(backfilled, 300, interval=3, what="the 3 backfill runs to finish")
    for dag_id, run_id in first_runs.items():
        stack.wait_for_run(dag_id, run_id, timeout=120)
    assert {r["state"] for r in runs} == {"success"}
    assert sorted(datetime.fromisoformat(r["logical_date"]) for r in runs) == missed

    each = _ledger(stack, outage, "audit-each/daily")
    assert sorted(each) == [_iso(s) for s in (*missed, NEWEST)]
    assert {r["state"] for r in each.values()} == {"ready"}
    assert {d["state"] for r in each.values() for d in r["deliveries"]} == {"acknowledged"}

    # One file per slot: the 3 missed, the newest, and any later slot that fell due while the
    # module ran (the scheduler's own on-time run, once it finished).
    def files_settled() -> Counter[datetime] | None:
        later = [r for r in stack.dag_runs(EACH) if r["run_type"] == "scheduled"
                 and datetime.fromisoformat(r["logical_date"]) > NEWEST]
        if any(r["state"] not in ("success", "failed") for r in later):
            return None
        files = _file_slots(stack)
        wanted = {*missed, NEWEST, *(datetime.fromisoformat(r["logical_date"]) for r in later)}
        return files if set(files) == wanted else None

    files = wait_for(files_settled, 120, interval=2,
                     what="one file per exported slot in audit-each/daily's outbox")
    assert set(files.values()) == {1}, files
    assert all(s == NEWEST + timedelta(days=1) for s in files if s > NEWEST), files

    latest = _ledger(stack, outage, "audit-latest/hourly")
    outcomes = [latest[_iso(HOURLY_FROM + timedelta(hours=h))] for h in range(72)]
    # every hourly slot of the 3 days has an outcome: the newest exported, the rest skipped
    skipped = [r for r in outcomes if r["state"] == "skipped"]
    assert len(skipped) >= 71 and {r["state"] for r in outcomes} <= {"skipped", "ready"}
    assert all(r["reason"].startswith("superseded by a later slot under recovery=latest")
               and r["trigger"] == "audit" for r in skipped)

    recorded = _skipped(stack, outage)
    result = _audit_json(stack, outage.daily_from - timedelta(days=1))
    assert result["changed"] == 0 and result["recorded"] == [], result
    assert all(s.startswith("nothing changed") for s in result["summaries"]), result
    assert _ledger(stack, outage, "audit-each/daily") == each
    assert _skipped(stack, outage) == recorded
    assert len([r for r in stack.dag_runs(EACH) if r["run_type"] == "backfill"]) == 3


def test_moving_the_export_hour_sends_no_delivered_period_again(scheduler_stack, clock,
                                                                tmp_path):
    """issue 22 item 2 on the running stack, after the test above delivered four periods of
    audit-each/daily: the hour moved by hand without effective_from is refused by validate
    with the lines to add; ``exportctl reschedule --apply`` moves it; the DAG's next run is at
    the new hour, the audit changes nothing and no period has a second file."""
    stack, outage = scheduler_stack, Outage(clock)
    config = stack.config_dir / "audit-each.yaml"
    before = config.read_text()
    # 2 h later, or 2 h earlier when later crosses midnight: 22:00 → 00:00 would leave the
    # period of today's 22:00 slot to no slot, so the switch waits a day and the next run is
    # still today's 22:00 (export_lib/pipeline/reschedule.py, _without_hole; CI 6 Dec 10:40).
    new_hour = clock.hour + 2 if clock.hour < 22 else clock.hour - 2
    assert f"  export_hour: {clock.hour}\n" in before
    # The hand edit is validated in a copy of the directory: written into the stack's own
    # directory, the dag-processor could parse it before it is undone, and the DAG would take
    # the new hour's past slot as its next run (CI 3 Dec 04:45) — a moved slot whose day went
    # out is skipped as delivered (tests/integration/pipeline/test_timing_change.py), but the
    # wait for the next run below would read that stale one.
    edited = tmp_path / "edited"
    shutil.copytree(stack.config_dir, edited, ignore=shutil.ignore_patterns("__pycache__"))
    (edited / "audit-each.yaml").write_text(before.replace(
        f"  export_hour: {clock.hour}\n", f"  export_hour: {new_hour}\n", 1))
    refused = stack.exportctl("validate", str(edited), check=False)
    assert refused.returncode == 1, refused.stdout
    assert (f"the timing of audit-each/daily changed (export_hour {clock.hour} → {new_hour}) "
            "but it already ran under the old timing") in refused.stdout, refused.stdout
    assert f"history entry '- {{export_hour: {clock.hour}, effective_from: " in refused.stdout
    assert config.read_text() == before

    files_before = _file_slots(stack)
    moved = stack.exportctl("reschedule", "audit-each/daily", "--config", "dags/config",
                            "--export-hour", str(new_hour), "--apply", "--json")
    plan = json.loads(moved.stdout)
    assert plan["changes"] == {"export_hour": {"old": clock.hour, "new": new_hour}}
    assert stack.validate_errors() == []
    first_new = datetime.fromisoformat(plan["new_next"][0].replace("Z", "+00:00"))
    assert first_new.hour == new_hour and first_new > datetime.now(UTC)
    stack._touch_loader("audit-each")  # the dag-processor re-parses it within seconds

    def next_run() -> datetime | None:
        dag = stack.api.ok("GET", f"/api/v2/dags/{EACH}")
        nxt = dag.get("next_dagrun_logical_date")
        return datetime.fromisoformat(nxt) if nxt and datetime.fromisoformat(
            nxt).hour == new_hour else None

    assert wait_for(next_run, 120, interval=2, what=f"{EACH}'s next run at {new_hour}:00") == \
        first_new
    audit = _audit_json(stack, outage.daily_from - timedelta(days=1), "--dry-run")
    assert [a for a in audit["actions"] if a["schedule"] == "audit-each/daily"] == [], audit
    assert audit["changed"] == 0, audit
    files = _file_slots(stack)
    assert set(files.values()) == {1} and set(files) >= set(files_before), files


def _next_run(stack, dag_id: str, wanted: datetime) -> datetime | None:
    """The DAG's next scheduled run once the dag-processor has re-parsed the edit."""
    nxt = stack.api.ok("GET", f"/api/v2/dags/{dag_id}").get("next_dagrun_logical_date")
    return wanted if nxt and datetime.fromisoformat(nxt) == wanted else None


def test_an_interval_and_a_timezone_change_follow_on_the_running_stack(scheduler_stack, clock):
    """issue 22 item 2, the other timing keys on the running stack: audit-latest's hourly
    export every 4 h (like 6 → 4), then audit-each's daily export moved to New York time
    (after the hour move above): each DAG's next run is the plan's first new slot, validate
    passes, the audit plans nothing for either, and no period has two ready runs."""
    stack, outage = scheduler_stack, Outage(clock)
    for schedule, dag_id, company, change in (
            ("audit-latest/hourly", LATEST, "audit-latest", ("--interval-hours", "4")),
            ("audit-each/daily", EACH, "audit-each", ("--timezone", "America/New_York"))):
        plan = json.loads(stack.exportctl("reschedule", schedule, "--config", "dags/config",
                                          *change, "--apply", "--json").stdout)
        key = change[0].removeprefix("--").replace("-", "_")
        assert set(plan["changes"]) == {key}, plan
        assert stack.validate_errors() == []
        first = datetime.fromisoformat(plan["new_next"][0].replace("Z", "+00:00"))
        stack._touch_loader(company)
        wait_for(lambda d=dag_id, f=first: _next_run(stack, d, f), 120, interval=2,
                 what=f"{dag_id}'s next run at the plan's first new slot {plan['new_next'][0]}")
    audit = _audit_json(stack, outage.daily_from - timedelta(days=1), "--dry-run")
    assert [a for a in audit["actions"] if a["action"] != "skip"] == [], audit
    for schedule in ("audit-each/daily", "audit-latest/hourly"):
        windows = [(r["window_start_utc"], r["window_end_utc"]) for r in stack.ledger_runs()
                   if r["schedule"] == schedule and r["state"] == "ready"]
        assert len(windows) == len(set(windows)), (schedule, windows)


def test_a_hand_edit_of_the_export_hour_sends_no_delivered_period_again(scheduler_stack, clock):
    """issue 22's acceptance, by hand: audit-hand/daily's catch-up delivered its days; then its
    ``export_hour`` is moved 2 h in its YAML on the running stack, without ``effective_from``.
    ``exportctl validate`` refuses the file with the line to add, and the DAG takes the edit
    as written (ADR 0005): the scheduler runs the new hour's latest past slot and
    ``recover_missed`` looks back at the new hour's slots. Whatever they find, no period is
    exported twice (a moved slot whose day went out is recorded skipped, with the reason), no
    destination gets a second file of a day, the next run is at the new hour, and the gap audit
    plans nothing for the schedule."""
    stack = scheduler_stack

    def delivered() -> dict[str, dict] | None:
        runs = [r for r in stack.dag_runs(HAND)]
        ready = {r["slot_utc"]: r for r in stack.ledger_runs()
                 if r["schedule"] == "audit-hand/daily" and r["state"] == "ready"}
        settled = runs and all(r["state"] in ("success", "failed") for r in runs)
        return ready if settled and len(ready) >= 3 else None

    before = wait_for(delivered, 300, interval=3, what="audit-hand's catch-up to deliver 3 days")
    assert {d["state"] for r in before.values() for d in r["deliveries"]} == {"acknowledged"}
    files_before = _file_slots(stack, "audit-hand")
    assert set(files_before.values()) == {1} and len(files_before) == len(before), files_before
    known = {r["dag_run_id"] for r in stack.dag_runs(HAND)}

    config = stack.config_dir / "audit-hand.yaml"
    text = config.read_text()
    new_hour = (clock.hour + 2) % 24
    config.write_text(text.replace(f"  export_hour: {clock.hour}\n",
                                   f"  export_hour: {new_hour}\n", 1))
    refused = "\n".join(stack.validate_errors())  # only its own lines: see validate_errors
    assert Path(refused.split(": ", 1)[0]).name == "audit-hand.yaml", refused
    assert (f"the timing of audit-hand/daily changed (export_hour {clock.hour} → {new_hour}) "
            "but it already ran under the old timing") in refused, refused
    stack._touch_loader("audit-hand")

    def moved() -> datetime | None:
        nxt = stack.api.ok("GET", f"/api/v2/dags/{HAND}").get("next_dagrun_logical_date")
        when = datetime.fromisoformat(nxt) if nxt else None
        new_runs = [r for r in stack.dag_runs(HAND) if r["dag_run_id"] not in known]
        settled = new_runs and all(r["state"] in ("success", "failed") for r in new_runs)
        return when if (when and when.hour == new_hour and when > datetime.now(UTC)
                        and settled) else None

    next_run = wait_for(moved, 240, interval=3,
                        what=f"{HAND}'s run at {new_hour}:00 to finish and its next run set")
    assert next_run - datetime.now(UTC) <= timedelta(days=1)
    new_runs = [r for r in stack.dag_runs(HAND) if r["dag_run_id"] not in known]
    assert {r["state"] for r in new_runs} == {"success"}, new_runs

    rows = [r for r in stack.ledger_runs() if r["schedule"] == "audit-hand/daily"]
    ready = [r for r in rows if r["state"] == "ready"]
    windows = [(r["window_start_utc"], r["window_end_utc"]) for r in ready]
    assert len(windows) == len(set(windows)), windows  # no period exported twice
    old_windows = {(r["window_start_utc"], r["window_end_utc"]) for r in before.values()}
    moved_rows = [r for r in rows if r["slot_utc"] not in before]
    assert moved_rows, rows  # the new hour's slot was seen, and answered
    print(f"\nafter the hand edit ({clock.hour} → {new_hour}): "
          + "; ".join(f"slot {r['slot_utc']} {r['trigger']} {r['state']} {r['reason'] or ''}"
                      for r in moved_rows) + f"; next run {next_run.isoformat()}")
    for row in moved_rows:
        window = (row["window_start_utc"], row["window_end_utc"])
        if window in old_windows:
            assert (row["state"], row["reason"][:18]) == ("skipped", "already delivered:"), row
    files = _file_slots(stack, "audit-hand")
    assert set(files.values()) == {1}, files
    assert set(files) == {datetime.fromisoformat(r["slot_utc"].replace("Z", "+00:00"))
                          for r in ready}, (files, ready)

    audit = _audit_json(stack, Outage(clock).daily_from - timedelta(days=1), "--dry-run")
    assert [a for a in audit["actions"] if a["schedule"] == "audit-hand/daily"
            and a["action"] != "skip"] == [], audit
