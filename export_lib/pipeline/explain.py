"""``exportctl explain``: what happened to one period, in one paragraph a support person can act
on. The obligations page shows the same text.

:func:`explain_period` is pure: the schedule, the slot, what the ledger holds about it (run,
events, artifacts, deliveries) and ``now`` in, a paragraph out. Branches, first match wins: not
due yet · before the schedule's first version · paused · no run (due now, or missed: the gap
audit recovers it) · revoked · held · running · skipped (why; unrecoverable) · cancelled ·
failed (error, retries) · delivered (when, to each destination, late by how much).
:func:`explain_from_ledger` gathers the facts for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from export_lib.errors import STORAGE_FULL_PREFIX
from export_lib.ledger.records import ArtifactRecord, AttemptRecord, RunRecord
from export_lib.ledger.schema import runs
from export_lib.ledger.states import IN_FLIGHT, RunState
from export_lib.periods.names import deadline_for, run_key
from export_lib.periods.slots import latest_slot_at_or_before, next_slots, slots_between, start_of_day
from export_lib.pipeline.audit import UNRECOVERABLE_PREFIX

if TYPE_CHECKING:
    from export_lib.config.models import Schedule
    from export_lib.ledger import Ledger

RETRY_WINDOW = timedelta(days=5)  # the export tasks' retries (dag_factory.retry_args; required: 5 days)


@dataclass(frozen=True)
class PeriodFacts:
    """What the ledger knows about one slot (empty when no run was registered)."""

    run: RunRecord | None = None
    events: Sequence[Mapping[str, Any]] = ()
    artifacts: Sequence[ArtifactRecord] = ()  # oldest first
    deliveries: Sequence[Mapping[str, Any]] = ()  # ledger.deliveries.list_deliveries rows
    attempts: Sequence[AttemptRecord] = ()
    paused: str | None = None  # an operator's pause in force now (pipeline.controls), if any
    # When the schedule's first run was registered (ADR 0029): a deadline that had passed by
    # then is not tracked, so a delivery after it is not called late. None: not known.
    first_deployed: datetime | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def _when(moment: datetime, tz: ZoneInfo) -> str:
    local = moment.astimezone(tz)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({moment.astimezone(UTC):%H:%M} UTC)"


def _utc(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _span(delta: timedelta) -> str:
    minutes = max(int(delta.total_seconds() // 60), 0)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{mins} min"]
    return " ".join(parts if mins or not (days or hours) else parts[:-1])


def _at(value: datetime | str | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _detail(events: Sequence[Mapping[str, Any]], prefix: str) -> Mapping[str, Any] | None:
    found = [e for e in events if str(e.get("detail") or "").startswith(prefix)]
    return found[-1] if found else None


def _delivered(schedule: Schedule, run: RunRecord, facts: PeriodFacts) -> str:
    art = facts.artifacts[-1]
    text = (f"it was exported: artifact v{art.version} ({art.rows} rows, sha256 "
            f"{art.sha256[:12]}) published at {_utc(art.generated_at)}.")
    if not facts.deliveries:
        return text + " No delivery is recorded yet (its deliver tasks have not run)."
    parts = []
    for d in facts.deliveries:
        acked = _at(d.get("acknowledged_at"))
        name = f"{d['destination_id']} (v{d['artifact_version']})"
        if d["state"] == "acknowledged" and acked is not None:
            late = acked - run.deadline if run.deadline else timedelta(0)
            verdict = f"late by {_span(late)}" if late > timedelta(0) else "on time"
            if (late > timedelta(0) and facts.first_deployed is not None
                    and run.deadline <= facts.first_deployed):
                verdict = ("after a deadline that passed before this schedule was deployed "
                           "(not tracked: not late)")
            parts.append(f"delivered to {name} at {_utc(acked)}, {verdict}")
        elif d["state"] in ("exhausted", "refused"):
            parts.append(f"NOT delivered to {name}: {d['state']} after {d['attempts']} "
                         f"attempt(s) ({d.get('last_error') or 'no error recorded'}); fix the "
                         f"cause, then run 'exportctl requeue {run.run_key} --destination "
                         f"{d['destination_id']}'")
        else:
            until = _at(d.get("retry_until"))
            parts.append(f"delivery to {name} is {d['state']} after {d['attempts']} attempt(s)"
                         + (f" (last error: {d['last_error']})" if d.get("last_error") else "")
                         + (f"; Airflow retries it until {_utc(until)}" if until else ""))
    deadline = f" The deadline was {_utc(run.deadline)}." if run.deadline else ""
    return text + " " + "; ".join(parts) + "." + deadline


def _not_registered(schedule: Schedule, slot: datetime, version: Schedule | None,
                    now: datetime) -> str:
    company = schedule.company
    if company.status == "paused":
        return (f"paused: company {company.id} is paused in its config file, so no run was "
                "created. Resume it (status: active), then 'exportctl audit --company "
                f"{company.id}' recovers or records the missed slots.")
    deadline = deadline_for(version, slot)
    if slot == latest_slot_at_or_before(schedule.timing, now) and deadline > now:
        return (f"due {_span(now - slot)} ago and not registered yet: the scheduler is creating "
                f"its run. Look at DAG {schedule.dag_id} in Airflow (Grid view); it must be "
                f"delivered by {_utc(deadline)}.")
    return (f"missed: no run was registered (the scheduler did not create one: an outage or a "
            f"paused DAG). Run 'exportctl audit --company {company.id}' to recover it under "
            f"recovery={schedule.policies.recovery} (each: backfilled; latest: only the newest "
            "missed slot; none: recorded skipped).")


def _held(schedule: Schedule, run: RunRecord, facts: PeriodFacts) -> str | None:
    held = _detail(facts.events, "held: ")
    released = _detail(facts.events, "released by operator")
    if run.state not in (RunState.REGISTERED, RunState.FAILED) or held is None or (
            released is not None and _at(released["at"]) >= _at(held["at"])):
        return None
    return (f"held since {_utc(_at(held['at']))}: {held['detail'][6:]} To export it anyway: "
            f"'exportctl release {run.run_key}', then clear its resolve_window task in DAG "
            f"{schedule.dag_id}.")


def _failed(schedule: Schedule, slot: datetime, run: RunRecord, now: datetime,
            next_retry: datetime | None) -> str:
    if next_retry is not None:
        retry = f"The next retry is at {_utc(next_retry)}"
    elif now > slot + RETRY_WINDOW:
        retry = (f"Its retries ended {_utc(slot + RETRY_WINDOW)}; fix the cause and clear the "
                 f"failed task in DAG {schedule.dag_id}")
    else:
        retry = (f"Airflow retries the failed task (10 min, doubling) until "
                 f"{_utc(slot + RETRY_WINDOW)}; see its up_for_retry state in DAG "
                 f"{schedule.dag_id}")
    if (run.reason or "").startswith(STORAGE_FULL_PREFIX):
        return (f"waiting on storage since {_utc(run.updated_at)}: "
                f"{run.reason[len(STORAGE_FULL_PREFIX):]}. {retry}.")
    return f"failed at {_utc(run.updated_at)}: {run.reason or 'no error recorded'}. {retry}."


def _registered(schedule: Schedule, slot: datetime, facts: PeriodFacts, now: datetime,
                next_retry: datetime | None) -> str:
    run = facts.run
    revoked = [a for a in facts.artifacts if getattr(a, "revoked_at", None) is not None]
    if revoked and revoked[-1] is facts.artifacts[-1]:
        newest = revoked[-1]
        return (f"artifact v{newest.version} was {newest.revoked_reason} (at "
                f"{_utc(newest.revoked_at)}); later deliveries are refused. Regenerate the "
                "period to export it again.")
    held = _held(schedule, run, facts)
    if held is not None:
        return held
    if run.state == RunState.REGISTERED or run.state in IN_FLIGHT:
        attempt = facts.attempts[-1] if facts.attempts else None
        return (f"running: {run.state} since {_utc(run.updated_at)}"
                + (f", attempt {attempt.generation} from {attempt.origin}" if attempt else "")
                + (f"; deadline {_utc(run.deadline)}." if run.deadline else "."))
    reason = run.reason or "no reason recorded"
    if run.state == RunState.SKIPPED and reason.startswith(UNRECOVERABLE_PREFIX):
        return (f"unrecoverable (recorded {_utc(run.updated_at)}): "
                f"{reason[len(UNRECOVERABLE_PREFIX):]}.")
    if run.state == RunState.SKIPPED:
        return f"skipped (recorded {_utc(run.updated_at)}): {reason}."
    if run.state == RunState.CANCELLED:
        return f"cancelled at {_utc(run.updated_at)}: {reason}."
    if run.state == RunState.FAILED:
        return _failed(schedule, slot, run, now, next_retry)
    if run.state == RunState.READY and facts.artifacts:
        return _delivered(schedule, run, facts)
    return f"{run.state}: {reason}."


def explain_period(schedule: Schedule, slot: datetime, facts: PeriodFacts, *, now: datetime,
                   next_retry: datetime | None = None) -> str:
    """One paragraph on ``slot`` of ``schedule`` (see the module docstring). ``next_retry``:
    when Airflow retries a failed run next, if the caller knows (the page asks Airflow)."""
    tz = schedule.timing.zone
    version = schedule.version_for(slot)
    head = f"{schedule.schedule_id}, slot {_when(slot, tz)}: "
    if slot > now:
        text = (f"not due yet; it runs in {_span(slot - now)} and must be delivered by "
                f"{_utc(deadline_for(version or schedule, slot))}.")
        if schedule.company.status == "paused":
            text += (f" Company {schedule.company.id} is paused, so it will be skipped unless "
                     "resumed.")
        elif facts.paused:
            text += (f" It is paused ({facts.paused}), so it will be recorded skipped unless "
                     f"'exportctl unpause --company {schedule.company.id}' comes first.")
        return head + text
    if version is None:
        return head + (f"nothing was due: the schedule starts at its first config version "
                       f"(effective_from {_utc(schedule.first_effective)}).")
    if facts.run is None:
        if facts.paused:
            return head + (f"paused: {facts.paused}. Its slots are recorded skipped while the "
                           f"pause lasts; 'exportctl unpause --company {schedule.company.id}' "
                           "ends it, then 'exportctl audit' recovers the missed slots.")
        return head + _not_registered(schedule, slot, version, now)
    run = facts.run
    head = (f"{schedule.schedule_id}, slot {_when(slot, tz)}, period "
            f"{run.window_start:%Y-%m-%d %H:%M}–{run.window_end:%Y-%m-%d %H:%M} UTC "
            f"(run {run.run_key}): ")
    text = head + _registered(schedule, slot, facts, now, next_retry)
    if run.batch:
        # ADR 0032: the period had no DAG run of its own; its task log is the batch's.
        dag_id, _, rest = run.batch.partition("/")
        text += (f" Exported by batched recovery: DAG {dag_id}, run and task {rest} (its task "
                 "log has this period's lines).")
    return text


def slots_of_day(schedule: Schedule, day: date) -> tuple[datetime, ...]:
    """The slots of ``schedule`` on local date ``day`` (in the schedule's timezone)."""
    tz = schedule.timing.zone
    return slots_between(schedule.timing, start_of_day(tz, day),
                         start_of_day(tz, day + timedelta(days=1)))


def explain_day(schedule: Schedule, day: date, ledger: Ledger, *, now: datetime) -> list[str]:
    """One paragraph per slot of ``day``; a day without slots says when the nearest ones are."""
    slots = slots_of_day(schedule, day)
    if not slots:
        after = next_slots(schedule.timing, start_of_day(schedule.timing.zone, day), 1)
        nxt = f"; the next one is {_when(after[0], schedule.timing.zone)}" if after else ""
        return [f"{schedule.schedule_id} has no slot on {day} ({schedule.timing.summary}){nxt}."]
    return [explain_period(schedule, slot, explain_facts(ledger, schedule.schedule_id, slot),
                           now=now) for slot in slots]


def explain_facts(ledger: Ledger, schedule_id: str, slot: datetime) -> PeriodFacts:
    from export_lib.ledger.deliveries import list_deliveries
    from export_lib.pipeline.controls import pause_reason

    key = run_key(schedule_id, slot)
    run = ledger.get_run(key)
    paused = pause_reason(ledger, schedule_id.split("/", 1)[0], schedule_id)
    if run is None:
        return PeriodFacts(paused=paused)
    with ledger.engine.connect() as conn:  # the first deployment (ADR 0029)
        deployed = conn.execute(sa.select(sa.func.min(runs.c.created_at))
                                .where(runs.c.schedule_id == schedule_id)).scalar()
    return PeriodFacts(run=run, events=ledger.events(key), artifacts=ledger.artifacts(key),
                       deliveries=list_deliveries(ledger.engine, key),
                       attempts=ledger.attempts(key), paused=paused,
                       first_deployed=deployed)


__all__ = ["PeriodFacts", "explain_day", "explain_facts", "explain_period", "slots_of_day"]
