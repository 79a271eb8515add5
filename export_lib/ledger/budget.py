"""The render budget: how many source queries may run at once, globally and per company.

A source database cannot take many full scans, so at most 4 renders read the sources at
once (on-time, catch-up, backfill, restatement and manual work together) and one company takes
at most 2 of them. A render's *lease* is its attempt row while it is ``running`` with an
unexpired ``lease_expires_at`` (renewed while the render reads, see
:meth:`Ledger.renew_lease`); an attempt leaves the budget when it is staged, fails or is
abandoned, or when its lease runs out (a worker killed without a word).

The check and the claim are one transaction serialised across every process: on PostgreSQL a
transaction-scoped advisory lock (:data:`LOCK_KEY`) taken before anything else in the claim,
on SQLite the ``BEGIN IMMEDIATE`` write lock every ledger transaction takes. So two renders can
never both see "3 running" and both start. Airflow's pools stay for scheduling fairness; this is
what bounds the queries the source sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select, text

from export_lib import settings
from export_lib.errors import RenderBudgetError
from export_lib.ledger.schema import attempts, runs
from export_lib.ledger.states import AttemptState

# pg_advisory_xact_lock key of the render budget ("EXPB" as an int; any constant would do).
LOCK_KEY = 0x45585042
TOTAL_ENV = settings.RENDER_BUDGET_ENV
PER_COMPANY_ENV = settings.RENDER_BUDGET_PER_COMPANY_ENV


@dataclass(frozen=True)
class RenderBudget:
    """At most ``total`` renders at once, at most ``per_company`` of one company."""

    total: int = settings.RENDER_BUDGET
    per_company: int = settings.RENDER_BUDGET_PER_COMPANY

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RenderBudget:
        """``EXPORT_RENDER_BUDGET`` and ``EXPORT_RENDER_BUDGET_PER_COMPANY`` (4 and 2)."""
        return cls(*settings.render_budget(environ))


def live_renders(conn: Connection, now: datetime, *, exclude_run_id: int | None = None
                 ) -> dict[str, int]:
    """Company → renders holding a live lease (running, lease not expired)."""
    query = (select(runs.c.company, func.count())
             .select_from(attempts.join(runs, runs.c.id == attempts.c.run_id))
             .where(attempts.c.state == AttemptState.RUNNING.value,
                    attempts.c.lease_expires_at > now)
             .group_by(runs.c.company))
    if exclude_run_id is not None:  # the claiming run's own attempts are about to be abandoned
        query = query.where(attempts.c.run_id != exclude_run_id)
    return {company: count for company, count in conn.execute(query).all()}


def lock_budget(conn: Connection) -> None:
    """Serialise budget checks: first statement of a claiming transaction on PostgreSQL."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})


def check_budget(conn: Connection, budget: RenderBudget, *, company: str, run_id: int,
                 run_key: str, now: datetime) -> None:
    """Raise :class:`RenderBudgetError` when a render of ``company`` would exceed the budget.
    Call under :func:`lock_budget`, in the transaction that then claims the attempt."""
    live = live_renders(conn, now, exclude_run_id=run_id)
    total, mine = sum(live.values()), live.get(company, 0)
    if total >= budget.total:
        raise RenderBudgetError(
            f"run {run_key}: {total} renders already read the sources (budget {budget.total}, "
            f"{TOTAL_ENV}); try again when one has finished")
    if mine >= budget.per_company:
        raise RenderBudgetError(
            f"run {run_key}: company {company!r} already has {mine} renders reading its sources "
            f"(at most {budget.per_company} per company, {PER_COMPANY_ENV}); try again when one "
            "has finished")
