"""``exportctl reschedule``'s plan: a timing edit from an explicit slot, shown before it is made
(ADR 0005 as amended).

Support moves a schedule's timing (``--export-hour 9``, ``--interval-hours 4``, ``--timezone``,
``--cron``). The edit applies from ``effective_from``: by default the next slot of either timing
after now (and after the newest run), so the old timing never fires again and the next export
is the new timing's first (:func:`switch_instant`). The plan lists the next slots under the old and the
new timeline side by side, in local time and UTC, and every period around the switch with what
will happen to it: exported once; reported again by a new slot and skipped because the old
timing delivered it (``start_run``'s period check: no period is sent twice); or reported by no slot at
all. Pure: ``now`` and the newest run's slot are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from export_lib.config.models import Schedule
from export_lib.config.timing import Timing, timeline_of
from export_lib.errors import ConfigError
from export_lib.periods.coverage import TIMING_KEYS, DeliveredPeriod, covering
from export_lib.periods.instants import format_instant
from export_lib.periods.names import period_label
from export_lib.periods.slots import latest_slot_at_or_before, next_slots, slots_between
from export_lib.periods.switches import avoiding_switch, switch_problems
from export_lib.periods.windows import window_for

NEXT = 3  # slots shown on each side, and new slots followed after the switch


@dataclass(frozen=True)
class PeriodOutcome:
    slot: datetime
    timing: str  # "old" or "new"
    period: str
    outcome: str


@dataclass(frozen=True)
class ReschedulePlan:
    schedule: Schedule
    changes: dict[str, tuple[Any, Any]]
    effective_from: datetime
    old_next: tuple[datetime, ...]
    new_next: tuple[datetime, ...]
    periods: tuple[PeriodOutcome, ...]
    holes: tuple[str, ...]
    timeline: Timing

    @property
    def twice(self) -> tuple[PeriodOutcome, ...]:
        return tuple(p for p in self.periods if p.outcome.startswith("skipped"))

    def lines(self) -> list[str]:
        sid, tz = self.schedule.schedule_id, self.timeline.zone
        change = ", ".join(f"{k} {old!r} → {new!r}" for k, (old, new) in self.changes.items())
        out = [f"{sid}: {change}",
               f"effective_from: {format_instant(self.effective_from)} "
               f"({self.effective_from.astimezone(tz):%Y-%m-%d %H:%M} {self.timeline.timezone}); "
               "earlier slots keep the old timing",
               "", f"next slots{'':4}{'old timing':40}new timing"]
        for n, (old, new) in enumerate(zip(self.old_next, self.new_next, strict=False), 1):
            out.append(f"  {n}{'':11}{_when(old, self.schedule):40}{_when(new, self.schedule)}")
        out += ["", "periods around the switch:"]
        out += [f"  {p.period:24} slot {format_instant(p.slot)} ({p.timing}): {p.outcome}"
                for p in self.periods]
        out += [f"  {hole:24} no slot of either timing reports it: export it by hand if it is "
                f"owed (exportctl run CONFIG_DIR --schedule {sid} --slot …)"
                for hole in self.holes]
        covered_twice = len(self.twice)
        out += ["", f"{covered_twice} period(s) reported twice by the switch, each sent once; "
                    f"{len(self.holes)} period(s) reported by no slot"]
        return out


def _when(slot: datetime, schedule: Schedule) -> str:
    local = slot.astimezone(schedule.timing.zone)
    return f"{local:%Y-%m-%d %H:%M %Z} ({slot:%H:%MZ})"


def new_timing(schedule: Schedule, **changes: Any) -> Timing:
    """The schedule's current timing with ``changes`` (None values ignored), validated."""
    current = schedule.timing.segments[-1][2]
    wanted = {k: v for k, v in changes.items() if v is not None}
    if not wanted:
        raise ConfigError("nothing to change: give --export-hour, --interval-hours, --timezone, "
                          "--cron, --dst-gap or --dst-fold")
    if schedule.kind == "widget" and "cron" in wanted:
        raise ConfigError(f"{schedule.schedule_id} is a widget export: it fires at export_hour "
                          "every interval_hours; --cron is for data exports")
    if schedule.kind != "widget" and {"export_hour", "interval_hours"} & set(wanted):
        raise ConfigError(f"{schedule.schedule_id} is a data export: it fires on its cron; "
                          "use --cron")
    try:
        timing = Timing.model_validate({**current.model_dump(), **wanted})
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ConfigError(f"the new timing is not valid: {reasons}") from None
    if timing == current:
        raise ConfigError(f"{schedule.schedule_id} already fires at {current.summary}")
    return timing


def switch_instant(old: Timing, new: Timing, after: datetime, *,
                   wanted: datetime | None = None) -> datetime:
    """Where a timing edit starts. Asked for (``--from``): the first slot of the new timing at
    or after it. Otherwise the next slot of *either* timing after ``after``: the old timing
    never fires once the edit is made, and the next slot is the new timing's first (moving
    07:00 to 09:00 at 10:00 switches at tomorrow's 07:00, whose slot is gone; the first
    export is tomorrow at 09:00)."""
    if wanted is not None:
        first = next_slots(new, wanted, 1)
    else:
        start = after + timedelta(microseconds=1)
        first = tuple(sorted((*next_slots(old, start, 1), *next_slots(new, start, 1))))[:1]
    if not first or not next_slots(new, first[0], 1):
        raise ConfigError(f"the new timing ({new.summary}) never fires after "
                          f"{format_instant(wanted or after)}")
    return first[0]


def plan_reschedule(schedule: Schedule, timing: Timing, *, now: datetime,
                    newest_run: datetime | None = None,
                    effective_from: datetime | None = None) -> ReschedulePlan:
    """The plan for moving ``schedule`` to ``timing`` (a plain timing)."""
    old = schedule.timing
    floor = max(now, newest_run) if newest_run else now
    effective_from = _without_hole(schedule, timing, switch_instant(
        old, timing, floor, wanted=effective_from))
    if newest_run is not None and effective_from <= newest_run:
        raise ConfigError(f"effective_from {format_instant(effective_from)} is not after the "
                          f"newest run's slot {format_instant(newest_run)}: the slots already "
                          "run keep their timing; choose a later instant")
    kept = [(start, plain) for start, _, plain in old.segments
            if start is None or start < effective_from]
    timeline = timeline_of([*kept, (effective_from, timing)])
    changes = {k: (getattr(old.at(effective_from), k), getattr(timing, k)) for k in TIMING_KEYS
               if getattr(old.at(effective_from), k) != getattr(timing, k)}
    periods, holes = _periods(schedule, timeline, effective_from, now)
    return ReschedulePlan(schedule=schedule, changes=changes, effective_from=effective_from,
                          old_next=next_slots(old, now, NEXT),
                          new_next=next_slots(timeline, now, NEXT), periods=periods,
                          holes=holes, timeline=timeline)


def _without_hole(schedule: Schedule, timing: Timing, switch: datetime) -> datetime:
    """``switch``, or the first later slot of either timing at which every period is reported
    when ``switch`` leaves one that no slot reports (moving 07:00 to 05:00 at 06:00 would
    drop today's 07:00, yesterday's only report: the switch waits for tomorrow's 05:00)."""
    kept = tuple(s for s in schedule.timing.segments if s[0] is None or s[0] < switch)
    timeline = timeline_of([*((start, plain) for start, _, plain in kept), (switch, timing)])
    if not any(p.kind == "unreported" for p in switch_problems(
            schedule.model_copy(update={"timing": timeline}), now=switch)
               if p.switch == switch):
        return switch
    return avoiding_switch(schedule, kept, timing, switch) or switch


def _periods(schedule: Schedule, timeline: Timing, switch: datetime, now: datetime
             ) -> tuple[tuple[PeriodOutcome, ...], tuple[str, ...]]:
    """Each slot from the newest due one (or the last before the switch) to the NEXT-th slot
    of the new timing, with what happens to its period."""
    tz = schedule.window_timezone
    start = latest_slot_at_or_before(timeline, min(now, switch)) or switch
    after = next_slots(timeline, switch, NEXT)
    end = (after[-1] if after else switch) + timedelta(microseconds=1)
    # The old timing's periods that count as delivered reach back one longest window.
    reach = timedelta(days=max(schedule.window.days or 1, 1) + 3)
    delivered: list[DeliveredPeriod] = []
    for slot in slots_between(timeline, start - reach, switch):
        window = window_for(schedule.window, timeline, slot, tz)
        delivered.append(DeliveredPeriod(
            run_key=f"{schedule.schedule_id}/{format_instant(slot)}", slot=slot,
            window_start=window.start, window_end=window.end, timing=("old",),
            artifact_version=1, artifact_uri=""))
    outcomes, windows = [], []
    for slot in slots_between(timeline, start, end):
        window = window_for(schedule.window, timeline, slot, tz)
        label = period_label(window.start, window.end, tz)
        windows.append((window.start, window.end))
        if slot < switch:
            outcome = ("exported by the old timing" if slot > now
                       else "due before the switch (run or recovered as usual)")
            outcomes.append(PeriodOutcome(slot, "old", label, outcome))
            continue
        cover = covering(window.start, window.end, ("new",), delivered)
        if cover:
            outcome = (f"skipped: already delivered by slot {format_instant(cover[-1].slot)} "
                       "(sent once; `--regenerate` on that run sends it again)")
        elif slot <= now:
            outcome = "already due: exported by catch-up per the recovery policy"
        else:
            outcome = "exported"
        outcomes.append(PeriodOutcome(slot, "new", label, outcome))
    holes, covered_until = [], None
    for w_start, w_end in sorted(windows):
        if covered_until is not None and w_start > covered_until:
            holes.append(period_label(covered_until, w_start, tz))
        covered_until = w_end if covered_until is None else max(covered_until, w_end)
    return tuple(outcomes), tuple(holes)
