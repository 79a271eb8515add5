"""``exportctl runs --missed / --late / --since 48h`` on a PostgreSQL ledger (ADR 0029).

acme/hourly-clicks (deadline 30 min) was deployed at 06:05 on 28 March: its first run (slot
06:00) was registered then and delivered on time. Its first catch-up ran at 06:20: 04:00 and
05:00 delivered late, 03:00 never delivered — all three due before the schedule existed, so not
tracked. After that, a genuine outage: 08:00 ran at 09:00 (late, tracked), 10:00 was registered
and never delivered (missed), 11:00 was skipped (owes nothing), 12:00's deadline is still ahead.
acme/daily-spend's only run (its own first catch-up) was delivered late: not tracked.
kiwi-outdoors/six-hourly-orders (deadline 90 min) was deployed at 01:05, its 07:00 slot
delivered at 09:00: late. ``now`` is 12:20, passed in through the CLI's one clock.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.world import World

NOW = datetime(2026, 3, 28, 12, 20, tzinfo=UTC)
HOURLY, DAILY, KIWI = ("acme/hourly-clicks", "acme/daily-spend",
                       "kiwi-outdoors/six-hourly-orders")


def _at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 28, hour, minute, tzinfo=UTC)


@pytest.fixture()
def ledger_world(pg_world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    from export_lib.cli.commands import run_one
    from export_lib.pipeline import RunContext, register_run

    pg_world.use(monkeypatch)
    config = str(pg_world.config)
    ledger = pg_world.ledger()
    ctx = RunContext(origin="test", trigger="scheduled")

    def register(schedule: str, slot: datetime, now: datetime) -> str:
        return register_run(ledger, pg_world.schedule(schedule), slot, now=now, ctx=ctx).run_key

    def deliver(schedule: str, slot: datetime, now: datetime) -> None:
        assert run_one(config, schedule, f"{slot:%Y-%m-%dT%H:%MZ}", now=now)["state"] == "ready"

    register(HOURLY, _at(6), _at(6, 5))          # the first deployment
    deliver(HOURLY, _at(6), _at(6, 10))          # on time
    for hour in (4, 5):                          # the first catch-up: late, not tracked
        deliver(HOURLY, _at(hour), _at(6, 20))
    register(HOURLY, _at(3), _at(6, 20))         # first catch-up, never delivered
    deliver(HOURLY, _at(8), _at(9))              # an outage after deployment: late
    register(HOURLY, _at(10), _at(10, 2))        # missed
    ledger.skip(register(HOURLY, _at(11), _at(11, 1)), "skipped by a test", _at(11, 2))
    register(HOURLY, _at(12), _at(12, 1))        # deadline 12:30, still ahead
    deliver(DAILY, _at(6), _at(10))              # its only run: delivered late, not tracked
    register(KIWI, _at(1), _at(1, 5))            # kiwi deployed at 01:05
    register(KIWI, _at(7), _at(7, 5))
    deliver(KIWI, _at(7), _at(9))                # late
    ledger.engine.dispose()
    monkeypatch.setattr("export_lib.cli.commands._now", lambda: NOW)
    return pg_world


def _runs(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, str, bool]]:
    from export_lib.cli.main import main

    assert main(["runs", "--json", *args]) == 0
    return [(r["run_key"].split("/", 1)[1], r["deadline_status"], r["tracked"])
            for r in json.loads(capsys.readouterr().out)]


def test_missed_and_late_list_tracked_periods_only(ledger_world: World, capsys):
    assert _runs(capsys, "--missed") == [
        ("hourly-clicks/2026-03-28T10:00Z", "overdue", True),
        ("six-hourly-orders/2026-03-28T01:00Z", "overdue", True)]
    assert _runs(capsys, "--late") == [
        ("hourly-clicks/2026-03-28T08:00Z", "late", True),
        ("six-hourly-orders/2026-03-28T07:00Z", "late", True)]
    assert _runs(capsys, "--missed", "--late", "--company", "acme") == [
        ("hourly-clicks/2026-03-28T10:00Z", "overdue", True),
        ("hourly-clicks/2026-03-28T08:00Z", "late", True)]
    assert _runs(capsys, "--missed", "--late", "--schedule", DAILY) == []
    # Without the flags every run is listed with what happened; the first catch-up's verdicts
    # stand but are not tracked.
    everything = _runs(capsys, "--schedule", HOURLY)
    assert everything == [
        ("hourly-clicks/2026-03-28T12:00Z", "pending", True),
        ("hourly-clicks/2026-03-28T11:00Z", "none", True),
        ("hourly-clicks/2026-03-28T10:00Z", "overdue", True),
        ("hourly-clicks/2026-03-28T08:00Z", "late", True),
        ("hourly-clicks/2026-03-28T06:00Z", "on_time", True),
        ("hourly-clicks/2026-03-28T05:00Z", "late", False),
        ("hourly-clicks/2026-03-28T04:00Z", "late", False),
        ("hourly-clicks/2026-03-28T03:00Z", "overdue", False)]


def test_an_empty_answer_says_what_was_looked_for(ledger_world: World, capsys):
    """'No runs recorded yet' only for an empty ledger question: a filtered one that finds
    nothing says which runs it looked for, so an analyst reads 'no misses', not 'no data'."""
    from export_lib.cli.main import main

    assert main(["runs", "--missed", "--since", "30m"]) == 0
    assert capsys.readouterr().out == (
        "no missed runs (deadline passed, nothing delivered) for --since 30m\n")
    assert main(["runs", "--late", "--schedule", DAILY]) == 0
    assert capsys.readouterr().out == (
        f"no late runs (delivered after the deadline) for --schedule {DAILY}\n")
    assert main(["runs", "--company", "nobody"]) == 0
    assert capsys.readouterr().out == "no runs for --company nobody\n"


def test_since_takes_a_duration_back_from_now_or_a_date(ledger_world: World, capsys):
    from export_lib.cli.main import main

    assert _runs(capsys, "--missed", "--since", "3h") == [  # slots from 09:20
        ("hourly-clicks/2026-03-28T10:00Z", "overdue", True)]
    assert _runs(capsys, "--late", "--since", "300m") == [  # from 07:20
        ("hourly-clicks/2026-03-28T08:00Z", "late", True)]
    assert _runs(capsys, "--missed", "--late", "--since", "11h") == [  # from 01:20
        ("hourly-clicks/2026-03-28T10:00Z", "overdue", True),
        ("hourly-clicks/2026-03-28T08:00Z", "late", True),
        ("six-hourly-orders/2026-03-28T07:00Z", "late", True)]
    assert _runs(capsys, "--missed", "--late", "--since", "2d") == _runs(
        capsys, "--missed", "--late", "--since", "2026-03-26T12:20Z") == _runs(
        capsys, "--missed", "--late")
    assert _runs(capsys, "--missed", "--since", "2026-03-28T09:00Z", "--until",
                 "2026-03-28T11:00Z") == [("hourly-clicks/2026-03-28T10:00Z", "overdue", True)]
    assert main(["runs", "--missed", "--since", "yesterday"]) == 2
    assert capsys.readouterr().err == (
        "exportctl: --since 'yesterday' is neither a duration nor an ISO 8601 date/time; use "
        "e.g. 48h, 7d, 90m, 2026-03-29 or 2026-03-29T05:00Z\n")


def test_the_table_marks_verdicts_that_are_not_tracked(ledger_world: World, capsys):
    from export_lib.cli.main import main

    assert main(["runs", "--schedule", HOURLY, "--since", "2026-03-28T03:00Z",
                 "--until", "2026-03-28T09:00Z"]) == 0
    rows = [line.split()[:9] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [
        [f"{HOURLY}/2026-03-28T08:00Z", "ready", "2026-03-28T08:30:00Z", "2026-03-28T09:00:00Z",
         "30", "min", "-", "2026-03-28T07:00:00Z", "→"],
        [f"{HOURLY}/2026-03-28T06:00Z", "ready", "2026-03-28T06:30:00Z", "2026-03-28T06:10:00Z",
         "-", "-", "2026-03-28T05:00:00Z", "→", "2026-03-28T06:00:00Z"],
        [f"{HOURLY}/2026-03-28T05:00Z", "ready", "2026-03-28T05:30:00Z", "2026-03-28T06:20:00Z",
         "50", "min", "(not", "tracked)", "-"],
        [f"{HOURLY}/2026-03-28T04:00Z", "ready", "2026-03-28T04:30:00Z", "2026-03-28T06:20:00Z",
         "110", "min", "(not", "tracked)", "-"],
        [f"{HOURLY}/2026-03-28T03:00Z", "registered", "2026-03-28T03:30:00Z", "-",
         "530", "min", "(overdue)", "(not", "tracked)"]]


def test_the_obligations_page_and_the_metrics_count_the_same_misses(ledger_world: World):
    """Browse → Export obligations and ``export_slots_missed`` read the same ledger the same way:
    the first catch-up is ``untracked`` (what happened still shown), the outage is not."""
    from export_lib.views.obligations import obligation_filter, obligations_page, schedule_strips
    from export_lib.views.risk import outage_report

    ledger = ledger_world.ledger()
    hourly = ledger_world.schedule(HOURLY)
    try:
        page = obligations_page(ledger.engine, obligation_filter(schedule_id=HOURLY), now=NOW)
        (strip,) = schedule_strips(ledger.engine, [hourly], now=NOW, slots=11)
        (tally,) = outage_report(ledger.engine, [hourly], now=NOW, horizon=timedelta(hours=10))
        missed = obligations_page(ledger.engine, obligation_filter(outcome="missed"), now=NOW)
    finally:
        ledger.engine.dispose()
    assert [(r["run_key"][-6:-1], r["outcome"], r["lateness"]) for r in page["runs"]] == [
        ("12:00", "waiting", None),
        ("11:00", "skipped", None),
        ("10:00", "missed", "deadline passed 1 h 50 min ago"),
        ("08:00", "late", "late by 30 min"),
        ("06:00", "on_time", "20 min before the deadline"),
        ("05:00", "untracked", "delivered 50 min after a deadline that passed before the "
                               "schedule was deployed"),
        ("04:00", "untracked", "delivered 1 h 50 min after a deadline that passed before the "
                               "schedule was deployed"),
        ("03:00", "untracked", "nothing delivered; the deadline passed before the schedule "
                               "was deployed")]
    assert [r["run_key"] for r in missed["runs"]] == [
        f"{HOURLY}/2026-03-28T10:00Z", f"{KIWI}/2026-03-28T01:00Z"]
    # 02:00 has no run and its deadline passed before 06:05: not tracked either; 07:00 and
    # 09:00 (no run, after the deployment) are the outage.
    assert [(c["slot_utc"][11:16], c["outcome"]) for c in strip["strip"]] == [
        ("02:00", "untracked"), ("03:00", "untracked"), ("04:00", "untracked"),
        ("05:00", "untracked"), ("06:00", "on_time"), ("07:00", "no_run"), ("08:00", "late"),
        ("09:00", "no_run"), ("10:00", "missed"), ("11:00", "skipped"), ("12:00", "waiting")]
    # Slots 02:20-12:20: 03:00-05:00 not tracked; 06:00-12:00 expected; 07:00, 09:00 without a
    # run; missed: 07:00, 09:00, 10:00 (the skipped 11:00 owes nothing, 12:00 is not due yet).
    assert (tally.expected, tally.missing, tally.missed) == (7, 2, 3)
