"""Run keys: the identity of a scheduled run, e.g. ``acme/daily-spend/2026-03-29T05:00Z``.

Deterministic from the schedule id (company + export, or company + channel + kind) and the
slot in UTC, so every process and every retry derives the same key. Minute precision, seconds
only when non-zero (cron slots are whole minutes; a gap shift can land on a sub-minute
transition in historical tzdata).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from export_lib.errors import WindowError

if TYPE_CHECKING:
    from export_lib.config_models import Schedule


def slot_label(slot: datetime) -> str:
    """``2026-03-29T05:00Z`` (``…T05:00:30Z`` if seconds are non-zero)."""
    if slot.tzinfo is None or slot.utcoffset() is None:
        raise WindowError(f"a run key needs a timezone-aware slot (got naive {slot.isoformat()})")
    utc = slot.astimezone(UTC)
    spec = "minutes" if utc.second == 0 and utc.microsecond == 0 else "auto"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def run_key(schedule_id: str, slot: datetime) -> str:
    """The run key of ``slot`` of ``schedule_id``: ``<schedule_id>/<slot_label>``."""
    return f"{schedule_id}/{slot_label(slot)}"


def parse_run_key(key: str) -> tuple[str, datetime]:
    """Split a run key back into ``(schedule_id, slot)``; raises ``WindowError`` if malformed."""
    schedule_id, _, label = key.rpartition("/")
    try:
        if not schedule_id or not label.endswith("Z"):
            raise ValueError(key)
        slot = datetime.fromisoformat(label[:-1]).replace(tzinfo=UTC)
    except ValueError:
        raise WindowError(
            f"malformed run key {key!r}; expected '<schedule id>/<YYYY-MM-DDTHH:MMZ>', "
            "e.g. 'acme/daily-spend/2026-03-29T05:00Z'") from None
    return schedule_id, slot


def deadline_for(schedule: Schedule, slot: datetime) -> datetime:
    """When the export of ``slot`` must be delivered: the slot plus the schedule's deadline."""
    return slot.astimezone(UTC) + schedule.policies.deadline
