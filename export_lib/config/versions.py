"""Config versions in a company file (ADR 0005): ``history`` entries made whole versions, and
the keys every version of an export must share.

An export's top-level keys are its current version (in force from its ``effective_from``);
each ``history`` entry lists only what differed in an earlier version, with its own
``effective_from`` (the oldest may have none). The loader merges each entry over the current
version before validation, so every version is validated like an export and gets its own
``config_version``; :meth:`Schedule.version_for` picks the one in force for a slot.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_lib.config.operational import OPERATIONAL_KEYS

if TYPE_CHECKING:
    from export_lib.config.models import CompanyFile

# Keys an earlier version (``history``) cannot change: they name the schedule. The timing keys
# (export_hour, interval_hours, cron, timezone, DST policies) may differ: the DAG's timetable
# follows the versions' timings, each from its own effective_from (ADR 0005, amended).
FIXED_ACROSS_VERSIONS = ("id", "history")
# Operational settings (ADR 0015): they set the DAG's task arguments, one value for every run,
# so an earlier version cannot have its own (``late_data.poke_interval`` likewise).
DAG_WIDE_KEYS = OPERATIONAL_KEYS


# How far ahead a current version may start while a ``history`` entry is in force. A file
# whose top-level keys start in 2099 reads as one export and runs another (its history entry):
# a reviewer checks what the file shows. A year covers changes planned with a customer for
# their next contract period (`exportctl reschedule --effective-from`); anything later is
# written when it is that close. A current version without history may start whenever it likes:
# until then it simply exports nothing (some files park a secondary that way).
MAX_CURRENT_LEAD = timedelta(days=366)

Layer = Callable[[dict[str, Any]], dict[str, Any]]


def with_history(own: dict[str, Any], layered: Layer) -> dict[str, Any]:
    """``own`` with defaults (``layered``), and each ``history`` entry made a whole version:
    the entry's keys over the current version's (``effective_from`` is never inherited)."""
    result = layered(own)
    history = own.get("history")
    if isinstance(history, list):
        current = {k: v for k, v in own.items() if k not in ("history", "effective_from")}
        result["history"] = [layered({**current, **entry}) if isinstance(entry, dict) else entry
                             for entry in history]
    return result


def history_issues(path: Path, data: dict[str, Any]) -> list[str]:
    """History entries that try to change what every version must share."""
    issues: list[str] = []
    places: list[tuple[str, Any]] = []
    for index, widget in enumerate(_list(data.get("widget_exports"))):
        places.append((f"widget_exports[{index}]", widget))
    for index, channel in enumerate(_list(data.get("data_exports"))):
        for kind in ("primary", "secondary"):
            if isinstance(channel, dict):
                places.append((f"data_exports[{index}].{kind}", channel.get(kind)))
    for where, export in places:
        if not isinstance(export, dict):
            continue
        for number, entry in enumerate(_list(export.get("history"))):
            issues.extend(_entry_issues(f"{path}: {where}.history[{number}]", entry))
    return issues


def future_version_issues(path: Path, parsed: CompanyFile, now: datetime) -> list[str]:
    """Current versions with ``history`` that start more than :data:`MAX_CURRENT_LEAD` after
    ``now``: until then a history entry runs while the file's top level says otherwise."""
    bound = now + MAX_CURRENT_LEAD
    places: list[tuple[str, Any]] = [(f"widget_exports[{i}]", w)
                                     for i, w in enumerate(parsed.widget_exports)]
    places += [(f"data_exports[{i}].{kind}", getattr(c, kind))
               for i, c in enumerate(parsed.data_exports) for kind in ("primary", "secondary")]
    return [f"{path}: {where}.effective_from: "
            f"{export.effective_from.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} is "
            f"more than {MAX_CURRENT_LEAD.days} days ahead while its 'history' is in force; "
            "the file would show one version and run another. Give the version a start within "
            f"a year (by {bound.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}), or add it when it is that "
            "close"
            for where, export in places
            if export.history and export.effective_from is not None
            and export.effective_from > bound]


def _entry_issues(where: str, entry: Any) -> list[str]:
    keys = entry if isinstance(entry, dict) else {}
    issues = []
    fixed = sorted(k for k in keys if k in FIXED_ACROSS_VERSIONS)
    if fixed:
        issues.append(f"{where}: {', '.join(fixed)} cannot change between versions (they "
                      "name the export); remove them from the entry, or make a new export")
    late_data = keys.get("late_data")
    wide = sorted(k for k in keys if k in DAG_WIDE_KEYS) + (
        ["late_data.poke_interval"] if isinstance(late_data, dict)
        and "poke_interval" in late_data else [])
    if wide:
        issues.append(f"{where}: {', '.join(wide)} cannot differ between versions (they set "
                      "the DAG's tasks, the same for every run); remove them from the entry and "
                      "set them on the current version")
    return issues


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
