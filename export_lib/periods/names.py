"""Names that must be the same in every process: run keys and artifact names (never the clock).

**Run keys** are the identity of a scheduled run, e.g. ``acme/daily-spend/2026-03-29T05:00Z``:
deterministic from the schedule id (company + export, or company + channel + kind) and the slot
in UTC, so every process and every retry derives the same key. Minute precision, seconds only
when non-zero (cron slots are whole minutes; a gap shift can land on a sub-minute transition in
historical tzdata).

**Artifact names** carry the period: the reporting window in the company's timezone, half-open
like the window itself: ``2026-03-28`` for one local calendar day, ``2026-02-27--2026-03-29``
for a range of whole days (end exclusive), ``2026-03-28T0700--2026-03-28T1300`` otherwise.
Generation time lives only in the manifest. Several runs can report the same period (a
calendar-day window on a 6-hourly schedule, the previous business day on Saturday, Sunday and
Monday), so the name also carries the run's slot:
``acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv``. Every run thus owns its names
and a published version is never overwritten by another run. From a schedule's second schema
major version on (``schema_policy: new_major``, ADR 0025) the name also carries it, before the
version: ``acme__daily-spend__2026-03-28__slot-20260329T0500Z__schema-2__v1.csv``.

The parts are joined by ``__``, a separator no id can contain (ids are slugs: ``-`` and ``_``
only *between* letters and digits, never doubled), so a name splits back into its parts in one
way only: widget export ``google-ads-primary`` (``acme__google-ads-primary__…``) and channel
``google-ads``'s primary export (``acme__google-ads__primary__…``), or company ``acme`` channel
``x_y`` and company ``acme_x`` channel ``y``, can never produce the same file.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from export_lib.errors import WindowError

if TYPE_CHECKING:
    from export_lib.config.models import Schedule


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



def period_label(start: datetime, end: datetime, timezone: str) -> str:
    tz = ZoneInfo(timezone)
    ls, le = start.astimezone(tz), end.astimezone(tz)
    if ls.time() == time(0) and le.time() == time(0):
        if le.date() - ls.date() == timedelta(days=1):
            return ls.date().isoformat()
        return f"{ls.date().isoformat()}--{le.date().isoformat()}"
    return f"{ls:%Y-%m-%dT%H%M}--{le:%Y-%m-%dT%H%M}"


SEPARATOR = "__"


def schedule_slug(schedule_id: str) -> str:
    """``acme/facebook/primary`` → ``facebook__primary`` (the company is the folder already)."""
    parts = schedule_id.split("/")
    return SEPARATOR.join(parts[1:]) if len(parts) > 1 else parts[0]


def slot_tag(slot: datetime) -> str:
    return f"slot-{slot.astimezone(UTC):%Y%m%dT%H%MZ}"


def artifact_key(company: str, schedule_id: str, period: str, slot: datetime, version: int,
                 ext: str, *, major: int | None = None) -> str:
    """``<company>/<slug>/<company>__<slug>__<period>__<slot tag>[__schema-<M>]__v<N>.<ext>``:
    unambiguous (see the module docstring) and unique per run and version.

    ``major`` is the schedule's schema major version (ADR 0025): from 2 on it is in the name,
    so a consumer parsing by name never mistakes a file of the new schema for one of the old;
    major 1 (and a file without a contract) keeps the name it always had. ``v<N>`` stays the
    run's artifact version (a correction of the period is v2 whatever its major)."""
    slug = schedule_slug(schedule_id)
    parts = [company, slug, period, slot_tag(slot)]
    if major is not None and major > 1:
        parts.append(f"schema-{major}")
    name = SEPARATOR.join((*parts, f"v{version}"))
    return f"{company}/{slug}/{name}.{ext}"
