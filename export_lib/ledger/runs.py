"""The Ledger: registration (insert-or-get), attempts with fencing, fenced publication, events.

Every state change goes through :func:`check_transition` and appends an event in the same
transaction. Fencing: each attempt claims ``generation = current_generation + 1``; only the
attempt holding the current generation may move the run or publish, and publication checks it
in the transaction that records the artifact (row-locked on PostgreSQL, ``BEGIN IMMEDIATE`` on
SQLite), so a stalled worker that wakes up after a newer attempt started is rejected.

Over 400 lines on purpose: the fencing rule holds only if every transition of a run and its
attempts goes through the one ``Ledger`` class here (reads, deliveries and operator actions
already live in ``LedgerAccess`` and their own modules).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError

from export_lib import settings
from export_lib.errors import (
    FencingError,
    LeaseHeldError,
    LedgerError,
    LedgerUnavailable,
    PublishError,
)
from export_lib.ledger.access import MOVED, LedgerAccess
from export_lib.ledger.budget import RenderBudget, check_budget, live_renders, lock_budget
from export_lib.ledger.clock import database_now
from export_lib.ledger.contracts import publish_under_contract
from export_lib.ledger.database import ledger_url, make_engine, masked
from export_lib.ledger.reconnect import reconnecting, waits_for_ledger
from export_lib.ledger.records import ArtifactRecord, AttemptRecord, RunRecord, RunRegistration
from export_lib.ledger.schema import artifacts, attempts, events, runs
from export_lib.ledger.states import RUN_STATES, AttemptState, RunState, check_transition
from export_lib.logfmt import get_logger
from export_lib.source.export_schema import ExportSchema

if TYPE_CHECKING:
    from sqlalchemy import Row

log = get_logger(__name__)

DEFAULT_LEASE = timedelta(hours=1)
# A render renews its lease this often while it reads (a killed worker frees its place in the
# render budget within RENDER_LEASE).
RENDER_LEASE = settings.RENDER_LEASE
RENDER_LEASE_ENV = settings.RENDER_LEASE_ENV
# Attempt states that hold the run while their lease lives: a render in progress, and a staged
# object waiting for its publish step. Only the holder may work on the run until then.
_HOLDING = (AttemptState.RUNNING.value, AttemptState.STAGED.value)


def render_lease(environ: Mapping[str, str] | None = None) -> timedelta:
    """The render lease: ``EXPORT_RENDER_LEASE_SECONDS`` or :data:`RENDER_LEASE`. A killed
    worker's run is taken over this long after its last renewal."""
    return settings.render_lease(environ)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def open_ledger(url: str | None = None) -> Ledger:
    """Connect to the ledger; an unreachable one is a LedgerError naming the (masked) URL."""
    resolved = ledger_url(url)
    try:
        engine = make_engine(resolved)
    except (ArgumentError, ValueError) as exc:
        # SQLAlchemy's ValueError (a port that is no number) quotes the URL: never shown.
        why = str(exc) if isinstance(exc, ArgumentError) else "its port is not a number"
        raise LedgerError(
            f"EXPORT_LEDGER_URL {masked(resolved)!r} is not a usable database URL ({why}); use "
            "e.g. postgresql://user:pw@host:5432/exports or sqlite:////abs/path/ledger.db"
        ) from None
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise LedgerUnavailable(
            f"cannot reach the export ledger at {masked(resolved)}: {reason}. "
            "Check EXPORT_LEDGER_URL and that the database is up."
        ) from exc
    return Ledger(engine, resolved)


def _run(row: Row[Any]) -> RunRecord:
    return RunRecord(**dict(row._mapping))


def _attempt(row: Row[Any]) -> AttemptRecord:
    return AttemptRecord(**dict(row._mapping))


# An attempt as lists read it: without the tail of its upload session (up to 256 KiB, read
# only by the publication of that one attempt: get_attempt).
_LISTED = [c for c in attempts.c if c.name != "staging_tail"]


def _artifact(row: Row[Any]) -> ArtifactRecord:
    return ArtifactRecord(**dict(row._mapping))


class Ledger(LedgerAccess):
    """The run repository. Thread/process safe: every method is one transaction."""

    def _lock_run(self, conn: Connection, run_key: str) -> RunRecord:
        row = conn.execute(
            select(runs).where(runs.c.run_key == run_key).with_for_update()
        ).first()
        if row is None:
            raise LedgerError(f"run {run_key} is not registered in the ledger")
        return _run(row)

    def _move(
        self, conn: Connection, run: RunRecord, target: RunState, now: datetime,
        *, attempt_id: str | None = None, reason: str | None = None,
    ) -> None:
        target = RunState(target)
        check_transition(RUN_STATES, run.run_key, run.state, target)
        conn.execute(
            update(runs).where(runs.c.id == run.id)
            .values(state=target.value, reason=reason, updated_at=now)
        )
        conn.execute(insert(events).values(
            run_id=run.id, at=now, from_state=run.state, to_state=target.value,
            attempt_id=attempt_id, detail=reason,
        ))
        conn.info.get(MOVED, []).append((run.run_key, target.value))  # see _tx

    # -- registration ---------------------------------------------------------------------
    @waits_for_ledger
    def register(self, reg: RunRegistration, now: datetime) -> tuple[RunRecord, bool]:
        """Insert-or-get on the run key. Returns (run, created). An existing run is returned
        untouched: its captured window, config version and snapshot are never rewritten."""
        existing = self.get_run(reg.run_key)
        if existing is not None:
            return existing, False
        values = {**reg.__dict__, "state": RunState.REGISTERED.value, "current_generation": 0,
                  "created_at": now, "updated_at": now}
        try:
            with self._tx() as conn:
                run_id = conn.execute(insert(runs).values(**values)).inserted_primary_key[0]
                conn.execute(insert(events).values(
                    run_id=run_id, at=now, from_state=None, to_state=RunState.REGISTERED.value,
                    detail=f"registered by {reg.trigger}",
                ))
        except IntegrityError:
            # Another scheduler/process registered the same slot first: use theirs.
            run = self.get_run(reg.run_key)
            assert run is not None
            return run, False
        run = self.get_run(reg.run_key)
        assert run is not None
        return run, True

    @waits_for_ledger
    def get_run(self, run_key: str) -> RunRecord | None:
        with self._read() as conn:
            row = conn.execute(select(runs).where(runs.c.run_key == run_key)).first()
        return _run(row) if row else None

    # -- attempts -------------------------------------------------------------------------
    def claim_attempt(
        self, run_key: str, *, origin: str, staging_uri: Callable[[str], str], now: datetime,
        lease: timedelta = DEFAULT_LEASE, regenerate: bool = False,
        budget: RenderBudget | None = None,
    ) -> AttemptRecord:
        """Start a new attempt with the next generation. An attempt that still holds the run
        (running or staged, lease not expired at ``now``) is not superseded: LeaseHeldError,
        nothing changed. Older attempts whose lease lapsed (a killed worker) are abandoned
        (their staging objects stay recorded for clean-up). A READY run is only re-opened with
        ``regenerate=True``. With ``budget``, the claim is refused (RenderBudgetError, nothing
        changed) when the render budget is full; check and claim are one serialised
        transaction (export_lib/ledger/budget.py).

        Leases are the database's clock (``now`` stamps the records only): the lease runs to
        the database's ``now()`` + ``lease``, and a holder's lease has lapsed when that has
        passed by the database's clock, whatever the claiming worker's clock says. A claim
        whose answer a ledger restart lost is found again by its attempt id and returned."""
        attempt_id = uuid.uuid4().hex
        return reconnecting(lambda: self._claim(
            attempt_id, run_key, origin=origin, staging_uri=staging_uri, now=now, lease=lease,
            regenerate=regenerate, budget=budget), what="ledger claim_attempt")

    def _claim(self, attempt_id: str, run_key: str, *, origin: str,
               staging_uri: Callable[[str], str], now: datetime, lease: timedelta,
               regenerate: bool, budget: RenderBudget | None) -> AttemptRecord:
        with self._tx() as conn:
            mine = conn.execute(select(attempts).where(attempts.c.attempt_id == attempt_id)
                                ).first()
            if mine is not None:  # committed before the connection dropped: ours already
                return _attempt(mine)
            if budget is not None:
                lock_budget(conn)  # before the run's row lock: one lock order for every claim
            run = self._lock_run(conn, run_key)
            if run.state == RunState.READY and not regenerate:
                raise PublishError(
                    f"run {run_key} is already ready; pass regenerate to publish a new version"
                )
            clock = database_now(conn)
            self._check_lease(conn, run, clock)
            if budget is not None:
                check_budget(conn, budget, company=run.company, run_id=run.id, run_key=run_key,
                             now=clock)
            generation = run.current_generation + 1
            stale = conn.execute(
                update(attempts)
                .where(attempts.c.run_id == run.id, attempts.c.state.in_((AttemptState.RUNNING.value,
                                                                  AttemptState.STAGED.value)))
                .values(state=AttemptState.ABANDONED.value, finished_at=now,
                        error=f"superseded by generation {generation}")
            ).rowcount
            if stale:
                log.warning("run %s: %d earlier attempt(s) abandoned; generation %d takes over",
                            run_key, stale, generation)
            values: dict[str, Any] = {"current_generation": generation}
            if regenerate and run.state == RunState.READY:
                # A regeneration reads what the source holds now (late rows included).
                values["source_cutoff"] = now
            conn.execute(update(runs).where(runs.c.id == run.id).values(**values))
            self._move(conn, run, RunState.READING, now, attempt_id=attempt_id,
                       reason=f"attempt generation {generation} from {origin}")
            conn.execute(insert(attempts).values(
                attempt_id=attempt_id, run_id=run.id, generation=generation, origin=origin,
                state=AttemptState.RUNNING.value, lease_expires_at=clock + lease,
                staging_uri=staging_uri(attempt_id), staging_cleaned=0, started_at=now,
            ))
            row = conn.execute(select(attempts).where(attempts.c.attempt_id == attempt_id)).one()
        return _attempt(row)

    def _check_lease(self, conn: Connection, run: RunRecord, now: datetime) -> None:
        """Refuse a claim while another attempt holds the run at ``now`` (the database's
        clock; called under the run's lock)."""
        row = conn.execute(
            select(*_LISTED).where(attempts.c.run_id == run.id, attempts.c.state.in_(_HOLDING),
                                   attempts.c.lease_expires_at > now)
            .order_by(attempts.c.generation.desc()).limit(1)
        ).first()
        if row is None:
            return
        holder = _attempt(row)
        until = _aware(holder.lease_expires_at)
        raise LeaseHeldError(
            f"run {run.run_key}: attempt {holder.attempt_id[:12]} (generation "
            f"{holder.generation}, {holder.origin}) holds the run, {holder.state}, lease until "
            f"{until:%Y-%m-%dT%H:%M:%SZ}; this attempt stands down (nothing claimed) and takes "
            "over only if that lease lapses (a killed worker stops renewing it)", until=until)

    @waits_for_ledger
    def get_attempt(self, attempt_id: str) -> AttemptRecord:
        with self._read() as conn:
            row = conn.execute(select(attempts).where(attempts.c.attempt_id == attempt_id)).first()
        if row is None:
            raise LedgerError(f"attempt {attempt_id} is not in the ledger")
        return _attempt(row)

    def _fence(self, conn: Connection, run: RunRecord, attempt_id: str) -> AttemptRecord:
        row = conn.execute(select(attempts).where(attempts.c.attempt_id == attempt_id)).first()
        if row is None:
            raise LedgerError(f"attempt {attempt_id} is not in the ledger")
        att = _attempt(row)
        if run.state == RunState.CANCELLED:
            raise FencingError(f"run {run.run_key} was cancelled ({run.reason}); attempt "
                               f"{attempt_id[:12]} may not go on. Nothing was made visible.")
        if att.run_id != run.id or att.generation != run.current_generation:
            raise FencingError(
                f"run {run.run_key}: attempt {attempt_id[:12]} (generation {att.generation}) is "
                f"stale; generation {run.current_generation} owns the run now, so this attempt "
                "may not publish. Nothing was made visible."
            )
        return att

    @waits_for_ledger
    def advance(self, run_key: str, attempt_id: str, target: RunState, now: datetime) -> None:
        """Move an in-flight run (reading → rendering → validating) for the current attempt.

        Re-entering the state the run is in is a no-op for the attempt that owns it: an Airflow
        retry of ``publish`` after a storage error finds the run still ``validating``.
        """
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            self._fence(conn, run, attempt_id)
            if run.state == RunState(target).value:
                return
            self._move(conn, run, target, now, attempt_id=attempt_id)

    @waits_for_ledger
    def record_staged(self, run_key: str, attempt_id: str, *, rows: int, nbytes: int,
                      sha256: str, now: datetime,
                      file_schema: list[dict[str, Any]] | None = None,
                      staging_uri: str | None = None, tail: bytes | None = None) -> None:
        """Record what the attempt staged (``file_schema``: its file's schema, ADR 0025;
        ``staging_uri``, ``tail``: its upload session as the render left it, ADR 0031).
        Fenced: an attempt that was superseded while it rendered stays abandoned (its object
        remains staging garbage) and gets FencingError."""
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            self._fence(conn, run, attempt_id)
            conn.execute(update(attempts).where(attempts.c.attempt_id == attempt_id)
                         .values(state=AttemptState.STAGED.value, rows=rows, bytes=nbytes,
                                 sha256=sha256, file_schema=file_schema, staging_tail=tail,
                                 **({"staging_uri": staging_uri} if staging_uri else {})))

    @waits_for_ledger
    def restage(self, run_key: str, attempt_id: str, staging_uri: str) -> None:
        """Record where the attempt's bytes really go (an object store's pending upload to the
        final key, :mod:`export_lib.storage.multipart`), so publication completes it and
        garbage collection aborts it. Fenced like :meth:`record_staged`."""
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            self._fence(conn, run, attempt_id)
            conn.execute(update(attempts).where(attempts.c.attempt_id == attempt_id)
                         .values(staging_uri=staging_uri))

    @waits_for_ledger
    def fail(self, run_key: str, attempt_id: str | None, error: str, now: datetime) -> None:
        """Record a failed attempt; the run goes to FAILED if that attempt still owns it."""
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            owns = True
            if attempt_id:
                row = conn.execute(select(attempts).where(attempts.c.attempt_id == attempt_id)).first()
                owns = row is not None and row.generation == run.current_generation
                conn.execute(update(attempts).where(attempts.c.attempt_id == attempt_id)
                             .values(state=AttemptState.FAILED.value, error=error[:4000], finished_at=now))
            if owns and run.state not in (RunState.READY, RunState.FAILED):
                self._move(conn, run, RunState.FAILED, now, attempt_id=attempt_id,
                           reason=error[:4000])

    @waits_for_ledger
    def skip(self, run_key: str, reason: str, now: datetime) -> None:
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            if run.state != RunState.SKIPPED:
                self._move(conn, run, RunState.SKIPPED, now, reason=reason)

    # -- publication ----------------------------------------------------------------------
    def publish(
        self, run_key: str, attempt_id: str, *, now: datetime, fmt: str,
        promote: Callable[..., tuple[str, str]], correction: bool = False,
        schema_policy: str | None = None,
    ) -> tuple[ArtifactRecord, bool]:
        """Fenced publication. Returns (artifact, created).

        In one transaction: lock the run, check the attempt holds the current generation,
        compare with the newest artifact (identical sha256 → no-op, that artifact is returned),
        else call ``promote(version)`` to make the object visible under its immutable name
        and record version N+1 superseding N. The run becomes READY.

        With ``schema_policy`` and an attempt that recorded its file's schema, the schema
        contract is applied first (:func:`export_lib.ledger.contracts.publish_under_contract`,
        ADR 0025): ``promote(version, publication)`` gets the contract the file is published
        under, and ``fail`` on a changed schema raises SchemaContractError, nothing recorded.

        A ledger restart before ``promote`` ran is waited for (the transaction is repeated);
        after it, LedgerUnavailable at once: the object moved, the task's retry decides.
        """
        promoted: list[bool] = []

        def promote_once(*args: Any) -> tuple[str, str]:
            promoted.append(True)
            return promote(*args)

        return reconnecting(lambda: self._publish(
            run_key, attempt_id, now=now, fmt=fmt, promote=promote_once, correction=correction,
            schema_policy=schema_policy), what="ledger publish", again=lambda: not promoted)

    def _publish(self, run_key: str, attempt_id: str, *, now: datetime, fmt: str,
                 promote: Callable[..., tuple[str, str]], correction: bool,
                 schema_policy: str | None) -> tuple[ArtifactRecord, bool]:
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            att = self._fence(conn, run, attempt_id)
            if att.sha256 is None:
                raise PublishError(f"run {run_key}: attempt {attempt_id[:12]} has no staged artifact")
            latest_row = conn.execute(
                select(artifacts).where(artifacts.c.run_id == run.id)
                .order_by(artifacts.c.version.desc()).limit(1)
            ).first()
            latest = _artifact(latest_row) if latest_row else None
            if latest is not None and latest.sha256 == att.sha256 and latest.revoked_at is None:
                created, record = False, latest
            else:
                version = (latest.version if latest else 0) + 1
                observed = (ExportSchema.from_json(att.file_schema)
                            if att.file_schema is not None else None)
                publication = (publish_under_contract(conn, run, observed, schema_policy, now)
                               if schema_policy is not None and observed is not None else None)
                uri, manifest_uri = (promote(version) if publication is None
                                     else promote(version, publication))
                values = dict(
                    run_id=run.id, version=version, uri=uri, manifest_uri=manifest_uri,
                    sha256=att.sha256, rows=att.rows, bytes=att.bytes, format=fmt,
                    window_start=run.window_start, window_end=run.window_end,
                    config_version=run.config_version, attempt_id=attempt_id, generated_at=now,
                    supersedes=latest.version if latest else None, correction=int(correction),
                    schema_fingerprint=observed.fingerprint if observed else None,
                    schema_major=publication.entry.major if publication else None,
                    schema_change=publication.change if publication else None,
                    schema_diff="\n".join(publication.diff) if publication and publication.diff
                    else None,
                )
                taken = conn.execute(select(artifacts.c.run_id).where(
                    artifacts.c.uri == uri)).first()
                if taken is not None:  # the unique index would refuse it too; say why
                    raise PublishError(f"run {run_key}: {uri} is already recorded as an "
                                       "artifact of another run; artifact names are unique "
                                       "per run, nothing was recorded")
                conn.execute(insert(artifacts).values(**values))
                row = conn.execute(select(artifacts).where(
                    artifacts.c.run_id == run.id, artifacts.c.version == version)).one()
                created, record = True, _artifact(row)
            conn.execute(update(attempts).where(attempts.c.attempt_id == attempt_id)
                         .values(state=AttemptState.PUBLISHED.value, finished_at=now,
                                 staging_tail=None))
            if run.state != RunState.READY:
                self._move(conn, run, RunState.READY, now, attempt_id=attempt_id,
                           reason=f"artifact v{record.version}" + ("" if created else " (unchanged)"))
        return record, created

    # -- queries --------------------------------------------------------------------------
    @waits_for_ledger
    def artifacts(self, run_key: str) -> list[ArtifactRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(artifacts).join(runs, runs.c.id == artifacts.c.run_id)
                .where(runs.c.run_key == run_key).order_by(artifacts.c.version)
            ).all()
        return [_artifact(r) for r in rows]

    def latest_artifact(self, run_key: str) -> ArtifactRecord | None:
        found = self.artifacts(run_key)
        return found[-1] if found else None

    @waits_for_ledger
    def attempts(self, run_key: str) -> list[AttemptRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(*_LISTED).join(runs, runs.c.id == attempts.c.run_id)
                .where(runs.c.run_key == run_key).order_by(attempts.c.generation)
            ).all()
        return [_attempt(r) for r in rows]

    @waits_for_ledger
    def events(self, run_key: str) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(
                select(events).join(runs, runs.c.id == events.c.run_id)
                .where(runs.c.run_key == run_key).order_by(events.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    @waits_for_ledger
    def list_runs(self, company: str | None = None, schedule_id: str | None = None) -> list[RunRecord]:
        query = select(runs).order_by(runs.c.company, runs.c.schedule_id, runs.c.slot)
        if company:
            query = query.where(runs.c.company == company)
        if schedule_id:
            query = query.where(runs.c.schedule_id == schedule_id)
        with self._read() as conn:
            return [_run(r) for r in conn.execute(query).all()]

    @waits_for_ledger
    def staging_garbage(self) -> list[AttemptRecord]:
        """Abandoned or failed attempts whose staging object has not been cleaned up yet."""
        with self._read() as conn:
            rows = conn.execute(select(*_LISTED).where(
                attempts.c.state.in_((AttemptState.ABANDONED.value,
                                  AttemptState.FAILED.value)), attempts.c.staging_cleaned == 0
            )).all()
        return [_attempt(r) for r in rows]

    @waits_for_ledger
    def run_key_of(self, run_id: int) -> str:
        with self._read() as conn:
            return conn.execute(select(runs.c.run_key).where(runs.c.id == run_id)).scalar_one()

    @waits_for_ledger
    def mark_cleaned(self, attempt_id: str) -> None:
        with self._tx() as conn:
            conn.execute(update(attempts).where(attempts.c.attempt_id == attempt_id)
                         .values(staging_cleaned=1, staging_tail=None))

    @waits_for_ledger
    def count(self, table: str) -> int:
        target = {"runs": runs, "attempts": attempts, "artifacts": artifacts, "events": events}[table]
        with self._read() as conn:
            return conn.execute(select(func.count()).select_from(target)).scalar_one()

    # -- operator decisions and recovery bookkeeping --------------------------------------------
    def note(self, run_key: str, detail: str, now: datetime, *, reason: str | None = None) -> None:
        """Append an event without a state change (a hold, a release, a notification)."""
        with self._tx() as conn:
            run = self._lock_run(conn, run_key)
            conn.execute(insert(events).values(run_id=run.id, at=now, from_state=run.state,
                                               to_state=run.state, detail=detail))
            if reason is not None:
                conn.execute(update(runs).where(runs.c.id == run.id)
                             .values(reason=reason, updated_at=now))

    def is_released(self, run_key: str) -> bool:
        return any((e["detail"] or "").startswith("released by operator")
                   for e in self.events(run_key))

    def release(self, run_key: str, now: datetime, who: str = "operator") -> None:
        """Record an operator's decision to export a held (late) run anyway; ``who`` stays in the
        run's history (the reason is overwritten once the run moves on)."""
        self.note(run_key, f"released by operator {who}", now, reason=f"released by {who}")

    @waits_for_ledger
    def previous_slot(self, schedule_id: str, before: datetime) -> datetime | None:
        """The newest registered slot of ``schedule_id`` strictly before ``before``."""
        with self._read() as conn:
            return conn.execute(
                select(func.max(runs.c.slot)).where(runs.c.schedule_id == schedule_id,
                                                    runs.c.slot < before)
            ).scalar_one_or_none()

    def renew_lease(self, attempt_id: str, lease: timedelta) -> bool:
        """Extend a running attempt's lease (its place in the render budget) to the database's
        ``now()`` + ``lease``; False once the attempt is no longer running (staged, failed or
        abandoned meanwhile). Not retried here: the keeper's next tick is the retry."""
        with self._tx() as conn:
            return conn.execute(
                update(attempts).where(attempts.c.attempt_id == attempt_id,
                                       attempts.c.state == AttemptState.RUNNING.value)
                .values(lease_expires_at=database_now(conn) + lease)
            ).rowcount == 1

    @waits_for_ledger
    def live_renders(self) -> dict[str, int]:
        """Company → renders holding a place in the render budget now (the database's clock)."""
        with self._read() as conn:
            return live_renders(conn, database_now(conn))
