"""Batched recovery (ADR 0032): one process exports many missed periods of one schedule, oldest
first, each exactly as its own DAG run would.

Per period, in slot order: :func:`start_run` (registration with the version in force for the
slot, its cutoff, the start policies: a pause, the period-exported-once rule, the owner's
authorisation, ``late_start``), then :func:`render_run` (an attempt with its lease, fenced,
inside the render budget, streamed), :func:`publish_run` (its own immutable artifact and
manifest) and :func:`deliver_run` for each destination the run captured (its own delivery
record). Every period is registered before the first is rendered: consecutive periods one
query can read share one range scan (ADR 0038, :mod:`export_lib.pipeline.range_batch`), each
still written by its own render_run, and their deliveries follow the scan. Nothing else is
shared between periods but the process: the batch is a loop over the stages every DAG run
calls, so the ledger's contract holds per period by construction.

Failure isolation: a period whose stage raises (a source error, a destination down, a schema
change refused) is recorded by that stage as it would be in its own run and the loop goes on
with the next one. A period already done — its run final, or ready with every captured
destination's delivery settled — is passed over without a stage call, so a retried or cleared
batch re-runs only the periods that are not done, and a delivered period is exported again
only by an explicit regenerate (never from here). Pure of Airflow: ``clock`` and ``sleep`` are
passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from export_lib.errors import ExportError, RenderBudgetError
from export_lib.ledger import Ledger, RunState
from export_lib.ledger.runs import render_lease
from export_lib.logfmt import get_logger, run_context
from export_lib.periods.instants import format_instant
from export_lib.pipeline.results import PublishResult, Rendered, RenderResult, RenderSkipped
from export_lib.pipeline.stages import (
    RunContext,
    deliver_run,
    list_deliveries,
    publish_run,
    render_run,
    schedule_of,
)
from export_lib.pipeline.start import slot_log_context, start_run

if TYPE_CHECKING:
    from export_lib.config.loader import Allowlist
    from export_lib.config.models import Schedule
    from export_lib.source.connections import ConnectionResolver
    from export_lib.storage.stores import ArtifactStore

log = get_logger(__name__)

# A delivery in one of these states needs nothing more from a batch: acknowledged, or settled
# by its window or an operator (``exhausted`` and ``refused`` come back only by a requeue).
SETTLED = frozenset({"acknowledged", "exhausted", "refused", "cancelled"})
_FINAL_RUN = frozenset({RunState.SKIPPED.value, RunState.CANCELLED.value})
# How long one period's render waits for a place in the render budget before that period
# fails (and is retried with the batch): places free within one short render.
BUDGET_WAIT = timedelta(minutes=10)


@dataclass(frozen=True)
class PeriodOutcome:
    """What the batch did with one period: ``done`` (already done before), ``exported``,
    ``skipped`` (a start policy said so, recorded in the ledger) or ``failed``."""

    slot: datetime
    run_key: str
    outcome: str
    detail: str = ""
    published: PublishResult | None = None  # set when this batch published a new version

    def line(self) -> str:
        return f"{format_instant(self.slot)} {self.outcome}" + (
            f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class BatchOutcome:
    """Every period of the batch, in slot order."""

    schedule_id: str
    periods: tuple[PeriodOutcome, ...] = field(default_factory=tuple)

    def of(self, outcome: str) -> list[PeriodOutcome]:
        return [p for p in self.periods if p.outcome == outcome]

    @property
    def failed(self) -> list[PeriodOutcome]:
        return self.of("failed")

    def describe(self) -> str:
        counts = ", ".join(f"{len(self.of(o))} {o}" for o in
                           ("exported", "done", "skipped", "failed") if self.of(o))
        return f"{self.schedule_id}: {len(self.periods)} period(s): {counts or 'none'}"


class BatchIncomplete(ExportError):
    """Some periods of a batch failed; the others were exported. Retrying the batch re-runs
    only the failed ones (and any that had not started)."""

    def __init__(self, outcome: BatchOutcome) -> None:
        failed = outcome.failed
        super().__init__(
            f"{outcome.describe()}; failed: "
            + "; ".join(p.line() for p in failed[:5])
            + (f"; and {len(failed) - 5} more" if len(failed) > 5 else "")
            + ". Every other period is published and delivered; a retry of this task (or a "
              "clear) exports only the periods that are not done")
        self.outcome = outcome


def period_done(ledger: Ledger, run_key: str) -> bool:
    """Has the run of ``run_key`` nothing left for a batch: skipped or cancelled, or ready with
    a settled delivery of its newest artifact to every destination it captured?"""
    run = ledger.get_run(run_key)
    if run is None:
        return False
    if run.state in _FINAL_RUN:
        return True
    if run.state != RunState.READY.value:
        return False
    latest = ledger.latest_artifact(run_key)
    wanted = {d.id for d in schedule_of(run).destinations}
    settled = {d["destination"] for d in list_deliveries(ledger, run_key)
               if d["version"] == latest.version and d["state"] in SETTLED}
    return wanted <= settled


@dataclass(frozen=True)
class Batch:
    """Where and how a batch runs: ``ref`` names it on each run it exports (the Airflow task,
    ``dag_id/run_id/task_id``, or ``cli``); ``clock`` and ``sleep`` are the time it runs in."""

    ref: str
    ctx: RunContext = RunContext(origin="batch", trigger="batch")
    config_dir: str | None = None
    resolver: ConnectionResolver | None = None
    allowlist: Allowlist | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    sleep: Callable[[float], None] = time.sleep
    budget_wait: timedelta = BUDGET_WAIT


def export_batch(ledger: Ledger, store: ArtifactStore, schedule: Schedule,
                 slots: Sequence[datetime], batch: Batch) -> BatchOutcome:
    """Export every period of ``slots`` (any order given; done in slot order) of ``schedule``
    (with its earlier versions: each slot runs under the version in force for it).

    Every period is registered first (its start policies, its cutoff); then consecutive
    periods that one range scan can read are rendered and published from it (ADR 0038), their
    deliveries following the scan, and the others are exported one by one as before.

    :returns: each period's outcome; the caller raises :class:`BatchIncomplete` when any failed
    """
    from export_lib.pipeline.range_batch import ScanGroup, plan_scans

    outcomes: dict[datetime, PeriodOutcome] = {}
    slot_of: dict[str, datetime] = {}
    for slot in sorted(set(slots)):
        started = _period(schedule, slot, batch, lambda s=slot: _start(ledger, schedule, s, batch))
        if started.outcome == "registered":
            slot_of[started.run_key] = slot
        else:
            outcomes[slot] = started
    plan = plan_scans(ledger, list(slot_of), batch.resolver)
    scans = scanned = single = 0
    for unit in plan.units:
        keys = [r.run_key for r in unit.runs] if isinstance(unit, ScanGroup) else [unit]
        if isinstance(unit, ScanGroup):
            done, keys, served = _scan(ledger, store, schedule, unit, slot_of, batch,
                                       plan.because)
            scans, scanned = scans + 1, scanned + served
            outcomes.update(done)
        for key in keys:
            slot = slot_of[key]
            run = ledger.get_run(key)
            single += run is not None and run.state != RunState.READY.value
            outcomes[slot] = _period(schedule, slot, batch, lambda k=key, s=slot: _deliver(
                ledger, _render_publish(ledger, store, s, k, batch), batch))
    outcome = BatchOutcome(schedule.schedule_id, tuple(outcomes[s] for s in sorted(outcomes)))
    reads = (f"{scans} range scan(s) serving {scanned} period(s), {single} per-period read(s)"
             + (f"; read per period: {'; '.join(plan.reasons)}" if plan.reasons else ""))
    log.info("company=%s schedule=%s period=%s..%s: batch %s: %s; source reads: %s",
             schedule.company.id, schedule.schedule_id,
             format_instant(min(slots)) if slots else "-",
             format_instant(max(slots)) if slots else "-", batch.ref, outcome.describe(), reads)
    return outcome


def _period(schedule: Schedule, slot: datetime, batch: Batch,
            step: Callable[[], PeriodOutcome]) -> PeriodOutcome:
    """One step of one period, in its log context; an ExportError fails that period alone."""
    fields = slot_log_context(schedule, slot)
    with run_context(**fields):
        try:
            return step()
        except ExportError as exc:
            # Recorded by the stage that raised (a failed attempt, a delivery's error and its
            # retry window); this period alone waits for the batch's retry.
            log.warning("period %s failed in batch %s: %s", format_instant(slot), batch.ref,
                        exc)
            return PeriodOutcome(slot, fields["run"], "failed", f"{type(exc).__name__}: {exc}")


def _start(ledger: Ledger, schedule: Schedule, slot: datetime, batch: Batch) -> PeriodOutcome:
    """Register the period (outcome ``registered``), unless it is done or a start policy
    skips it."""
    from export_lib.ledger.batches import mark_batch

    key = slot_log_context(schedule, slot)["run"]
    if period_done(ledger, key):
        return PeriodOutcome(slot, key, "done")
    started = start_run(ledger, schedule, slot, now=batch.clock(), ctx=batch.ctx)
    key = started.run_key
    if started.skip_reason:
        return PeriodOutcome(slot, key, "skipped", started.skip_reason)
    mark_batch(ledger, key, batch.ref, batch.clock())
    return PeriodOutcome(slot, key, "registered")


def _scan(ledger: Ledger, store: ArtifactStore, schedule: Schedule, group: Any,
          slot_of: dict[str, datetime], batch: Batch, because: Callable[[str], None]
          ) -> tuple[dict[datetime, PeriodOutcome], list[str], int]:
    """Render and publish ``group``'s periods from one range scan, then deliver them; return
    their outcomes, the run keys left to read one by one and how many periods the scan
    wrote."""
    from export_lib.ledger.batches import note_range_scan
    from export_lib.pipeline.range_batch import scan_group

    def render_publish(run: Any, produce: Any) -> PeriodOutcome:
        slot = slot_of[run.run_key]
        return _period(schedule, slot, batch, lambda: _render_publish(
            ledger, store, slot, run.run_key, batch, produce))

    result = scan_group(group, batch.resolver, render_publish)
    if result.stopped:
        log.warning("company=%s schedule=%s period=%s..%s: batch %s: %s; %d period(s) are "
                    "read one by one", schedule.company.id, schedule.schedule_id,
                    format_instant(group.runs[0].slot), format_instant(group.runs[-1].slot),
                    batch.ref, result.stopped, len(result.rest))
        because(result.stopped.split(":", 1)[0])
    first, last = group.runs[0], group.runs[-1]
    note = (f"rendered from batch {batch.ref}'s one source read for {len(group.runs)} periods "
            f"[{format_instant(first.window_start)}, {format_instant(last.window_end)})")

    def deliver(period: PeriodOutcome) -> PeriodOutcome:
        if period.run_key in result.served:
            note_range_scan(ledger, period.run_key, note, batch.clock())
        return _deliver(ledger, period, batch)

    done = {p.slot: _period(schedule, p.slot, batch, lambda p=p: deliver(p))
            if p.outcome == "published" else p for p in result.outcomes}
    return done, result.rest, len(result.served)


def _render_publish(ledger: Ledger, store: ArtifactStore, slot: datetime, key: str,
                    batch: Batch, produce: Any = None) -> PeriodOutcome:
    rendered = _render(ledger, store, key, batch, produce)
    if isinstance(rendered, RenderSkipped):
        return PeriodOutcome(slot, key, "skipped", rendered.skipped)
    fresh = rendered if isinstance(rendered, Rendered) else None
    published = publish_run(ledger, store, key, fresh.attempt_id if fresh else None,
                            now=batch.clock(), columns=list(fresh.columns) if fresh else None)
    return PeriodOutcome(slot, key, "published", published=published if published.created
                         else None)


def _deliver(ledger: Ledger, period: PeriodOutcome, batch: Batch) -> PeriodOutcome:
    """Deliver a published period to every destination its run captured."""
    if period.outcome != "published":
        return period
    failures = []
    for destination in schedule_of(ledger.get_run(period.run_key)).destinations:
        try:  # one destination down does not keep the period from the others
            deliver_run(ledger, period.run_key, destination.id, now=batch.clock(),
                        config_dir=batch.config_dir, resolver=batch.resolver)
        except ExportError as exc:
            failures.append(f"{destination.id}: {exc}")
    if failures:
        return PeriodOutcome(period.slot, period.run_key, "failed", "; ".join(failures),
                             period.published)
    return PeriodOutcome(period.slot, period.run_key, "exported", published=period.published)


def _render(ledger: Ledger, store: ArtifactStore, key: str, batch: Batch,
            produce: Any = None) -> RenderResult:
    """render_run, waiting (bounded by ``batch.budget_wait``) for a place in the render budget
    instead of failing the period: the batch holds at most one place at a time."""
    waited = 0.0
    while True:
        try:
            # Another attempt holding the period (a killed try of this batch) is waited for
            # until it publishes or its lease lapses, as exportctl run does.
            return render_run(ledger, store, key, now=batch.clock(), ctx=batch.ctx,
                              resolver=batch.resolver, allowlist=batch.allowlist,
                              wait=render_lease() + timedelta(seconds=10), produce=produce)
        except RenderBudgetError:
            if waited >= batch.budget_wait.total_seconds():
                raise
            batch.sleep(1.0)
            waited += 1.0


__all__ = ["Batch", "BatchIncomplete", "BatchOutcome", "PeriodOutcome", "export_batch",
           "period_done"]
