"""Which periods of a batch share one source read, and that read (ADR 0038).

A batch's registered periods (slot order) are split into runs of consecutive periods that one
range scan (:class:`export_lib.render.range_scan.RangeScan`) can read: a CSV (of two columns
or more) or JSON Lines export (their COPY rows are the file's) from a PostgreSQL source, the same
captured config (so the same query, columns, format and options), contiguous windows (each
starts where the previous ended) and a cutoff on all of them or none. Anything else is read
per period, as before: :attr:`ScanPlan.reasons` says why, for the batch's log line.

:func:`scan_group` renders and publishes a group's periods from one scan, each through its
own ``render_run`` (its own attempt, lease, budget place and artifact); the periods the scan
could not serve (it could not start, or the source failed mid-way) are handed back to be read
one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from export_lib.errors import ExportError, RenderError
from export_lib.ledger import RunState
from export_lib.ledger.records import RunRecord
from export_lib.logfmt import get_logger
from export_lib.periods.instants import format_instant

if TYPE_CHECKING:
    from export_lib.ledger import Ledger
    from export_lib.render.engine import RenderResult
    from export_lib.render.range_scan import RangeScan
    from export_lib.source.connections import ConnectionResolver

log = get_logger(__name__)


@dataclass(frozen=True)
class ScanGroup:
    """Consecutive periods read by one range scan, in slot order (two or more)."""

    runs: tuple[RunRecord, ...]


@dataclass
class ScanPlan:
    """The batch's periods to render, in slot order: a :class:`ScanGroup` or one run key read
    on its own; ``reasons``: why periods are read on their own (each once)."""

    units: list[ScanGroup | str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def because(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)


def plan_scans(ledger: Ledger, keys: list[str],
               resolver: ConnectionResolver | None = None) -> ScanPlan:
    """Group the runs of ``keys`` (registered, slot order) into range scans where they can
    share one; a ready run (only its deliveries are left) reads nothing and stays alone."""
    plan = ScanPlan()
    group: list[RunRecord] = []

    def close() -> None:
        if len(group) > 1:
            plan.units.append(ScanGroup(tuple(group)))
        else:
            plan.units.extend(r.run_key for r in group)
        group.clear()

    for key in keys:
        run = ledger.get_run(key)
        alone = None if run is None else (
            "" if run.state == RunState.READY.value else _scan_blocker(run, resolver))
        if alone is not None:
            close()
            if alone:
                plan.because(alone)
            plan.units.append(key)
            continue
        if group and (apart := _apart(group[-1], run)):
            close()
            plan.because(apart)
        group.append(run)
    close()
    return plan


def _scan_blocker(run: RunRecord, resolver: ConnectionResolver | None) -> str | None:
    """Why no range scan can read this run's period (None: one can)."""
    from export_lib.pipeline.stages import schedule_of
    from export_lib.render.range_scan import SPLITTABLE
    from export_lib.source.connections import resolve
    from export_lib.source.database import POSTGRES_TYPES

    schedule = schedule_of(run)
    if schedule.format not in SPLITTABLE:
        return (f"format {schedule.format} (a range scan splits CSV and JSON Lines only: "
                "their COPY rows are the file's rows)")
    if schedule.format == "csv" and len(schedule.query.columns) < 2:
        return "a one-column export (its own COPY quotes a lone \\. where a scan's would not)"
    try:
        conn = resolve(schedule.query.source, resolver)
    except ExportError as exc:
        return f"its source connection does not resolve ({exc})"
    if conn.conn_type not in POSTGRES_TYPES:
        return f"source {schedule.query.source!r} is {conn.conn_type}, not PostgreSQL"
    return None


def _apart(prev: RunRecord, run: RunRecord) -> str | None:
    """Why ``run`` cannot share ``prev``'s scan (None: it can)."""
    if prev.window_end != run.window_start:
        return (f"windows not contiguous ({_window(prev)} then {_window(run)}: they overlap "
                "or leave a gap)")
    if prev.config_version != run.config_version or prev.config_snapshot != run.config_snapshot:
        return f"config versions differ ({prev.config_version} then {run.config_version})"
    if (prev.source_cutoff is None) != (run.source_cutoff is None):
        return "a source cutoff on some periods and none on others"
    return None


def _window(run: RunRecord) -> str:
    return f"[{format_instant(run.window_start)}, {format_instant(run.window_end)})"


@dataclass
class GroupResult:
    """What :func:`scan_group` did: ``outcomes`` of the periods it rendered (or failed), in
    order, ``served`` their run keys rendered from the scan, ``rest`` the run keys left to
    read on their own and ``stopped`` why the scan served no more (None: it served all)."""

    outcomes: list[Any] = field(default_factory=list)
    served: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)
    stopped: str | None = None


def scan_group(group: ScanGroup, resolver: ConnectionResolver | None,
               render_publish: Callable[[RunRecord, Any], Any]) -> GroupResult:
    """Read ``group``'s periods with one range scan, each period rendered and published by
    ``render_publish(run, produce)`` (its own render_run with ``produce``; it returns the
    period's outcome, and records and reports a failure itself)."""
    from export_lib.pipeline.stages import render_options, schedule_of
    from export_lib.render.range_scan import RangeScan, Window
    from export_lib.source.connections import resolve
    from export_lib.source.database import open_source

    first = group.runs[0]
    schedule = schedule_of(first)
    result = GroupResult()
    options = render_options(first, schedule)
    windows = [Window(r.window_start, r.window_end, r.source_cutoff) for r in group.runs]
    try:
        with open_source(resolve(schedule.query.source, resolver)) as source, \
                RangeScan(source, schedule.query, company_id=first.company, windows=windows,
                          options=options, schedule_id=first.schedule_id) as scan:
            for index, run in enumerate(group.runs):
                if scan.broken is not None or scan.late:
                    result.rest = [r.run_key for r in group.runs[index:]]
                    result.stopped = (f"the source failed mid-way: {scan.broken}" if scan.broken
                                      else "the range scan reached half the source's "
                                           "statement_timeout: the rest are read on their own")
                    break
                outcome = render_publish(run, _producer(scan, index))
                result.outcomes.append(outcome)
                if index in scan.served:
                    result.served.append(run.run_key)
    except ExportError as exc:  # before the first period: the scan could not start
        if result.outcomes:
            raise
        result.rest = [r.run_key for r in group.runs]
        result.stopped = f"the range scan could not start: {exc}"
    return result


def _producer(scan: RangeScan, index: int) -> Callable[..., RenderResult]:
    window = scan.windows[index]

    def produce(run: RunRecord, sink: Any, check_schema: Any) -> RenderResult:
        if (run.window_start, run.window_end, run.source_cutoff) != (
                window.start, window.end, window.cutoff):
            raise RenderError(f"run {run.run_key}: its window or cutoff changed after the "
                              "batch's range scan began; the period is read on its own by "
                              "the batch's retry")
        return scan.render_period(index, sink, check_schema)

    return produce


__all__ = ["GroupResult", "ScanGroup", "ScanPlan", "plan_scans", "scan_group"]
