"""The start of every run, whoever starts it: register the slot, then apply the start policies.

``start_run`` is the one place that decides whether a slot exports: a paused company (in its
config, or by ``exportctl pause``), an owner
who lost access, a start after the deadline (``late_start``), slots missed while nothing ran
(``recovery``). The Airflow ``ResolveWindowOperator`` and ``exportctl run`` both call it, so the
same slot gets the same outcome, with the same recorded reason, in either world.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from export_lib.errors import AuthorizationError, RunHeldError, WindowError
from export_lib.ledger import Ledger, RunState
from export_lib.ledger.periods import delivered_periods
from export_lib.ledger.records import RunRecord, RunRegistration
from export_lib.logfmt import bind, get_logger, scope
from export_lib.periods.coverage import (
    ALREADY_DELIVERED,
    DeliveredPeriod,
    covering,
    describe,
    timing_of,
)
from export_lib.periods.decisions import missed_slots, start_decision
from export_lib.periods.names import deadline_for, period_label, run_key
from export_lib.periods.slots import format_instant, is_slot, latest_slot_at_or_before
from export_lib.periods.windows import ExportWindow, resolve_window
from export_lib.pipeline.controls import pause_reason
from export_lib.pipeline.summary import RunSummary

if TYPE_CHECKING:
    from export_lib.config.manual import ManualRequest
    from export_lib.config.models import Schedule
    from export_lib.config.timing import Timing
    from export_lib.pipeline.stages import RunContext

log = get_logger(__name__)

_FINAL = (RunState.SKIPPED, RunState.CANCELLED)


def slot_at_or_before(timing: Timing, moment: datetime) -> datetime:
    """The slot a trigger at ``moment`` stands for: ``moment`` itself when it is a slot (the
    logical date of a scheduled run), else the latest slot before it (a manual trigger)."""
    # Rebuilt from the timestamp: Airflow hands in pendulum instants, whose astimezone() is not
    # a plain aware datetime.
    moment = datetime.fromtimestamp(moment.timestamp(), UTC)
    if is_slot(timing, moment):
        return moment
    slot = latest_slot_at_or_before(timing, moment)
    if slot is None:
        raise WindowError(f"no slot of {timing.summary} at or before {format_instant(moment)}")
    return slot


def _summary(ledger: Ledger, run: RunRecord, *, created: bool) -> RunSummary:
    latest = ledger.latest_artifact(run.run_key)
    snapshot = run.config_snapshot or {}
    return RunSummary(
        run_key=run.run_key, created=created, state=run.state, company=run.company,
        schedule_id=run.schedule_id, slot=run.slot,
        window=ExportWindow(start=run.window_start, end=run.window_end, timezone=run.timezone,
                            kind=run.window_kind),
        config_version=run.config_version, deadline=run.deadline,
        artifact_version=latest.version if latest else None,
        destinations=tuple(d["id"] for d in snapshot.get("destinations", ())),
    )


def version_in_force(schedule: Schedule, slot: datetime) -> Schedule:
    """The config version that applies to ``slot`` (ADR 0005): catch-up and backfill of an
    older slot run with the version that was in force for it, not today's."""
    version = schedule.version_for(slot) if hasattr(schedule, "version_for") else schedule
    if version is None:
        raise WindowError(
            f"slot {format_instant(slot)} of {schedule.schedule_id} is before its first config "
            f"version (effective_from {format_instant(schedule.first_effective)}); nothing "
            "applies to it. Pick a later slot, or add the earlier version under 'history'")
    return version


def slot_log_context(schedule: Schedule, slot: datetime) -> dict[str, str]:
    """The log fields of ``slot``'s run before it is registered: the key and period it gets."""
    version = version_in_force(schedule, slot)
    return {"company": version.company.id, "schedule": version.schedule_id,
            "run": run_key(version.schedule_id, slot),
            "period": resolve_window(version, slot).period}


@scope
def register_run(ledger: Ledger, schedule: Schedule, slot: datetime, *, now: datetime,
                 ctx: RunContext | None = None) -> RunSummary:
    """Register the run of ``slot`` (or find it): window, config version and snapshot are
    captured once and never rewritten — the version in force for ``slot``. No policy is
    applied here (see :func:`start_run`)."""
    schedule = version_in_force(schedule, slot)
    window = resolve_window(schedule, slot)
    reg = RunRegistration(
        run_key=run_key(schedule.schedule_id, slot), company=schedule.company.id,
        schedule_id=schedule.schedule_id, slot=slot, window_start=window.start,
        window_end=window.end, timezone=window.timezone, window_kind=window.kind,
        config_version=schedule.config_version, config_snapshot=schedule.snapshot(),
        owner=schedule.owner, trigger=ctx.trigger if ctx else "scheduled", source_cutoff=now,
        deadline=deadline_for(schedule, slot),
    )
    run, created = ledger.register(reg, now)
    summary = _summary(ledger, run, created=created)
    bind(**summary.log_context())
    log.info("company=%s schedule=%s period=%s: %s run %s (state %s, config %s)%s",
             *summary.log_fields(), "registered new" if created else "found existing",
             run.run_key, run.state, run.config_version[:12],
             f"; artifact v{summary.artifact_version} already published"
             if summary.artifact_version else "")
    return summary


def _record_missed(ledger: Ledger, schedule: Schedule, slot: datetime, *, now: datetime,
                   ctx: RunContext) -> int:
    """Recovery ``latest``/``none``: slots between the previous run and this one are recorded
    as skipped with the reason, so an outage leaves explicit outcomes, not holes."""
    recovery = schedule.policies.recovery
    if recovery == "each":
        return 0
    missed = missed_slots(schedule.timing, current=slot,
                          previous=ledger.previous_slot(schedule.schedule_id, slot))
    for old in missed:
        if schedule.version_for(old) is None:
            continue  # before the schedule's first version: nothing was due
        summary = register_run(ledger, schedule, old, now=now, ctx=ctx)
        if not summary.created:
            continue
        if recovery == "latest":
            reason = (f"recovery=latest: missed while the scheduler was down; the newer slot "
                      f"{slot:%Y-%m-%dT%H:%MZ} was exported instead")
        else:
            reason = (f"recovery=none: missed while the scheduler was down; not exported "
                      f"(recovery=none); for the attention of {schedule.owner}")
        ledger.skip(summary.run_key, reason, now)
        log.warning("company=%s schedule=%s period=%s: %s", *summary.log_fields(), reason,
                    extra=summary.log_context())  # the missed slot's run, not the current one
    return len(missed)


@scope
def start_run(ledger: Ledger, schedule: Schedule, slot: datetime, *, now: datetime,
              ctx: RunContext, regenerate: bool = False) -> RunSummary:
    """Register the run of ``slot`` and apply every start policy.

    Returns the summary, with ``skip_reason`` set when the slot must not export (recorded in the
    ledger). Raises ``AuthorizationError`` (recorded as failed) when the owner lost access, and
    ``RunHeldError`` under ``late_start: hold`` until an operator releases the run.
    ``schedule`` may carry earlier versions: the one in force for ``slot`` applies. A period
    already delivered under another timing is skipped unless ``regenerate``.
    """
    every_version, schedule = schedule, version_in_force(schedule, slot)
    summary = register_run(ledger, schedule, slot, now=now, ctx=ctx)
    bind(**summary.log_context())
    key = summary.run_key
    if summary.state == RunState.READY:
        return summary  # the period has its artifact; downstream reports it (or regenerates)
    if summary.state in _FINAL:
        run = ledger.get_run(key)
        return summary.model_copy(update={"skip_reason": f"run {key} is already {run.state}: "
                                                         f"{run.reason}"})
    # A pause stops new work only: a run already reading or rendering (a cleared task) goes on.
    paused = None if summary.state not in (RunState.REGISTERED, RunState.FAILED) else \
        pause_reason(ledger, schedule.company.id, schedule.schedule_id)
    if paused is not None:
        ledger.skip(key, paused, now)
        log.warning("company=%s schedule=%s period=%s: skipped: %s", *summary.log_fields(), paused)
        return summary.model_copy(update={"state": RunState.SKIPPED.value, "skip_reason": paused})
    covered = None if regenerate or summary.state not in (RunState.REGISTERED, RunState.FAILED) \
        else delivered_elsewhere(ledger, schedule, summary)
    if covered is not None:
        ledger.skip(key, covered, now)
        log.warning("company=%s schedule=%s period=%s: skipped: %s", *summary.log_fields(), covered)
        return summary.model_copy(update={"state": RunState.SKIPPED.value, "skip_reason": covered})
    missed = 0
    if summary.created and ctx.trigger == "scheduled":
        missed = _record_missed(ledger, every_version, slot, now=now, ctx=ctx)
    run = ledger.get_run(key)
    if not schedule.company.may_receive(run.owner):
        reason = (f"owner {run.owner} is no longer authorised for company {schedule.company.id}; "
                  "add them to 'authorized' or change the export's owner")
        ledger.fail(key, None, reason, now)
        raise AuthorizationError(f"run {key}: {reason}")
    decision = start_decision(company_status=schedule.company.status,
                              late_start=schedule.policies.late_start, deadline=run.deadline,
                              now=now, released=ledger.is_released(key))
    if decision.action == "skip":
        ledger.skip(key, decision.reason, now)
        log.warning("company=%s schedule=%s period=%s: skipped: %s", *summary.log_fields(),
                    decision.reason)
        return summary.model_copy(update={"state": RunState.SKIPPED.value, "missed_recorded": missed,
                                          "skip_reason": decision.reason})
    if decision.action == "hold":
        ledger.note(key, "held: " + decision.reason, now, reason=decision.reason)
        raise RunHeldError(f"run {key}: {decision.reason}")
    if decision.reason:
        log.warning("company=%s schedule=%s period=%s: %s", *summary.log_fields(), decision.reason)
    return summary.model_copy(update={"missed_recorded": missed,
                                      "late_reason": decision.reason or None})


def earlier_timing_cover(ledger: Ledger, schedule: Schedule, window: ExportWindow, *,
                         excluding: str | None = None) -> tuple[DeliveredPeriod, ...]:
    """The ready runs of ``schedule`` under other timings that cover ``window`` ((): none)."""
    delivered = delivered_periods(ledger, schedule.schedule_id, window.start, window.end,
                                  excluding=excluding)
    timing = timing_of({"timing": schedule.timing.model_dump(mode="json")})
    return covering(window.start, window.end, timing, delivered)


def delivered_elsewhere(ledger: Ledger, schedule: Schedule, summary: RunSummary) -> str | None:
    """Why ``summary``'s period must not be exported again, or None: runs of another timing
    of the schedule (before ``export_hour`` or ``interval_hours`` or the timezone changed)
    delivered all of it. Same-timing repeats are exports by design and do not count."""
    window = summary.window
    found = earlier_timing_cover(ledger, schedule, window, excluding=summary.run_key)
    if not found:
        return None
    return (f"{ALREADY_DELIVERED}period {period_label(window.start, window.end, window.timezone)} "
            f"{window.timezone} of {schedule.schedule_id} went out under an earlier timing: "
            f"{describe(found)}; not exported again. To send it again: exportctl run CONFIG_DIR "
            f"--schedule {schedule.schedule_id} --slot {format_instant(summary.slot)} "
            "--regenerate (or trigger the DAG run with regenerate)")


def manual_registration(schedule: Schedule, request: ManualRequest, *, run_id: str, slot: datetime,
                        now: datetime) -> RunRegistration:
    """Registration of a manual run: its window is the requested one, not a slot's. (The reason
    and requester go on the run's event log; the snapshot stays a valid Schedule.)"""
    return RunRegistration(
        run_key=f"{schedule.schedule_id.replace('/manual-', '/manual/')}",
        company=schedule.company.id, schedule_id=schedule.schedule_id, slot=slot,
        window_start=request.window_start.astimezone(UTC),
        window_end=request.window_end.astimezone(UTC), timezone=schedule.company.timezone,
        window_kind="manual", config_version=schedule.config_version,
        config_snapshot=schedule.snapshot(), owner=schedule.owner, trigger="manual",
        source_cutoff=now, deadline=None,
    )


# The note start_manual writes on a manual run's history names its base export; retention reads
# it back (manual_bases_noted) to follow the base's retention_days and legal_hold.
_BASED_ON = re.compile(r"; based on ([a-z0-9_-]+/[a-z0-9_/-]+); airflow run ")


def manual_bases_noted(events: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The base export(s) named by a manual run's registration note (``… based on <id>; …``),
    from its events; empty when none is noted. The note's free text (the reason) comes first,
    so a caller checks what it finds against the run's snapshot."""
    return frozenset(match for event in events
                     for match in _BASED_ON.findall(event.get("detail") or ""))


@scope
def start_manual(ledger: Ledger, config_dir: str, params: dict[str, Any], *, run_id: str,
                 requested_at: datetime, now: datetime, ctx: RunContext,
                 company: str | None = None,
                 requested_by: str | None = None) -> RunSummary:
    """Register the manual export a trigger form (or API call) asked for. The request is
    validated before any file is read; nothing is registered when it is invalid. The owner's
    authorisation and the company's status apply as for scheduled runs.

    ``company`` is the company of the DAG that was triggered (``manual_export__<company>``):
    a request for any other company is refused, so Airflow's permission to trigger that DAG is
    the permission to export that company's data. ``requested_by`` (the triggering user) goes
    on the run's event log."""
    from export_lib.config.manual import manual_schedule, parse_request
    from export_lib.ledger.seniority import open_catalog

    request = parse_request(params)  # every field checked before the company's file is read
    if company is not None and request.company != company:
        raise AuthorizationError(
            f"manual_export__{company}: company: {request.company!r} is not this DAG's company; "
            f"a manual export of {request.company!r} is triggered from manual_export__"
            f"{request.company} (nothing was registered)")
    catalog = open_catalog(config_dir, only=request.company)
    schedule = manual_schedule(catalog, request, run_id=run_id, now=now)
    if not schedule.company.may_receive(schedule.owner):
        raise AuthorizationError(f"manual export for {schedule.company.id}: owner {schedule.owner} "
                                 "is not authorised for the company")
    reg = manual_registration(schedule, request, run_id=run_id, now=now,
                              slot=datetime.fromtimestamp(requested_at.timestamp(), UTC))
    run, created = ledger.register(reg, now)
    if created:
        ledger.note(run.run_key, f"manual export requested by {requested_by or 'unknown user'} "
                                 f"({request.reason}); based on {request.base_export}; "
                                 f"airflow run {run_id}", now)
    summary = _summary(ledger, run, created=created)
    bind(**summary.log_context())
    log.info("company=%s schedule=%s period=%s: manual run %s %s: %s", *summary.log_fields(),
             run.run_key, "registered" if created else "found", request.reason)
    paused = pause_reason(ledger, schedule.company.id, None)
    if schedule.company.status == "paused" and run.state not in (RunState.READY, *_FINAL):
        paused = "company is paused; resume it in its config file to export"
    if paused is not None and run.state not in (RunState.READY, *_FINAL):
        reason = paused
        ledger.skip(run.run_key, reason, now)
        return summary.model_copy(update={"state": RunState.SKIPPED.value, "skip_reason": reason})
    return summary
