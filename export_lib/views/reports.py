"""Read models over the ledger for people: the runs page of the UI and ``exportctl runs``.

A page is read with a fixed number of statements whatever its size (count, one page of runs,
their artifacts, their deliveries): filtering, ordering (newest slot first) and pagination
happen in SQL, never by loading the ledger and slicing it in Python. Lateness is computed here,
from the run's deadline and the time its first delivery was acknowledged (the deadline is
"delivered within ... of the slot"; ``now`` while nothing was delivered), so every reader shows
the same verdict — catch-up and backfill runs included, which raise no Deadline Alert. A run
whose deadline passed before its schedule was first deployed keeps its verdict but is
``tracked: false`` and never listed by ``missed``/``late`` (ADR 0029). Every ledger timestamp
reads back aware UTC (``UtcDateTime``), on SQLite too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.engine import Engine

from export_lib.errors import ConfigError
from export_lib.ledger.schema import artifacts, deliveries, runs
from export_lib.ledger.states import UNRESOLVED_DELIVERIES, RunState
from export_lib.periods.names import period_label
from export_lib.periods.slots import format_instant
from export_lib.views.risk import RiskRule, mark_at_risk
from export_lib.views.tracking import tracked_expression

MAX_LIMIT = 500
FilterT = TypeVar("FilterT", bound="LedgerFilter")


class LedgerFilter(BaseModel):
    """What a reader of ledger runs asks for, whatever the view (``exportctl runs``, the
    obligations page): which runs, which slots, which companies they may see, which page."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    company: str | None = None
    schedule_id: str | None = None
    since: datetime | None = None  # slots at or after
    until: datetime | None = None  # slots before
    # The companies the reader may see (None: no restriction, e.g. the CLI; empty: none at all).
    visible_companies: frozenset[str] | None = None
    offset: int = Field(default=0, ge=0)


def build_filter(model: type[FilterT], problems: list[str] | None = None,
                 **values: Any) -> FilterT:
    """``model`` from loose values (CLI flags, query strings; empty ones left out); every
    problem — ``problems`` found by the caller and the model's own — in one ``ConfigError``
    that names the field."""
    from pydantic import ValidationError

    problems = list(problems or [])
    wanted = None
    try:
        wanted = model(**{k: v for k, v in values.items() if v not in (None, "")})
    except ValidationError as exc:
        problems += [f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
                     for e in exc.errors()]
    if problems or wanted is None:
        raise ConfigError("; ".join(problems), issues=problems)
    return wanted


class RunFilter(LedgerFilter):
    """``exportctl runs`` / the runs page. Unknown states are refused with the valid ones
    named."""

    state: str | None = None
    unresolved_deliveries: bool = False
    # Deadline misses (ADR 0029; both: either). missed: the deadline passed with nothing
    # delivered (not skipped or cancelled); late: first delivered after it. Tracked periods only.
    missed: bool = False
    late: bool = False
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)

    @field_validator("state")
    @classmethod
    def _known_state(cls, value: str | None) -> str | None:
        if value is not None and value not in {s.value for s in RunState}:
            raise ValueError(f"unknown run state {value!r}; valid: "
                             + ", ".join(s.value for s in RunState))
        return value


def run_filter(**values: Any) -> RunFilter:
    """A :class:`RunFilter` from loose values; every problem in one ConfigError."""
    return build_filter(RunFilter, **values)


class RunsPage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    limit: int
    offset: int
    runs: tuple[dict[str, Any], ...]

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def ledger_where(f: LedgerFilter) -> list[Any]:
    """The WHERE clauses on ``export_runs`` every view shares: visible companies, company,
    schedule, slot range."""
    clauses: list[Any] = []
    if f.visible_companies is not None:
        clauses.append(runs.c.company.in_(sorted(f.visible_companies)) if f.visible_companies
                       else sa.false())
    if f.company:
        clauses.append(runs.c.company == f.company)
    if f.schedule_id:
        clauses.append(runs.c.schedule_id == f.schedule_id)
    if f.since:
        clauses.append(runs.c.slot >= f.since)
    if f.until:
        clauses.append(runs.c.slot < f.until)
    return clauses


def _where(f: RunFilter, now: datetime) -> list[Any]:
    clauses = ledger_where(f)
    if f.state:
        clauses.append(runs.c.state == f.state)
    if f.unresolved_deliveries:
        unresolved = [s.value for s in UNRESOLVED_DELIVERIES]
        clauses.append(runs.c.run_key.in_(
            sa.select(deliveries.c.run_key).where(deliveries.c.state.in_(unresolved))))
    if f.missed or f.late:
        clauses.append(_deadline_verdicts(f, now))
    return clauses


def _deadline_verdicts(f: RunFilter, now: datetime) -> Any:
    """Runs of tracked periods that missed their deadline and/or were delivered after it (the
    same words as ``_lateness``: ``overdue`` is missed)."""
    first_ack = (sa.select(sa.func.min(deliveries.c.acknowledged_at))
                 .where(deliveries.c.run_key == runs.c.run_key).scalar_subquery())
    wanted = []
    if f.missed:
        wanted.append(sa.and_(first_ack.is_(None), runs.c.deadline < now,
                              runs.c.state.not_in([RunState.SKIPPED.value,
                                                   RunState.CANCELLED.value])))
    if f.late:
        wanted.append(first_ack > runs.c.deadline)
    return sa.and_(runs.c.deadline.is_not(None), sa.or_(*wanted), tracked_expression())


def _minutes(delta: timedelta) -> int:
    return int(delta.total_seconds() // 60)


def _lateness(deadline: datetime | None, delivered_at: datetime | None, state: str,
              now: datetime) -> dict[str, Any]:
    """``on_time`` / ``late`` (first delivered after the deadline) / ``overdue`` (nothing
    delivered and the deadline passed) / ``pending`` (deadline ahead) / ``none`` (no deadline,
    or skipped)."""
    if deadline is None or state in (RunState.SKIPPED, RunState.CANCELLED):
        return {"deadline_status": "none", "late_by_minutes": None}
    if delivered_at is not None:
        late = delivered_at > deadline
        return {"deadline_status": "late" if late else "on_time",
                "late_by_minutes": _minutes(delivered_at - deadline) if late else 0}
    if now > deadline:
        return {"deadline_status": "overdue", "late_by_minutes": _minutes(now - deadline)}
    return {"deadline_status": "pending", "late_by_minutes": None}


def _iso(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


def runs_page(engine: Engine, f: RunFilter, *, now: datetime,
              risk: Mapping[str, RiskRule] | None = None) -> RunsPage:
    """One page of runs, newest slot first, with artifacts, deliveries and deadline verdicts;
    ``at_risk`` and ``risk_point_utc`` by each schedule's rule in ``risk`` (else the default:
    half the deadline; ADR 0020)."""
    where = _where(f, now)
    with engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(runs).where(*where)).scalar_one()
        page = conn.execute(
            sa.select(runs.c.id, runs.c.run_key, runs.c.company, runs.c.schedule_id, runs.c.slot,
                      runs.c.window_start, runs.c.window_end, runs.c.timezone, runs.c.window_kind,
                      runs.c.config_version, runs.c.deadline, runs.c.state, runs.c.reason,
                      runs.c.owner, runs.c.trigger, runs.c.created_at, runs.c.updated_at,
                      runs.c.batch, tracked_expression().label("tracked"))
            .where(*where).order_by(runs.c.slot.desc(), runs.c.id.desc())
            .limit(f.limit).offset(f.offset)
        ).all()
        ids = [r.id for r in page]
        keys = [r.run_key for r in page]
        arts = conn.execute(
            sa.select(artifacts.c.run_id, artifacts.c.version, artifacts.c.sha256, artifacts.c.uri,
                      artifacts.c.rows, artifacts.c.bytes, artifacts.c.generated_at,
                      artifacts.c.supersedes, artifacts.c.correction)
            .where(artifacts.c.run_id.in_(ids)).order_by(artifacts.c.run_id, artifacts.c.version)
        ).all() if ids else []
        dels = conn.execute(
            sa.select(deliveries.c.run_key, deliveries.c.destination_id, deliveries.c.state,
                      deliveries.c.artifact_version, deliveries.c.attempts, deliveries.c.receipt,
                      deliveries.c.last_error, deliveries.c.acknowledged_at,
                      deliveries.c.retry_until)
            .where(deliveries.c.run_key.in_(keys))
            .order_by(deliveries.c.run_key, deliveries.c.artifact_version,
                      deliveries.c.destination_id)
        ).all() if keys else []
    by_run: dict[int, list[Any]] = {}
    for a in arts:
        by_run.setdefault(a.run_id, []).append(a)
    by_key: dict[str, list[Any]] = {}
    for d in dels:
        by_key.setdefault(d.run_key, []).append(d)
    rows = []
    for r in page:
        versions = by_run.get(r.id, [])
        ready_at = versions[0].generated_at if versions else None
        acked = [d.acknowledged_at for d in by_key.get(r.run_key, []) if d.acknowledged_at]
        delivered_at = min(acked) if acked else None
        rows.append({
            "run_key": r.run_key, "state": r.state, "reason": r.reason, "company": r.company,
            "schedule": r.schedule_id, "trigger": r.trigger, "owner": r.owner,
            "batch": r.batch,  # the batched recovery that exported it (ADR 0032), else None
            "slot_utc": _iso(r.slot),
            "window_start_utc": _iso(r.window_start),
            "window_end_utc": _iso(r.window_end), "timezone": r.timezone,
            "period": period_label(r.window_start, r.window_end, r.timezone),
            "config_version": r.config_version, "deadline_utc": _iso(r.deadline),
            "ready_at_utc": _iso(ready_at), "delivered_at_utc": _iso(delivered_at),
            **_lateness(r.deadline, delivered_at, r.state, now),
            "tracked": bool(r.tracked),
            "artifacts": [{"version": a.version, "sha256": a.sha256, "uri": a.uri, "rows": a.rows,
                           "bytes": a.bytes, "supersedes": a.supersedes,
                           "correction": bool(a.correction),
                           "generated_at_utc": _iso(a.generated_at)} for a in versions],
            "deliveries": [{"destination": d.destination_id, "state": d.state,
                            "version": d.artifact_version, "attempts": d.attempts,
                            "receipt": d.receipt, "last_error": d.last_error,
                            "acknowledged_at_utc": _iso(d.acknowledged_at),
                            "retry_until_utc": _iso(d.retry_until)}
                           for d in by_key.get(r.run_key, [])],
        })
        mark_at_risk(rows[-1], now, risk)
    return RunsPage(total=total, limit=f.limit, offset=f.offset, runs=tuple(rows))


__all__ = ["MAX_LIMIT", "RunFilter", "RunsPage", "run_filter", "runs_page"]
