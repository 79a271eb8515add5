"""``exportctl audit``, ``explain`` and ``migrate-legacy``.

* ``audit``: expected slots versus the ledger, each gap handled per the schedule's recovery
  policy (export_lib.pipeline.audit, ADR 0009); ``--dry-run`` prints the plan only.
* ``explain``: one paragraph per slot of a schedule on a date (export_lib.pipeline.explain),
  and under it what still waits in Airflow and why (export_lib.pipeline.waiting, ADR 0013).
* ``migrate-legacy``: ``export_time`` (morning/evening) to ``export_hour`` + ``effective_from``
  (export_lib.periods.legacy); prints the conversion and the next runs, ``--write`` edits.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from export_lib import settings
from export_lib.errors import ConfigError, WindowError

if TYPE_CHECKING:
    from collections.abc import Callable

    from export_lib.config.models import Schedule
    from export_lib.ledger import Ledger

    # What waits in Airflow for each due slot of a schedule (``exportctl explain``).
    Waits = Callable[[Schedule, list[datetime]], dict[datetime, list[str]]]

DEFAULT_LOOKBACK = timedelta(days=7)


def _now() -> datetime:
    return datetime.now(UTC)  # the CLI is the edge: the only clock read


def _config_dir(value: str | None) -> str:
    found = value or settings.config_dir()
    if found is None and Path("dags/config").is_dir():
        found = "dags/config"
    if found is None:
        raise ConfigError("no config directory: pass --config DIR or set EXPORT_CONFIG_DIR "
                          "(e.g. dags/config)")
    return found


def _catalog(config: str | None, company: str | None = None):
    from export_lib.ledger.seniority import open_catalog

    catalog = open_catalog(_config_dir(config), only=company)
    for line in catalog.error_lines:
        print(f"config error (not audited): {line}", file=sys.stderr)
    if company is not None and company not in catalog.companies:
        raise WindowError(f"unknown company {company!r} (or its file has errors, above)")
    return catalog


def cmd_audit(args: argparse.Namespace) -> int:
    from export_lib.ledger import open_ledger
    from export_lib.periods.instants import parse_instant
    from export_lib.pipeline.audit_apply import run_audit
    from export_lib.pipeline.backfills import api_from_environment

    now = _now()
    since = parse_instant(args.since, "--since") if args.since else now - DEFAULT_LOOKBACK
    catalog = _catalog(args.config, args.company)
    ledger = open_ledger()
    ledger.ensure_schema()
    api = None
    if not args.no_airflow:
        try:
            api = api_from_environment()
        except ConfigError as exc:
            if not args.dry_run:
                raise
            print(f"exportctl: note: {exc}; the plan does not know Airflow's running slots",
                  file=sys.stderr)
    result = run_audit(catalog, ledger, since=since, until=now, now=now, company=args.company,
                       api=api, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    for line in result.plan.lines():
        print(line)
    for outcome in result.backfills:
        print(f"backfill      {outcome.describe()}")
    for dag_id in result.not_requested:
        print(f"backfill      {dag_id}: not requested (--no-airflow); run the audit with the "
              "Airflow API reachable, or create the backfill in the UI")
    for key in result.left_alone:
        print(f"left alone    {key}: registered meanwhile by its own run")
    print(result.summary())
    return 0


def _day_or_slot(text: str) -> tuple[date | None, datetime | None]:
    from export_lib.periods.instants import parse_instant

    if "T" in text or " " in text.strip():
        return None, parse_instant(text, "--date")
    try:
        return date.fromisoformat(text.strip()), None
    except ValueError:
        raise WindowError(f"--date {text!r} is not a date; use e.g. 2026-03-29 (a local date "
                          "of the schedule) or an instant 2026-03-29T05:00Z (one slot)") from None


def explain_text(config_dir: str, schedule_id: str, when: str, *, now: datetime,
                 ledger: Ledger, waits: Waits | None = None) -> list[str]:
    """The paragraphs ``exportctl explain`` prints (one per slot). ``waits``: ``(schedule,
    due slots) -> {slot: lines}``, what waits in Airflow (export_lib.pipeline.waiting_sources),
    appended under the slot's paragraph."""
    from export_lib.ledger.seniority import open_catalog
    from export_lib.periods.slots import require_slot
    from export_lib.pipeline.explain import (
        explain_day,
        explain_facts,
        explain_period,
        slots_of_day,
    )

    company = schedule_id.split("/", 1)[0]
    try:
        schedule = open_catalog(config_dir, only=company).schedule(schedule_id)
    except ConfigError as exc:
        raise WindowError(str(exc)) from exc
    day, slot = _day_or_slot(when)
    if slot is not None:
        slots = (require_slot(schedule.timing, slot, schedule_id),)
        paragraphs = [explain_period(schedule, slots[0],
                                     explain_facts(ledger, schedule_id, slots[0]), now=now)]
    else:
        slots, paragraphs = slots_of_day(schedule, day), explain_day(schedule, day, ledger,
                                                                     now=now)
    due = [s for s in slots if s <= now]
    if waits is None or not due:
        return paragraphs
    lines = waits(schedule, due)
    return [text + "".join(f"\n{line}" for line in lines.get(s, ()))
            for text, s in zip(paragraphs, slots, strict=True)]


def _airflow_waits(args: argparse.Namespace, now: datetime) -> Waits | None:
    """What waits in Airflow, for :func:`explain_text` (None with ``--no-airflow``). When
    Airflow cannot be asked, a note on stderr: the paragraphs are the ledger's view only."""
    from export_lib.errors import ExportError
    from export_lib.pipeline.backfills import api_from_environment
    from export_lib.pipeline.waiting_sources import celery_workers, slot_waits

    if args.no_airflow:
        return None

    def waits(schedule: Schedule, slots: list[datetime]) -> dict[datetime, list[str]]:
        try:
            return slot_waits(api_from_environment(), schedule, slots,
                              celery_workers, now=now)
        except ExportError as exc:
            print(f"exportctl: note: Airflow not asked ({exc}); tasks waiting there are not "
                  "shown", file=sys.stderr)
            return {}

    return waits


def cmd_explain(args: argparse.Namespace) -> int:
    from export_lib.ledger import open_ledger

    schedule_id = args.schedule
    if args.company and not schedule_id.startswith(args.company + "/"):
        schedule_id = f"{args.company}/{schedule_id}"
    ledger = open_ledger()
    ledger.ensure_schema()
    now = _now()
    paragraphs = explain_text(_config_dir(args.config), schedule_id, args.date, now=now,
                              ledger=ledger, waits=_airflow_waits(args, now))
    print("\n\n".join(paragraphs))
    return 0


def cmd_migrate_legacy(args: argparse.Namespace) -> int:
    from export_lib.periods.instants import parse_instant
    from export_lib.periods.legacy import find_legacy, write_conversions

    config_dir = Path(_config_dir(args.config))
    start = parse_instant(args.start, "--from") if args.start else _now()
    conversions = find_legacy(config_dir, start=start, preserve=args.preserve)
    if not conversions:
        print(f"no widget export in {config_dir} carries export_time; nothing to migrate")
        return 0
    for conv in conversions:
        for line in conv.lines():
            print(line)
    refused = [c for c in conversions if c.problem]
    if not args.write:
        print(f"{len(conversions) - len(refused)} convertible, {len(refused)} refused; nothing "
              "written (add --write)")
        return 1 if refused else 0
    problems = write_conversions(config_dir, conversions)
    for line in problems:
        print(f"not written: {line}", file=sys.stderr)
    if not problems:
        print(f"wrote {len({c.path for c in conversions if not c.problem})} file(s); "
              f"{len(refused)} export(s) left for you to decide")
    return 1 if problems or refused else 0


def register(sub: argparse._SubParsersAction) -> None:
    from export_lib.cli.commands import guarded

    p = sub.add_parser("audit", help="find expected slots without a run and recover or record "
                                     "them per the recovery policy (idempotent)")
    p.add_argument("--company", help="only this company")
    p.add_argument("--since", help="first slot to look at (ISO 8601; default 7 days ago)")
    p.add_argument("--config", help="config directory (default $EXPORT_CONFIG_DIR or "
                                    "./dags/config)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--no-airflow", action="store_true",
                   help="do not ask Airflow (no in-flight check, backfills not requested)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_audit))

    p = sub.add_parser("explain", help="what happened to one period of a schedule, in words")
    p.add_argument("--schedule", required=True, help="schedule id, e.g. acme/daily-spend")
    p.add_argument("--date", required=True, help="a local date (every slot that day) or a slot "
                                                 "instant (ISO 8601)")
    p.add_argument("--company", help="the company, when --schedule omits it")
    p.add_argument("--config", help="config directory (default $EXPORT_CONFIG_DIR or "
                                    "./dags/config)")
    p.add_argument("--no-airflow", action="store_true",
                   help="the ledger's view only: do not ask Airflow (and the Celery broker) "
                        "about tasks still waiting")
    p.set_defaults(func=functools.partial(guarded, cmd_explain))

    p = sub.add_parser("migrate-legacy", help="convert export_time (morning/evening) into "
                                              "export_hour + effective_from")
    p.add_argument("--config", help="config directory (default $EXPORT_CONFIG_DIR or "
                                    "./dags/config)")
    p.add_argument("--preserve", choices=("standard", "daylight"),
                   help="in a timezone with DST: keep the legacy UTC time in standard (winter) "
                        "or daylight (summer) time")
    p.add_argument("--from", dest="start", help="the conversion applies from the first slot at "
                                                "or after this instant (default now)")
    p.add_argument("--write", action="store_true", help="edit the files (validated first)")
    p.set_defaults(func=functools.partial(guarded, cmd_migrate_legacy))
