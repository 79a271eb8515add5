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
from pathlib import Path
from typing import Any

from export_lib.config.operational import OPERATIONAL_KEYS

# Keys an earlier version (``history``) cannot change: they name the schedule. The timing keys
# (export_hour, interval_hours, cron, timezone, DST policies) may differ: the DAG's timetable
# follows the versions' timings, each from its own effective_from (ADR 0005, amended).
FIXED_ACROSS_VERSIONS = ("id", "history")
# Operational settings (ADR 0015): they set the DAG's task arguments, one value for every run,
# so an earlier version cannot have its own (``late_data.poke_interval`` likewise).
DAG_WIDE_KEYS = OPERATIONAL_KEYS


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
