"""Timing edits start from an explicit slot (ADR 0005 as amended).

A schedule's timing keys (``export_hour``, ``interval_hours``, ``cron``, ``timezone``, the DST
policies) may change between versions: the new timing applies from its version's
``effective_from`` and the earlier slots keep the timing they ran under. An edit *without*
``effective_from`` rewrites the past: the slots already run move, and the gap audit and
catch-up see the moved slots as missed. :func:`unannounced_timing_edits` finds such edits by
comparing each schedule's newest run with the timing the config now gives its slot;
``exportctl validate`` refuses them with the exact lines to add (or the ``exportctl
reschedule`` command that writes them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from export_lib.config.models import Schedule
from export_lib.config.timing import Timing
from export_lib.errors import ConfigError
from export_lib.ledger.periods import LatestRun, latest_runs
from export_lib.ledger.runs import Ledger
from export_lib.periods.coverage import TIMING_KEYS
from export_lib.periods.instants import format_instant
from export_lib.pipeline.reschedule import switch_instant


@dataclass(frozen=True)
class TimingEdit:
    """A schedule whose config now gives an already-run slot another timing."""

    schedule: Schedule
    latest: LatestRun
    changed: dict[str, tuple[Any, Any]]  # timing key -> (what the run had, what config says)
    effective_from: datetime  # the first slot after now at the new timing
    where: str  # "<file>: widget_exports[0]" or "<file>: data_exports[1].primary"

    @property
    def change_text(self) -> str:
        return ", ".join(f"{key} {old!r} → {new!r}" for key, (old, new) in self.changed.items())

    def history_entry(self) -> str:
        old = ", ".join(f"{key}: {_yaml_scalar(old)}" for key, (old, _) in self.changed.items())
        since = self.schedule.effective_from
        return "{" + old + (f", effective_from: {format_instant(since)}" if since else "") + "}"

    def message(self) -> str:
        """One error line (validate's format: ``<file>: <where>: …``) with the fix."""
        sid = self.schedule.schedule_id
        local = self.effective_from.astimezone(self.schedule.timing.zone)
        keys = [k for k in self.changed if k != "timezone"] or ["timezone"]
        flags = " ".join(f"--{k.replace('_', '-')} {_yaml_scalar(self.changed[k][1])}"
                         for k in keys)
        return (f"{self.where}: the timing of {sid} changed ({self.change_text}) but it already "
                f"ran under the old timing (newest run {self.latest.run_key}); without "
                f"effective_from the edit moves the slots already run and the audit would "
                f"export their periods again. Apply it from an explicit slot: add "
                f"'effective_from: {format_instant(self.effective_from)}' (the next slot after "
                f"now, {local:%Y-%m-%d %H:%M} {self.schedule.timing.timezone}: the old timing "
                f"fires no more) "
                f"and the history entry '- {self.history_entry()}' to the export, or run "
                f"'exportctl reschedule {sid} {flags} --apply' on the file as it was")


def _yaml_scalar(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) and (" " in value or "*" in value) else str(
        value)


def unannounced_timing_edits(ledger: Ledger, schedules: Iterable[Schedule], config_dir: Path,
                             *, now: datetime) -> list[TimingEdit]:
    """The schedules whose newest run's slot now has another timing in the config."""
    latest = latest_runs(ledger)
    found = []
    for schedule in schedules:
        run = latest.get(schedule.schedule_id)
        if run is None or not run.timing:
            continue
        in_force = schedule.timing.at(run.slot).model_dump(mode="json")
        changed = {key: (run.timing.get(key), in_force.get(key)) for key in TIMING_KEYS
                   if run.timing.get(key) != in_force.get(key)}
        if not changed:
            continue
        current = schedule.timing.segments[-1][2]
        try:
            start = switch_instant(Timing.model_validate(run.timing), current,
                                   max(now, run.slot))
        except (ConfigError, ValueError):
            continue  # a timing that never fires again: validate reports it elsewhere
        found.append(TimingEdit(schedule=schedule, latest=run, changed=changed,
                                effective_from=start, where=where_in_file(schedule,
                                                                          config_dir)))
    return found


def where_in_file(schedule: Schedule, config_dir: Path) -> str:
    """``<file>: widget_exports[i]`` / ``<file>: data_exports[i].<kind>`` of a schedule."""
    from export_lib.config.yaml_io import read_yaml

    company = schedule.company.id
    path = next((p for p in (config_dir / f"{company}.yaml", config_dir / f"{company}.yml")
                 if p.exists()), config_dir / f"{company}.yaml")
    data, _ = read_yaml(path) if path.exists() else (None, [])
    section, key, ident = (("widget_exports", "id", schedule.export_id) if schedule.kind ==
                           "widget" else ("data_exports", "channel", schedule.channel))
    entries = (data or {}).get(section) or []
    index = next((i for i, e in enumerate(entries) if isinstance(e, dict)
                  and e.get(key) == ident), "?")
    suffix = "" if schedule.kind == "widget" else f".{schedule.kind}"
    return f"{path}: {section}[{index}]{suffix}"


def check_timing_edits(schedules: Iterable[Schedule], config_dir: Path, *, now: datetime,
                       ledger_url: str | None = None) -> tuple[list[str], list[str]]:
    """``exportctl validate``'s ledger check: (error lines, warning lines). No ledger yet (the
    embedded SQLite file does not exist, or has no tables): nothing ran, nothing to check. An
    unreachable ledger is a warning: the config may still be checked without it."""
    import sqlalchemy.exc

    from export_lib.errors import LedgerError
    from export_lib.ledger.database import ledger_url as resolve_url
    from export_lib.ledger.runs import open_ledger

    url = resolve_url(ledger_url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return [], []
    try:
        ledger = open_ledger(url)
    except LedgerError as exc:
        return [], [f"warning: timing edits not checked against the runs already made: {exc}"]
    try:
        return [e.message() for e in unannounced_timing_edits(
            ledger, schedules, config_dir, now=now)], []
    except sqlalchemy.exc.OperationalError as exc:
        if "no such table" in str(exc):
            return [], []
        return [], [f"warning: timing edits not checked against the runs already made: "
                    f"{str(exc.orig or exc).strip().splitlines()[0]}"]
    except sqlalchemy.exc.ProgrammingError:  # PostgreSQL: the ledger was never migrated
        return [], []
    finally:
        ledger.engine.dispose()
