"""``exportctl validate``'s timing-switch check: the periods around each version's
``effective_from`` that no slot reports, or that two report
(:mod:`export_lib.periods.switches` finds them).

* A period no slot reports is a **warning**: if the switch is kept, the gap audit exports it
  once (``exportctl audit --apply``, through the manual lane); the line names the
  ``effective_from`` at which a slot reports it.
* A period reported twice whose whole window the old timing reported is a **warning**: the
  second run is skipped as already delivered (ADR 0016), so it is sent once.
* A period reported twice in part (the new slot's window only partly reported before) is an
  **error** while the switch is ahead and an ``effective_from`` avoids it: ``start_run``
  exports a partly covered window in full, so the overlap would be sent twice. When no
  instant avoids it (the two timings' windows do not line up, e.g. ``trailing_hours`` across
  an hour change) or the switch is already in effect, it is a warning.

Switches older than the gap audit's default look-back are not named: they are history.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from export_lib.config.models import Schedule
from export_lib.config.timing import zone
from export_lib.periods.instants import format_instant
from export_lib.periods.switches import SwitchProblem, switch_problems
from export_lib.pipeline.timing_edits import where_in_file

# The gap audit's default look-back (``exportctl audit``): older switches are not named.
LOOKBACK = timedelta(days=7)


def check_switches(schedules: Iterable[Schedule], config_dir: Path, *, now: datetime,
                   lookback: timedelta = LOOKBACK) -> tuple[list[str], list[str]]:
    """(error lines, warning lines) for every timing switch from ``now - lookback`` on."""
    errors: list[str] = []
    warnings: list[str] = []
    for schedule in schedules:
        if not schedule.timing.earlier:
            continue
        found = [p for p in switch_problems(schedule, now=now) if p.switch >= now - lookback]
        if not found:
            continue
        where = where_in_file(schedule, config_dir)
        for problem in found:
            line = f"{where}: effective_from: {switch_message(problem, schedule)}"
            refused = (problem.kind == "reported_twice" and not problem.guarded
                       and not problem.in_effect and problem.fix is not None)
            (errors if refused else warnings).append(line if refused else f"warning: {line}")
    return errors, warnings


def _local(instant: datetime, schedule: Schedule) -> str:
    tz = schedule.window_timezone
    return f"{instant.astimezone(zone(tz)):%Y-%m-%d %H:%M} {tz}"


def switch_message(problem: SwitchProblem, schedule: Schedule) -> str:
    """One sentence for ``problem`` (after ``<file>: <export>: effective_from: ``): what
    happens to the period, what recovery does, and the ``effective_from`` that avoids it."""
    sid, tz = schedule.schedule_id, problem.timezone
    head = (f"{format_instant(problem.switch)}: the timing switch of {sid} "
            f"{'left' if problem.in_effect else 'leaves'} period {problem.period} ({tz}, "
            f"{format_instant(problem.start)} .. {format_instant(problem.end)})")
    fix = (f"'{problem.fix_text}' ({_local(problem.fix, schedule)})" if problem.fix
           else None)
    if problem.kind == "unreported":
        text = (f"{head} reported by no slot: the old timing's slot "
                f"{format_instant(problem.slots[0])} that would report it is dropped by the "
                f"switch. If the switch is kept, the gap audit exports the period once "
                f"(exportctl audit --apply, through the company's manual export)")
        if fix is None:
            return text + "; no effective_from has a slot report it"
        if problem.in_effect:
            return (text + f"; {fix} would have avoided it, but the switch is in effect: "
                    "moving it now moves slots already due, so keep it")
        return text + f"; to have a slot report it, set {fix}"
    old, new = (format_instant(s) for s in problem.slots)
    if problem.guarded:
        text = (f"{head} reported twice: by the old timing's slot {old} and the new timing's "
                f"slot {new}. It is sent once: the new slot's run is skipped as already "
                "delivered (a period delivered under another timing is not exported again)")
        return text + (f"; {fix} avoids the skipped run" if fix and not problem.in_effect
                       else "")
    text = (f"{head} partly reported twice: by the old timing's slot {old} and again by the "
            f"new timing's slot {new}, whose window the old timing delivered only in part, so "
            "the run exports it in full and this part is sent twice")
    if fix is None:
        return text + ("; no effective_from avoids it: the two timings' windows do not line up "
                       f"(window kind {schedule.window.kind}); the customer receives the "
                       "overlap twice once")
    if problem.in_effect:
        return text + f"; the switch is in effect ({fix} would have avoided it)"
    return text + f"; set {fix}"


__all__ = ["LOOKBACK", "check_switches", "switch_message"]
