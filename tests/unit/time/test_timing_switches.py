"""Periods around a timing switch that no slot reports or that two report (issue 47 item 2):
:func:`switch_problems` names each with the ``effective_from`` that avoids it, and
``exportctl validate`` prints them. A seeded property over 200 hand-written switches near DST
transitions checks it against a brute-force count of the slots reporting each calendar day."""

from __future__ import annotations

import os
import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from export_lib.config.loader import load_catalog
from export_lib.config.timing import Timing, timeline_of
from export_lib.periods.slots import is_slot, slots_between, start_of_day
from export_lib.periods.switches import switch_problems
from export_lib.periods.windows import window_for
from export_lib.pipeline.reschedule import new_timing, plan_reschedule
from tests.support.cli import exportctl as run_cli
from tests.world import REPO

ZONES = ("Europe/London", "America/New_York", "Pacific/Auckland", "Australia/Lord_Howe")
TICK = timedelta(microseconds=1)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def daily():
    return load_catalog(REPO / "dags" / "config").schedule("acme/daily-spend")


def _switched(base, zone: str, old_hour: int, new_hour: int, switch: datetime):
    """``base`` (a daily calendar-day export) in ``zone``, moved from ``old_hour`` to
    ``new_hour`` at ``switch``, as a hand-written version makes it."""
    old = Timing(timezone=zone, export_hour=old_hour, interval_hours=24)
    new = Timing(timezone=zone, export_hour=new_hour, interval_hours=24)
    company = base.company.model_copy(update={"timezone": zone})
    return base.model_copy(update={"company": company,
                                   "timing": timeline_of([(None, old), (switch, new)])}), old, new


def _reports(schedule, around: datetime) -> Counter[date]:
    """How many slots of the schedule's timeline report each calendar day near ``around``
    (brute force: every slot of a fortnight, its window, the day it is)."""
    tz = ZoneInfo(schedule.window_timezone)
    counted: Counter[date] = Counter()
    for slot in slots_between(schedule.timing, around - timedelta(days=7),
                              around + timedelta(days=7)):
        window = window_for(schedule.window, schedule.timing, slot, schedule.window_timezone)
        day = window.start.astimezone(tz).date()
        assert (window.start, window.end) == (start_of_day(tz, day),
                                              start_of_day(tz, day + timedelta(days=1)))
        counted[day] += 1
    return counted


def _days_near(schedule, around: datetime) -> list[date]:
    local = around.astimezone(ZoneInfo(schedule.window_timezone)).date()
    return [local + timedelta(days=n) for n in range(-3, 4)]


def _transitions(zone: str) -> list[datetime]:
    """The instants ``zone`` changes its UTC offset in 2026 and 2027."""
    tz, found = ZoneInfo(zone), []
    cursor = datetime(2026, 1, 1, tzinfo=UTC)
    while cursor.year < 2028:
        after = cursor + timedelta(minutes=30)
        if cursor.astimezone(tz).utcoffset() != after.astimezone(tz).utcoffset():
            found.append(after)
        cursor = after
    return found


def test_two_hundred_hand_written_switches_near_dst_transitions(daily):
    rng = random.Random(47)
    transitions = {zone: _transitions(zone) for zone in ZONES}
    named_cases = 0
    for _ in range(200):
        zone = rng.choice(ZONES)
        old_hour, new_hour = rng.sample(range(24), 2)
        # A hand-written effective_from: any quarter hour within a day and a half of a change.
        switch = rng.choice(transitions[zone]) + timedelta(minutes=15 * rng.randint(-144, 144))
        schedule, old, new = _switched(daily, zone, old_hour, new_hour, switch)
        case = f"{zone} {old_hour:02d}->{new_hour:02d} from {switch:%Y-%m-%dT%H:%MZ}"

        counts = _reports(schedule, switch)
        problems = switch_problems(schedule, now=switch - timedelta(days=30))
        tz = ZoneInfo(zone)
        named = {(p.kind, p.start.astimezone(tz).date()) for p in problems}
        expected = {("unreported" if counts[d] == 0 else "reported_twice", d)
                    for d in _days_near(schedule, switch) if counts[d] != 1}
        assert named == expected, case
        assert all(p.guarded for p in problems if p.kind == "reported_twice"), case
        if not problems:
            continue
        named_cases += 1
        fixes = {p.fix for p in problems}
        assert len(fixes) == 1 and None not in fixes, case
        fix = fixes.pop()
        assert fix > switch and (is_slot(old, fix) or is_slot(new, fix)), case
        fixed, _, _ = _switched(daily, zone, old_hour, new_hour, fix)
        fixed_counts = _reports(fixed, fix)
        assert [fixed_counts[d] for d in _days_near(fixed, fix)] == [1] * 7, case
        assert switch_problems(fixed, now=switch) == (), case
        # exportctl reschedule, asked at the written instant, leaves no day unreported either.
        plan = plan_reschedule(schedule.model_copy(update={"timing": old}), new,
                               now=switch - TICK)
        assert plan.holes == (), case
    # The hand-written instants the old validate let through silently: 31 unreported days
    # and 28 reported twice, in 59 of the 200.
    assert named_cases == 59, named_cases


BERLIN = ZoneInfo("Europe/Berlin")


def _quiet_day() -> date:
    """A Berlin date a month ahead of the real clock (``exportctl validate`` reads it) with the
    same UTC offset three days either side, so the expected instants can be written out."""
    day = datetime.now(UTC).date() + timedelta(days=30)
    while len({datetime.combine(day + timedelta(days=n), datetime.min.time(),
                                BERLIN).utcoffset() for n in (-3, 3)}) != 1:
        day += timedelta(days=1)
    return day


def _berlin(day: date, hour: int) -> datetime:
    return datetime.combine(day, datetime.min.time(), BERLIN).replace(hour=hour).astimezone(UTC)


def _z(instant: datetime) -> str:
    return f"{instant:%Y-%m-%dT%H:%M:%S}Z"


def _config(tmp_path: Path, old: str, new: str) -> Path:
    config = tmp_path / "config"
    config.mkdir()
    (config / "defaults.yaml").write_text((REPO / "dags/config/defaults.yaml").read_text())
    text = (REPO / "dags/config/acme.yaml").read_text()
    assert old in text
    (config / "acme.yaml").write_text(text.replace(old, new, 1))
    return config


def test_a_hand_written_switch_between_the_hours_is_named_by_validate(tmp_path: Path):
    """09:00 → 07:00 Berlin with effective_from 08:00: that day's 09:00 is dropped, the next
    day's 07:00 reports that day, so the day before goes to no one. The file is valid for every
    other check (the catalog loads without an error, no other warning): only the switch check
    names it, with the next day's 07:00 as the effective_from from which every day is
    reported."""
    day = _quiet_day()
    anchor = "    export_hour: 7            # 07:00 Berlin time, every day\n"
    config = _config(tmp_path, anchor, anchor + (
        f"    effective_from: {_z(_berlin(day, 8))}  # written by hand, between the hours\n"
        "    history:\n"
        "      - {export_hour: 9}\n"))
    catalog = load_catalog(config)
    assert catalog.ok and catalog.error_lines == []

    result = run_cli("validate", "--no-ledger", "--no-source", str(config), cwd=REPO,
                     env={**os.environ, "PYTHONPATH": str(REPO)})

    assert result.returncode == 0, result.stdout + result.stderr
    before = day - timedelta(days=1)
    assert result.stdout.splitlines() == [
        f"warning: {config}/acme.yaml: widget_exports[0]: effective_from: "
        f"{_z(_berlin(day, 8))}: the timing switch of acme/daily-spend leaves period {before} "
        f"(Europe/Berlin, {_z(_berlin(before, 0))} .. {_z(_berlin(day, 0))}) reported by no "
        f"slot: the old timing's slot {_z(_berlin(day, 9))} that would report it is dropped by "
        "the switch. If the switch is kept, the gap audit exports the period once (exportctl "
        "audit --apply, through the company's manual export); to have a slot report it, set "
        f"'effective_from: {_z(_berlin(day + timedelta(days=1), 7))}' "
        f"({day + timedelta(days=1)} 07:00 Europe/Berlin)",
        f"OK: 1 companies, 4 schedules in {config} (1 warning(s))"]


def test_a_switch_reported_twice_is_sent_once_and_a_misaligned_one_has_no_fix(daily):
    """07:00 → 09:00 at 08:00: today's 09:00 reports the day 07:00 reported; the whole window
    went out under the old timing, so the run is skipped (guarded) and tomorrow's 07:00 is the
    clean switch. A trailing 24-hour window across the same move is two hours short or 22 hours
    over at any instant: named with no fix."""
    schedule, _, _ = _switched(daily, "Europe/Berlin", 7, 9, _at("2027-01-12T07:00Z"))
    (twice,) = switch_problems(schedule, now=_at("2027-01-01T00:00Z"))
    assert (twice.kind, twice.period, twice.guarded, twice.slots, twice.fix, twice.in_effect) \
        == ("reported_twice", "2027-01-11", True,
            (_at("2027-01-12T06:00Z"), _at("2027-01-12T08:00Z")), _at("2027-01-13T06:00Z"),
            False)
    trailing = schedule.model_copy(update={"window": schedule.window.model_validate(
        {"kind": "trailing_hours", "hours": 24})})
    found = switch_problems(trailing, now=_at("2027-01-13T00:00Z"))
    assert [(p.kind, p.start, p.end, p.guarded, p.fix, p.in_effect) for p in found] == [
        ("reported_twice", _at("2027-01-11T08:00Z"), _at("2027-01-12T06:00Z"), False, None,
         True)]


def test_reschedule_waits_for_a_switch_that_reports_every_day(daily):
    """Moving 07:00 to 05:00 at 06:00 Berlin: the next slot of either timing is today's 07:00,
    but switching there drops yesterday's only report; the plan switches at tomorrow's 05:00,
    after today's 07:00 has reported yesterday."""
    plan = plan_reschedule(daily, new_timing(daily, export_hour=5), now=_at("2026-12-02T05:00Z"))
    assert plan.effective_from == _at("2026-12-03T04:00Z")
    assert plan.holes == () and plan.twice == ()
    assert [(f"{p.slot:%d %H:%M}", p.period) for p in plan.periods][:3] == [
        ("01 06:00", "2026-11-30"), ("02 06:00", "2026-12-01"), ("03 04:00", "2026-12-02")]


def test_a_period_reported_twice_in_part_is_refused_with_the_effective_from_that_avoids_it(
        tmp_path: Path):
    """A six-hour trailing window at 09:00 and 21:00 moved to every six hours from 07:00, from
    midnight: the new 01:00 slot reports 19:00–01:00, and 19:00–21:00 went out with the old
    21:00 slot's 15:00–21:00. start_run exports a partly delivered window in full (ADR 0016),
    so those two hours would be sent twice: refused, naming the switch at 07:00 instead."""
    day = _quiet_day()
    before = day - timedelta(days=1)
    timing = ("    export_hour: 7            # 07:00 Berlin time, every day\n"
              "    interval_hours: 24\n    window: {kind: calendar_day}\n")
    config = _config(tmp_path, timing, (
        "    export_hour: 7\n    interval_hours: 6\n    window: {kind: trailing_hours, hours: 6}\n"
        f"    effective_from: {_z(_berlin(day, 0))}\n"
        "    history:\n      - {export_hour: 9, interval_hours: 12}\n"))

    result = run_cli("validate", "--no-ledger", "--no-source", str(config), cwd=REPO,
                     env={**os.environ, "PYTHONPATH": str(REPO)})

    assert (result.returncode, result.stderr) == (1, "1 error(s) in 1 file(s)\n"), result.stdout
    assert result.stdout.splitlines() == [
        f"{config}/acme.yaml: widget_exports[0]: effective_from: {_z(_berlin(day, 0))}: the "
        f"timing switch of acme/daily-spend leaves period {before}T1900--{before}T2100 "
        f"(Europe/Berlin, {_z(_berlin(before, 19))} .. {_z(_berlin(before, 21))}) partly "
        f"reported twice: by the old timing's slot {_z(_berlin(before, 21))} and again by the "
        f"new timing's slot {_z(_berlin(day, 1))}, whose window the old timing delivered only "
        "in part, so the run exports it in full and this part is sent twice; set "
        f"'effective_from: {_z(_berlin(day, 7))}' ({day} 07:00 Europe/Berlin)"]
