"""``deliver()``: one attempt to bring one artifact version to one destination, recorded.

Each call is at most one attempt (Airflow's task retries call again), in this order:

1. insert-or-get the delivery record for (run key, artifact version, destination id);
2. already ``acknowledged`` → return it without touching the destination: a re-triggered or
   retried run delivers once;
3. the run's owner must still be authorised, else the record becomes ``refused`` and
   :class:`AuthorizationError` is raised;
4. win the attempt (compare-and-swap to ``attempting``; an attempt whose heartbeat has been
   silent for four beats (:mod:`export_lib.delivery.heartbeat`) is taken over, one of an
   earlier release (no heartbeat) once older than ``stale_after``);
5. ask the destination whether it already holds the same content (acknowledge without
   rewriting), else transport it;
6. record the receipt, or the error: a retryable error leaves the record ``pending`` while
   ``now`` is inside its retry window (``retry_until``: the run's slot + the destination's
   ``retry_window``, 5 days by default), and exhausts it once the window has closed; a
   permanent error exhausts it at once. There is no attempt count: the window is the budget.

Failures raise :class:`DeliveryError` with ``retryable`` set for the Airflow edge and, while the
window is open, ``retry_until`` (the Airflow retry policy lands its last try at that moment).
A destination removed from the config before delivery is recorded ``refused`` by
:func:`refuse` (nothing is sent, nothing fails).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

from sqlalchemy.engine import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from export_lib.config.destinations import Destination, EmailDestination, parse_destination
from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.delivery.heartbeat import Heartbeat, silent_after
from export_lib.delivery.transports import DeliveryContext, Transport, transport_for
from export_lib.errors import (
    AuthorizationError,
    ConfigError,
    DeliveryError,
    ExportError,
)
from export_lib.ledger import deliveries as rec
from export_lib.ledger.clock import agreed_now
from export_lib.ledger.reconnect import ledger_error, repeatable
from export_lib.logfmt import bind, get_logger, run_context, scope
from export_lib.source.connections import ConnectionResolver

log = get_logger(__name__)

DEFAULT_STALE_AFTER = timedelta(minutes=30)


@dataclass(frozen=True)
class DeliveryOutcome:
    """Result of :func:`deliver`: the record's state after this call."""

    delivery_id: str
    destination_id: str
    destination_type: str
    target: str
    state: str
    attempts: int
    receipt: str | None
    already_delivered: bool = False
    """True when an earlier call had acknowledged it: nothing was sent this time."""
    already_present: bool = False
    """True when this attempt found the content at the destination and did not rewrite it."""

    def as_xcom(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Attempt:
    engine: Engine
    record: rec.DeliveryRecord  # as it stands once this attempt won (state attempting)
    ctx: DeliveryContext
    retry_until: datetime  # the window this attempt counts against
    now: datetime
    labels: tuple[str, str, str]  # company, schedule, period for every log line


def deliver(
    engine: Engine,
    destination: Destination,
    artifact: DeliverableArtifact,
    *,
    run_key: str,
    period_label: str,
    owner: str,
    authorized: Collection[str],
    retry_until: datetime,
    now: datetime,
    exports_root: Path | None = None,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
    resolver: ConnectionResolver | None = None,
) -> DeliveryOutcome:
    """Deliver ``artifact`` to ``destination`` once; see the module docstring for the steps.

    ``destination`` must be the config the run captured (a changed config raises; it applies
    from the next slot). ``owner``/``authorized`` are re-checked now, at delivery time.
    ``retry_until`` ends the retry window of a delivery recorded by this call (a recorded
    delivery keeps the window it was given, or the one a requeue gave it).
    ``now`` is the moment of this call, supplied by the caller (the Airflow edge or the CLI):
    it stamps the ledger, decides whether the window has closed and whether an ``attempting``
    record older than ``stale_after`` belongs to a dead worker. ``exports_root`` anchors
    relative ``local`` paths (default ``$EXPORT_HOME/exports``). ``resolver`` resolves the
    destination's connection (the environment when None). Each call makes at most one attempt.
    """
    if retry_until.tzinfo is None:
        raise ConfigError(f"retry_until {retry_until.isoformat()} is naive; pass an aware UTC "
                          "instant (the run's slot + the destination's retry_window)")
    try:
        with run_context(**_log_fields(artifact, run_key, period_label)):
            return _deliver(engine, destination, artifact, run_key=run_key,
                            period_label=period_label, owner=owner, authorized=authorized,
                            retry_until=retry_until, now=now, exports_root=exports_root,
                            stale_after=stale_after, resolver=resolver)
    except (OperationalError, InterfaceError) as exc:  # down or locked: the task retries
        raise ledger_error(str(engine.url), exc) from exc


def _deliver(engine: Engine, destination: Destination, artifact: DeliverableArtifact, *,
             run_key: str, period_label: str, owner: str, authorized: Collection[str],
             retry_until: datetime, now: datetime, exports_root: Path | None,
             stale_after: timedelta, resolver: ConnectionResolver | None) -> DeliveryOutcome:
    transport = transport_for(destination, exports_root=exports_root, resolver=resolver)
    # Up to the attempt won, every step is safe to repeat: a ledger restart is waited for.
    won = repeatable(engine, lambda: _attempt_once(
        engine, destination, artifact, transport, run_key=run_key, period_label=period_label,
        owner=owner, authorized=authorized, retry_until=retry_until, now=now,
        stale_after=stale_after), what="delivery record")
    if isinstance(won, DeliveryOutcome):  # acknowledged earlier: nothing to send
        return won
    return _run(transport, artifact, won)


def _attempt_once(engine: Engine, destination: Destination, artifact: DeliverableArtifact,
                  transport: Transport, *, run_key: str, period_label: str, owner: str,
                  authorized: Collection[str], retry_until: datetime, now: datetime,
                  stale_after: timedelta) -> DeliveryOutcome | _Attempt:
    record = rec.ensure_record(
        engine, _new_record(destination, artifact, run_key, transport, retry_until), now=now)
    _check_same_delivery(record, destination, artifact)
    labels = (str(artifact.manifest.get("company", "-")),
              str(artifact.manifest.get("schedule", "-")), period_label)
    if record.state == rec.ACKNOWLEDGED:
        log.info("company=%s schedule=%s period=%s delivery %s to %s already acknowledged (%s); "
                 "not sending again", *labels, record.delivery_id, record.target, record.receipt)
        return _outcome(record, already_delivered=True)
    if record.state == rec.EXHAUSTED:
        raise DeliveryError(
            f"delivery {record.delivery_id} to {record.target} is exhausted after "
            f"{record.attempts} attempt(s); last error: {record.last_error}. Fix the cause, then "
            "requeue it (export_lib.delivery.requeue)"
        )
    recipients = destination.to if isinstance(destination, EmailDestination) else ()
    record = _authorize(engine, record, owner, authorized, now, labels, recipients)
    record = _begin(engine, record, now, stale_after)
    ctx = DeliveryContext(record.delivery_id, run_key, period_label, destination.id)
    return _Attempt(engine, record, ctx, window_of(record), now, labels)


def window_of(record: rec.DeliveryRecord) -> datetime:
    """The end of the record's retry window (records made before it was stored: created_at +
    the destination's window)."""
    if record.retry_until is not None:
        return record.retry_until
    return record.created_at + parse_destination(record.destination_config).retry_window


def _log_fields(artifact: DeliverableArtifact, run_key: str, period: str) -> dict[str, Any]:
    """The run's log fields, for callers that bound none (deliver_run has: the same values)."""
    return {"company": artifact.manifest.get("company"),
            "schedule": artifact.manifest.get("schedule"), "run": run_key, "period": period}


@scope
def refuse(engine: Engine, destination: Destination, artifact: DeliverableArtifact, *,
           run_key: str, period_label: str, reason: str, retry_until: datetime,
           now: datetime) -> DeliveryOutcome:
    """Record that this delivery will not be made (e.g. its destination was removed from the
    config before delivery): ``pending`` becomes ``refused`` with ``reason``; a delivery that
    was already acknowledged, exhausted or refused is left as it is. Nothing is sent."""
    bind(**_log_fields(artifact, run_key, period_label))
    try:
        transport = transport_for(destination)
        record = rec.ensure_record(
            engine, _new_record(destination, artifact, run_key, transport, retry_until), now=now)
        if record.state == rec.PENDING:
            with engine.begin() as conn:
                rec.transition(conn, record, rec.REFUSED, now=now, last_error=reason)
            record = rec.get_record(engine, record.delivery_id) or record
    except (OperationalError, InterfaceError) as exc:
        raise ledger_error(str(engine.url), exc) from exc
    log.warning("company=%s schedule=%s period=%s delivery %s to %s %s: %s",
                artifact.manifest.get("company", "-"), artifact.manifest.get("schedule", "-"),
                period_label, record.delivery_id, record.target, record.state, reason)
    return _outcome(record)


def _new_record(destination: Destination, artifact: DeliverableArtifact, run_key: str,
                transport: Transport, retry_until: datetime) -> rec.NewDelivery:
    return rec.NewDelivery(
        delivery_id=rec.delivery_id(run_key, artifact.version, destination.id),
        run_key=run_key,
        artifact_version=artifact.version,
        destination_id=destination.id,
        destination_type=destination.type,
        destination_config=destination.model_dump_json(),
        target=transport.target(artifact),
        artifact_name=artifact.name,
        artifact_sha256=artifact.sha256,
        artifact_bytes=artifact.bytes,
        retry_until=retry_until,
    )


def _check_same_delivery(record: rec.DeliveryRecord, destination: Destination,
                         artifact: DeliverableArtifact) -> None:
    """A run keeps the destination config it captured; a changed config is the next slot's.

    An artifact version is immutable: different content under the same version would make
    "already delivered" a lie, so it is refused.
    """
    if record.artifact_sha256 != artifact.sha256:
        raise DeliveryError(
            f"artifact {artifact.name} (version {artifact.version}) had sha256 "
            f"{record.artifact_sha256} when delivery {record.delivery_id} was recorded and has "
            f"{artifact.sha256} now; versions are immutable — publish changed content as a new "
            "version"
        )
    if parse_destination(record.destination_config).identity() != destination.identity():
        # Compared as parsed configs without the retry policy: a record written before a
        # field existed (it takes its default) or with another retry_window is the same
        # delivery; another path, bucket or host is not.
        raise DeliveryError(
            f"destination {destination.id!r} changed since delivery {record.delivery_id} was "
            f"recorded (recorded {record.destination_config}, now "
            f"{destination.model_dump_json()}); deliver this run with the config it captured — "
            "the change applies from the next slot"
        )


def _authorize(engine: Engine, record: rec.DeliveryRecord, owner: str,
               authorized: Collection[str], now: datetime,
               labels: tuple[str, str, str], recipients: Collection[str] = ()
               ) -> rec.DeliveryRecord:
    allowed = {identity.lower() for identity in authorized}
    strangers = sorted(r for r in recipients if r.lower() not in allowed)
    if owner.lower() in allowed and not strangers:
        if record.state == rec.REFUSED:  # the owner was authorised again since the refusal
            with engine.begin() as conn:
                rec.transition(conn, record, rec.PENDING, now=now)
            record = rec.get_record(engine, record.delivery_id) or record
        return record
    reason = (f"owner {owner!r} is no longer authorised for this company; restore the owner's "
              "access or transfer the schedule to an authorised owner, then requeue")
    if owner.lower() in allowed:
        reason = (f"e-mail recipient(s) {', '.join(strangers)} are neither the company's owner "
                  "nor in its 'authorized' list; add them to company.authorized or remove them "
                  "from the destination's 'to', then requeue")
    if record.state == rec.PENDING:
        with engine.begin() as conn:
            rec.transition(conn, record, rec.REFUSED, now=now, last_error=reason)
    log.warning("company=%s schedule=%s period=%s delivery %s to %s refused: %s", *labels,
                record.delivery_id, record.target, reason)
    raise AuthorizationError(f"delivery {record.delivery_id} to {record.target} refused: {reason}")


def _begin(engine: Engine, record: rec.DeliveryRecord, now: datetime,
           stale_after: timedelta) -> rec.DeliveryRecord:
    if record.state == rec.ATTEMPTING and record.attempt_started_at is not None:
        with engine.connect() as conn:  # dead by both clocks: a fast worker takes none early
            quiet = rec.silence(conn, record.delivery_id, record.attempts)
            age = agreed_now(conn, rec.utc(now)) - record.attempt_started_at
        if quiet is not None and quiet < (limit := silent_after()):
            raise DeliveryError(
                f"delivery {record.delivery_id}: attempt {record.attempts} started at "
                f"{record.attempt_started_at.isoformat()} is still in progress elsewhere (its "
                f"worker's last heartbeat was {quiet.total_seconds():.0f} s ago); it is taken "
                f"over once silent for {limit.total_seconds():.0f} s", retryable=True,
            )
        if quiet is None and age < stale_after:  # an earlier release's attempt: no heartbeat
            raise DeliveryError(
                f"delivery {record.delivery_id}: attempt {record.attempts} started at "
                f"{record.attempt_started_at.isoformat()} is still in progress elsewhere; "
                f"it is taken over after {stale_after}", retryable=True,
            )
    with engine.begin() as conn:
        number = rec.start_attempt(conn, record, now=now)
    if number is None:
        raise DeliveryError(
            f"delivery {record.delivery_id}: another worker started an attempt at the same "
            "moment; this one stands down", retryable=True,
        )
    current = rec.get_record(engine, record.delivery_id)
    assert current is not None
    return current


def _run(transport: Transport, artifact: DeliverableArtifact, attempt: _Attempt) -> DeliveryOutcome:
    # Alive until its outcome is recorded: an acknowledgement waiting out a ledger restart
    # is not taken over.
    with Heartbeat(attempt.engine, attempt.record.delivery_id, attempt.record.attempts):
        return _send(transport, artifact, attempt)


def _send(transport: Transport, artifact: DeliverableArtifact, attempt: _Attempt
          ) -> DeliveryOutcome:
    started = time.monotonic()
    try:
        artifact.check_file()
        with transport:
            receipt = transport.find_existing(artifact, attempt.ctx)
            present = receipt is not None
            if receipt is None:
                receipt = transport.send(artifact, attempt.ctx)
    except ExportError as exc:
        _fail(attempt, DeliveryError(transport.scrub(str(exc)), retryable=exc.retryable), started)
    except Exception as exc:  # a bug or an unmapped library error: record it, never retry blind
        log.error("company=%s schedule=%s period=%s delivery %s: unexpected error\n%s",
                  *attempt.labels, attempt.ctx.delivery_id,
                  transport.scrub(traceback.format_exc()))
        _fail(attempt, DeliveryError(f"unexpected {type(exc).__name__}: "
                                     f"{transport.scrub(str(exc))}"), started)
    except BaseException as exc:
        _interrupted(attempt, transport.scrub(f"{type(exc).__name__}: {exc}"), started)
        raise
    else:
        return _succeed(attempt, receipt, present, started)


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _succeed(attempt: _Attempt, receipt: str, present: bool, started: float) -> DeliveryOutcome:
    record = attempt.record

    def acknowledge() -> bool:
        with attempt.engine.begin() as conn:
            won = rec.transition(conn, record, rec.ACKNOWLEDGED, now=attempt.now,
                                 receipt=receipt, last_error=None,
                                 acknowledged_at=rec.utc(attempt.now))
            if won:
                rec.finish_attempt(conn, record.delivery_id, record.attempts,
                                   outcome=rec.ALREADY_PRESENT if present else rec.DELIVERED,
                                   duration_ms=_elapsed_ms(started), receipt=receipt)
        return won

    # Sent: recording it waits out a ledger restart (a compare-and-swap, safe to repeat).
    won = repeatable(attempt.engine, acknowledge, what="delivery acknowledgement")
    if not won:
        raise DeliveryError(
            f"delivery {record.delivery_id}: attempt {record.attempts} was taken over by another "
            "worker while it ran; the next attempt verifies the destination", retryable=True,
        )
    log.info("company=%s schedule=%s period=%s delivery %s to %s acknowledged on attempt %d%s: %s",
             *attempt.labels, record.delivery_id, record.target, record.attempts,
             " (already present, not rewritten)" if present else "", receipt)
    final = rec.get_record(attempt.engine, record.delivery_id)
    assert final is not None
    return _outcome(final, already_present=present)


def _fail(attempt: _Attempt, error: DeliveryError, started: float) -> NoReturn:
    message, exhausted = _record_failure(attempt, error, started)
    record = attempt.record
    # Not chained: the cause's text is in the (scrubbed) message; a chained library exception
    # would print its own, unscrubbed, in the task log's traceback.
    raise DeliveryError(f"delivery {record.delivery_id} to {record.target} {message}: {error}",
                        retryable=not exhausted,
                        retry_until=None if exhausted else attempt.retry_until) from None


def _interrupted(attempt: _Attempt, what: str, started: float) -> None:
    """The task was stopped mid-attempt (Airflow's timeout or SIGTERM raise BaseException).

    Free the record now, so the next try need not wait ``stale_after`` for a takeover. Best
    effort: if this fails too, the takeover still recovers the record.
    """
    error = DeliveryError(f"interrupted: {what}", retryable=True)
    try:
        _record_failure(attempt, error, started)
    except Exception:  # noqa: BLE001 - never mask the interruption itself
        log.warning("delivery %s: could not record the interruption; a later attempt takes "
                    "over after stale_after", attempt.ctx.delivery_id)


def _record_failure(attempt: _Attempt, error: DeliveryError, started: float) -> tuple[str, bool]:
    """Write the failed attempt and the record's next state; the log message and exhaustion."""
    record = attempt.record
    number = record.attempts

    def write() -> bool:
        with attempt.engine.begin() as conn:
            # Closed once both clocks passed its end: a worker running fast closes none early.
            closed = agreed_now(conn, rec.utc(attempt.now)) >= attempt.retry_until
            exhausted = not error.retryable or closed
            if rec.transition(conn, record, rec.EXHAUSTED if exhausted else rec.PENDING,
                              now=attempt.now, last_error=str(error)):
                rec.finish_attempt(
                    conn, record.delivery_id, number,
                    outcome=rec.RETRYABLE_FAILURE if error.retryable else rec.PERMANENT_FAILURE,
                    duration_ms=_elapsed_ms(started), error=str(error),
                )
        return exhausted

    exhausted = repeatable(attempt.engine, write, what="delivery failure")
    if not error.retryable:
        message = f"failed permanently on attempt {number} (not retried)"
    elif exhausted:
        message = (f"exhausted: its retry window closed at {_iso(attempt.retry_until)} "
                   f"(attempt {number} failed)")
    else:
        message = f"attempt {number} failed, will retry until {_iso(attempt.retry_until)}"
    log.error("company=%s schedule=%s period=%s delivery %s to %s %s: %s", *attempt.labels,
              record.delivery_id, record.target, message, error)
    return message, exhausted


def _iso(moment: datetime) -> str:
    return rec.utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def _outcome(record: rec.DeliveryRecord, *, already_delivered: bool = False,
             already_present: bool = False) -> DeliveryOutcome:
    return DeliveryOutcome(
        delivery_id=record.delivery_id,
        destination_id=record.destination_id,
        destination_type=record.destination_type,
        target=record.target,
        state=record.state,
        attempts=record.attempts,
        receipt=record.receipt,
        already_delivered=already_delivered,
        already_present=already_present,
    )
