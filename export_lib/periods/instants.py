"""The one way instants are written and read back: ISO 8601 in UTC with a ``Z``.

``2026-03-29T05:00:00Z`` in every log line, report, CLI output and manifest field built here;
reading accepts any ISO 8601 date or date-time, with ``Z`` or an offset (none means UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime

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
