"""Requeue: an operator's decision to try again a delivery that gave up (``exhausted``) or was
turned away (``refused``).

Both doors lead here: clearing a ``deliver`` task in Airflow (the operator requeues the
delivery before delivering) and ``exportctl requeue RUN_KEY [--destination ID]``. The decision
is kept in the run's history (``export_run_events``) as an operator action with who, when and
why; the delivery record goes back to ``pending`` with a fresh budget
(:func:`export_lib.ledger.deliveries.requeue` decides what "fresh" means).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from export_lib.errors import ConfigError, PublishError
from export_lib.ledger import Ledger
from export_lib.ledger import deliveries as rec
from export_lib.ledger.controls import Action, record_action
from export_lib.logfmt import bind, get_logger, scope
from export_lib.pipeline.stages import _get, schedule_of

log = get_logger(__name__)

REQUEUABLE = (rec.EXHAUSTED, rec.REFUSED)
ACTION = "operator action: requeued delivery"


@dataclass(frozen=True)
class Requeued:
    """One delivery put back to ``pending``: what it was, and the event that records it."""

    delivery_id: str
    destination_id: str
    was: str
    attempts: int
    last_error: str | None
    event: str


@scope
def requeue_deliveries(ledger: Ledger, run_key: str, *, who: str, why: str, now: datetime,
                       destination_id: str | None = None, strict: bool = True) -> list[Requeued]:
    """Put the exhausted or refused deliveries of the run's newest artifact back to ``pending``
    (only ``destination_id``'s, if given), recording who, when (``now``) and why for each.

    Deliveries in any other state are left alone, so calling this when nothing gave up is a
    no-op (returns ``[]``). Raises ConfigError for a destination the run did not capture and
    PublishError when the run has no artifact yet, unless ``strict`` is False (the deliver
    task: it leaves those cases to the delivery itself) — then there is nothing to requeue.
    """
    run = _get(ledger, run_key)
    bind(**run.log_context())
    captured = [d.id for d in schedule_of(run).destinations]
    artifact = ledger.latest_artifact(run_key)
    if not strict and (artifact is None or destination_id not in (None, *captured)):
        return []
    if destination_id is not None and destination_id not in captured:
        raise ConfigError(f"run {run_key} has no destination {destination_id!r}; its "
                          f"destinations (as captured at registration): {', '.join(captured)}")
    if artifact is None:
        raise PublishError(f"run {run_key} has no published artifact, so nothing to requeue; "
                           "it is delivered once it is published")
    done: list[Requeued] = []
    for dest in [destination_id] if destination_id else captured:
        record = rec.get_record(ledger.engine, rec.delivery_id(run_key, artifact.version, dest))
        if record is None or record.state not in REQUEUABLE:
            continue
        rec.requeue(ledger.engine, record.delivery_id, now=now)
        detail = (f"{ACTION} {record.delivery_id} to {dest} (was {record.state} after "
                  f"{record.attempts} attempt(s); last error: {record.last_error or '-'}) by "
                  f"{who}: {why}")
        ledger.note(run_key, detail, now)
        record_action(ledger, Action(
            at=now, who=who, action="requeue", target_kind="delivery",
            target_id=record.delivery_id, why=why, changed=True,
            outcome=f"delivery to {dest} requeued (was {record.state})", company=run.company,
            schedule_id=run.schedule_id))
        log.warning("%s", detail)
        done.append(Requeued(record.delivery_id, dest, record.state, record.attempts,
                             record.last_error, detail))
    return done


def operator_actions(ledger: Ledger, run_key: str) -> list[dict]:
    """The run's recorded requeues (event rows: ``at`` and ``detail``), oldest first."""
    return [e for e in ledger.events(run_key) if (e["detail"] or "").startswith(ACTION)]
