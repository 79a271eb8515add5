"""The one duration type of the config: ``"2h"``, ``"90m"``, ``"1h30m"``, ``"2d"``, ``"45s"`` or
ISO 8601 ``"PT2H"``, bounded by :data:`~export_lib.config.limits.MAX_DURATION`.

Every duration a config file states (``deadline``, ``grace``, ``retry_window``, the operational
settings of ADR 0015), and ``EXPORT_TIMEOUT_<KIND>`` (:mod:`export_lib.settings`), is read here,
so one spelling works everywhere and one message explains a wrong one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

from export_lib.config.limits import MAX_DURATION, shown
from export_lib.config.messages import invalid
from export_lib.settings import short_duration_seconds

DURATION_HELP = "expected a duration such as '2h', '90m', '1h30m' or 'PT2H'"
# The same spellings for an editor (the JSON Schema, export_lib/config/company.schema.json):
# the short form (days, hours, minutes, seconds in that order) or ISO 8601; ``0`` as a number.
DURATION_PATTERN = (r"^(?:(?=\d)(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?"
                    r"|[Pp](?=.)(?:\d+[Ww])?(?:\d+[Dd])?(?:[Tt](?=\d)(?:\d+[Hh])?(?:\d+[Mm])?"
                    r"(?:\d+(?:\.\d+)?[Ss])?)?)$")
DURATION_JSON: dict[str, Any] = {"type": ["string", "integer"], "pattern": DURATION_PATTERN,
                                 "minimum": 0, "maximum": 0}


def parse_duration(value: Any) -> Any:
    """``"2h"``, ``"90m"``, ``"1h30m"``, ``"2d"``, ``"45s"`` or ISO 8601 ``"PT2H"`` → timedelta."""
    if isinstance(value, timedelta):
        return value
    if value == 0 and isinstance(value, int) and not isinstance(value, bool):
        return timedelta(0)
    if isinstance(value, bool) or not isinstance(value, str) or not value.strip():
        raise invalid("duration", f"{DURATION_HELP} (got {shown(value)})")
    text = value.strip()
    total = short_duration_seconds(text)
    if total is not None:
        if total > MAX_DURATION.total_seconds():
            raise _too_long(value)
        return timedelta(seconds=total)
    if text.upper().startswith("P") and len(text) <= 40:
        return text  # pydantic parses ISO 8601 durations; check_duration bounds them
    raise invalid("duration", f"{DURATION_HELP} (got {shown(value)})")


def _too_long(value: Any) -> Exception:
    return invalid("duration", f"duration {shown(value)} is longer than the maximum of "
                   f"{MAX_DURATION.days} days; use a shorter one")


def check_duration(value: timedelta) -> timedelta:
    """Upper bound on every duration (parsed ISO 8601 ones included)."""
    if value > MAX_DURATION:
        raise _too_long(str(value))
    return value


def short(value: timedelta) -> str:
    """``40d``, ``30s``, ``1d2h``: a duration the way the config writes it."""
    seconds = int(value.total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"),
             (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return sign + ("".join(f"{n}{unit}" for n, unit in parts if n) or "0s")


Duration = Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(check_duration),
                     WithJsonSchema(DURATION_JSON)]
