"""``exportctl``: validate configs and preview schedules (no Airflow import; fast start).

One function per subcommand (``cmd_<name>(args) -> exit code``), registered in
:func:`build_parser`; add a subcommand by writing ``add_<name>_parser(subparsers)`` and listing
it in ``SUBCOMMANDS``. Exit codes: 0 ok, 1 the config (or the thing checked) is wrong, 2 bad
command-line input (argparse's convention). Heavy modules are imported inside the commands.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def usage_error(message: str) -> NoReturn:
    """Bad command-line input: print ``exportctl: error: …`` and exit 2 (no traceback)."""
    print(f"exportctl: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def parse_instant(text: str) -> datetime:
    """``--from`` values: ISO 8601 date or datetime; no offset means UTC; ``Z`` allowed."""
    from export_lib.errors import WindowError
    from export_lib.periods.instants import parse_instant as parse

    try:
        return parse(text, "")
    except WindowError as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100000, got {value}")
    return value


# --- validate -------------------------------------------------------------------------------

def add_validate_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help="check every config file of a directory",
                                   description="Exit 0 if CONFIG_DIR is valid, else print every "
                                   "error as 'file: field.path: message' and exit 1. Warnings "
                                   "('warning: …') never change the exit code. A timing edit "
                                   "without effective_from on a schedule that already has runs "
                                   "in the ledger (EXPORT_LEDGER_URL) is an error. A period "
                                   "around a timing switch (a version's effective_from) that "
                                   "no slot reports, or that two report, is named with the "
                                   "effective_from that avoids it. When an export's source is "
                                   "reachable, csv timestamps: local over a column without time "
                                   "zone is an error, and a company without rows in a table it "
                                   "exports is a warning.")
    parser.add_argument("config_dir", metavar="CONFIG_DIR")
    parser.add_argument("--no-ledger", action="store_true",
                        help="check the files only, not timing edits against the ledger's runs")
    parser.add_argument("--no-source", action="store_true",
                        help="do not open the exports' sources (column types, companies "
                        "without rows)")
    parser.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from export_lib.config.advisories import holiday_warnings, retention_warnings
    from export_lib.errors import ConfigError
    from export_lib.ledger.seniority import open_catalog

    try:
        catalog = open_catalog(args.config_dir)
    except ConfigError as exc:
        usage_error(str(exc))
    lines = list(catalog.error_lines)
    files = len(catalog.errors)
    loaders = _loader_check(Path(args.config_dir))
    if loaders is not None and not loaders.ok:
        lines += loaders.problems()
        files += len(loaders.missing) + len(loaders.orphans)
    warnings = retention_warnings(catalog.schedules)  # a warning never fails validation
    now = datetime.now(UTC)  # the CLI is the edge: a clock read
    warnings += holiday_warnings(catalog.companies, catalog.schedules, now=now)
    from export_lib.pipeline.switch_check import check_switches

    switches, switch_warnings = check_switches(catalog.schedules, Path(args.config_dir), now=now)
    lines += switches
    files += len({line.split(": ", 1)[0] for line in switches})
    warnings += switch_warnings
    if not args.no_ledger:
        from export_lib.pipeline.timing_edits import check_timing_edits

        edits, unchecked = check_timing_edits(catalog.schedules, Path(args.config_dir), now=now)
        lines += edits
        files += len({line.split(": ", 1)[0] for line in edits})
        warnings = [*warnings, *unchecked]
    if not args.no_source:
        from export_lib.source.checks import check_sources

        found = check_sources(catalog.schedules, args.config_dir)
        lines += found.errors
        files += len({line.split(": ", 1)[0] for line in found.errors})
        warnings = [*warnings, *found.warnings]
    for line in (*lines, *warnings):
        print(line)
    if lines:
        print(f"{len(lines)} error(s) in {files} file(s)", file=sys.stderr)
        return EXIT_INVALID
    print(f"OK: {len(catalog.companies)} companies, {len(catalog.schedules)} schedules in "
          f"{args.config_dir}{f' ({len(warnings)} warning(s))' if warnings else ''}")
    return EXIT_OK


def _loader_check(config_dir: Path):
    """A config directory inside a DAG folder (``dags/config``) needs one loader per company."""
    from export_lib.config.dag_loaders import check_loaders

    dags = config_dir.resolve().parent
    if config_dir.resolve().name != "config" or not any(dags.glob("*.py")):
        return None
    return check_loaders(dags)


def add_loaders_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "loaders", help="write the DAG loader of every company file (dags/company_<id>.py)",
        description="Write dags/company_<id>.py for every dags/config/<id>.yaml that has none and "
                    "remove generated loaders whose company file is gone. --check only reports "
                    "(exit 1 when something is missing).")
    parser.add_argument("dags_dir", metavar="DAGS_DIR")
    parser.add_argument("--check", action="store_true")
    parser.set_defaults(func=cmd_loaders)


def cmd_loaders(args: argparse.Namespace) -> int:
    from export_lib.config.dag_loaders import check_loaders, sync_loaders

    if not (Path(args.dags_dir) / "config").is_dir():
        usage_error(f"{args.dags_dir} has no config/ directory; pass the DAG folder, e.g. dags")
    if args.check:
        check = check_loaders(args.dags_dir)
        for line in check.problems():
            print(line)
        return EXIT_OK if check.ok else EXIT_INVALID
    written, removed, kept = sync_loaders(args.dags_dir)
    for path in written:
        print(f"wrote {path}")
    for path in removed:
        print(f"removed {path} (its company file is gone)")
    for path in kept:
        print(f"kept {path}: its company file is gone but the loader was edited; remove it by hand",
              file=sys.stderr)
    if not (written or removed or kept):
        print(f"every company file in {Path(args.dags_dir) / 'config'} has its loader")
    return EXIT_INVALID if kept else EXIT_OK


# --- preview --------------------------------------------------------------------------------

def add_preview_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "preview", help="the next slots, windows and deadlines",
        description="Configured form: exportctl preview CONFIG_DIR [--company ID] [--schedule "
        "ID]. Ad-hoc form (no CONFIG_DIR): --timezone TZ with --export-hour/--interval-hours "
        "or --cron, --window KIND. --from defaults to now; a --from without offset is UTC. "
        "When a schedule's source is reachable, what it says about the schedules (a company "
        "without rows, local timestamps over a column without time zone) goes to stderr.")
    parser.add_argument("config_dir", metavar="CONFIG_DIR", nargs="?")
    parser.add_argument("--company", help="only this company's schedules")
    parser.add_argument("--schedule", help="only this schedule id, e.g. acme/daily-spend")
    parser.add_argument("--from", dest="start", type=parse_instant,
                        help="first slot at or after this ISO 8601 instant (default: now)")
    parser.add_argument("--count", type=_count, default=10, help="slots per schedule (10)")
    parser.add_argument("--json", action="store_true", help="print a JSON array")
    adhoc = parser.add_argument_group("ad-hoc schedule (instead of CONFIG_DIR)")
    adhoc.add_argument("--timezone", help="IANA timezone, e.g. Europe/Berlin")
    adhoc.add_argument("--export-hour", type=int, help="local hour 0-23 (default 0)")
    adhoc.add_argument("--interval-hours", type=int, help="1,2,3,4,6,8,12,24 (default 24)")
    adhoc.add_argument("--cron", help="a cron expression instead of --export-hour/--interval")
    adhoc.add_argument("--window", default="calendar_day", help="window kind (calendar_day)")
    adhoc.add_argument("--window-days", type=int, help="N for trailing_days")
    adhoc.add_argument("--window-hours", type=int, help="N for trailing_hours")
    adhoc.add_argument("--dst-gap", default="shift", choices=("shift", "skip"))
    adhoc.add_argument("--dst-fold", default="first", choices=("first", "second", "both"))
    adhoc.add_argument("--schedule-id", default="adhoc", help="prefix of the run keys (adhoc)")
    adhoc.add_argument("--holidays-country", help="previous_business_day skips this country's "
                       "weekend and holidays (ISO code, e.g. NZ, IL), as "
                       "company.holidays.country does")
    adhoc.add_argument("--holidays-subdivision", help="and this subdivision's (e.g. AUK)")
    adhoc.add_argument("--holiday", action="append", default=[], metavar="DATE",
                       help="skip this date too (YYYY-MM-DD; repeat for more)")
    parser.set_defaults(func=cmd_preview)


_ADHOC_OPTIONS = {"timezone": "--timezone", "export_hour": "--export-hour",
                  "interval_hours": "--interval-hours", "cron": "--cron", "kind": "--window",
                  "days": "--window-days", "hours": "--window-hours",
                  "country": "--holidays-country", "subdivision": "--holidays-subdivision",
                  "dates": "--holiday"}


def _option_problems(exc: Exception, fallback: str) -> list[str]:
    """``--option: message`` for each error of a pydantic ``ValidationError``."""
    problems = []
    for error in exc.errors():  # type: ignore[attr-defined]
        name = str(error["loc"][0]) if error["loc"] else fallback
        message = error["msg"] if error["type"].startswith("export_") else (
            f"{error['msg']} (got {error.get('input')!r})")
        problems.append(f"{_ADHOC_OPTIONS.get(name, name)}: {message}")
    return problems


def _adhoc_models(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The ad-hoc ``Timing``, ``WindowSpec`` and holiday calendar (None without --holiday…);
    every bad option is reported at once (exit 2)."""
    from pydantic import ValidationError

    from export_lib.config.holiday_calendar import HolidayCalendar
    from export_lib.config.timing import Timing, WindowSpec

    needs = {"trailing_days": "window_days", "trailing_hours": "window_hours"}.get(args.window)
    for name in ("window_days", "window_hours"):
        if name != needs and getattr(args, name) is not None:
            # Lenient on purpose: a script may pass N for every kind; only the kind uses it.
            print(f"exportctl: note: --{name.replace('_', '-')} is not used by --window "
                  f"{args.window}; ignored", file=sys.stderr)
            setattr(args, name, None)
    problems: list[str] = []
    timing = spec = None
    try:
        timing = Timing(timezone=args.timezone, export_hour=args.export_hour,
                        interval_hours=args.interval_hours, cron=args.cron,
                        dst_gap=args.dst_gap, dst_fold=args.dst_fold)
    except ValidationError as exc:
        problems += _option_problems(exc, "--cron")
    try:
        spec = WindowSpec(kind=args.window, days=args.window_days, hours=args.window_hours)
    except ValidationError as exc:
        problems += _option_problems(exc, "--window")
    holidays = None
    if args.holidays_country or args.holidays_subdivision or args.holiday:
        try:
            holidays = HolidayCalendar(country=args.holidays_country,
                                       subdivision=args.holidays_subdivision,
                                       dates=tuple(args.holiday))
        except ValidationError as exc:
            problems += _option_problems(exc, "--holidays-country")
    if problems:
        usage_error("; ".join(problems))
    return timing, spec, holidays


def cmd_preview(args: argparse.Namespace) -> int:
    from export_lib.periods.preview import preview_rows, render_table

    start = args.start or datetime.now(UTC)  # the CLI is the edge: the only clock read
    if args.config_dir is None:
        if args.timezone is None:
            usage_error("give CONFIG_DIR, or --timezone for an ad-hoc schedule")
        if args.company or args.schedule:
            usage_error("--company/--schedule need CONFIG_DIR")
        timing, spec, holidays = _adhoc_models(args)
        rows = preview_rows(spec, timing, start, args.count, schedule_id=args.schedule_id,
                            holidays=holidays)
        status = EXIT_OK
    else:
        if (args.timezone or args.cron or args.export_hour is not None
                or args.holidays_country or args.holidays_subdivision or args.holiday):
            usage_error("use either CONFIG_DIR or the ad-hoc options (--timezone, ...); a "
                        "configured company's holidays are its company.holidays")
        rows, status = _configured_rows(args, start)
    print(json.dumps(rows, indent=2) if args.json else render_table(rows))
    return status


def _configured_rows(args: argparse.Namespace, start: datetime) -> tuple[list[dict], int]:
    """Rows of the selected schedules; config errors of the selection go to stderr (exit 1)."""
    from export_lib.errors import ConfigError
    from export_lib.ledger.seniority import open_catalog
    from export_lib.periods.preview import schedule_rows

    try:
        catalog = open_catalog(args.config_dir)
    except ConfigError as exc:
        usage_error(str(exc))
    wanted = args.company or (args.schedule.split("/", 1)[0] if args.schedule else None)
    broken = {Path(path).stem: lines for path, lines in catalog.errors.items()}
    if wanted is not None and wanted not in catalog.companies and wanted not in broken:
        known = ", ".join(catalog.companies) or "none"
        usage_error(f"unknown company {wanted!r}; known companies: {known}")
    if wanted is not None:
        broken = {stem: lines for stem, lines in broken.items() if stem == wanted}
    for lines in broken.values():
        for line in lines:
            print(f"config error: {line}", file=sys.stderr)
    schedules = [s for s in catalog.schedules if wanted is None or s.company.id == wanted]
    if args.schedule and wanted in catalog.companies:
        try:
            schedules = [catalog.schedule(args.schedule)]
        except ConfigError as exc:
            usage_error(str(exc))
    elif args.schedule:
        schedules = []  # its company file is broken: the errors above say why
    rows = [row for s in schedules for row in schedule_rows(s, start, args.count)]
    rows.sort(key=lambda r: (r["slot_utc"], r["schedule"]))
    from export_lib.source.checks import preview_notes

    notes, wrong = preview_notes(schedules, args.config_dir)
    print(*notes, sep="\n", file=sys.stderr, end="\n" if notes else "")
    return rows, EXIT_INVALID if broken or wrong else EXIT_OK


# --- dispatcher -----------------------------------------------------------------------------

def add_ledger_parsers(subparsers: argparse._SubParsersAction) -> None:
    """``run``, ``runs``, ``ledger`` and ``demo`` (export_lib.cli.commands; imports stay lazy)."""
    from export_lib.cli import commands

    commands.register(subparsers)


def add_audit_parsers(subparsers: argparse._SubParsersAction) -> None:
    """``audit``, ``explain`` and ``migrate-legacy`` (export_lib.cli.audit_commands)."""
    from export_lib.cli import audit_commands

    audit_commands.register(subparsers)


def add_control_parsers(subparsers: argparse._SubParsersAction) -> None:
    """``pause``, ``unpause``, ``cancel``, ``revoke``, ``hold``, ``unhold``, ``retention``,
    ``actions`` (export_lib.cli.control_commands)."""
    from export_lib.cli import control_commands

    control_commands.register(subparsers)


def add_reschedule_parser(subparsers: argparse._SubParsersAction) -> None:
    """``reschedule`` (export_lib.cli.reschedule_command)."""
    from export_lib.cli import reschedule_command

    reschedule_command.register(subparsers)


def add_schema_parser(subparsers: argparse._SubParsersAction) -> None:
    """``schema`` (export_lib.cli.schema_command)."""
    from export_lib.cli import schema_command

    schema_command.register(subparsers)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_validate_parser,
    add_loaders_parser,
    add_preview_parser,
    add_ledger_parsers,
    add_audit_parsers,
    add_control_parsers,
    add_reschedule_parser,
    add_schema_parser,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="exportctl",
                                     description="Scheduled data exports: config and time tools.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    from export_lib.cli.common_help import fill_help

    fill_help(parser)
    return parser


@contextmanager
def _logging() -> Iterator[None]:
    """Our records for the length of one command. Text (the default): they go nowhere, as
    before — the commands print what matters. ``EXPORT_LOG_FORMAT=json``: each at INFO and
    above is one JSON object on stderr (logfmt.JsonFormatter). Undone afterwards, so many
    commands in one process (tests/support/cli.py) leave no mode and no handler bound to an
    earlier stderr behind."""
    from export_lib import settings
    from export_lib.logfmt import JsonFormatter, installed

    ours = logging.getLogger("export_lib")
    with installed(settings.log_format()) as json_lines:
        if not json_lines:
            ours.addHandler(logging.NullHandler())
            yield
            return
        handler, level = logging.StreamHandler(), ours.level
        handler.setFormatter(JsonFormatter())
        ours.addHandler(handler)
        ours.setLevel(logging.INFO)
        try:
            yield
        finally:
            ours.removeHandler(handler)
            ours.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    with _logging():
        parser = build_parser()
        args = parser.parse_args(argv)
        try:
            return args.func(args)
        except BrokenPipeError:  # `exportctl preview ... | head`
            return EXIT_OK
