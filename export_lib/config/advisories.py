"""Warnings about a valid config: settings that work, but not as their author may expect.

``exportctl validate`` prints them after the errors and still exits 0 when there are no errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta

from export_lib.config.durations import short
from export_lib.config.models import Schedule


def retention_warnings(schedules: Iterable[Schedule]) -> list[str]:
    """A schedule whose ``retention_days`` is shorter than one of its destinations'
    ``retry_window``: retention keeps an artifact while its delivery may still be retried
    (ADR 0017), so such artifacts outlive ``retention_days``."""
    lines = []
    for schedule in schedules:
        days = schedule.policies.retention_days
        for destination in schedule.destinations:
            window = destination.retry_window
            if timedelta(days=days) >= window:
                continue
            needed = math.ceil(window / timedelta(days=1))
            lines.append(
                f"warning: {schedule.schedule_id}: retention_days {days} is shorter than "
                f"destination {destination.id}'s retry_window ({short(window)}): its artifacts "
                "are kept until their deliveries are final, past retention_days; set "
                f"retention_days to {needed} or more, or shorten retry_window")
    return lines
