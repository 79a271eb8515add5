"""Bounds on everything a config or a trigger form can say.

A config file is input from people who may be wrong or hostile; every number and text in it has
an upper bound here, so a typo like ``deadline: 1000000000d`` is one config error naming the
field, never an ``OverflowError`` deep inside a timetable (which Airflow would retry for days).
Integers and booleans are *strict*: ``interval_hours: true`` or ``export_hour: '7'`` is an
error, not a silent ``1`` or ``7``.

:func:`shown` is how every message quotes a value the user wrote: ``repr`` cut to
:data:`SHOWN_CHARS`, so a 300,000-character value (or a YAML alias bomb) never becomes a
300,000-character error line.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import Strict

SHOWN_CHARS = 80
LINE_CHARS = 600  # one error line is cut here, whatever the message

MAX_FILE_BYTES = 1024 * 1024  # a config file is a few KB; 1 MiB is far beyond any real one
MAX_YAML_NODES = 20_000  # nodes after expanding aliases (a real company file has < 2,000)
MAX_YAML_DEPTH = 40
MAX_YAML_ALIASES = 100

MAX_DURATION = timedelta(days=366)  # deadline, grace: a year is more than any policy needs
MAX_WINDOW_DAYS = 3660  # trailing_days: ten years
MAX_WINDOW_HOURS = 24 * 366  # trailing_hours: a year
MAX_RETENTION_DAYS = 36_500
MAX_COLUMNS = 500
MAX_FILTERS = 50
MAX_FILTER_VALUES = 1_000
MAX_DESTINATIONS = 20
MAX_COMPANIES = 10_000  # destination_areas entries in defaults.yaml
MAX_EXPORTS = 200  # widget exports, or data export channels, per company file
MAX_AUTHORIZED = 100
MAX_TEXT = 200  # a name, a path, a prefix
MAX_VALUE_TEXT = 1_000  # a filter value
MAX_REASON = 500  # a manual export's reason

StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]
StrictFloat = Annotated[float, Strict()]  # ints pass, booleans and text do not


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (``…(N chars)`` marks the cut).

    Containers are never expanded in full: a value built from YAML aliases can be huge.
    """
    if isinstance(value, (dict, list, tuple, set)) and len(value) > 20:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{repr(value[:limit])[:-1]}…({len(value)} chars)"
    text = reprlib_repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(cut)"


def reprlib_repr(value: Any) -> str:
    """A repr that stops early on nested containers (``reprlib`` with generous string room)."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring = SHOWN_CHARS * 4
    short.maxother = SHOWN_CHARS * 4
    short.maxlevel = 3
    return short.repr(value)


def cut_line(line: str, limit: int = LINE_CHARS) -> str:
    """One message line at most ``limit`` characters (the last line of defence)."""
    return line if len(line) <= limit else f"{line[:limit]}…(cut; {len(line)} chars)"
