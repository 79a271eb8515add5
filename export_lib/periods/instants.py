"""The one way instants are written and read back: ISO 8601 in UTC with a ``Z``.

``2026-03-29T05:00:00Z`` in every log line, report, CLI output and manifest field built here;
reading accepts any ISO 8601 date or date-time, with ``Z`` or an offset (none means UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from export_lib.errors import WindowError


def format_instant(instant: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix, e.g. ``2026-03-29T01:00:00Z``."""
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def parse_instant(text: str, what: str = "instant") -> datetime:
    """An aware UTC datetime from ISO 8601 text; ``WindowError`` naming ``what`` otherwise."""
    try:
        value = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise WindowError(f"{what} {text!r} is not an ISO 8601 date/time; use e.g. "
                          "2026-03-29T05:00Z, 2026-03-29T07:00+02:00 or 2026-03-29") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_since(text: str, now: datetime, what: str = "--since") -> datetime:
    """The start of a look-back: a duration before ``now`` (``48h``, ``7d``, ``90m``,
    ``1d12h``) or an ISO 8601 date/time. ``now`` is the caller's one reading of the clock, so
    every figure of a report is measured from the same instant."""
    from export_lib.settings import short_duration_seconds

    seconds = short_duration_seconds(text) if isinstance(text, str) else None
    if seconds is not None:
        return now - timedelta(seconds=seconds)
    try:
        return parse_instant(text, what)
    except WindowError:
        raise WindowError(f"{what} {text!r} is neither a duration nor an ISO 8601 date/time; use "
                          "e.g. 48h, 7d, 90m, 2026-03-29 or 2026-03-29T05:00Z") from None
