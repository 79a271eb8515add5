"""Outages and risk (ADR 0020): what the timetables made due, what the ledger
has of it, and which exports are at risk of missing their deadline. Pure over ``now``.

* **due slots** come from the schedule's timing (its versions included), never from runs, so an
  outage in which the scheduler created nothing still shows: ``expected`` slots with no run are
  ``missing``;
* a slot (with or without a run) is **at risk** while nothing of it was delivered (no
  acknowledged delivery), it was not skipped or cancelled, and ``risk point <= now < deadline``.
  The risk point is ``slot + risk_offset``: ``at_risk.after`` when the export sets it (a share of
  the deadline, or a duration), else half the deadline, or the schedule's median slot→first
  acknowledged delivery of its last :data:`MEDIAN_SAMPLE` scheduled runs if that is longer —
  never later than the deadline;
* a slot is **missed** when its deadline passed and nothing was delivered (or it has no run).

Slots whose deadline passed before the schedule was first deployed are not counted (ADR 0029;
the obligations strip shows them ``untracked``), nor are a paused company's. Read by the
obligations page, ``exportctl runs``, the ``/exports/metrics`` endpoint and the at-risk deadline
alert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from export_lib.ledger.schema import deliveries, runs
from export_lib.periods.instants import format_instant
from export_lib.periods.names import deadline_for
from export_lib.periods.slots import slots_between
from export_lib.views.tracking import first_seen, slot_tracked

if TYPE_CHECKING:
    from export_lib.config.models import Schedule
    from export_lib.config.risk import AtRisk

DEFAULT_SHARE = 0.5
MEDIAN_SAMPLE = 20  # the newest scheduled, delivered runs a median is taken over
MEDIAN_WINDOW = timedelta(days=90)  # older runs are not read for the median
DEFAULT_HORIZON = timedelta(hours=24)  # how far back the metrics count due slots
NOT_AT_RISK = ("skipped", "cancelled")  # run states that owe nothing any more


@dataclass(frozen=True)
class RiskRule:
    """A schedule's risk point: its ``at_risk`` setting and its median delivery time."""

    at_risk: AtRisk | None = None
    median: timedelta | None = None

    def offset(self, deadline: timedelta) -> timedelta:
        return risk_offset(deadline, self.at_risk, self.median)


DEFAULT_RULE = RiskRule()


def risk_offset(deadline: timedelta, at_risk: AtRisk | None, median_delivery: timedelta | None
                ) -> timedelta:
    """How long after its slot an undelivered export becomes at risk (see the module doc)."""
    if at_risk is not None and at_risk.duration is not None:
        return min(at_risk.duration, deadline)
    if at_risk is not None and at_risk.share is not None:
        return deadline * at_risk.share
    offset = deadline * DEFAULT_SHARE
    if median_delivery is not None and median_delivery > offset:
        offset = min(median_delivery, deadline)
    return offset


def at_risk(*, slot: datetime, deadline: datetime | None, delivered: bool, state: str | None,
            now: datetime, rule: RiskRule = DEFAULT_RULE) -> tuple[bool, datetime | None]:
    """``(at risk now?, risk point)`` of one slot; no deadline: never at risk."""
    if deadline is None:
        return False, None
    point = slot + rule.offset(deadline - slot)
    risky = (not delivered and state not in NOT_AT_RISK and point <= now < deadline)
    return risky, point


def _instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def mark_at_risk(row: dict[str, Any], now: datetime,
                 rules: Mapping[str, RiskRule] | None = None) -> dict[str, Any]:
    """``row`` (a run or a strip cell of the read models: ``slot_utc``, ``deadline_utc``,
    ``delivered_at_utc``, ``state``, ``schedule``) with ``at_risk`` and ``risk_point_utc``."""
    slot = _instant(row.get("slot_utc"))
    rule = (rules or {}).get(row.get("schedule") or "", DEFAULT_RULE)
    risky, point = (False, None) if slot is None else at_risk(
        slot=slot, deadline=_instant(row.get("deadline_utc")),
        delivered=row.get("delivered_at_utc") is not None, state=row.get("state"), now=now,
        rule=rule)
    row["at_risk"] = risky
    row["risk_point_utc"] = format_instant(point) if point is not None else None
    return row


def due_slots(schedule: Schedule, since: datetime, now: datetime) -> tuple[datetime, ...]:
    """The slots ``since <= s <= now`` the schedule owed (a version in force for each)."""
    return tuple(s for s in slots_between(schedule.timing, since, now + timedelta(microseconds=1))
                 if schedule.version_for(s) is not None)


@dataclass(frozen=True)
class RunFacts:
    """What the tally needs of one run of the ledger."""

    run_key: str
    slot: datetime
    state: str
    deadline: datetime | None
    delivered_at: datetime | None


@dataclass(frozen=True)
class Tally:
    """One schedule's due slots over ``[since, now]``: the metrics and the page's facts."""

    company: str
    schedule_id: str
    since: datetime
    expected: int = 0
    missing: int = 0
    missed: int = 0
    at_risk: tuple[dict[str, Any], ...] = field(default=())


def tally(schedule: Schedule, *, since: datetime, now: datetime,
          runs_by_slot: Mapping[datetime, RunFacts],
          first_run: tuple[datetime, datetime] | None, rule: RiskRule = DEFAULT_RULE) -> Tally:
    """Count ``schedule``'s due slots (pure; see the module doc for each word).
    ``first_run``: the schedule's first deployment and oldest run's slot
    (:func:`~export_lib.views.tracking.first_seen`), None when it has no run yet."""
    if schedule.company.status == "paused":
        return Tally(schedule.company.id, schedule.schedule_id, since)
    expected = missing = missed = 0
    risky: list[dict[str, Any]] = []
    for slot in due_slots(schedule, since, now):
        run = runs_by_slot.get(slot)
        deadline = run.deadline if run is not None and run.deadline else deadline_for(
            schedule.version_for(slot), slot)  # type: ignore[arg-type]
        if not slot_tracked(slot, deadline, first_run):
            continue  # due before the schedule was first deployed: not tracked (ADR 0029)
        expected += 1
        missing += run is None
        delivered = run is not None and run.delivered_at is not None
        state = run.state if run is not None else None
        missed += not delivered and state not in NOT_AT_RISK and deadline <= now
        risky_now, point = at_risk(slot=slot, deadline=deadline, delivered=delivered,
                                   state=state, now=now, rule=rule)
        if risky_now:
            risky.append({"slot_utc": format_instant(slot), "run_key": run.run_key if run else None,
                          "state": state, "risk_point_utc": format_instant(point),  # type: ignore[arg-type]
                          "deadline_utc": format_instant(deadline)})
    return Tally(schedule.company.id, schedule.schedule_id, since, expected, missing, missed,
                 tuple(risky))


# -- the ledger reads (a fixed number of statements whatever the number of schedules) ---------
def _first_ack():
    return (sa.select(sa.func.min(deliveries.c.acknowledged_at))
            .where(deliveries.c.run_key == runs.c.run_key).scalar_subquery())


def median_delivery(engine: Engine | Connection, schedule_ids: Iterable[str], *,
                    now: datetime, sample: int = MEDIAN_SAMPLE) -> dict[str, timedelta]:
    """Per schedule, the median slot→first acknowledged delivery of its newest ``sample``
    delivered runs started by the scheduler (catch-up, backfills and manual runs start late by
    design and are left out); schedules without one are absent (one statement). Given a
    connection, it reads on it (the scheduler's read sets its own statement timeout there)."""
    ids = sorted(set(schedule_ids))
    took: dict[str, list[timedelta]] = {}
    if not ids:
        return {}
    first_ack = _first_ack().label("delivered_at")
    with (nullcontext(engine) if isinstance(engine, Connection) else engine.connect()) as conn:
        rows = conn.execute(
            sa.select(runs.c.schedule_id, runs.c.slot, first_ack)
            .where(runs.c.schedule_id.in_(ids), runs.c.trigger == "scheduled",
                   runs.c.slot >= now - MEDIAN_WINDOW)
            .order_by(runs.c.schedule_id, runs.c.slot.desc())).all()
    for r in rows:
        found = took.setdefault(r.schedule_id, [])
        if r.delivered_at is not None and len(found) < sample:
            found.append(r.delivered_at - r.slot)
    return {sid: median(values) for sid, values in took.items() if values}


def risk_rules(engine: Engine, schedules: Iterable[Schedule], *, now: datetime,
               sample: int = MEDIAN_SAMPLE) -> dict[str, RiskRule]:
    """Each schedule's :class:`RiskRule`: its ``at_risk`` and, for the automatic risk point,
    its :func:`median_delivery` (one statement)."""
    schedules = list(schedules)
    medians = median_delivery(engine, [s.schedule_id for s in schedules
                                       if s.policies.at_risk is None
                                       or s.policies.at_risk.after is None],
                              now=now, sample=sample)
    return {s.schedule_id: RiskRule(s.policies.at_risk, medians.get(s.schedule_id))
            for s in schedules}


def outage_report(engine: Engine, schedules: Iterable[Schedule], *, now: datetime,
                  horizon: timedelta = DEFAULT_HORIZON,
                  rules: Mapping[str, RiskRule] | None = None) -> list[Tally]:
    """:func:`tally` of every schedule over ``[now - horizon, now]`` (three statements; the
    rules are read too unless given)."""
    schedules = list(schedules)
    since = now - horizon
    ids = [s.schedule_id for s in schedules]
    found: dict[str, dict[datetime, RunFacts]] = {}
    first: dict[str, tuple[datetime, datetime]] = {}
    if ids:
        with engine.connect() as conn:
            for r in conn.execute(sa.select(runs.c.run_key, runs.c.schedule_id, runs.c.slot,
                                            runs.c.state, runs.c.deadline,
                                            _first_ack().label("delivered_at"))
                                  .where(runs.c.schedule_id.in_(ids), runs.c.slot >= since)):
                found.setdefault(r.schedule_id, {})[r.slot] = RunFacts(
                    r.run_key, r.slot, r.state, r.deadline, r.delivered_at)
            first = first_seen(conn, ids)
    if rules is None:
        rules = risk_rules(engine, schedules, now=now)
    return [tally(s, since=since, now=now, runs_by_slot=found.get(s.schedule_id, {}),
                  first_run=first.get(s.schedule_id), rule=rules.get(s.schedule_id, DEFAULT_RULE))
            for s in schedules]


SLOTS_NEVER_AT_RISK = ("untracked", "paused")  # strip cells that owe nothing


def mark_page(strips: list[dict[str, Any]], page_runs: Iterable[dict[str, Any]],
              rules: Mapping[str, RiskRule], tallies: Iterable[Tally], now: datetime) -> None:
    """The obligations page's strips and runs with ``at_risk``, and each strip with its
    ``due`` figures (expected, missing, missed, at risk over the tally's horizon)."""
    by_schedule = {t.schedule_id: t for t in tallies}
    for strip in strips:
        for cell in strip["strip"]:
            cell.setdefault("schedule", strip["schedule"])
            mark_at_risk(cell, now, rules)
            if cell.get("outcome") in SLOTS_NEVER_AT_RISK:
                cell["at_risk"] = False
        t = by_schedule.get(strip["schedule"])
        strip["due"] = None if t is None else {
            "since_utc": format_instant(t.since), "expected": t.expected, "missing": t.missing,
            "missed": t.missed, "at_risk": len(t.at_risk)}
    for row in page_runs:
        mark_at_risk(row, now, rules)


__all__ = ["DEFAULT_HORIZON", "DEFAULT_RULE", "MEDIAN_SAMPLE", "RiskRule", "RunFacts", "Tally",
           "at_risk", "due_slots", "mark_at_risk", "mark_page", "median_delivery",
           "outage_report", "risk_offset", "risk_rules", "tally"]
