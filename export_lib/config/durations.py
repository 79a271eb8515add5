"""Durations in the config: ``"2h"``, ``"90m"``, ``"1h30m"``, ``"2d"``, ``"45s"`` or ISO 8601
``"PT2H"``, bounded by ``limits.MAX_DURATION``.

Used by the config models (``grace``, ``deadline``, ...) and by the destinations
(``retry_window``); it sits below both, so neither imports the other for it.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from export_lib.config.limits import MAX_DURATION, shown
from export_lib.config.messages import invalid

_SHORT_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DURATION_HELP = "expected a duration such as '2h', '90m', '1h30m' or 'PT2H'"


def parse_duration(value: Any) -> Any:
    """``"2h"``, ``"90m"``, ``"1h30m"``, ``"2d"``, ``"45s"`` or ISO 8601 ``"PT2H"`` → timedelta."""
    if isinstance(value, timedelta):
        return value
    if value == 0 and isinstance(value, int) and not isinstance(value, bool):
        return timedelta(0)
    if isinstance(value, bool) or not isinstance(value, str) or not value.strip():
        raise invalid("duration", f"{_DURATION_HELP} (got {shown(value)})")
    text = value.strip()
    match = _SHORT_DURATION.fullmatch(text) if len(text) <= 40 else None
    if match and any(match.groups()):
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
        if total > MAX_DURATION.total_seconds():
            raise _too_long(value)
        return timedelta(seconds=total)
    if text.upper().startswith("P") and len(text) <= 40:
        return text  # pydantic parses ISO 8601 durations; check_duration bounds them
    raise invalid("duration", f"{_DURATION_HELP} (got {shown(value)})")


def _too_long(value: Any) -> Exception:
    return invalid("duration", f"duration {shown(value)} is longer than the maximum of "
                   f"{MAX_DURATION.days} days; use a shorter one")


def check_duration(value: timedelta) -> timedelta:
    """Upper bound on every duration (parsed ISO 8601 ones included)."""
    if value > MAX_DURATION:
        raise _too_long(str(value))
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(check_duration)]
