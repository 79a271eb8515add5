"""Outages and risk, the pure part (issue 22, item 4; ADR 0020): due slots from the timetable
with ``now`` passed in, the risk point, and the per-schedule tally the metrics and the page
read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from export_lib.config.loader import load_catalog
from export_lib.config.risk import AtRisk
from export_lib.views.prometheus import prometheus_text
from export_lib.views.risk import (
    RiskRule,
    RunFacts,
    at_risk,
    due_slots,
    mark_at_risk,
    risk_offset,
    tally,
)
from tests.conftest import REPO

NOW = datetime(2026, 3, 10, 12, 20, tzinfo=UTC)  # no DST change near (Berlin: 29 March)
H = timedelta(hours=1)


@pytest.fixture(scope="module")
def hourly():
    """acme/hourly-clicks (hourly, deadline 30 min), in force from 09:30: slots 10, 11, 12."""
    schedule = load_catalog(REPO / "dags" / "config").schedule("acme/hourly-clicks")
    return schedule.model_copy(update={"effective_from": datetime(2026, 3, 10, 9, 30,
                                                                  tzinfo=UTC)})


def test_an_outage_of_three_hourly_slots_with_no_run_is_three_expected_three_missing(hourly):
    slots = due_slots(hourly, NOW - 24 * H, NOW)
    assert [f"{s:%H:%M}" for s in slots] == ["10:00", "11:00", "12:00"]
    t = tally(hourly, since=NOW - 24 * H, now=NOW, runs_by_slot={}, first_run=None)
    assert (t.expected, t.missing, t.missed) == (3, 3, 2)  # 10:00, 11:00 past their 30 min
    # 12:00: nothing delivered, risk point 12:15 (half of 30 min) <= 12:20 < 12:30 deadline.
    assert t.at_risk == ({"slot_utc": "2026-03-10T12:00:00Z", "run_key": None, "state": None,
                          "risk_point_utc": "2026-03-10T12:15:00Z",
                          "deadline_utc": "2026-03-10T12:30:00Z"},)


def test_runs_delivered_or_skipped_are_neither_missing_nor_at_risk(hourly):
    def run(hour: int, state: str, delivered: bool) -> RunFacts:
        slot = datetime(2026, 3, 10, hour, tzinfo=UTC)
        return RunFacts(f"acme/hourly-clicks/{slot:%Y-%m-%dT%H:%M}Z", slot, state,
                        slot + timedelta(minutes=30),
                        slot + timedelta(minutes=5) if delivered else None)

    runs = {r.slot: r for r in (run(10, "ready", True), run(11, "skipped", False),
                                run(12, "rendering", False))}
    t = tally(hourly, since=NOW - 24 * H, now=NOW, runs_by_slot=runs, first_run=None)
    assert (t.expected, t.missing, t.missed) == (3, 0, 0)
    assert [(r["run_key"], r["state"]) for r in t.at_risk] == [
        ("acme/hourly-clicks/2026-03-10T12:00Z", "rendering")]
    # a later "now" than the deadline: missed, no longer at risk
    later = tally(hourly, since=NOW - 24 * H, now=NOW + 15 * timedelta(minutes=1),
                  runs_by_slot=runs, first_run=None)
    assert (later.missed, later.at_risk) == (1, ())


def test_slots_due_before_the_first_deployment_and_of_a_paused_company_are_not_counted(hourly):
    """ADR 0029: deployed at 11:10 (its first run, slot 11:00, registered then): the 10:00 slot's
    deadline (10:30) had passed, so it is not tracked; 11:00 and 12:00 are."""
    first = (datetime(2026, 3, 10, 11, 10, tzinfo=UTC), datetime(2026, 3, 10, 11, tzinfo=UTC))
    t = tally(hourly, since=NOW - 24 * H, now=NOW, runs_by_slot={}, first_run=first)
    assert (t.expected, t.missing, t.missed) == (2, 2, 1)
    paused = hourly.model_copy(update={"company": hourly.company.model_copy(
        update={"status": "paused"})})
    t = tally(paused, since=NOW - 24 * H, now=NOW, runs_by_slot={}, first_run=None)
    assert (t.expected, t.missing, t.missed, t.at_risk) == (0, 0, 0, ())


@pytest.mark.parametrize(("at_risk_", "median", "offset"), [
    (None, None, timedelta(hours=1)),                           # half of the 2 h deadline
    (None, timedelta(minutes=30), timedelta(hours=1)),          # median shorter: half
    (None, timedelta(minutes=80), timedelta(minutes=80)),       # median longer: the median
    (None, timedelta(hours=3), timedelta(hours=2)),             # never after the deadline
    (AtRisk(after="25%"), timedelta(minutes=80), timedelta(minutes=30)),  # explicit: as set
    (AtRisk(after="45m"), None, timedelta(minutes=45)),
    (AtRisk(alert=False), timedelta(minutes=80), timedelta(minutes=80)),  # alert only: auto
])
def test_the_risk_point(at_risk_, median, offset):
    assert risk_offset(timedelta(hours=2), at_risk_, median) == offset
    assert RiskRule(at_risk_, median).offset(timedelta(hours=2)) == offset


def test_at_risk_is_between_the_risk_point_and_the_deadline_while_nothing_is_delivered():
    slot = datetime(2026, 3, 10, 5, tzinfo=UTC)
    due = slot + 2 * H
    kwargs = {"slot": slot, "deadline": due, "delivered": False, "state": "registered"}
    assert at_risk(**kwargs, now=slot + 59 * timedelta(minutes=1)) == (False, slot + H)
    assert at_risk(**kwargs, now=slot + H) == (True, slot + H)
    assert at_risk(**kwargs, now=due) == (False, slot + H)  # missed, not at risk
    assert at_risk(**{**kwargs, "delivered": True}, now=slot + 90 * timedelta(minutes=1))[0] \
        is False
    assert at_risk(**{**kwargs, "state": "cancelled"}, now=slot + 90 * timedelta(minutes=1))[0] \
        is False
    assert at_risk(**{**kwargs, "deadline": None}, now=slot + H) == (False, None)


def test_mark_at_risk_reads_a_row_of_the_read_models():
    row = {"schedule": "acme/daily-spend", "slot_utc": "2026-03-10T05:00:00Z",
           "deadline_utc": "2026-03-10T07:00:00Z", "delivered_at_utc": None, "state": "ready"}
    rules = {"acme/daily-spend": RiskRule(AtRisk(after="90m"))}
    assert mark_at_risk(dict(row), datetime(2026, 3, 10, 6, 30, tzinfo=UTC), rules)[
        "at_risk"] is True
    marked = mark_at_risk(dict(row), datetime(2026, 3, 10, 6, 29, tzinfo=UTC), rules)
    assert (marked["at_risk"], marked["risk_point_utc"]) == (False, "2026-03-10T06:30:00Z")
    default = mark_at_risk(dict(row), datetime(2026, 3, 10, 6, 0, tzinfo=UTC))
    assert (default["at_risk"], default["risk_point_utc"]) == (True, "2026-03-10T06:00:00Z")


def test_prometheus_text_has_one_sample_per_schedule_and_figure(hourly):
    t = tally(hourly, since=NOW - 24 * H, now=NOW, runs_by_slot={}, first_run=None)
    text = prometheus_text([t], 24 * H)
    assert text.endswith("\n")
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == [
        "export_metrics_horizon_seconds 86400",
        'export_slots_expected{company="acme",schedule="acme/hourly-clicks"} 3',
        'export_slots_missing{company="acme",schedule="acme/hourly-clicks"} 3',
        'export_slots_missed{company="acme",schedule="acme/hourly-clicks"} 2',
        'export_runs_at_risk{company="acme",schedule="acme/hourly-clicks"} 1',
    ]
    assert "# TYPE export_slots_missing gauge" in text


def test_the_first_catch_up_is_not_tracked_but_an_outage_after_deployment_is(hourly):
    """ADR 0029. Deployed at 12:10: the newest due slot (12:00) registered first, the catch-up
    of 10:00 and 11:00 at 12:12, delivered at 12:15 — after deadlines that passed before the
    schedule existed: nothing missed, nothing counted. Deployed at 10:05 instead, then an
    outage: 11:00 missed its deadline and counts."""
    def run(hour: int, delivered: datetime | None) -> RunFacts:
        slot = datetime(2026, 3, 10, hour, tzinfo=UTC)
        return RunFacts(f"acme/hourly-clicks/2026-03-10T{hour}:00Z", slot,
                        "ready" if delivered else "registered", slot + 30 * timedelta(minutes=1),
                        delivered)

    deployed = datetime(2026, 3, 10, 12, 10, tzinfo=UTC)
    catch_up = datetime(2026, 3, 10, 12, 15, tzinfo=UTC)
    runs = {r.slot: r for r in (run(12, None), run(10, catch_up), run(11, catch_up))}
    t = tally(hourly, since=NOW - 24 * H, now=NOW, runs_by_slot=runs,
              first_run=(deployed, datetime(2026, 3, 10, 10, tzinfo=UTC)))
    assert (t.expected, t.missing, t.missed) == (1, 0, 0)
    outage = tally(hourly, since=NOW - 24 * H, now=NOW, runs_by_slot={},
                   first_run=(datetime(2026, 3, 10, 10, 5, tzinfo=UTC),
                              datetime(2026, 3, 10, 10, tzinfo=UTC)))
    assert (outage.expected, outage.missing, outage.missed) == (3, 3, 2)
