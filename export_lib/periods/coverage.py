"""Whether a period was already delivered under another timing (no period is sent twice; ADR 0005 as amended).

A run's identity is its slot, but what a customer receives is a period: ``[start, end)`` of
their data. When a schedule's timing changes (``export_hour`` 7 → 9, ``interval_hours`` 6 → 4,
another timezone), the new timing's slots can report periods the old timing's runs already
delivered. Those periods must not be sent again: :func:`covering` finds the delivered periods
of *other* timings that together cover a window entirely. Periods of the *same* timing never
count — a six-hourly export of the calendar day reports the same day four times on purpose.

Pure: no ledger, no clock. The ledger side is ``export_lib.ledger.periods``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# What identifies a timing in a run's config snapshot (``effective_from`` and the rest of the
# schedule are not timing: a query change under the same timing is a regeneration decision).
TIMING_KEYS = ("timezone", "export_hour", "interval_hours", "cron", "dst_gap", "dst_fold")
# A run skipped because its period was delivered under another timing (the reason's prefix).
ALREADY_DELIVERED = "already delivered: "


def timing_of(snapshot: Mapping[str, Any]) -> tuple[Any, ...]:
    """The timing a run was registered under, from its config snapshot."""
    timing = snapshot.get("timing") or {}
    return tuple(timing.get(key) for key in TIMING_KEYS)


@dataclass(frozen=True)
class DeliveredPeriod:
    """A period of a schedule with a live (published, not revoked) artifact."""

    run_key: str
    slot: datetime
    window_start: datetime
    window_end: datetime
    timing: tuple[Any, ...]
    artifact_version: int
    artifact_uri: str


def covering(window_start: datetime, window_end: datetime, timing: tuple[Any, ...],
             delivered: Iterable[DeliveredPeriod]) -> tuple[DeliveredPeriod, ...]:
    """The delivered periods of timings other than ``timing`` that together cover
    ``[window_start, window_end)`` without a hole, oldest first; ``()`` when any part of the
    window is not covered (then it is exported: a partial overlap is reported, not dropped)."""
    others = sorted((d for d in delivered if d.timing != timing
                     and d.window_start < window_end and d.window_end > window_start),
                    key=lambda d: (d.window_start, d.window_end))
    cursor, used = window_start, []
    for period in others:
        if period.window_start > cursor:
            return ()
        if period.window_end > cursor:
            used.append(period)
            cursor = period.window_end
        if cursor >= window_end:
            return tuple(used)
    return ()


def describe(periods: tuple[DeliveredPeriod, ...]) -> str:
    """``run acme/daily-spend/2026-03-10T06:00Z (artifact v1 s3://…)``, joined with ``; ``."""
    return "; ".join(f"run {p.run_key} (artifact v{p.artifact_version} {p.artifact_uri})"
                     for p in periods)
