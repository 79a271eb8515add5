"""Schema contracts: each schedule's published schemas in order, and how a file's schema stands
against the contract its run compares with (ADR 0025).

* The first file a schedule publishes makes its schema the contract (``seq`` 1, major 1,
  change ``initial``).
* A run captures its **baseline** at its first check (``export_runs.schema_baseline``: the
  newest ``seq`` then, 0 when there was none) and compares every attempt with that contract —
  the baseline's entry, or entry 1 when there was none yet (whoever published first set it).
  A retry or a regeneration of the run therefore meets the same contract whatever other runs
  published meanwhile.
* A different fingerprint is a change, handled by the run's captured ``schema_policy``:
  ``fail`` raises :class:`~export_lib.errors.SchemaContractError` (the diff); ``warn`` and
  ``new_major`` publish under a new entry (``new_major``: the next major) — or under the entry
  another run already recorded for the same change, so one change is one entry (and one alert).

Entries are written inside the publication's transaction, serialised per schedule (a
PostgreSQL advisory lock; SQLite's write lock), so two runs publishing the same change at once
record it once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.engine import Engine

from export_lib.errors import SchemaContractError
from export_lib.ledger.records import RunRecord, utc
from export_lib.ledger.schema import notices, runs, schemas
from export_lib.periods.names import period_label
from export_lib.source.export_schema import ExportSchema, schema_diff

INITIAL = "initial"
# pg_advisory_xact_lock(key1, key2) namespace of the schema contracts ("EXPS" as an int); the
# two-key space never meets the render budget's one-key lock.
LOCK_NAMESPACE = 0x45585053


@dataclass(frozen=True)
class ContractEntry:
    """One published schema of a schedule (a row of ``export_schemas``)."""

    schedule_id: str
    company: str
    seq: int
    major: int
    fingerprint: str
    schema: ExportSchema
    change: str
    previous_fingerprint: str | None
    diff: tuple[str, ...]
    run_key: str
    period: str
    slot: datetime
    recorded_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> ContractEntry:
        """The entry of an ``export_schemas`` row (timestamps in UTC on every backend)."""
        data = dict(row._mapping)
        return cls(
            schedule_id=data["schedule_id"], company=data["company"], seq=data["seq"],
            major=data["major"], fingerprint=data["fingerprint"],
            schema=ExportSchema.from_json(data["columns"]), change=data["change"],
            previous_fingerprint=data["previous_fingerprint"],
            diff=tuple((data["diff"] or "").splitlines()), run_key=data["run_key"],
            period=data["period"], slot=utc(data["slot"]), recorded_at=utc(data["recorded_at"]))

    def as_json(self) -> dict[str, Any]:
        """What ``exportctl schema --json`` prints for this entry."""
        return {"seq": self.seq, "major": self.major, "fingerprint": self.fingerprint,
                "change": self.change, "previous_fingerprint": self.previous_fingerprint,
                "diff": list(self.diff), "first_run": self.run_key, "first_period": self.period,
                "first_slot_utc": self.slot.isoformat().replace("+00:00", "Z"),
                "recorded_at_utc": self.recorded_at.isoformat().replace("+00:00", "Z"),
                "columns": self.schema.as_json()}


@dataclass(frozen=True)
class SchemaVerdict:
    """A file's schema (``observed``) against its run's contract (None: no schema has been
    published yet, so this file's becomes the contract)."""

    schedule_id: str
    observed: ExportSchema
    contract: ContractEntry | None
    policy: str

    @property
    def changed(self) -> bool:
        return self.contract is not None and self.contract.fingerprint != \
            self.observed.fingerprint

    @property
    def diff(self) -> tuple[str, ...]:
        return schema_diff(self.contract.schema, self.observed) if self.changed else ()

    def refusal(self) -> SchemaContractError | None:
        """The error of a changed schema under ``fail`` (None when the file may publish)."""
        if not self.changed or self.policy != "fail":
            return None
        contract = self.contract
        diff = self.diff
        lines = "\n".join(f"  {line}" for line in diff)
        return SchemaContractError(
            f"schedule {self.schedule_id!r}: the file's schema differs from its published "
            f"contract (schema_policy: fail), so nothing is published:\n{lines}\n"
            f"contract {contract.fingerprint[:12]} (major {contract.major}, first published "
            f"for {contract.period} by {contract.run_key}) → this file "
            f"{self.observed.fingerprint[:12]}. Restore the source's columns, or give the "
            "export schema_policy: warn (publish with the new schema as the contract, one "
            "alert) or new_major (publish it as the next major version of the file name) from "
            "the slot it should apply to (effective_from)", diff=diff)


@dataclass(frozen=True)
class SchemaPublication:
    """The contract a file is published under: ``entry``; ``change`` is ``warn`` or
    ``new_major`` when the file differs from its run's contract (``diff``), else None."""

    entry: ContractEntry
    change: str | None = None
    diff: tuple[str, ...] = ()


def schema_notice_key(schedule_id: str, seq: int) -> str:
    """The ``export_notices`` key of the one alert about contract change ``seq``."""
    return f"alert:{schedule_id}:schema_change:{seq}"


def history(conn: Connection | Engine, schedule_id: str) -> list[ContractEntry]:
    """Every contract of ``schedule_id``, oldest first (the last is the current one)."""
    query = sa.select(schemas).where(schemas.c.schedule_id == schedule_id) \
        .order_by(schemas.c.seq)
    if isinstance(conn, Engine):
        with conn.connect() as read:
            return [ContractEntry.from_row(r) for r in read.execute(query)]
    return [ContractEntry.from_row(r) for r in conn.execute(query)]


def _baseline(conn: Connection, run: RunRecord) -> int:
    """The run's baseline, captured now if it has none (never rewritten)."""
    if run.schema_baseline is not None:
        return run.schema_baseline
    newest = conn.execute(sa.select(sa.func.max(schemas.c.seq)).where(
        schemas.c.schedule_id == run.schedule_id)).scalar_one_or_none() or 0
    conn.execute(sa.update(runs).where(runs.c.id == run.id, runs.c.schema_baseline.is_(None))
                 .values(schema_baseline=newest))
    return conn.execute(sa.select(runs.c.schema_baseline).where(runs.c.id == run.id)
                        ).scalar_one()


def judge(conn: Connection, run: RunRecord, observed: ExportSchema, policy: str
          ) -> SchemaVerdict:
    """``observed`` against the run's contract (its baseline captured on the way)."""
    seq = max(_baseline(conn, run), 1)
    row = conn.execute(sa.select(schemas).where(schemas.c.schedule_id == run.schedule_id,
                                                schemas.c.seq == seq)).first()
    return SchemaVerdict(run.schedule_id, observed,
                         ContractEntry.from_row(row) if row is not None else None, policy)


def check_schema(engine: Engine, run: RunRecord, observed: ExportSchema, policy: str
                 ) -> SchemaVerdict:
    """Render's check, before any row is read: raises the refusal of ``fail``. Waits out a
    ledger restart (the baseline it captures is written once: repeating it changes nothing)."""
    from export_lib.ledger.reconnect import repeatable

    def read() -> SchemaVerdict:
        with engine.begin() as conn:
            return judge(conn, run, observed, policy)

    verdict = repeatable(engine, read, what="schema contract check")
    refusal = verdict.refusal()
    if refusal is not None:
        raise refusal
    return verdict


def _lock_schedule(conn: Connection, schedule_id: str) -> None:
    if conn.dialect.name == "postgresql":  # SQLite: BEGIN IMMEDIATE already serialises
        key = int.from_bytes(hashlib.sha256(schedule_id.encode()).digest()[:4], "big",
                             signed=True)
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:ns, :key)"),
                     {"ns": LOCK_NAMESPACE, "key": key})


def publish_under_contract(conn: Connection, run: RunRecord, observed: ExportSchema,
                           policy: str, now: datetime) -> SchemaPublication:
    """Inside the publication's transaction: the contract this file is published under,
    recording the schedule's first contract or the change ``warn``/``new_major`` allows.
    Raises the refusal of ``fail``; a caller's rollback undoes what was recorded."""
    _lock_schedule(conn, run.schedule_id)
    verdict = judge(conn, run, observed, policy)
    if verdict.contract is None:
        return SchemaPublication(_record(conn, run, observed, 1, INITIAL, None, now))
    if not verdict.changed:
        return SchemaPublication(verdict.contract)
    refusal = verdict.refusal()
    if refusal is not None:
        raise refusal
    found = _changed_entry(conn, run, observed, policy, verdict)
    if isinstance(found, ContractEntry):
        return SchemaPublication(found, policy, verdict.diff)
    return SchemaPublication(_record(conn, run, observed, found, policy, verdict, now),
                             policy, verdict.diff)


def _changed_entry(conn: Connection, run: RunRecord, observed: ExportSchema, policy: str,
                   verdict: SchemaVerdict) -> ContractEntry | int:
    """For a changed schema: the entry another run already published for it, else the major
    a new entry gets."""
    assert verdict.contract is not None
    later = [e for e in history(conn, run.schedule_id) if e.seq > verdict.contract.seq]
    same = [e for e in later if e.fingerprint == observed.fingerprint]
    if same:  # another run published this change already: one change, one entry
        return same[-1]
    entries = [verdict.contract, *later]
    return max(e.major for e in entries) + 1 if policy == "new_major" else entries[-1].major


def planned_major(engine: Engine, run: RunRecord, observed: ExportSchema, policy: str) -> int:
    """The schema major :func:`publish_under_contract` would publish ``observed`` under if
    the ledger stays as it is (what the artifact's name carries): read only, after render's
    check captured the run's baseline."""
    with engine.begin() as conn:
        verdict = judge(conn, run, observed, policy)
        if verdict.contract is None:
            return 1
        if not verdict.changed:
            return verdict.contract.major
        found = _changed_entry(conn, run, observed, policy, verdict)
    return found.major if isinstance(found, ContractEntry) else found


def _record(conn: Connection, run: RunRecord, observed: ExportSchema, major: int, change: str,
            verdict: SchemaVerdict | None, now: datetime) -> ContractEntry:
    seq = (conn.execute(sa.select(sa.func.max(schemas.c.seq)).where(
        schemas.c.schedule_id == run.schedule_id)).scalar_one_or_none() or 0) + 1
    conn.execute(sa.insert(schemas).values(
        schedule_id=run.schedule_id, company=run.company, seq=seq, major=major,
        fingerprint=observed.fingerprint, columns=observed.as_json(), change=change,
        previous_fingerprint=verdict.contract.fingerprint if verdict else None,
        diff="\n".join(verdict.diff) if verdict else None, run_key=run.run_key,
        period=period_label(run.window_start, run.window_end, run.timezone), slot=run.slot,
        recorded_at=now))
    row = conn.execute(sa.select(schemas).where(schemas.c.schedule_id == run.schedule_id,
                                                schemas.c.seq == seq)).one()
    return ContractEntry.from_row(row)


def unsent_warnings(engine: Engine, schedule_id: str) -> list[ContractEntry]:
    """The schedule's ``warn`` changes whose one alert has not been sent yet (never asked, or
    its send failed): what the next publication of the schedule sends."""
    pending = []
    with engine.connect() as conn:
        for entry in history(conn, schedule_id):
            if entry.change != "warn":
                continue
            state = conn.execute(sa.select(notices.c.state).where(
                notices.c.notice_key == schema_notice_key(schedule_id, entry.seq))
            ).scalar_one_or_none()
            if state != "sent":
                pending.append(entry)
    return pending


__all__ = ["INITIAL", "ContractEntry", "SchemaPublication", "SchemaVerdict", "check_schema",
           "history", "judge", "planned_major", "publish_under_contract", "schema_notice_key",
           "unsent_warnings"]
