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
from datetime import UTC, datetime, timedelta

from tests.system.scheduler.harness import company_file, daily_hour_far_from_now, widget_export
from tests.system.soak.stack import wait_for

NOW = datetime.now(UTC)
HOUR = daily_hour_far_from_now(NOW)
_last = NOW.replace(hour=HOUR, minute=0, second=0, microsecond=0)
NEWEST = _last if _last <= NOW else _last - timedelta(days=1)  # the daily newest due slot
DAILY_FROM = NEWEST - timedelta(days=3)
HOURLY_NEWEST = NOW.replace(minute=0, second=0, microsecond=0)
HOURLY_FROM = HOURLY_NEWEST - timedelta(days=3)
EACH, LATEST = "widget_export__audit-each__daily", "widget_export__audit-latest__hourly"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# No look back: recover_missed leaves the older slots alone, as after an outage it did not
# cover; a failed try is retried 5 s later.
OUTAGE = {"catchup": {"lookback": "0h"}, "retries": {"delay": "5s"}}
COMPANIES = {
    "audit-each": company_file("audit-each", [widget_export(
        "daily", export_hour=HOUR, company="audit-each", recovery="each",
        effective_from=_iso(DAILY_FROM), **OUTAGE)]),
    "audit-latest": company_file("audit-latest", [widget_export(
        "hourly", export_hour=0, interval_hours=1, company="audit-latest", recovery="latest",
        window={"kind": "interval"}, effective_from=_iso(HOURLY_FROM), **OUTAGE)]),
}


def _ledger(stack, schedule: str) -> dict[str, dict]:
    """The schedule's runs up to the module's newest due slot, by slot: a daily slot that falls
    due while the module runs (EXPORT_TEST_HOURS_AHEAD=1) is the scheduler's own, not the
    audit's business."""
    newest = _iso(NEWEST if schedule == "audit-each/daily" else HOURLY_NEWEST)
    return {r["slot_utc"]: r for r in stack.ledger_runs()
            if r["schedule"] == schedule and r["slot_utc"] <= newest}


def _skipped(stack) -> set[tuple[str, str]]:
    return {(r["run_key"], r["reason"]) for r in _ledger(stack, "audit-latest/hourly").values()
            if r["state"] == "skipped"}


def _audit(stack, *extra: str):
    return stack.exportctl("audit", "--since", _iso(DAILY_FROM - timedelta(days=1)), *extra)


def test_an_outage_is_recovered_by_the_audit_and_a_second_audit_changes_nothing(
        scheduler_stack):
    stack = scheduler_stack
    stack.wait_for_dags(EACH, LATEST)
    first_runs = {d: stack.wait_for_run_id(d) for d in (EACH, LATEST)}
    for dag_id, run_id in first_runs.items():  # the newest due slot runs, the older never did
        stack.wait_for_task(dag_id, run_id, "resolve_window", timeout=240)
    assert list(_ledger(stack, "audit-each/daily")) == [_iso(NEWEST)]

    first = _audit(stack)
    out = first.stdout
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

    each = _ledger(stack, "audit-each/daily")
    assert sorted(each) == [_iso(s) for s in (*missed, NEWEST)]
    assert {r["state"] for r in each.values()} == {"ready"}
    assert {d["state"] for r in each.values() for d in r["deliveries"]} == {"acknowledged"}
    files = sorted(p.name for p in (stack.outbox / "audit-each" / "daily" / "box").glob("*.csv"))
    assert len(files) == 4 and all(f"slot-{s:%Y%m%dT%H%MZ}" in " ".join(files)
                                   for s in (*missed, NEWEST))

    latest = _ledger(stack, "audit-latest/hourly")
    outcomes = [latest[_iso(HOURLY_FROM + timedelta(hours=h))] for h in range(72)]
    # every hourly slot of the 3 days has an outcome: the newest exported, the rest skipped
    skipped = [r for r in outcomes if r["state"] == "skipped"]
    assert len(skipped) >= 71 and {r["state"] for r in outcomes} <= {"skipped", "ready"}
    assert all(r["reason"].startswith("superseded by a later slot under recovery=latest")
               and r["trigger"] == "audit" for r in skipped)

    recorded = _skipped(stack)
    second = _audit(stack, "--json")
    result = json.loads(second.stdout)
    assert result["changed"] == 0 and result["recorded"] == [], result
    assert result["summary"].startswith("nothing changed"), result["summary"]
    assert _ledger(stack, "audit-each/daily") == each
    assert _skipped(stack) == recorded
    assert len([r for r in stack.dag_runs(EACH) if r["run_type"] == "backfill"]) == 3
