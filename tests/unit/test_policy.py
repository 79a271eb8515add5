"""Start policies and recovery bookkeeping (pure functions of export_lib.periods.decisions)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from export_lib.config.timing import Timing
from export_lib.periods.decisions import missed_slots, start_decision

DEADLINE = datetime(2026, 3, 29, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(("policy", "action", "reason"), [
    ("finish", "run", r"late_start=finish: started 1 h 30 min after its deadline 2026-03-29T07:00Z; "
                      r"exporting anyway"),
    ("skip", "skip", r"late_start=skip: started 1 h 30 min after .* the period is not exported"),
    ("hold", "hold", r"late_start=hold: .* run 'exportctl release <run key>' and clear this task"),
])
def test_late_start_policies(policy, action, reason):
    decision = start_decision(company_status="active", late_start=policy, deadline=DEADLINE,
                              now=DEADLINE + timedelta(minutes=90))
    assert decision.action == action
    assert re.fullmatch(reason, decision.reason), decision.reason


def test_on_time_runs_and_released_holds_proceed():
    assert start_decision(company_status="active", late_start="hold", deadline=DEADLINE,
                          now=DEADLINE).action == "run"
    released = start_decision(company_status="active", late_start="hold", deadline=DEADLINE,
                              now=DEADLINE + timedelta(minutes=5), released=True)
    assert (released.action, released.reason.startswith("late_start=hold: started 5 min")) == (
        "run", True)


def test_paused_company_skips_with_the_fix_in_the_reason():
    decision = start_decision(company_status="paused", late_start="finish", deadline=None,
                              now=DEADLINE)
    assert decision == type(decision)("skip", "company is paused; resume it in its config file "
                                              "to export")


def test_missed_slots_are_those_strictly_between_two_runs():
    timing = Timing.model_validate({"timezone": "Europe/Berlin", "export_hour": 7,
                                    "interval_hours": 24})
    prev = datetime(2026, 3, 26, 6, 0, tzinfo=UTC)
    current = datetime(2026, 3, 30, 5, 0, tzinfo=UTC)  # CEST from 29 March
    assert missed_slots(timing, previous=prev, current=current) == (
        datetime(2026, 3, 27, 6, 0, tzinfo=UTC), datetime(2026, 3, 28, 6, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 5, 0, tzinfo=UTC))
    assert missed_slots(timing, previous=None, current=current) == ()
