"""A period is exported once, whatever its slot (issue 22): support moves acme/daily-spend's
``export_hour`` from 7 to 9 after three periods went out. The new timing's slots report the
same calendar days; neither ``exportctl run``, the gap audit nor a scheduled start exports them
again (each records why), ``--regenerate`` does on request, and the first new period exports.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from export_lib.periods.coverage import ALREADY_DELIVERED
from tests.world import DAILY, build_world

OLD_SLOTS = ("2026-03-26T06:00Z", "2026-03-27T06:00Z", "2026-03-28T06:00Z")  # 07:00 Berlin
NEW_SLOTS = ("2026-03-26T08:00Z", "2026-03-27T08:00Z", "2026-03-28T08:00Z")  # 09:00 Berlin
NEXT_NEW = "2026-03-29T07:00Z"  # 09:00 CEST: the calendar day 28 March, never delivered


def delivered_then_edited(tmp_path, monkeypatch, schedule: str, slots, company: str,
                          old: str, new: str):
    """A world where ``schedule`` delivered ``slots``, then ``old`` became ``new`` in the
    company's file by hand (no effective_from)."""
    world = build_world(tmp_path / "w", days=6).use(monkeypatch)
    for slot in slots:
        assert world.run(schedule, slot)["state"] == "ready"
    path = world.config / f"{company}.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return world


@pytest.fixture()
def world(tmp_path, monkeypatch):
    return delivered_then_edited(
        tmp_path, monkeypatch, DAILY, OLD_SLOTS, "acme",
        "    export_hour: 7            # 07:00 Berlin time, every day\n",
        "    export_hour: 9            # 07:00 Berlin time, every day\n")


def _delivered(world) -> list[str]:
    return sorted(p for p in world.visible_files() if "outbox" in p and p.endswith(".csv"))


def test_the_moved_slots_of_delivered_days_are_skipped_with_the_artifact_and_the_way_back(world):
    before = _delivered(world)
    assert len(before) == 3
    for old, new in zip(OLD_SLOTS, NEW_SLOTS, strict=True):
        result = world.exportctl("run", str(world.config), "--schedule", DAILY, "--slot", new,
                                 "--json")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["state"] == "skipped"
        day = (datetime.fromisoformat(old.replace("Z", "+00:00")) - timedelta(days=1))
        assert out["skipped"].startswith(
            f"{ALREADY_DELIVERED}period {day:%Y-%m-%d} Europe/Berlin of acme/daily-spend went "
            f"out under an earlier timing: run acme/daily-spend/{old} (artifact v1 "), out
        assert out["skipped"].endswith(
            f"not exported again. To send it again: exportctl run CONFIG_DIR --schedule "
            f"acme/daily-spend --slot {new[:-1]}:00Z --regenerate (or trigger the DAG run with "
            "regenerate)"), out
    assert _delivered(world) == before
    runs = {r["run_key"]: r for r in world.runs()}
    assert {runs[f"{DAILY}/{s}"]["state"] for s in NEW_SLOTS} == {"skipped"}
    assert runs[f"{DAILY}/{NEW_SLOTS[0]}"]["reason"].startswith(ALREADY_DELIVERED)


def test_regenerate_sends_a_delivered_period_again_on_request(world):
    before = _delivered(world)
    result = world.exportctl("run", str(world.config), "--schedule", DAILY, "--slot",
                             NEW_SLOTS[2], "--regenerate", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["state"] == "ready" and out["artifact"]["version"] == 1
    assert len(_delivered(world)) == len(before) + 1


def test_the_first_period_of_the_new_timing_exports(world):
    out = world.run(DAILY, NEXT_NEW)
    assert (out["state"], out["window_start_utc"], out["window_end_utc"]) == (
        "ready", "2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z")
    assert len(_delivered(world)) == 4


def test_the_gap_audit_plans_no_export_of_a_delivered_day_and_records_why_once(world):
    from export_lib.config.loader import load_catalog
    from export_lib.pipeline.audit_apply import run_audit

    catalog = load_catalog(world.config, only="acme")
    now = datetime(2026, 3, 29, 6, 0, tzinfo=UTC)  # before NEXT_NEW: only moved slots are due
    since = datetime(2026, 3, 26, 0, 0, tzinfo=UTC)
    result = run_audit(catalog, world.ledger(), since=since, until=now, now=now,
                       company="acme", dry_run=False)
    daily = [a for a in result.plan.actions if a.gap.schedule_id == DAILY]
    assert [(a.action, f"{a.gap.slot:%Y-%m-%dT%H:%MZ}") for a in daily] == [
        ("skip", s) for s in NEW_SLOTS]
    assert all(a.reason.startswith(f"{ALREADY_DELIVERED}its period went out under an earlier "
                                   "timing: run acme/daily-spend/") for a in daily)
    assert not result.plan.backfills.get("widget_export__acme__daily-spend")
    again = run_audit(catalog, world.ledger(), since=since, until=now, now=now,
                      company="acme", dry_run=False)
    assert [a for a in again.plan.actions if a.gap.schedule_id == DAILY] == []


def test_a_period_of_the_same_timing_is_exported_as_often_as_its_slots_say():
    """Same-timing repeats are by design (a six-hourly calendar-day export): not covered."""
    from export_lib.periods.coverage import DeliveredPeriod, covering

    day = datetime(2026, 3, 27, 23, 0, tzinfo=UTC)
    old = ("Europe/Berlin", 7, 24, None, "shift", "first")
    new = ("Europe/Berlin", 9, 24, None, "shift", "first")
    first = DeliveredPeriod("a/b/1", day, day - timedelta(days=1), day, old, 1, "file:///1")
    second = DeliveredPeriod("a/b/2", day, day, day + timedelta(days=1), old, 1, "file:///2")
    assert covering(day - timedelta(days=1), day, old, [first]) == ()
    assert covering(day - timedelta(days=1), day, new, [first]) == (first,)
    # two delivered days cover a two-day window; a hole (a day never delivered) does not
    two = (day - timedelta(days=1), day + timedelta(days=1))
    assert covering(*two, new, [second, first]) == (first, second)
    assert covering(day - timedelta(days=2), day, new, [first]) == ()
    assert covering(*two, new, [first]) == ()


KIWI = "kiwi-outdoors/six-hourly-orders"
# 02:00, 08:00, 14:00, 20:00 NZDT (UTC+13) on 28 March: trailing 6 h windows that cover
# [27 March 19:00Z, 28 March 19:00Z) without a gap.
KIWI_OLD = ("2026-03-28T01:00Z", "2026-03-28T07:00Z", "2026-03-28T13:00Z", "2026-03-28T19:00Z")
# Every 4 h from 02:00 NZDT after the edit: 14:00, 18:00, 22:00, 02:00, 06:00 NZDT lie inside
# what went out; 10:00 NZDT's window reaches 2 h past it.
KIWI_COVERED = ("2026-03-28T01:00Z", "2026-03-28T05:00Z", "2026-03-28T09:00Z",
                "2026-03-28T13:00Z", "2026-03-28T17:00Z")
KIWI_NEW = "2026-03-28T21:00Z"


def test_an_interval_edited_by_hand_exports_only_what_did_not_go_out(tmp_path, monkeypatch):
    """issue 22's acceptance at the library tier, by hand: kiwi's six-hourly export moved to
    every 4 h in its YAML (no effective_from) after a day went out: a new slot whose trailing
    6 h lie inside the delivered windows is skipped as delivered; the first that reaches past
    them exports."""
    world = delivered_then_edited(tmp_path, monkeypatch, KIWI, KIWI_OLD, "kiwi-outdoors",
                                  "    interval_hours: 6\n", "    interval_hours: 4\n")
    refused = world.exportctl("validate", str(world.config))
    assert refused.returncode == 1 and "interval_hours 6 → 4" in refused.stdout, refused.stdout
    before = _delivered(world)
    for slot in KIWI_COVERED:
        out = world.run(KIWI, slot)
        if slot in KIWI_OLD:  # a slot of both timings: the run it had, nothing new
            assert out["state"] == "ready", (slot, out)
        else:
            assert (out["state"], out.get("skipped", "")[:len(ALREADY_DELIVERED)]) == (
                "skipped", ALREADY_DELIVERED), (slot, out)
    assert _delivered(world) == before
    out = world.run(KIWI, KIWI_NEW)
    assert (out["state"], out["window_start_utc"], out["window_end_utc"]) == (
        "ready", "2026-03-28T15:00:00Z", "2026-03-28T21:00:00Z")
    assert len(_delivered(world)) == len(before) + 1


def test_a_timezone_edited_by_hand_sends_no_delivered_day_again(world):
    """The same by hand for the zone of ``export_hour``: acme's 07:00 in London instead of
    Berlin (windows stay Berlin's calendar days): each moved slot reports a delivered day."""
    acme = world.config / "acme.yaml"
    text = acme.read_text()
    # Undo the fixture's hour edit and move the zone instead.
    text = text.replace("    export_hour: 9 ", "    export_hour: 7 ", 1)
    acme.write_text(text.replace("    interval_hours: 24\n",
                                 "    interval_hours: 24\n    timezone: Europe/London\n", 1))
    refused = world.exportctl("validate", str(world.config))
    assert refused.returncode == 1, refused.stdout
    assert "(timezone 'Europe/Berlin' → 'Europe/London')" in refused.stdout, refused.stdout
    before = _delivered(world)
    for old in OLD_SLOTS:  # 06:00Z (07:00 CET) → 07:00Z (07:00 GMT), the same Berlin day
        new = old.replace("T06:00Z", "T07:00Z")
        out = world.run(DAILY, new)
        assert out["state"] == "skipped", (new, out)
        assert out["skipped"].startswith(f"{ALREADY_DELIVERED}period ") and \
            f"run acme/daily-spend/{old}" in out["skipped"], out
    assert _delivered(world) == before
