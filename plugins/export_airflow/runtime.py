"""Glue between an Airflow task context and export_lib: slot from the run, policies, manual runs.

Everything here is called from ``ResolveWindowOperator.execute`` (never at parse time).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from export_lib.errors import AuthorizationError, RunHeldError

log = logging.getLogger(__name__)


def slot_for_context(schedule: Any, context: Any) -> datetime:
    """The run's slot: the logical date (= the slot for scheduled runs); a manual run without a
    logical date, or with one off the schedule, maps to the latest slot at or before it."""
    from export_lib.slots import is_slot, latest_slot_at_or_before

    logical = context.get("logical_date")
    moment = logical if logical is not None else context["dag_run"].run_after
    moment = datetime.fromtimestamp(moment.timestamp(), UTC)
    if is_slot(schedule.timing, moment):
        return moment
    return latest_slot_at_or_before(schedule.timing, moment)


def _record_missed(ledger: Any, schedule: Any, slot: datetime, *, now: datetime, ctx: Any) -> int:
    """Recovery ``latest``/``none``: slots between the previous run and this one are recorded
    as skipped with the reason, so an outage leaves explicit outcomes, not holes."""
    from export_lib.pipeline import resolve_run
    from export_lib.policy import missed_slots

    recovery = schedule.policies.recovery
    if recovery == "each":
        return 0
    missed = missed_slots(schedule.timing, previous=ledger.previous_slot(schedule.schedule_id, slot),
                          current=slot)
    for old in missed:
        summary = resolve_run(ledger, schedule, old, now=now, ctx=ctx)
        if summary["created"]:
            reason = (f"recovery={recovery}: missed while the scheduler was down; "
                      + (f"the newer slot {slot:%Y-%m-%dT%H:%MZ} was exported instead"
                         if recovery == "latest" else
                         f"not exported (recovery=none); for the attention of {schedule.owner}"))
            ledger.skip(summary["run_key"], reason, now)
            log.warning("company=%s schedule=%s period=%s: %s", schedule.company.id,
                        schedule.schedule_id, summary["run_key"], reason)
    return len(missed)


def resolve_for_context(config_dir: str, schedule_id: str, context: Any, *, now: datetime,
                        ctx: Any) -> dict[str, Any]:
    """Register or find the run of this context's slot and apply the start policies."""
    from export_lib.config import load_catalog
    from export_lib.ledger import RunState, open_ledger
    from export_lib.pipeline import resolve_run
    from export_lib.policy import start_decision

    catalog = load_catalog(config_dir, only=schedule_id.split("/", 1)[0])
    schedule = catalog.schedule(schedule_id)
    slot = slot_for_context(schedule, context)
    ledger = open_ledger()
    summary = resolve_run(ledger, schedule, slot, now=now, ctx=ctx)
    key = summary["run_key"]
    if summary["state"] == RunState.READY:
        return summary  # the period has its artifact; downstream reports it (or regenerates)
    if summary["state"] in (RunState.SKIPPED, RunState.CANCELLED):
        run = ledger.get_run(key)
        summary["skip_reason"] = f"run {key} is already {run.state}: {run.reason}"
        return summary
    if summary["created"] and ctx.trigger == "scheduled":
        summary["missed_recorded"] = _record_missed(ledger, schedule, slot, now=now, ctx=ctx)
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
        summary["skip_reason"] = decision.reason
    elif decision.action == "hold":
        ledger.note(key, "held: " + decision.reason, now, reason=decision.reason)
        raise RunHeldError(f"run {key}: {decision.reason}")
    elif decision.reason:
        log.warning("company=%s schedule=%s run=%s: %s", schedule.company.id, schedule_id, key,
                    decision.reason)
    return summary


def resolve_manual(config_dir: str, context: Any, *, now: datetime, ctx: Any) -> dict[str, Any]:
    """Register the manual export requested by the trigger form (validated; nothing is
    registered when the request is invalid)."""
    from export_lib.config import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.manual import manual_registration, manual_schedule, parse_request

    request = parse_request(dict(context["params"]))
    catalog = load_catalog(config_dir, only=request.company)
    run_id = context["dag_run"].run_id
    schedule = manual_schedule(catalog, request, run_id=run_id)
    if not schedule.company.may_receive(schedule.owner):
        raise AuthorizationError(f"manual export for {schedule.company.id}: owner {schedule.owner} "
                                 "is not authorised for the company")
    slot = datetime.fromtimestamp(context["dag_run"].run_after.timestamp(), UTC)
    ledger = open_ledger()
    reg = manual_registration(schedule, request, run_id=run_id, slot=slot, now=now)
    run, created = ledger.register(reg, now)
    if created:
        ledger.note(run.run_key, f"manual export requested ({request.reason}); based on "
                                 f"{request.base_export}; airflow run {run_id}", now)
    log.info("company=%s schedule=%s manual run %s window [%s, %s) %s: %s", run.company,
             request.base_export, run.run_key, run.window_start.isoformat(),
             run.window_end.isoformat(), "registered" if created else "found", request.reason)
    return {"run_key": run.run_key, "created": created, "state": run.state,
            "company": run.company, "schedule_id": run.schedule_id,
            "window_start": run.window_start.isoformat(), "window_end": run.window_end.isoformat(),
            "timezone": run.timezone, "config_version": run.config_version,
            "destinations": [d.id for d in schedule.destinations]}
