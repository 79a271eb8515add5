"""The gap audit, executing half: record the skipped and unrecoverable gaps in the ledger and
request the backfills from Airflow (ADR 0009). ``exportctl audit`` and the ``export_gap_audit``
DAG both call :func:`run_audit`.

Recording a gap registers its run (window, config version and snapshot of the version in force
for the slot, trigger ``audit``) and moves it to ``skipped`` with the plan's reason; an
unrecoverable one also gets an event ``owner notified: …`` (the notification intent) and one
warning line naming the owner, and is handed to ``notify`` when given. A run someone else
registered meanwhile is left alone. Backfills go through :class:`AirflowApi`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from export_lib.logfmt import bind, get_logger, scope
from export_lib.periods.instants import format_instant
from export_lib.pipeline.audit import AuditPlan, Gap, find_gaps, plan_audit
from export_lib.pipeline.backfills import AirflowApi, BackfillOutcome, trigger_once
from export_lib.pipeline.batch_requests import request_batches

if TYPE_CHECKING:
    from export_lib.config.loader import Catalog
    from export_lib.ledger import Ledger

log = get_logger(__name__)

AUDIT_TRIGGER = "audit"
Notify = Callable[[Gap, str], None]


@dataclass(frozen=True)
class AuditResult:
    """What one audit did (``applied`` False: a dry run, nothing changed). ``as_dict()`` is its
    JSON (``exportctl audit --json``)."""

    plan: AuditPlan
    recorded: list[str] = field(default_factory=list)  # run keys recorded skipped
    left_alone: list[str] = field(default_factory=list)  # registered meanwhile by someone else
    backfills: list[BackfillOutcome] = field(default_factory=list)
    not_requested: list[str] = field(default_factory=list)  # DAG ids (dry run or no API)
    # Periods no slot reports: (manual run id, what Airflow answered) per recovery requested.
    recoveries: list[tuple[str, str]] = field(default_factory=list)
    # Batched recovery runs (ADR 0032): (batch run id, what Airflow answered) per batch.
    batches: list[tuple[str, str]] = field(default_factory=list)
    applied: bool = False

    @property
    def changed(self) -> int:
        return (len(self.recorded) + sum(len(b.created) for b in self.backfills)
                + sum(answer == "requested" for _, answer in (*self.recoveries, *self.batches)))

    def summary(self) -> str:
        plan = self.plan
        gaps = len(plan.actions)
        if not self.applied:
            return (f"dry run: {gaps} gap(s) found; nothing was changed "
                    f"({len(plan.of('backfill'))} to backfill, {len(plan.of('skip'))} to record "
                    f"skipped, {len(plan.unrecoverable)} unrecoverable, "
                    f"{len(plan.of('untouched'))} in flight"
                    + (f", {len(plan.recoveries)} period(s) no slot reports to export once"
                       if plan.recoveries else "") + ")")
        if self.changed == 0:
            return (f"nothing changed: {gaps} gap(s) found, every one already recorded, "
                    "requested or in flight")
        created = sum(len(b.created) for b in self.backfills)
        requested = sum(answer == "requested" for _, answer in self.recoveries)
        batched = sum(answer == "requested" for _, answer in self.batches)
        return (f"{self.changed} change(s): {len(self.recorded)} gap(s) recorded in the ledger "
                f"({len(self.plan.unrecoverable)} unrecoverable), {created} backfill run(s) "
                f"requested from Airflow"
                + (f", {requested} period(s) no slot reports requested from the manual lane"
                   if requested else "")
                + (f", {batched} batched recovery run(s) requested" if batched else ""))

    def as_dict(self) -> dict[str, Any]:
        return {**self.plan.as_dict(), "applied": self.applied, "changed": self.changed,
                "recorded": self.recorded, "left_alone": self.left_alone,
                "unrecoverable": [g.label for g in self.plan.unrecoverable],
                "backfills": [{"dag_id": b.dag_id, "asked": b.asked, "backfill_id": b.backfill_id,
                               "created": [format_instant(s) for s in b.created],
                               "deferred": b.deferred} for b in self.backfills],
                "not_requested": self.not_requested,
                "recoveries": [{"run_id": r, "answer": a} for r, a in self.recoveries],
                "batches": [{"run_id": r, "answer": a} for r, a in self.batches],
                "summary": self.summary()}


@scope
def _record(ledger: Ledger, catalog: Catalog, gap: Gap, reason: str, *, now: datetime,
            notify: Notify | None, unrecoverable: bool) -> tuple[str, bool]:
    """Record one gap: (its run key, True) when recorded, (run key, False) when someone else
    registered the run meanwhile and it is left alone."""
    from export_lib.pipeline.stages import RunContext
    from export_lib.pipeline.start import register_run

    schedule = catalog.schedule(gap.schedule_id)
    summary = register_run(ledger, schedule, gap.slot, now=now,
                           ctx=RunContext(origin="gap-audit", trigger=AUDIT_TRIGGER))
    bind(**summary.log_context())
    if not summary.created:
        log.info("company=%s schedule=%s period=%s: registered meanwhile (state %s); the audit "
                 "leaves it alone", *gap.log_fields(), summary.state)
        return summary.run_key, False
    ledger.skip(summary.run_key, reason, now)
    if not unrecoverable:
        log.warning("company=%s schedule=%s period=%s: recorded skipped: %s",
                    *gap.log_fields(), reason)
        return summary.run_key, True
    ledger.note(summary.run_key, f"owner notified: {gap.owner}: {reason}", now)
    log.warning("company=%s schedule=%s period=%s: UNRECOVERABLE, owner %s notified: %s",
                *gap.log_fields(), gap.owner, reason)
    if notify is not None:
        notify(gap, reason)
    return summary.run_key, True


def _batches(catalog: Catalog, gaps: list[Gap]) -> tuple[tuple[datetime, ...], ...]:
    """The gaps of one schedule in batches (ADR 0032), or () for a backfill: more gaps than
    ``EXPORT_BATCH_RECOVERY_THRESHOLD``, or settled slots between them (a backfill would run
    each of those again, as a no-op run)."""
    from export_lib import settings
    from export_lib.periods.recovery import plan_recovery
    from export_lib.periods.slots import slots_between

    wanted = sorted(g.slot for g in gaps)
    schedule = catalog.schedule(gaps[0].schedule_id)
    timing = schedule.timing
    own = schedule.policies.catchup
    threshold = (own.batch_over if own is not None and own.batch_over is not None
                 else settings.batch_recovery_threshold())
    spanned = [s for s in slots_between(timing, wanted[0], wanted[-1]) if s < wanted[-1]]
    spanned.append(wanted[-1])
    plan = plan_recovery(spanned, settled=set(spanned) - set(wanted), in_flight=set(),
                         threshold=threshold, size=settings.batch_recovery_size())
    return plan.batches if plan.kind == "batch" else ()


def apply_audit(plan: AuditPlan, ledger: Ledger, catalog: Catalog, *, now: datetime,
                api: AirflowApi | None, notify: Notify | None = None) -> AuditResult:
    """Record every ``skip``/``unrecoverable`` gap and request every backfill (``api``; None
    leaves the backfills unrequested and says so). ``untouched`` gaps are not touched."""
    recorded: list[str] = []
    left_alone: list[str] = []
    for action in plan.of("skip", "unrecoverable"):
        key, done = _record(ledger, catalog, action.gap, action.reason, now=now, notify=notify,
                            unrecoverable=action.action == "unrecoverable")
        (recorded if done else left_alone).append(key)
    backfills: list[BackfillOutcome] = []
    not_requested: list[str] = []
    batched: list[tuple[str, str]] = []
    for dag_id, gaps in plan.backfills.items():
        if api is None:
            not_requested.append(dag_id)
            continue
        batches = _batches(catalog, gaps)
        if batches:
            asked = request_batches(api, gaps[0].company, gaps[0].schedule_id, batches)
            batched.extend(asked)
            log.info("company=%s schedule=%s period=%s: %d missed slot(s) in %d batch(es): %s",
                     *gaps[-1].log_fields(), len(gaps), len(batches),
                     ", ".join(f"{run_id} {answer}" for run_id, answer in asked),
                     extra={"company": gaps[-1].company, "schedule": gaps[-1].schedule_id})
            continue
        outcome = api.request_backfill(dag_id, [g.slot for g in gaps])
        backfills.append(outcome)
        # One line for the DAG's gaps: company and schedule, no single run or period.
        log.info("company=%s schedule=%s period=%s: %s", *gaps[-1].log_fields(),
                 outcome.describe(),
                 extra={"company": gaps[-1].company, "schedule": gaps[-1].schedule_id})
    recoveries: list[tuple[str, str]] = []
    for gap in plan.recoveries:
        if api is None:
            not_requested.append(gap.manual_dag_id)
            continue
        answer = trigger_once(api, gap.manual_dag_id, gap.run_id, gap.manual_params())
        recoveries.append((gap.run_id, answer))
        log.info("company=%s schedule=%s period=%s: reported by no slot after the timing "
                 "switch; %s: %s run %s", gap.company, gap.schedule_id, gap.label.rsplit("/")[-1],
                 answer, gap.manual_dag_id, gap.run_id)
    return AuditResult(plan, recorded=recorded, left_alone=left_alone, backfills=backfills,
                       not_requested=not_requested, recoveries=recoveries, batches=batched,
                       applied=True)


def run_audit(catalog: Catalog, ledger: Ledger, *, since: datetime, until: datetime, now: datetime,
              company: str | None = None, api: AirflowApi | None = None, dry_run: bool = False,
              notify: Notify | None = None) -> AuditResult:
    """Find the gaps, plan them (slots Airflow is running are left alone: asked through
    ``api``), and apply the plan unless ``dry_run``."""
    found, notes = find_gaps(catalog, ledger, since=since, until=until, now=now, company=company)
    active: dict[str, set[datetime]] = {}
    if api is not None:
        for item in found:
            if item.gaps:
                active[item.dag_id] = api.active_slots(item.dag_id, item.gaps[0].slot,
                                                       now + timedelta(days=1))
    plan = plan_audit(found, since=since, until=until, now=now, active=active, notes=notes)
    if dry_run:
        return AuditResult(plan)
    return apply_audit(plan, ledger, catalog, now=now, api=api, notify=notify)


__all__ = ["AUDIT_TRIGGER", "AuditResult", "apply_audit", "run_audit"]
