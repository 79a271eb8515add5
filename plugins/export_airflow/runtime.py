"""Glue between an Airflow task context and export_lib (slot from the run, catalog lookup)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)


def slot_for_context(schedule: Any, context: Any) -> datetime:
    """The run's slot: the logical date (= the slot for scheduled runs); a manual run without a
    logical date maps to the latest slot at or before its ``run_after``."""
    from export_lib.slots import is_slot, latest_slot_at_or_before

    logical = context.get("logical_date")
    moment = logical if logical is not None else context["dag_run"].run_after
    moment = datetime.fromtimestamp(moment.timestamp(), UTC)
    if is_slot(schedule.timing, moment):
        return moment
    return latest_slot_at_or_before(schedule.timing, moment)


def resolve_for_context(config_dir: str, schedule_id: str, context: Any, *, now: datetime,
                        ctx: Any) -> dict[str, Any]:
    from export_lib.config import load_catalog

    from export_lib.ledger import open_ledger
    from export_lib.pipeline import resolve_run

    catalog = load_catalog(config_dir)
    schedule = catalog.schedule(schedule_id)
    slot = slot_for_context(schedule, context)
    return resolve_run(open_ledger(), schedule, slot, now=now, ctx=ctx)
