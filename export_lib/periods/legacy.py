"""``exportctl migrate-legacy``: widget exports that still carry the old ``export_time``.

The old system fired ``morning`` at 03:00 UTC and ``evening`` at 11:00 UTC; today each
export runs at its ``export_hour`` in the company's timezone. The loader does not accept
``export_time`` (models forbid unknown keys), so this module reads the raw YAML.

A conversion keeps the UTC time the customer got: ``export_hour`` = that UTC hour in the
company's timezone, from ``effective_from`` = the first new slot at or after ``start``. It
refuses to guess when no local hour keeps it all year:

* a timezone with daylight saving time: 03:00 UTC is one local hour in standard time and
  another in daylight time; ``preserve="standard"`` or ``"daylight"`` says which half of the
  year keeps 03:00 UTC (the other half then moves by the DST shift);
* an offset that is not a whole hour (Asia/Kolkata +05:30): no ``export_hour`` gives 03:00 UTC.

The file is edited as text (comments stay): the ``export_time:`` line becomes ``export_hour:``
and ``effective_from:`` lines; the result must load (it is validated before it is written).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

from export_lib.config.timing import Timing
from export_lib.config.yaml_io import read_yaml
from export_lib.periods.instants import format_instant
from export_lib.periods.slots import next_slots

LEGACY_UTC_HOURS = {"morning": 3, "evening": 11}
Preserve = Literal["standard", "daylight"]
_LINE = re.compile(r"^(?P<indent>\s*(?:-\s+)?)export_time:\s*[\"']?(?P<value>\w+)[\"']?\s*"
                   r"(?:#.*)?$")


@dataclass(frozen=True)
class Conversion:
    """One widget export's migration (``hour`` None: refused, ``problem`` says why)."""

    path: Path
    export_id: str
    timezone: str
    legacy: str
    utc_hour: int
    interval_hours: int
    hour: int | None = None
    effective_from: datetime | None = None
    problem: str | None = None
    note: str = ""
    before: tuple[datetime, ...] = field(default=())
    after: tuple[datetime, ...] = field(default=())

    def lines(self) -> list[str]:
        name = f"{self.path.name}: widget_exports[{self.export_id}]"
        if self.problem:
            return [f"{name}: NOT converted: {self.problem}"]
        tz = ZoneInfo(self.timezone)
        out = [f"{name}: export_time {self.legacy} ({self.utc_hour:02d}:00 UTC) -> export_hour "
               f"{self.hour} ({self.timezone}) from {format_instant(self.effective_from)}; "
               f"{self.note}",
               "  next runs before: " + ", ".join(_both(s, tz) for s in self.before),
               "  next runs after:  " + ", ".join(_both(s, tz) for s in self.after)]
        return out


def _both(slot: datetime, tz: ZoneInfo) -> str:
    local = slot.astimezone(tz)
    return f"{local:%m-%d %H:%M} {local.tzname()} = {slot:%H:%M} UTC"


def _offsets(tz: ZoneInfo, year: int) -> dict[str, timedelta]:
    """The UTC offsets of ``tz`` in ``year``: ``standard`` and ``daylight`` (if it has DST)."""
    seen: dict[str, timedelta] = {}
    for month in range(1, 13):
        moment = datetime(year, month, 15, 12, tzinfo=UTC).astimezone(tz)
        seen["daylight" if moment.dst() else "standard"] = moment.utcoffset()
    return seen


def convert(path: Path, export: dict[str, Any], timezone: str, *, start: datetime,
            preserve: Preserve | None, count: int = 3) -> Conversion:
    """The conversion of one widget export with ``export_time`` (pure, ``start`` passed in)."""
    legacy = str(export.get("export_time"))
    export_id = str(export.get("id"))
    interval = export.get("interval_hours", 24)
    base = dict(path=path, export_id=export_id, timezone=timezone, legacy=legacy,
                utc_hour=LEGACY_UTC_HOURS.get(legacy, -1), interval_hours=interval)
    if legacy not in LEGACY_UTC_HOURS:
        return Conversion(**base, problem=f"export_time {legacy!r} is not a legacy value "
                          f"(morning = 03:00 UTC, evening = 11:00 UTC); set export_hour by hand")
    if "export_hour" in export:
        return Conversion(**base, problem=f"it has both export_time and export_hour "
                          f"{export['export_hour']}; check the hour and delete export_time")
    tz = ZoneInfo(timezone)
    offsets = _offsets(tz, start.year)
    utc_hour = LEGACY_UTC_HOURS[legacy]
    if len(offsets) > 1 and preserve is None:
        hours = {k: (utc_hour + int(v.total_seconds() // 3600)) % 24 for k, v in offsets.items()}
        return Conversion(**base, problem=(
            f"{timezone} observes daylight saving time: {utc_hour:02d}:00 UTC is "
            f"{hours['standard']:02d}:00 local in standard time and {hours['daylight']:02d}:00 "
            f"in daylight time, and export_hour keeps one local hour all year. Choose: "
            f"--preserve standard (export_hour {hours['standard']}: {utc_hour:02d}:00 UTC in "
            f"winter, {(utc_hour - 1) % 24:02d}:00 UTC in summer) or --preserve daylight "
            f"(export_hour {hours['daylight']}: {utc_hour:02d}:00 UTC in summer, "
            f"{(utc_hour + 1) % 24:02d}:00 UTC in winter)"))
    offset = offsets[preserve] if len(offsets) > 1 and preserve else offsets["standard"] \
        if "standard" in offsets else next(iter(offsets.values()))
    if offset.total_seconds() % 3600:
        return Conversion(**base, problem=(
            f"{timezone} is {offset} from UTC, not a whole number of hours: no export_hour "
            f"fires at {utc_hour:02d}:00 UTC; choose the nearest hour and set it by hand"))
    hour = (utc_hour + int(offset.total_seconds() // 3600)) % 24
    new = Timing(timezone=timezone, export_hour=hour, interval_hours=interval)
    old = Timing(timezone="UTC", export_hour=utc_hour, interval_hours=interval)
    first = next_slots(new, start, 1)[0]
    if len(offsets) == 1:
        note = f"keeps {utc_hour:02d}:00 UTC all year ({timezone} has no daylight saving time)"
    else:
        note = (f"keeps {utc_hour:02d}:00 UTC in {preserve} time only; the other half of the "
                "year it runs an hour " + ("earlier" if preserve == "standard" else "later")
                + " in UTC (the local hour stays)")
    return Conversion(**base, hour=hour, effective_from=first, note=note,
                      before=next_slots(old, start, count), after=next_slots(new, start, count))


def find_legacy(config_dir: Path, *, start: datetime, preserve: Preserve | None
                ) -> list[Conversion]:
    """Every widget export with ``export_time`` in the company files of ``config_dir``."""
    found = []
    for path in sorted(config_dir.glob("*.y*ml")):
        if path.name.startswith("defaults."):
            continue
        data, _ = read_yaml(path)
        if not isinstance(data, dict):
            continue
        timezone = str((data.get("company") or {}).get("timezone", "UTC"))
        for export in data.get("widget_exports") or ():
            if isinstance(export, dict) and "export_time" in export:
                found.append(convert(path, export, timezone, start=start, preserve=preserve))
    return found


def rewrite(text: str, conversions: list[Conversion]) -> str:
    """``text`` with each converted ``export_time:`` line replaced, in file order. Raises
    ValueError when the lines cannot be matched to the exports one to one (flow style)."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if _LINE.match(line.rstrip("\n"))]
    if len(hits) != len(conversions):
        raise ValueError(f"found {len(hits)} 'export_time:' line(s) for {len(conversions)} "
                         "export(s); edit this file by hand")
    for index, conv in zip(reversed(hits), reversed(conversions), strict=True):
        if conv.problem:
            continue
        match = _LINE.match(lines[index].rstrip("\n"))
        indent = match.group("indent")
        pad = " " * len(indent)
        lines[index] = (f"{indent}export_hour: {conv.hour}  # was export_time: {conv.legacy} "
                        f"({conv.utc_hour:02d}:00 UTC)\n"
                        f"{pad}effective_from: \"{format_instant(conv.effective_from)}\"\n")
    return "".join(lines)


def write_conversions(config_dir: Path, conversions: list[Conversion]) -> list[str]:
    """Rewrite the files and validate the directory first; returns the problems (nothing is
    written when there is any)."""
    from export_lib.config.loader import load_catalog

    by_file: dict[Path, list[Conversion]] = {}
    for conv in conversions:
        by_file.setdefault(conv.path, []).append(conv)
    new_text: dict[Path, str] = {}
    problems: list[str] = []
    for path, convs in by_file.items():
        if all(c.problem for c in convs):
            continue  # nothing to change in this file
        try:
            new_text[path] = rewrite(path.read_text(), convs)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
    if problems:
        return problems
    with tempfile.TemporaryDirectory() as tmp:
        trial = Path(tmp) / "config"
        shutil.copytree(config_dir, trial)
        for path, text in new_text.items():
            (trial / path.name).write_text(text)
        errors = load_catalog(trial).errors
        problems = [line.replace(str(trial), str(config_dir)) for path in new_text
                    for line in errors.get(str(trial / path.name), ())]
    if not problems:
        for path, text in new_text.items():
            path.write_text(text)
    return problems


__all__ = ["LEGACY_UTC_HOURS", "Conversion", "convert", "find_legacy", "rewrite",
           "write_conversions"]
