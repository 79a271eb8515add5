"""One run in full for the obligations page's drill-down, and the operator actions it offers.

:func:`run_detail` reads a run's window, config version, render attempts, artifact manifest
(every version with rows, bytes, sha256 and what it supersedes), each delivery with its
attempts and receipts, and the run's history. :func:`available_actions` says which operator
actions apply right now; :func:`release_held` and :func:`requeue_delivery` perform them,
recording who did it (``who``). Revoking an artifact is not done here (see the page's action
table, ``plugins/export_airflow/pages/obligations_ui.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from export_lib.errors import WindowError
from export_lib.ledger.schema import artifacts, attempts, deliveries, delivery_attempts, events, runs
from export_lib.periods.instants import format_instant
from export_lib.views.obligations import _run_columns, run_row

if TYPE_CHECKING:
    from export_lib.ledger import Ledger


def _iso(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


def run_detail(engine: Engine, run_key: str, *, now: datetime) -> dict[str, Any] | None:
    """The run ``run_key`` in full, or None when the ledger has no such run."""
    with engine.connect() as conn:
        head = conn.execute(sa.select(runs.c.id, *_run_columns(now))
                            .where(runs.c.run_key == run_key)).first()
        if head is None:
            return None
        tries = conn.execute(sa.select(attempts).where(attempts.c.run_id == head.id)
                             .order_by(attempts.c.generation)).all()
        versions = conn.execute(sa.select(artifacts).where(artifacts.c.run_id == head.id)
                                .order_by(artifacts.c.version)).all()
        dels = conn.execute(sa.select(deliveries).where(deliveries.c.run_key == run_key)
                            .order_by(deliveries.c.artifact_version.desc(),
                                      deliveries.c.destination_id)).all()
        ids = [d.delivery_id for d in dels]
        tried = conn.execute(sa.select(delivery_attempts)
                             .where(delivery_attempts.c.delivery_id.in_(ids))
                             .order_by(delivery_attempts.c.delivery_id,
                                       delivery_attempts.c.attempt)).all() if ids else []
        history = conn.execute(sa.select(events).where(events.c.run_id == head.id)
                               .order_by(events.c.at, events.c.id)).all()
    per_delivery: dict[str, list[dict[str, Any]]] = {}
    for t in tried:
        per_delivery.setdefault(t.delivery_id, []).append({
            "attempt": t.attempt, "started_at_utc": _iso(t.started_at),
            "duration_ms": t.duration_ms, "outcome": t.outcome, "error": t.error,
            "receipt": t.receipt})
    return {
        **run_row(head, now),
        "attempts": [{"generation": a.generation, "state": a.state, "origin": a.origin,
                      "started_at_utc": _iso(a.started_at), "finished_at_utc": _iso(a.finished_at),
                      "rows": a.rows, "error": a.error} for a in tries],
        "artifacts": [{"version": a.version, "uri": a.uri, "manifest_uri": a.manifest_uri,
                       "rows": a.rows, "bytes": a.bytes, "sha256": a.sha256, "format": a.format,
                       "config_version": a.config_version, "supersedes": a.supersedes,
                       "correction": bool(a.correction),
                       "generated_at_utc": _iso(a.generated_at),
                       "revoked": a.revoked_reason if a.revoked_at is not None else None,
                       "deleted_at_utc": _iso(a.deleted_at)} for a in versions],
        "deliveries": [{"delivery_id": d.delivery_id, "destination": d.destination_id,
                        "type": d.destination_type, "version": d.artifact_version,
                        "state": d.state, "attempts": d.attempts, "target": d.target,
                        "receipt": d.receipt, "last_error": d.last_error,
                        "acknowledged_at_utc": _iso(d.acknowledged_at),
                        "retry_until_utc": _iso(d.retry_until),
                        "history": per_delivery.get(d.delivery_id, [])} for d in dels],
        "events": [{"at_utc": _iso(e.at), "from": e.from_state, "to": e.to_state,
                    "detail": e.detail} for e in history],
    }


def one_off(detail: dict[str, Any]) -> bool:
    """Is this run a one-off (manual) export, ``<company>/manual/<tag>`` of the pseudo-schedule
    ``<company>/manual-<tag>`` (``config.manual``)?"""
    company = detail["company"]
    return (detail["run_key"].startswith(f"{company}/manual/")
            and detail["schedule"].startswith(f"{company}/manual-"))


def available_actions(detail: dict[str, Any]) -> dict[str, list[str]]:
    """What an operator may do to this run now: ``release`` (a held run), ``requeue`` (the
    destinations whose delivery of the newest artifact gave up), ``revoke`` (published
    versions not revoked or deleted yet), ``cancel`` (a run that has not finished), ``pause``
    / ``unpause`` its schedule (``detail["paused"]``: the pause in force, if the caller
    looked)."""
    from export_lib.pipeline.requeue import REQUEUABLE

    newest = max((a["version"] for a in detail["artifacts"]), default=None)
    # A one-off (manual) export's schedule is a pseudo-schedule of that run alone: pausing it
    # would stop nothing, so neither pause nor resume is offered.
    schedule = [] if one_off(detail) else [detail["schedule"]]
    unfinished = detail["state"] in ("registered", "reading", "rendering", "validating",
                                     "failed")
    return {
        "release": ["run"] if detail["outcome"] == "held" else [],
        "requeue": [d["destination"] for d in detail["deliveries"]
                    if d["version"] == newest and d["state"] in REQUEUABLE],
        "revoke": [str(a["version"]) for a in detail["artifacts"]
                   if not a["revoked"] and not a["deleted_at_utc"]],
        "cancel": ["run"] if unfinished else [],
        "pause": [] if detail.get("paused") else schedule,
        "unpause": schedule if detail.get("paused") else [],
    }


def release_held(ledger: Ledger, run_key: str, *, who: str, now: datetime) -> str:
    """Release a held run (``Ledger.release``, recording ``who``); WindowError when the run is
    not held, naming its state — nothing is changed then."""
    detail = run_detail(ledger.engine, run_key, now=now)
    if detail is None:
        raise WindowError(f"run {run_key} is not in the ledger; nothing was released")
    if detail["outcome"] != "held":
        raise WindowError(f"run {run_key} is not held (it is {detail['outcome_text']}); "
                          "nothing was released")
    ledger.release(run_key, now, who=who)
    return (f"run {run_key} released by {who}: clear its resolve_window task in Airflow to "
            "export it now")


def requeue_delivery(ledger: Ledger, run_key: str, destination_id: str, *, who: str, why: str,
                     now: datetime) -> str:
    """Requeue the delivery of the run's newest artifact to ``destination_id`` when it gave up
    (``pipeline.requeue.requeue_deliveries``, recording who and why); WindowError when there is
    nothing to requeue."""
    from export_lib.pipeline.requeue import requeue_deliveries

    done = requeue_deliveries(ledger, run_key, destination_id=destination_id, who=who, why=why,
                              now=now)
    if not done:
        raise WindowError(f"nothing to requeue: the delivery of {run_key} to {destination_id} "
                          "is not exhausted or refused; nothing was changed")
    return (f"delivery of {run_key} to {destination_id} requeued by {who}: clear its deliver "
            "task in Airflow (or run 'exportctl requeue') to send it now")


__all__ = ["available_actions", "one_off", "release_held", "requeue_delivery", "run_detail"]
