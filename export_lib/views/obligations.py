"""The obligations read model: what each schedule owed its customer, and what happened.

Every run gets one *outcome*, a word a support person understands (``OUTCOMES``), computed in
SQL (:func:`outcome_expression`) so the runs list can be filtered by it, ordered newest slot
first and paginated in the query itself. The per-schedule strip (:func:`schedule_strips`) adds
what the ledger cannot hold: slots the timetable expected that have no run at all
("expected, no run"). Pure functions over ledger rows, the catalog and ``now``; nothing here
writes.

Outcomes of a run (the first that applies):

* ``skipped`` / ``cancelled`` / ``failed``: the run's state, with its reason;
* ``storage``: failed because the volume under its render was full (``StorageFull``): it waits
  on storage, and the task's retry exports it once space is freed;
* ``running``: reading, rendering or validating right now;
* ``held``: started after its deadline under ``late_start: hold``; an operator must release it;
* ``released``: an operator released it; it runs when its task is cleared (or retried);
* ``revoked``: an operator revoked every published version (regenerate the period);
* ``unresolved``: published, but a delivery gave up (exhausted or refused) — requeue it;
* ``untracked``: would be ``late`` or ``missed``, but its deadline had passed before the
  schedule was first deployed (ADR 0029: the first catch-up of a new schedule); when it was
  delivered, the delivery time is still shown;
* ``late`` / ``on_time``: first delivery acknowledged after / before the deadline;
* ``missed``: the deadline passed and nothing was delivered;
* ``waiting``: registered or delivering, deadline still ahead.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import Field
from sqlalchemy.engine import Engine

from export_lib.errors import STORAGE_FULL_PREFIX
from export_lib.ledger.schema import artifacts, deliveries, runs
from export_lib.ledger.states import IN_FLIGHT, DeliveryState, RunState
from export_lib.periods.decisions import HOLD_REASON_PREFIX
from export_lib.periods.instants import format_instant
from export_lib.periods.names import deadline_for, period_label
from export_lib.periods.slots import next_slots, slots_between
from export_lib.views.reports import LedgerFilter, build_filter, ledger_where
from export_lib.views.tracking import NOT_TRACKED, first_seen, slot_tracked, tracked_expression

if TYPE_CHECKING:
    from sqlalchemy.engine import Row
    from sqlalchemy.sql.elements import ColumnElement

    from export_lib.config.models import Schedule
    from export_lib.config.timing import Timing

# outcome → what the page says, in plain words (the legend)
OUTCOMES: dict[str, str] = {
    "on_time": "delivered on time",
    "late": "delivered late",
    "missed": "missed its deadline: nothing delivered",
    "running": "running now",
    "waiting": "waiting (deadline still ahead)",
    "held": "held: started after its deadline, waiting for an operator to release it",
    "released": "released by an operator: exports when its task is cleared or retried",
    "skipped": "skipped (the reason is shown)",
    "failed": "failed (the error is shown)",
    "storage": "waiting on storage: the render's volume was full; the retry exports it once "
               "space is freed (the error names the volume)",
    "revoked": "revoked by an operator: withdrawn, never delivered again (regenerate it)",
    "unresolved": "delivery unresolved: a destination gave up, requeue it",
    "cancelled": "cancelled",
    # ADR 0029: a run or a slot whose deadline passed before the schedule was first deployed
    "untracked": NOT_TRACKED,
}
# only in the strip: slots without a run
SLOT_ONLY: dict[str, str] = {
    "no_run": "expected, no run: the schedule was due and nothing ran",
    "due": "due, not started yet (deadline still ahead)",
    "paused": "expected, no run: the company is paused",
}
RELEASE_REASON_PREFIX = "released by "  # Ledger.release's reason
GAVE_UP = (DeliveryState.EXHAUSTED.value, DeliveryState.REFUSED.value)
MAX_LIMIT = 200


class ObligationFilter(LedgerFilter):
    """The obligations page: by outcome instead of run state; unknown outcomes are refused
    with the valid ones named."""

    outcome: str | None = None
    limit: int = Field(default=25, ge=1, le=MAX_LIMIT)


def obligation_filter(**values: Any) -> ObligationFilter:
    """A filter from query-string values; every problem in one ConfigError naming the field."""
    outcome = values.get("outcome")
    problems = ([f"state: unknown state {outcome!r}; valid: " + ", ".join(OUTCOMES)]
                if outcome not in (None, "") and outcome not in OUTCOMES else [])
    return build_filter(ObligationFilter, problems, **values)


def _first_ack():
    return (sa.select(sa.func.min(deliveries.c.acknowledged_at))
            .where(deliveries.c.run_key == runs.c.run_key).scalar_subquery())


def outcome_expression(now: datetime):
    """The SQL CASE giving each ``export_runs`` row its outcome at ``now`` (see module doc)."""
    first_ack = _first_ack()
    gave_up = sa.exists().where(deliveries.c.run_key == runs.c.run_key,
                                deliveries.c.state.in_(GAVE_UP))
    past_deadline = sa.and_(runs.c.deadline.is_not(None), runs.c.deadline < now)
    published = sa.exists().where(artifacts.c.run_id == runs.c.id)
    live = sa.exists().where(artifacts.c.run_id == runs.c.id,
                             artifacts.c.revoked_at.is_(None))
    # Evaluated only for a run that would be late or missed (CASE stops at its first match).
    judged = sa.or_(sa.and_(first_ack.is_not(None), first_ack > runs.c.deadline),
                    sa.and_(first_ack.is_(None), past_deadline))
    return sa.case(
        (runs.c.state == RunState.SKIPPED.value, "skipped"),
        (runs.c.state == RunState.CANCELLED.value, "cancelled"),
        (sa.and_(runs.c.state == RunState.FAILED.value,
                 runs.c.reason.like(STORAGE_FULL_PREFIX + "%")), "storage"),
        (runs.c.state == RunState.FAILED.value, "failed"),
        (runs.c.state.in_([s.value for s in IN_FLIGHT]), "running"),
        (sa.and_(runs.c.state == RunState.REGISTERED.value,
                 runs.c.reason.like(HOLD_REASON_PREFIX + "%")), "held"),
        (sa.and_(runs.c.state == RunState.REGISTERED.value,
                 runs.c.reason.like(RELEASE_REASON_PREFIX + "%")), "released"),
        (sa.and_(runs.c.state == RunState.READY.value, published, ~live), "revoked"),
        (sa.and_(runs.c.state == RunState.READY.value, gave_up), "unresolved"),
        (sa.and_(runs.c.deadline.is_not(None), judged, ~tracked_expression()), "untracked"),
        (sa.and_(first_ack.is_not(None), runs.c.deadline.is_not(None),
                 first_ack > runs.c.deadline), "late"),
        (first_ack.is_not(None), "on_time"),
        (past_deadline, "missed"),
        else_="waiting",
    )


def _where(f: ObligationFilter, outcome: ColumnElement[str]) -> list[ColumnElement[bool]]:
    clauses = ledger_where(f)
    if f.outcome:
        clauses.append(outcome == f.outcome)
    return clauses


def _run_columns(now: datetime) -> list[Any]:
    return [runs.c.run_key, runs.c.company, runs.c.schedule_id, runs.c.slot,
            runs.c.window_start, runs.c.window_end, runs.c.timezone, runs.c.config_version,
            runs.c.deadline, runs.c.state, runs.c.reason, runs.c.owner, runs.c.trigger,
            _first_ack().label("delivered_at"), outcome_expression(now).label("outcome")]


def _minutes_text(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes >= 24 * 60:
        return f"{minutes // 1440} d {minutes % 1440 // 60} h"
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def run_row(r: Row[Any], now: datetime) -> dict[str, Any]:
    """One run as the page shows it (``r``: a row of :func:`_run_columns`)."""
    outcome = r.outcome
    lateness = None
    if outcome == "late":
        lateness = f"late by {_minutes_text(r.delivered_at - r.deadline)}"
    elif outcome == "untracked":  # what happened, without a verdict (ADR 0029)
        lateness = (f"delivered {_minutes_text(r.delivered_at - r.deadline)} after a deadline "
                    "that passed before the schedule was deployed" if r.delivered_at else
                    "nothing delivered; the deadline passed before the schedule was deployed")
    elif outcome in ("missed", "held", "released", "unresolved") and r.deadline and now > r.deadline \
            and r.delivered_at is None:
        lateness = f"deadline passed {_minutes_text(now - r.deadline)} ago"
    elif outcome == "on_time" and r.deadline:
        lateness = f"{_minutes_text(r.deadline - r.delivered_at)} before the deadline"
    tz = r.timezone
    return {
        "run_key": r.run_key, "company": r.company, "schedule": r.schedule_id,
        "outcome": outcome, "outcome_text": OUTCOMES[outcome], "state": r.state,
        "reason": r.reason, "owner": r.owner, "trigger": r.trigger,
        "period": period_label(r.window_start, r.window_end, tz), "timezone": tz,
        "slot_utc": format_instant(r.slot), "slot_local": _local(r.slot, tz),
        "window_start_utc": format_instant(r.window_start),
        "window_end_utc": format_instant(r.window_end),
        "deadline_utc": format_instant(r.deadline) if r.deadline else None,
        "delivered_at_utc": format_instant(r.delivered_at) if r.delivered_at else None,
        "lateness": lateness, "config_version": r.config_version,
    }


def _local(instant: datetime, tz: str) -> str:
    from zoneinfo import ZoneInfo

    return instant.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


def obligations_page(engine: Engine, f: ObligationFilter, *, now: datetime) -> dict[str, Any]:
    """One page of runs, newest slot first, filtered (outcome included) and paginated in SQL:
    two statements (count, page) whatever the page size."""
    where = _where(f, outcome_expression(now))
    with engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(runs).where(*where)
                             ).scalar_one()
        rows = conn.execute(sa.select(*_run_columns(now)).where(*where)
                            .order_by(runs.c.slot.desc(), runs.c.id.desc())
                            .limit(f.limit).offset(f.offset)).all()
    return {"total": total, "limit": f.limit, "offset": f.offset,
            "runs": [run_row(r, now) for r in rows]}


def _last_slots(timing: Timing, now: datetime, count: int) -> tuple[datetime, ...]:
    span = timedelta(hours=(timing.interval_hours or 24) * (count + 1))
    while True:
        found = slots_between(timing, now - span, now + timedelta(seconds=1))
        if len(found) >= count or span > timedelta(days=400):
            return found[-count:]
        span *= 2


def schedule_strips(engine: Engine, schedules: Iterable[Schedule], *, now: datetime,
                    slots: int = 14, next_count: int = 3) -> list[dict[str, Any]]:
    """Per schedule: its last ``slots`` expected slots coloured by outcome (oldest first; a slot
    without a run is ``no_run``, ``due`` or ``paused``; ``untracked`` when its deadline passed
    before the schedule was first deployed, ADR 0029), the next runs in local time and UTC, the
    owner and the last period delivered. Three statements whatever the number of schedules."""
    schedules = list(schedules)
    expected = {s.schedule_id: _last_slots(s.timing, now, slots) for s in schedules}
    oldest = min((v[0] for v in expected.values() if v), default=now)
    ids = [s.schedule_id for s in schedules]
    found: dict[tuple[str, datetime], dict[str, Any]] = {}
    delivered: dict[str, str] = {}
    seen: dict[str, tuple[datetime, datetime]] = {}
    if ids:
        with engine.connect() as conn:
            for r in conn.execute(sa.select(*_run_columns(now))
                                  .where(runs.c.schedule_id.in_(ids), runs.c.slot >= oldest)):
                found[(r.schedule_id, r.slot)] = run_row(r, now)
            acked = sa.exists().where(deliveries.c.run_key == runs.c.run_key,
                                      deliveries.c.state == DeliveryState.ACKNOWLEDGED.value)
            newest = (sa.select(runs.c.schedule_id, sa.func.max(runs.c.slot).label("slot"))
                      .where(runs.c.schedule_id.in_(ids), acked)
                      .group_by(runs.c.schedule_id).subquery())
            for r in conn.execute(sa.select(runs.c.schedule_id, runs.c.window_start,
                                            runs.c.window_end, runs.c.timezone)
                                  .join(newest, sa.and_(runs.c.schedule_id == newest.c.schedule_id,
                                                        runs.c.slot == newest.c.slot))):
                delivered[r.schedule_id] = period_label(r.window_start, r.window_end, r.timezone)
            seen = first_seen(conn, ids)
    out = []
    for s in schedules:
        cells: list[dict[str, Any]] = []
        for slot in expected[s.schedule_id]:
            run = found.get((s.schedule_id, slot))
            if run is not None:
                cells.append({**run, "kind": "run"})
                _mark_version_change(cells, s, slot)
                continue
            version = s.version_for(slot)
            if version is None:
                continue  # before the schedule's first effective_from: nothing was owed
            due = deadline_for(version, slot)
            outcome = ("untracked" if not slot_tracked(slot, due, seen.get(s.schedule_id))
                       else "paused" if s.company.status == "paused"
                       else "due" if due > now else "no_run")
            cells.append({"kind": "slot", "outcome": outcome,
                          "outcome_text": {**OUTCOMES, **SLOT_ONLY}[outcome],
                          "slot_utc": format_instant(slot),
                          "slot_local": _local(slot, s.timing.timezone),
                          "deadline_utc": format_instant(due),
                          "lateness": (f"deadline passed {_minutes_text(now - due)} ago"
                                       if due <= now else None)})
            _mark_version_change(cells, s, slot)
        out.append({
            "company": s.company.id, "schedule": s.schedule_id, "dag_id": s.dag_id,
            "owner": s.owner, "timing": s.timing.summary, "company_status": s.company.status,
            "strip": cells, "last_delivered_period": delivered.get(s.schedule_id),
            "next_runs": [{"local": _local(t, s.timing.timezone), "utc": format_instant(t)}
                          for t in next_slots(s.timing, now, next_count)],
        })
    return out


def _mark_version_change(cells: list[dict[str, Any]], schedule: Schedule, slot: datetime
                         ) -> None:
    """Mark the newest cell when its slot is the first of a config version in the strip (issue
    22: support sees where a timing or config edit took effect); ``version_change`` says which
    version and, for a timing edit, the new timing."""
    version = schedule.version_for(slot)
    cells[-1]["config_version"] = version.config_version if version else None
    before = cells[-2].get("config_version") if len(cells) > 1 else None
    if version is None or before is None or before == version.config_version:
        return
    since = version.effective_from
    text = (f"config version {version.config_version[:12]} from "
            f"{format_instant(since) if since else 'the start'}")
    if schedule.timing.at(slot) != schedule.timing.at(
            datetime.fromisoformat(cells[-2]["slot_utc"].replace("Z", "+00:00"))):
        text += f": new timing {schedule.timing.at(slot).summary}"
    cells[-1]["version_change"] = text


def visible_schedules(schedules: Iterable[Any], f: ObligationFilter) -> list[Any]:
    """The catalog's schedules this reader may see and asked for, by company then id."""
    return sorted((s for s in schedules
                   if (f.visible_companies is None or s.company.id in f.visible_companies)
                   and (not f.company or s.company.id == f.company)
                   and (not f.schedule_id or s.schedule_id == f.schedule_id)),
                  key=lambda s: (s.company.id, s.schedule_id))


__all__ = ["OUTCOMES", "SLOT_ONLY", "ObligationFilter", "obligation_filter", "obligations_page",
           "outcome_expression", "run_row", "schedule_strips", "visible_schedules"]
