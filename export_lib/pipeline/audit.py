"""The gap audit, planning half: expected slots versus the ledger, and what to do with each gap
under the schedule's recovery policy (ADR 0009). Nothing here writes; ``now`` is passed in.

:func:`find_gaps` lists, per schedule, the slots that should have a run and have none in the
ledger: from ``since`` (never before the schedule's first ``effective_from``, nor — when it has
none — before its first registered run: a schedule that never ran has no obligation yet) up to
``now``. The newest due slot is not a gap while its deadline is ahead: the scheduler is creating
it. A paused company is not audited (its slots are skipped by its own runs).

:func:`plan_audit` turns the gaps into actions:

* ``each``   → ``backfill`` every gap (one Airflow backfill per DAG, under the catch-up budget);
* ``latest`` → ``backfill`` the newest gap only if no later slot has a run; every other gap is
  ``skip`` ("superseded by a later slot under recovery=latest");
* ``none``   → ``skip`` every gap with the reason;
* a gap that would be exported but whose window starts before what its source still keeps
  (``sources.<name>.retention_days`` in defaults.yaml) → ``unrecoverable`` (recorded skipped,
  reason ``unrecoverable: …``, the owner notified);
* a gap whose slot has a queued or running DAG run in Airflow (``active``) → ``untouched``;
* a period that no slot reports because of a timing switch (a version's ``effective_from``
  between the hours, :mod:`export_lib.periods.switches`) → ``recover_period`` under
  ``each``: one export of that period through the company's manual lane
  (``manual_export__<company>``) with a run id derived from the period, so it is requested and
  registered once however often the audit runs (a note under ``latest``/``none``, or when the
  source no longer keeps the data).

Applying the plan is :mod:`export_lib.pipeline.audit_apply`; a second audit finds the recorded
gaps registered and the backfilled ones already run (or requested), so it changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import func, select

from export_lib.periods.coverage import ALREADY_DELIVERED, describe
from export_lib.periods.instants import format_instant
from export_lib.periods.names import deadline_for, period_label
from export_lib.periods.slots import latest_slot_at_or_before, slots_between
from export_lib.periods.switches import switch_problems
from export_lib.periods.windows import ExportWindow, resolve_window
from export_lib.pipeline.start import earlier_timing_cover

if TYPE_CHECKING:
    from export_lib.config.loader import Catalog
    from export_lib.config.models import Schedule
    from export_lib.ledger import Ledger

Action = Literal["backfill", "skip", "unrecoverable", "untouched", "recover_period"]
UNRECOVERABLE_PREFIX = "unrecoverable: "
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Gap:
    """An expected slot without a run in the ledger."""

    schedule_id: str
    company: str
    dag_id: str
    slot: datetime
    owner: str
    recovery: str
    window_start: datetime
    source: str
    retention_days: int
    # Why the slot needs no export: its period went out under an earlier timing.
    covered: str | None = None
    # A period no slot reports after a timing switch: [start, end) and the switch that dropped it; ``slot``
    # is then the old timing's slot that would have reported it (not a slot of the timeline).
    period: tuple[datetime, datetime] | None = None
    switch: datetime | None = None
    format: str = "csv"

    @property
    def run_id(self) -> str:
        """The manual lane's Airflow run id recovering :attr:`period`: the same every audit,
        so Airflow refuses a second request (409) and the ledger registers one run."""
        assert self.period is not None
        return (f"recover__{self.schedule_id.replace('/', '.')}__"
                f"{self.period[0]:%Y%m%dT%H%M%SZ}__{self.period[1]:%Y%m%dT%H%M%SZ}")

    @property
    def manual_dag_id(self) -> str:
        return f"manual_export__{self.company}"

    def manual_params(self) -> dict[str, Any]:
        """The manual export's trigger params (the form's fields) for :attr:`period`."""
        assert self.period is not None and self.switch is not None
        return {"company": self.company, "base_export": self.schedule_id,
                "window_start": format_instant(self.period[0]),
                "window_end": format_instant(self.period[1]), "columns": [],
                "format": self.format, "destinations": [], "regenerate": False,
                "reason": (f"gap audit: period {period_label(*self.period, self.timezone)} of "
                           f"{self.schedule_id} is reported by no slot after its timing switch "
                           f"at {format_instant(self.switch)}; exported once")}

    timezone: str = "UTC"

    @property
    def label(self) -> str:
        if self.period is not None:
            return f"{self.schedule_id}/{period_label(*self.period, self.timezone)}"
        return f"{self.schedule_id}/{self.slot:%Y-%m-%dT%H:%MZ}"

    def log_fields(self) -> tuple[str, str, str]:
        return self.company, self.schedule_id, f"{self.slot:%Y-%m-%dT%H:%MZ}"


@dataclass(frozen=True)
class ScheduleGaps:
    """One schedule's gaps (oldest first) and its newest registered slot."""

    schedule_id: str
    dag_id: str
    recovery: str
    gaps: tuple[Gap, ...]
    newest_run: datetime | None = None


@dataclass(frozen=True)
class AuditAction:
    action: Action
    gap: Gap
    reason: str


@dataclass(frozen=True)
class AuditPlan:
    since: datetime
    until: datetime
    now: datetime
    actions: tuple[AuditAction, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def of(self, *kinds: Action) -> list[AuditAction]:
        return [a for a in self.actions if a.action in kinds]

    @property
    def backfills(self) -> dict[str, list[Gap]]:
        """DAG id → the gaps to backfill, oldest first."""
        out: dict[str, list[Gap]] = {}
        for action in self.of("backfill"):
            out.setdefault(action.gap.dag_id, []).append(action.gap)
        return out

    @property
    def recoveries(self) -> list[Gap]:
        """The periods no slot reports, to export once through the manual lane."""
        return [a.gap for a in self.of("recover_period")]

    @property
    def unrecoverable(self) -> list[Gap]:
        return [a.gap for a in self.of("unrecoverable")]

    def as_dict(self) -> dict[str, Any]:
        return {"since": format_instant(self.since), "until": format_instant(self.until),
                "now": format_instant(self.now), "notes": list(self.notes),
                "actions": [{"action": a.action, "schedule": a.gap.schedule_id,
                             "company": a.gap.company, "dag_id": a.gap.dag_id,
                             "slot_utc": format_instant(a.gap.slot), "owner": a.gap.owner,
                             "recovery": a.gap.recovery, "reason": a.reason,
                             **({"period": {"start": format_instant(a.gap.period[0]),
                                            "end": format_instant(a.gap.period[1])},
                                 "run_id": a.gap.run_id} if a.gap.period else {})}
                            for a in self.actions]}

    def lines(self) -> list[str]:
        """The plan for a person: one line per gap, notes last."""
        out = [f"{a.action:<13} {a.gap.label}  {a.reason}" for a in self.actions]
        return out + [f"note: {n}" for n in self.notes]


def _registered(ledger: Ledger, schedule_id: str, start: datetime, end: datetime
                ) -> tuple[set[datetime], datetime | None, datetime | None]:
    """Registered slots of the schedule in ``[start, end)``, its first and newest slot ever."""
    from export_lib.ledger.schema import runs

    with ledger.engine.connect() as conn:
        slots = {r.slot for r in conn.execute(select(runs.c.slot).where(
            runs.c.schedule_id == schedule_id, runs.c.slot >= start, runs.c.slot < end))}
        first, newest = conn.execute(select(func.min(runs.c.slot), func.max(runs.c.slot)).where(
            runs.c.schedule_id == schedule_id)).one()
    return slots, first, newest


def _retention(catalog: Catalog, source: str) -> int:
    try:
        return catalog.retention_days(source)
    except Exception:  # noqa: BLE001 — an unlisted source fails at render time with its message
        return 10**6


def _covered(ledger: Ledger, version: Schedule, slot: datetime, window: ExportWindow
             ) -> str | None:
    """Why the gap's period needs no export (delivered under an earlier timing), or None."""
    found = earlier_timing_cover(ledger, version, window)
    if not found:
        return None
    return (f"{ALREADY_DELIVERED}its period went out under an earlier timing: {describe(found)}; "
            f"found missing by the gap audit, not exported again (exportctl run CONFIG_DIR "
            f"--schedule {version.schedule_id} --slot {format_instant(slot)} --regenerate "
            "sends it)")


def find_gaps(catalog: Catalog, ledger: Ledger, *, since: datetime, until: datetime, now: datetime,
              company: str | None = None) -> tuple[list[ScheduleGaps], list[str]]:
    """Every schedule's gaps in ``[since, min(until, now)]``, and notes on what was not audited.

    :param catalog: the loaded config catalog (``open_catalog``)
    :param ledger: the ledger (read only)
    """
    end = min(until, now) + _TICK
    found: list[ScheduleGaps] = []
    notes: list[str] = []
    for schedule in catalog.schedules:
        if company is not None and schedule.company.id != company:
            continue
        if schedule.company.status == "paused":
            notes.append(f"{schedule.schedule_id}: company {schedule.company.id} is paused; "
                         "not audited (resume it in its config file)")
            continue
        registered, first_run, newest = _registered(ledger, schedule.schedule_id, since, end)
        anchor = schedule.first_effective or first_run
        if anchor is None:
            notes.append(f"{schedule.schedule_id}: no effective_from and no run yet; nothing is "
                         "expected before its first run (set effective_from to audit earlier)")
            continue
        latest = latest_slot_at_or_before(schedule.timing, now)
        gaps = []
        for slot in slots_between(schedule.timing, max(since, anchor), end):
            version = schedule.version_for(slot)
            if slot in registered or version is None:
                continue
            if slot == latest and deadline_for(version, slot) > now:
                continue  # the scheduler's current slot: not missed (yet)
            window = resolve_window(version, slot)
            source = version.query.source
            gaps.append(Gap(schedule.schedule_id, schedule.company.id, schedule.dag_id, slot,
                            version.owner, schedule.policies.recovery, window.start, source,
                            _retention(catalog, source), _covered(ledger, version, slot, window)))
        gaps += _unreported(catalog, ledger, schedule, max(since, anchor), end, now)
        found.append(ScheduleGaps(schedule.schedule_id, schedule.dag_id,
                                  schedule.policies.recovery, tuple(gaps), newest))
    return found, notes


def _unreported(catalog: Catalog, ledger: Ledger, schedule: Schedule, start: datetime,
                end: datetime, now: datetime) -> list[Gap]:
    """The periods no slot reports around the schedule's timing switches whose dropped slot
    is in ``[start, end)`` and that are over, unless their recovery run is registered or the
    schedule's ready runs cover them."""
    from export_lib.config.manual import manual_run_key
    from export_lib.ledger.periods import delivered_periods
    from export_lib.periods.coverage import covering

    if not schedule.timing.earlier:
        return []
    found = []
    for problem in switch_problems(schedule, now=now):
        slot = problem.slots[0] if problem.slots else None
        if problem.kind != "unreported" or slot is None or not start <= slot < end \
                or problem.end > now:
            continue
        version = schedule.version_for(problem.switch - _TICK) or schedule
        gap = Gap(schedule.schedule_id, schedule.company.id, schedule.dag_id, slot,
                  version.owner, schedule.policies.recovery, problem.start, version.query.source,
                  _retention(catalog, version.query.source), period=(problem.start, problem.end),
                  switch=problem.switch, format=version.format, timezone=problem.timezone)
        if ledger.get_run(manual_run_key(gap.company, gap.run_id)) is not None:
            continue  # requested once already: the manual lane registered it
        if covering(problem.start, problem.end, ("recovery",), delivered_periods(
                ledger, schedule.schedule_id, problem.start, problem.end)):
            continue
        found.append(gap)
    return found


def _recoverable(gap: Gap, now: datetime, action: Action, reason: str) -> AuditAction:
    """``action`` for a gap that would be exported, unless its source no longer has the data."""
    cutoff = now - timedelta(days=gap.retention_days)
    if gap.window_start >= cutoff:
        return AuditAction(action, gap, reason)
    return AuditAction("unrecoverable", gap, (
        f"{UNRECOVERABLE_PREFIX}source {gap.source} keeps {gap.retention_days} days of data and "
        f"this period starts {format_instant(gap.window_start)}, before "
        f"{format_instant(cutoff)}; not exported; owner {gap.owner} notified"))


def _period_action(gap: Gap, now: datetime) -> AuditAction | None:
    """``recover_period`` under ``each``; None (a note) otherwise or when the source no longer
    keeps the data: nothing is recorded for a period that has no slot."""
    if gap.recovery != "each":
        return None
    action = _recoverable(gap, now, "recover_period", (
        f"reported by no slot after the timing switch at {format_instant(gap.switch)}; "
        f"exported once through {gap.manual_dag_id} (run {gap.run_id})"))
    return action if action.action == "recover_period" else None


def _period_note(gap: Gap, now: datetime) -> str:
    head = (f"{gap.label}: reported by no slot after the timing switch at "
            f"{format_instant(gap.switch)}; not exported: ")
    if gap.recovery != "each":
        why = f"recovery={gap.recovery}"
    else:
        why = _recoverable(gap, now, "recover_period", "").reason.removeprefix(
            UNRECOVERABLE_PREFIX)
    return (head + why + f"; export it by hand with {gap.manual_dag_id} (window "
            f"{format_instant(gap.period[0])} .. {format_instant(gap.period[1])})")


def _schedule_actions(item: ScheduleGaps, now: datetime, busy: set[datetime]
                      ) -> list[AuditAction]:
    periods = [g for g in item.gaps if g.period is not None]
    item = ScheduleGaps(item.schedule_id, item.dag_id, item.recovery,
                        tuple(g for g in item.gaps if g.period is None), item.newest_run)
    actions = [a for a in (_period_action(g, now) for g in periods) if a is not None]
    actions += [AuditAction("untouched", g, "a DAG run of this slot is queued or running in "
                            "Airflow; left to it") for g in item.gaps if g.slot in busy]
    actions += [AuditAction("skip", g, g.covered) for g in item.gaps
                if g.slot not in busy and g.covered]
    gaps = [g for g in item.gaps if g.slot not in busy and not g.covered]
    if not gaps:
        return actions
    if item.recovery == "each":
        return actions + [_recoverable(g, now, "backfill", "recovery=each: missed; backfilled "
                                       "through Airflow under the catch-up budget") for g in gaps]
    if item.recovery == "none":
        return actions + [AuditAction("skip", g, (
            f"recovery=none: missed (no run was registered); not exported under recovery=none; "
            f"for the attention of {g.owner}")) for g in gaps]
    newest = gaps[-1]
    later = [s for s in (item.newest_run, *busy) if s is not None and s > newest.slot]
    keep = None if later else newest
    for gap in gaps:
        if gap is keep:
            actions.append(_recoverable(gap, now, "backfill", "recovery=latest: the newest "
                                        "missed slot; backfilled through Airflow"))
            continue
        superseder = min(later) if later else newest.slot
        actions.append(AuditAction("skip", gap, (
            "superseded by a later slot under recovery=latest "
            f"({superseder:%Y-%m-%dT%H:%MZ}); found missing by the gap audit")))
    return actions


def plan_audit(found: Sequence[ScheduleGaps], *, since: datetime, until: datetime,
               now: datetime, active: Mapping[str, Iterable[datetime]] | None = None,
               notes: Sequence[str] = ()) -> AuditPlan:
    """The actions for every gap (see the module docstring). Pure.

    :param active: DAG id → logical dates with a queued or running DAG run in Airflow
    """
    actions: list[AuditAction] = []
    notes = [*notes, *(_period_note(g, now) for item in found for g in item.gaps
                       if g.period is not None and _period_action(g, now) is None)]
    for item in found:
        busy = set((active or {}).get(item.dag_id, ()))
        actions.extend(sorted(_schedule_actions(item, now, busy),
                              key=lambda a: (a.gap.schedule_id, a.gap.slot)))
    return AuditPlan(since, until, now, tuple(actions), tuple(notes))


__all__ = ["UNRECOVERABLE_PREFIX", "AuditAction", "AuditPlan", "Gap", "ScheduleGaps",
           "find_gaps", "plan_audit"]
