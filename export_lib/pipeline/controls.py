"""Operator controls, each audited with who, when and why (docs/adr/0008-operator-controls.md).

* :func:`pause` / :func:`unpause` a company or one schedule: no new runs (``start_run`` records
  each slot skipped with the pause's reason), running ones finish.
* :func:`cancel_run`: the run's attempt is fenced off (nothing publishes), its open deliveries
  are cancelled, the run ends ``cancelled``.
* :func:`revoke_artifact`: withdrawn from the destinations that can delete (local, S3, GCS,
  SFTP), recorded as "cannot withdraw" for those that cannot (webhook, e-mail); later
  deliveries are refused; the period can be regenerated as a new version.
* :func:`hold` / :func:`unhold` an artifact or a run: retention never deletes what is held.

Every function takes ``who``, ``why`` and ``now`` and returns a :class:`ControlResult`; a
control on the wrong object (an unknown id, a finished run, a deleted artifact) changes nothing,
is recorded as such in the audit trail and says why in ``outcome``. The CLI
(``exportctl pause|unpause|cancel|revoke|hold|unhold``) and the operations page call these.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_lib.ledger import Ledger, RunState
from export_lib.ledger import controls as repo
from export_lib.ledger import deliveries as rec
from export_lib.ledger.controls import NOTHING_CHANGED, Action
from export_lib.ledger.records import ArtifactRecord, RunRecord
from export_lib.logfmt import get_logger
from export_lib.periods.instants import format_instant
from export_lib.source.connections import ConnectionResolver

if TYPE_CHECKING:
    from export_lib.config.loader import Catalog

log = get_logger(__name__)

UNFINISHED = (RunState.REGISTERED, RunState.READING, RunState.RENDERING, RunState.VALIDATING,
              RunState.FAILED)


@dataclass(frozen=True)
class ControlResult:
    """What a control did: ``changed`` False means nothing changed and ``outcome`` says why."""

    action: str
    target: str
    changed: bool
    outcome: str
    details: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "details": list(self.details)}


def _done(ledger: Ledger, action: str, kind: str, target: str, *, who: str, why: str,
          now: datetime, outcome: str, changed: bool, run: RunRecord | None = None,
          company: str | None = None, schedule_id: str | None = None,
          details: tuple[str, ...] = (), recorded: bool = False) -> ControlResult:
    """Audit (unless the caller already did, in its own transaction) and log the result."""
    text = outcome if changed else NOTHING_CHANGED + outcome
    if not recorded:
        repo.record_action(ledger, _audit(action, kind, target, who=who, why=why, now=now,
                                          outcome=text, changed=changed, run=run,
                                          company=company, schedule_id=schedule_id))
    # A run's action carries the run's fields; a pause of a company or schedule carries those.
    fields = run.log_context() if run is not None else {"company": company,
                                                        "schedule": schedule_id}
    log.log(logging.WARNING if changed else logging.INFO,
            "company=%s schedule=%s run=%s: %s %s by %s: %s", company or (run and run.company),
            schedule_id or (run and run.schedule_id), target, action,
            "done" if changed else "refused", who, text, extra=fields)
    return ControlResult(action, target, changed, text, details)


def _audit(action: str, kind: str, target: str, *, who: str, why: str, now: datetime,
           outcome: str, changed: bool = True, run: RunRecord | None = None,
           company: str | None = None, schedule_id: str | None = None) -> Action:
    return Action(at=now, who=who, action=action, target_kind=kind, target_id=target, why=why,
                  changed=changed, outcome=outcome,
                  company=company or (run.company if run else None),
                  schedule_id=schedule_id or (run.schedule_id if run else None))


def _stamp(verb: str, who: str, now: datetime, why: str) -> str:
    return f"{verb} by {who} at {format_instant(now)}: {why}"


# -- pause ---------------------------------------------------------------------------------------

def pause(ledger: Ledger, company: str, schedule_id: str | None, *, who: str, why: str,
          now: datetime, catalog: Catalog | None = None) -> ControlResult:
    """Pause a company (``schedule_id`` None) or one of its schedules. With ``catalog`` (the
    current config) an unknown company or schedule is refused."""
    target = schedule_id or company
    kind = "schedule" if schedule_id else "company"
    problem = _unknown_scope(catalog, company, schedule_id)
    existing = None if problem else repo.exact_pause(ledger, company, schedule_id)
    if existing is not None:
        problem = (f"{kind} {target} is already paused "
                   f"({_stamp('paused', existing['paused_by'], existing['paused_at'], existing['why'])})")
    if problem:
        return _done(ledger, "pause", kind, target, who=who, why=why, now=now, outcome=problem,
                     changed=False, company=company, schedule_id=schedule_id)
    outcome = (f"{kind} {target} paused: its slots are recorded skipped until it is unpaused; "
               "runs already started finish")
    repo.add_pause(ledger, company, schedule_id, who=who, why=why, now=now,
                   audit=_audit("pause", kind, target, who=who, why=why, now=now,
                                outcome=outcome, company=company, schedule_id=schedule_id))
    return _done(ledger, "pause", kind, target, who=who, why=why, now=now, outcome=outcome,
                 changed=True, company=company, schedule_id=schedule_id, recorded=True)


def unpause(ledger: Ledger, company: str, schedule_id: str | None, *, who: str, why: str,
            now: datetime, catalog: Catalog | None = None) -> ControlResult:
    """End the pause of exactly this scope (a company's pause, or one schedule's)."""
    target = schedule_id or company
    kind = "schedule" if schedule_id else "company"
    problem = _unknown_scope(catalog, company, schedule_id)
    existing = None if problem else repo.exact_pause(ledger, company, schedule_id)
    if not problem and existing is None:
        problem = f"{kind} {target} is not paused"
        other = repo.active_pause(ledger, company, schedule_id)
        if other is not None:
            problem += (f" itself, but company {company} is "
                        f"({_stamp('paused', other['paused_by'], other['paused_at'], other['why'])});"
                        f" unpause the company")
    if problem:
        return _done(ledger, "unpause", kind, target, who=who, why=why, now=now,
                     outcome=problem, changed=False, company=company, schedule_id=schedule_id)
    outcome = f"{kind} {target} unpaused: its next slots export again"
    repo.end_pause(ledger, existing["id"], who=who, now=now,
                   audit=_audit("unpause", kind, target, who=who, why=why, now=now,
                                outcome=outcome, company=company, schedule_id=schedule_id))
    return _done(ledger, "unpause", kind, target, who=who, why=why, now=now, outcome=outcome,
                 changed=True, company=company, schedule_id=schedule_id, recorded=True)


def _unknown_scope(catalog: Catalog | None, company: str, schedule_id: str | None) -> str | None:
    if schedule_id is not None and not schedule_id.startswith(f"{company}/"):
        return f"schedule {schedule_id} does not belong to company {company}"
    if catalog is None:
        return None
    if company not in catalog.companies:
        return (f"unknown company {company!r}; known companies: "
                f"{', '.join(sorted(catalog.companies)) or 'none'}")
    if schedule_id is not None and schedule_id not in {s.schedule_id for s in catalog.schedules}:
        return f"unknown schedule {schedule_id!r} (see 'exportctl preview CONFIG_DIR')"
    return None


def pause_reason(ledger: Ledger, company: str, schedule_id: str) -> str | None:
    """Why slots of ``schedule_id`` must not export now (``start_run``), or None."""
    found = repo.active_pause(ledger, company, schedule_id)
    if found is None:
        return None
    scope = f"schedule {found['schedule_id']}" if found["schedule_id"] else f"company {company}"
    return f"{scope} " + _stamp("paused", found["paused_by"], found["paused_at"], found["why"])


# -- cancel --------------------------------------------------------------------------------------

def cancel_run(ledger: Ledger, run_key: str, *, who: str, why: str,
               now: datetime) -> ControlResult:
    """Cancel a run that has not finished (registered, in flight, or failed awaiting a retry)."""
    run = ledger.get_run(run_key)
    if run is None:
        return _done(ledger, "cancel", "run", run_key, who=who, why=why, now=now, changed=False,
                     outcome=f"run {run_key} is not in the ledger (see 'exportctl runs')")
    if run.state not in UNFINISHED:
        hint = ("; revoke its artifact instead" if run.state == RunState.READY else "")
        return _done(ledger, "cancel", "run", run_key, who=who, why=why, now=now, run=run,
                     changed=False, outcome=f"run {run_key} is already {run.state}; only a run "
                     f"that has not finished can be cancelled{hint}")
    reason = _stamp("cancelled", who, now, why)
    outcome = (f"run {run_key} cancelled (was {run.state}): its attempt is fenced off, nothing "
               "of it publishes")
    cancelled = repo.cancel(ledger, run_key, reason, now,
                            _audit("cancel", "run", run_key, who=who, why=why, now=now,
                                   outcome=outcome, run=run))
    details = tuple(f"delivery {d} cancelled" for d in cancelled)
    return _done(ledger, "cancel", "run", run_key, who=who, why=why, now=now, outcome=outcome,
                 changed=True, run=run, details=details, recorded=True)


def delivery_block(run: RunRecord, artifact: ArtifactRecord) -> str | None:
    """Why nothing of the run may be delivered any more (``deliver_run`` refuses): an operator
    cancelled the run or revoked its newest artifact."""
    if run.state == RunState.CANCELLED:
        return f"the run is cancelled ({run.reason})"
    if artifact.revoked_at is not None:
        return (f"artifact v{artifact.version} is {artifact.revoked_reason}; regenerate the "
                "period to deliver a new version")
    return None


# -- revoke --------------------------------------------------------------------------------------

def find_artifact(ledger: Ledger, target: str, *, live: bool = True
                  ) -> tuple[ArtifactRecord | None, RunRecord | None, str | None]:
    """``target`` is an artifact id (digits) or a run key (its newest artifact that is not
    revoked, when ``live``). Returns (artifact, run, problem)."""
    if target.isdigit():
        found = repo.get_artifact(ledger, int(target))
        if found is None:
            return None, None, f"artifact {target} is not in the ledger (see 'exportctl runs')"
        return found[0], found[1], None
    run = ledger.get_run(target)
    if run is None:
        return None, None, (f"{target!r} is neither an artifact id nor a run in the ledger "
                            "(see 'exportctl runs')")
    versions = [a for a in ledger.artifacts(target) if not (live and a.revoked_at)]
    if not versions:
        everything = ledger.artifacts(target)
        what = "every artifact of it is revoked already" if everything else \
            "it has no published artifact"
        return None, run, f"run {target} is {run.state} and {what}"
    return versions[-1], run, None


def revoke_artifact(ledger: Ledger, target: str, *, who: str, why: str, now: datetime,
                    exports_root: Path | None = None,
                    resolver: ConnectionResolver | None = None) -> ControlResult:
    """Revoke an artifact (id) or a run's newest artifact (run key)."""
    artifact, run, problem = find_artifact(ledger, target)
    if artifact is not None and artifact.revoked_at is not None:
        problem = f"artifact {artifact.id} is already revoked ({artifact.revoked_reason})"
    if problem or artifact is None or run is None:
        return _done(ledger, "revoke", "artifact" if target.isdigit() else "run", target,
                     who=who, why=why, now=now, run=run, outcome=problem or "", changed=False)
    reason = _stamp("revoked", who, now, why)
    repo.mark_revoked(ledger, artifact.id, reason, now)
    details = [f"delivery {d} cancelled"
               for d in repo.cancel_deliveries(ledger, run.run_key, artifact.version, reason, now)]
    details += _withdraw(ledger, run, artifact, exports_root=exports_root, resolver=resolver)
    outcome = (f"artifact {artifact.id} (run {run.run_key} v{artifact.version}) revoked: later "
               "deliveries are refused; regenerate the period to publish a new version")
    if details:
        outcome += "; " + "; ".join(details)
    return _done(ledger, "revoke", "artifact", str(artifact.id), who=who, why=why, now=now,
                 outcome=outcome, changed=True, run=run, details=tuple(details))


def _withdraw(ledger: Ledger, run: RunRecord, artifact: ArtifactRecord, *,
              exports_root: Path | None, resolver: ConnectionResolver | None) -> list[str]:
    """Take the artifact back from every destination that acknowledged it, where possible."""
    from export_lib.config.destinations import parse_destination
    from export_lib.delivery.transports import transport_for

    lines = []
    for row in rec.list_deliveries(ledger.engine, run.run_key, states=(rec.ACKNOWLEDGED,)):
        if row["artifact_version"] != artifact.version:
            continue
        dest = parse_destination(json.dumps(row["destination_config"]))
        transport = transport_for(dest, exports_root=exports_root, resolver=resolver)
        if not transport.can_withdraw:
            lines.append(f"cannot withdraw from {dest.id} ({dest.type}): a {dest.type} delivery "
                         f"cannot be taken back; tell its recipient ({row['target']}) that it "
                         "is revoked")
            continue
        try:
            with transport:
                done = transport.withdraw(row["artifact_name"])
        except Exception as exc:  # noqa: BLE001 - one destination's failure is recorded, the rest go on
            lines.append(f"withdrawing from {dest.id} failed: {type(exc).__name__}: "
                         f"{transport.scrub(str(exc))}")
            continue
        lines.append(f"withdrawn from {dest.id}: {done}")
    return lines


# -- hold ----------------------------------------------------------------------------------------

def hold(ledger: Ledger, target: str, *, who: str, why: str, now: datetime) -> ControlResult:
    """Hold an artifact (id) or a run (run key: every version, also later ones)."""
    run, artifact, kind, problem = _hold_target(ledger, target)
    if not problem and run is not None:
        existing = repo.active_holds(ledger, run.id, artifact.id if artifact else None,
                                     exact=True)
        if existing:
            held = existing[0]
            problem = (f"{kind} {target} is already held "
                       f"({_stamp('held', held['held_by'], held['held_at'], held['why'])})")
    if problem or run is None:
        return _done(ledger, "hold", kind, target, who=who, why=why, now=now, run=run,
                     outcome=problem or "", changed=False)
    outcome = f"{kind} {target} held: retention keeps it until it is unheld"
    repo.add_hold(ledger, run.id, artifact.id if artifact else None, who=who, why=why, now=now,
                  audit=_audit("hold", kind, target, who=who, why=why, now=now, outcome=outcome,
                               run=run))
    return _done(ledger, "hold", kind, target, who=who, why=why, now=now, outcome=outcome,
                 changed=True, run=run, recorded=True)


def unhold(ledger: Ledger, target: str, *, who: str, why: str, now: datetime) -> ControlResult:
    """Release the holds on exactly this artifact or run."""
    run, artifact, kind, problem = _hold_target(ledger, target, deleted_ok=True)
    existing = [] if problem or run is None else repo.active_holds(
        ledger, run.id, artifact.id if artifact else None, exact=True)
    if not problem and not existing:
        problem = f"{kind} {target} is not held"
        if artifact is not None and run is not None and repo.active_holds(ledger, run.id):
            problem += f" itself, but its run {run.run_key} is; unhold the run"
    if problem or run is None:
        return _done(ledger, "unhold", kind, target, who=who, why=why, now=now, run=run,
                     outcome=problem or "", changed=False)
    outcome = f"{kind} {target} no longer held: retention applies to it again"
    repo.end_holds(ledger, [h["id"] for h in existing], who=who, now=now,
                   audit=_audit("unhold", kind, target, who=who, why=why, now=now,
                                outcome=outcome, run=run))
    return _done(ledger, "unhold", kind, target, who=who, why=why, now=now, outcome=outcome,
                 changed=True, run=run, recorded=True)


def _hold_target(ledger: Ledger, target: str, *, deleted_ok: bool = False
                 ) -> tuple[RunRecord | None, ArtifactRecord | None, str, str | None]:
    if not target.isdigit():
        run = ledger.get_run(target)
        if run is None:
            return None, None, "run", (f"{target!r} is neither an artifact id nor a run in the "
                                       "ledger (see 'exportctl runs')")
        return run, None, "run", None
    artifact, run, problem = find_artifact(ledger, target, live=False)
    if problem is None and artifact is not None and artifact.deleted_at and not deleted_ok:
        problem = (f"artifact {target} was deleted ({artifact.deleted_reason}); there is "
                   "nothing left to hold")
    return run, artifact, "artifact", problem
