"""The ledger side of "a period is exported once, whatever its slot" (revision 0007's index).

:func:`delivered_periods` lists a schedule's runs whose window overlaps a window and that have
a live artifact: published and not revoked (an artifact retention deleted later still counts:
the customer received it). ``export_lib.periods.coverage`` decides what covers what.
:func:`latest_runs` gives each schedule's newest run and its timing, so a timing edit that would
rewrite slots already run is caught (``export_lib.pipeline.timing_edits``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from export_lib.ledger.records import utc
from export_lib.ledger.runs import Ledger
from export_lib.ledger.schema import artifacts, runs
from export_lib.ledger.states import RunState
from export_lib.periods.coverage import DeliveredPeriod, timing_of


def delivered_periods(ledger: Ledger, schedule_id: str, start: datetime, end: datetime,
                      *, excluding: str | None = None) -> list[DeliveredPeriod]:
    """Ready runs of ``schedule_id`` whose window overlaps ``[start, end)``, with their newest
    unrevoked artifact; ``excluding`` leaves one run out (the run asking)."""
    newest = (sa.select(artifacts.c.run_id, sa.func.max(artifacts.c.version).label("version"))
              .where(artifacts.c.revoked_at.is_(None)).group_by(artifacts.c.run_id).subquery())
    query = (sa.select(runs.c.run_key, runs.c.slot, runs.c.window_start, runs.c.window_end,
                       runs.c.config_snapshot, artifacts.c.version, artifacts.c.uri)
             .join(newest, newest.c.run_id == runs.c.id)
             .join(artifacts, sa.and_(artifacts.c.run_id == runs.c.id,
                                      artifacts.c.version == newest.c.version))
             .where(runs.c.schedule_id == schedule_id, runs.c.state == RunState.READY.value,
                    runs.c.window_start < end, runs.c.window_end > start)
             .order_by(runs.c.window_start))
    if excluding is not None:
        query = query.where(runs.c.run_key != excluding)
    with ledger._read() as conn:
        rows = conn.execute(query).all()
    return [DeliveredPeriod(run_key=r.run_key, slot=utc(r.slot), window_start=utc(r.window_start),
                            window_end=utc(r.window_end), timing=timing_of(r.config_snapshot),
                            artifact_version=r.version, artifact_uri=r.uri) for r in rows]


@dataclass(frozen=True)
class LatestRun:
    """A schedule's newest run by slot and the timing it was registered under."""

    run_key: str
    slot: datetime
    timing: dict[str, Any]


def latest_runs(ledger: Ledger) -> dict[str, LatestRun]:
    """Each schedule's newest run by slot (any state: a run at all means the schedule has a
    past its timing must keep), by schedule id."""
    newest = (sa.select(runs.c.schedule_id, sa.func.max(runs.c.slot).label("slot"))
              .group_by(runs.c.schedule_id).subquery())
    query = (sa.select(runs.c.schedule_id, runs.c.run_key, runs.c.slot, runs.c.config_snapshot)
             .join(newest, sa.and_(newest.c.schedule_id == runs.c.schedule_id,
                                   newest.c.slot == runs.c.slot)))
    with ledger._read() as conn:
        rows = conn.execute(query).all()
    return {r.schedule_id: LatestRun(run_key=r.run_key, slot=utc(r.slot),
                                     timing=dict((r.config_snapshot or {}).get("timing") or {}))
            for r in rows}
