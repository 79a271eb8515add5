"""The company view's data and its timing change against a PostgreSQL ledger (the page's
wiring: tests/dags/test_company_ui.py).

acme/daily-spend exports three days at 07:00 Berlin; the view shows its configured and resolved
timing, the last period per destination and the config versions. Support moves it to 09:00
through ``pipeline.reschedule_edit`` (the code path of ``exportctl reschedule --apply`` and of
the page): the plan is shown first and writes nothing, the edit is validated, written with the
file's comments kept and recorded in the ledger with who, when, before and after; the next days
go out at 09:00, each once, none lost. A form token is spent once.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from export_lib.errors import ConfigError, FormError
from tests.world import DAILY, build_world

OLD_SLOTS = ("2026-03-26T06:00Z", "2026-03-27T06:00Z", "2026-03-28T06:00Z")  # 07:00 CET
NOW = datetime(2026, 3, 28, 10, 0, tzinfo=UTC)


@pytest.fixture()
def world(tmp_path, monkeypatch, pg_ledger_database):
    world = build_world(tmp_path / "w", pg_ledger_database, days=6).use(monkeypatch)
    for slot in OLD_SLOTS:
        assert world.run(DAILY, slot)["state"] == "ready"
    return world


def _ledger(world):
    from export_lib.ledger import open_ledger

    return open_ledger(world.ledger_url)


def test_the_view_shows_timing_as_configured_and_resolved_and_what_was_delivered(world):
    from export_lib.config.loader import load_catalog
    from export_lib.views.company import last_delivered, schedule_card

    catalog = load_catalog(world.config)
    schedule = catalog.schedule(DAILY)
    ledger = _ledger(world)
    delivered = last_delivered(ledger.engine, [DAILY, "acme/hourly-clicks"])
    assert delivered == {DAILY: {"acme-dir": {
        "period": "2026-03-27", "run_key": "acme/daily-spend/2026-03-28T06:00Z",
        "acknowledged_at_utc": delivered[DAILY]["acme-dir"]["acknowledged_at_utc"]}}}
    raw = yaml.safe_load((world.config / "acme.yaml").read_text())
    card = schedule_card(schedule, raw, delivered[DAILY], now=NOW)
    assert [(r["slot_local"], r["slot_utc"], r["window_local"], r["deadline_utc"])
            for r in card["next_runs"][:3]] == [
        ("2026-03-29 07:00 CEST", "2026-03-29T05:00:00Z", "2026-03-28", "2026-03-29T07:00:00Z"),
        ("2026-03-30 07:00 CEST", "2026-03-30T05:00:00Z", "2026-03-29", "2026-03-30T07:00:00Z"),
        ("2026-03-31 07:00 CEST", "2026-03-31T05:00:00Z", "2026-03-30", "2026-03-31T07:00:00Z")]
    assert len(card["next_runs"]) == 5
    assert card["last_delivered"][0]["period"] == "2026-03-27"
    assert [v["current"] for v in card["versions"]] == [True]
    # A key the export leaves to the defaults is marked as such.
    hourly = catalog.schedule("acme/hourly-clicks")
    del raw["widget_exports"][1]["interval_hours"]
    assert {c["key"]: c["default"] for c in schedule_card(hourly, raw, {}, now=NOW)[
        "configured"]} == {"export_hour": False, "interval_hours": True, "timezone": True}


def test_reschedule_plans_writes_validated_and_records_who_before_and_after(world):
    from export_lib.config.loader import load_catalog
    from export_lib.ledger.controls import list_actions
    from export_lib.pipeline.reschedule_edit import (
        apply_reschedule,
        check_edit,
        prepare_reschedule,
    )
    from export_lib.views.company import company_history, timing_changes

    path = world.config / "acme.yaml"
    before = path.read_text()
    schedule = load_catalog(world.config).schedule(DAILY)
    changes = timing_changes(schedule, {"export_hour": "9", "interval_hours": ""})
    assert changes == {"export_hour": 9}
    edit = prepare_reschedule(world.config, DAILY, changes, now=NOW,
                              newest_run=datetime(2026, 3, 28, 6, tzinfo=UTC))
    assert path.read_text() == before  # planning writes nothing
    plan = edit.as_json()
    assert plan["changes"] == {"export_hour": {"old": 7, "new": 9}}
    # Tomorrow's 07:00 is gone and the new timing's first slot is 09:00 CEST; no period lost.
    assert plan["effective_from"] == "2026-03-29T05:00:00Z" and plan["uncovered"] == []
    assert plan["new_next"][:2] == ["2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"]
    check_edit(world.config, edit)
    ledger = _ledger(world)
    action = apply_reschedule(world.config, edit, ledger=ledger, who="sam (company page)",
                              why="customer asked for 09:00", now=NOW)
    text = path.read_text()
    assert "export_hour: 9  # was 7 before 2026-03-29T05:00:00Z (exportctl reschedule)" in text
    assert "effective_from: '2026-03-29T05:00:00Z'" in text or \
        "effective_from: 2026-03-29T05:00:00Z" in text
    assert "# ACME Corp: a Berlin company" in text and "# 07:00 Berlin time" not in text
    (recorded,) = list_actions(ledger, company="acme")
    assert recorded == action
    assert (recorded.who, recorded.at, recorded.action, recorded.target_id, recorded.why) == (
        "sam (company page)", NOW, "reschedule", DAILY, "customer asked for 09:00")
    assert recorded.outcome == ("acme/daily-spend: export_hour 7 → 9 from "
                                "2026-03-29T05:00:00Z; wrote acme.yaml")
    assert company_history(ledger, "acme")[0]["outcome"] == recorded.outcome
    # The same plan applied twice: the file changed since it was read, nothing written.
    with pytest.raises(ConfigError, match="changed since the plan was made; nothing written"):
        apply_reschedule(world.config, edit, ledger=ledger, who="sam", why="again", now=NOW)
    assert path.read_text() == text and len(list_actions(ledger, company="acme")) == 1

    # The new timing exports the next days once each.
    catalog = load_catalog(world.config)
    assert catalog.errors == {}
    for slot in ("2026-03-29T07:00Z", "2026-03-30T07:00Z"):
        world.run(DAILY, slot)
    periods = Counter((r["window_start_utc"], r["window_end_utc"]) for r in world.runs()
                      if r["schedule"] == DAILY and r["state"] == "ready")
    # 25 to 27 March at 07:00, then 28 and 29 March at 09:00: each day once, none lost.
    assert sorted(periods.values()) == [1] * 5 and sorted(p[0] for p in periods)[-2:] == [
        "2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z"]
    assert [r for r in world.runs() if r["schedule"] == DAILY and r["state"] != "ready"] == []


def test_an_edit_that_does_not_validate_writes_nothing_and_records_nothing(world):
    from export_lib.ledger.controls import list_actions
    from export_lib.pipeline.reschedule_edit import RescheduleEdit, apply_reschedule, prepare_reschedule

    path = world.config / "acme.yaml"
    edit = prepare_reschedule(world.config, DAILY, {"export_hour": 9}, now=NOW)
    broken = RescheduleEdit(plan=edit.plan, path=path, before=edit.before,
                            after=edit.after.replace("interval_hours: 24", "interval_hours: 25",
                                                     1))
    with pytest.raises(ConfigError, match="does not validate; nothing written"):
        apply_reschedule(world.config, broken, ledger=_ledger(world), who="sam", why="x",
                         now=NOW)
    assert path.read_text() == edit.before and list_actions(_ledger(world), company="acme") == []
    with pytest.raises(ConfigError, match="already fires at 07:00 Europe/Berlin"):
        prepare_reschedule(world.config, DAILY, {"export_hour": 7}, now=NOW)


def test_a_form_token_is_spent_once(world):
    from export_lib.ledger.controls import spend_form_token
    from export_lib.views.action_tokens import check_form_token, make_form_token

    ledger, secret, ttl = _ledger(world), "s" * 32, timedelta(hours=1)
    token = make_form_token(secret, "sam", "company/acme", now=NOW, ttl=ttl, nonce="ab12")
    mac, expires = check_form_token(secret, "sam", "company/acme", token, now=NOW, ttl=ttl)
    assert expires == NOW + ttl
    assert spend_form_token(ledger, mac, who="sam", now=NOW, expires_at=expires) is True
    assert spend_form_token(ledger, mac, who="sam", now=NOW, expires_at=expires) is False
    from export_lib.errors import ActionTokenError

    with pytest.raises(ActionTokenError, match="wrong form token"):
        check_form_token(secret, "sam", "company/kiwi-outdoors", token, now=NOW, ttl=ttl)
    with pytest.raises(ActionTokenError, match="wrong form token"):
        check_form_token(secret, "eve", "company/acme", token, now=NOW, ttl=ttl)
    # Spent rows of expired tokens are dropped as new ones are spent, an hour after expiry
    # (FORM_TOKEN_SKEW): a page server whose clock runs behind still finds them spent.
    assert spend_form_token(ledger, "x" * 64, who="sam", now=NOW + timedelta(hours=2),
                            expires_at=NOW + timedelta(hours=3)) is True
    assert spend_form_token(ledger, mac, who="sam", now=NOW + timedelta(hours=2),
                            expires_at=expires) is False
    later = NOW + timedelta(hours=2, seconds=1)
    other = make_form_token(secret, "sam", "company/acme", now=later, ttl=ttl, nonce="cd34")
    mac2, exp2 = check_form_token(secret, "sam", "company/acme", other, now=later, ttl=ttl)
    assert spend_form_token(ledger, mac2, who="sam", now=later, expires_at=exp2) is True
    assert spend_form_token(ledger, mac, who="sam", now=later, expires_at=expires) is True


@pytest.mark.parametrize(("preset", "zone", "now", "window"), [
    # Customers ask in their own time: a New Zealand week, Monday to Monday, in NZDT.
    ("last_week", "Pacific/Auckland", datetime(2026, 3, 4, 23, 0, tzinfo=UTC),
     ("2026-02-23T00:00:00+13:00", "2026-03-02T00:00:00+13:00")),
    # It is already Thursday 5 March in Auckland at 23:00 UTC on the 4th.
    ("yesterday", "Pacific/Auckland", datetime(2026, 3, 4, 23, 0, tzinfo=UTC),
     ("2026-03-04T00:00:00+13:00", "2026-03-05T00:00:00+13:00")),
    # A month across the spring change of clocks: March in Berlin is 743 hours.
    ("last_month", "Europe/Berlin", datetime(2026, 4, 10, tzinfo=UTC),
     ("2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00")),
])
def test_presets_are_local_periods(preset, zone, now, window):
    from export_lib.views.company import preset_window

    start, end = preset_window(preset, zone, now)
    assert (start.isoformat(), end.isoformat()) == window


def test_local_times_and_their_errors():
    from export_lib.views.company import local_instant, preset_window

    assert local_instant("2026-03-29T02:30", "start", "Europe/Berlin").isoformat() == \
        "2026-03-29T03:30:00+02:00"  # the skipped hour moves forward by the gap
    assert local_instant("2026-10-25", "end", "Europe/Berlin").isoformat() == \
        "2026-10-25T00:00:00+02:00"
    with pytest.raises(FormError, match=r"^start: '2026-02-30' is not a real date") as err:
        local_instant("2026-02-30", "start", "UTC")
    assert err.value.field == "start"
    with pytest.raises(FormError, match=r"^end: '2026-03-29T00:00:00\+13:00' is not a local"):
        local_instant("2026-03-29T00:00:00+13:00", "end", "UTC")
    with pytest.raises(FormError, match="^preset: 'tomorrow' is not a preset"):
        preset_window("tomorrow", "UTC", NOW)


def test_a_hand_written_switch_that_drops_a_period_is_named_with_its_fix(world):
    """09:00 → 07:00 Berlin written by hand with effective_from 08:00 on a day: that day's
    09:00 is dropped and the next day's 07:00 reports that day, so the day before is reported by
    no slot. The view names it, says what happens, and gives the effective_from that avoids
    it (the next day's 07:00), as `exportctl validate` does."""
    from export_lib.config.loader import load_catalog
    from export_lib.views.company import schedule_card

    anchor = "    export_hour: 7            # 07:00 Berlin time, every day\n"
    path = world.config / "acme.yaml"
    text = path.read_text()
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + (
        "    effective_from: 2027-01-12T07:00:00Z  # by hand, 08:00 Berlin, between the hours\n"
        "    history:\n      - {export_hour: 9}\n"), 1))
    catalog = load_catalog(world.config)
    assert catalog.ok, catalog.error_lines
    card = schedule_card(catalog.schedule(DAILY), None, {}, now=datetime(2027, 1, 1, tzinfo=UTC))
    (problem,) = card["switch_problems"]
    assert (problem["kind"], problem["period"], problem["switch"], problem["in_effect"]) == (
        "unreported", "2027-01-11", "2027-01-12T07:00:00Z", False)
    assert problem["what"].startswith("reported by no slot: the gap audit exports it once")
    assert problem["fix_text"] == "effective_from: 2027-01-13T06:00:00Z"
    assert [v["timing"] for v in card["versions"]] == ["07:00 Europe/Berlin, every 24 h",
                                                       "09:00 Europe/Berlin, every 24 h"]
    # The untouched schedule has none.
    assert schedule_card(catalog.schedule("acme/hourly-clicks"), None, {},
                         now=datetime(2027, 1, 1, tzinfo=UTC))["switch_problems"] == []
