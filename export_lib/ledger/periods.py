"""The ledger side of "a period is exported once, whatever its slot" (revision 0007's index).

:func:`delivered_periods` lists a schedule's runs whose window overlaps a window and that have
a live artifact: published and not revoked (an artifact retention deleted later still counts:
the customer received it). ``export_lib.periods.coverage`` decides what covers what.
"""

from __future__ import annotations

from datetime import datetime

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
