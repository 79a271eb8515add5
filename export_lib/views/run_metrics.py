"""What the run metrics are read from: the ledger, never the clock alone.

``completion`` says whether a run is complete (every captured destination acknowledged the
newest artifact version) and how late; ``unresolved_deliveries`` counts a schedule's deliveries
that are not acknowledged. ``count_once`` makes a counter count once per run (``runs.completed``
after a clear that delivers again is not a second completion), through the same ledger claim as
alerts (``export_notices``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from export_lib.ledger.notices import claim_notice, confirm_notice
from export_lib.ledger.runs import Ledger
from export_lib.ledger.schema import deliveries, runs
from export_lib.ledger.states import DeliveryState


@dataclass(frozen=True)
class Completion:
    run_key: str
    company: str
    schedule_id: str
    completed_at: datetime
    deadline: datetime | None

    @property
    def late_by(self) -> timedelta | None:
        """How long after the deadline the last destination acknowledged (None: on time)."""
        if self.deadline is None or self.completed_at <= self.deadline:
            return None
        return self.completed_at - self.deadline


def completion(ledger: Ledger, run_key: str) -> Completion | None:
    """The run's completion, or None while a captured destination has not acknowledged its
    newest artifact version (or it has none)."""
    from export_lib.pipeline.stages import schedule_of

    run = ledger.get_run(run_key)
    artifact = ledger.latest_artifact(run_key)
    if run is None or artifact is None:
        return None
    wanted = {d.id for d in schedule_of(run).destinations}
    with ledger.engine.connect() as conn:
        rows = conn.execute(sa.select(deliveries.c.destination_id, deliveries.c.acknowledged_at)
                            .where(deliveries.c.run_key == run_key,
                                   deliveries.c.artifact_version == artifact.version,
                                   deliveries.c.state == DeliveryState.ACKNOWLEDGED.value)).all()
    acked = {r.destination_id: r.acknowledged_at for r in rows if r.acknowledged_at}
    if not wanted or not wanted <= set(acked):
        return None
    return Completion(run_key, run.company, run.schedule_id, max(acked.values()), run.deadline)


def unresolved_deliveries(ledger: Ledger, schedule_id: str) -> int:
    """Deliveries of the schedule's runs (any version) that are not acknowledged."""
    with ledger.engine.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count()).select_from(
                deliveries.join(runs, runs.c.run_key == deliveries.c.run_key))
            .where(runs.c.schedule_id == schedule_id,
                   deliveries.c.state != DeliveryState.ACKNOWLEDGED.value)).scalar_one()


def count_once(ledger: Ledger, run_key: str, what: str, now: datetime) -> bool:
    """True the first time ``what`` is counted for the run, False ever after."""
    claim = claim_notice(ledger.engine, key=f"metric:{run_key}:{what}", kind="metric",
                         run_key=run_key, reason=what, now=now)
    if claim.granted:
        confirm_notice(ledger.engine, claim.key, now)
    return claim.granted
