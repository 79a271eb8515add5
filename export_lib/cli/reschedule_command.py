"""``exportctl reschedule``: move a schedule's timing from an explicit slot.

Prints the plan (``export_lib.pipeline.reschedule``); ``--apply`` writes the company file
(``export_lib.config.edits``: the new timing keys, ``effective_from`` and a ``history`` entry
with the old ones), validated with the rest of the directory first.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from export_lib.errors import LedgerError


def _now() -> datetime:
    return datetime.now(UTC)  # the CLI is the edge: the only clock read


def _newest_run(schedule_id: str) -> tuple[datetime | None, str | None]:
    """The schedule's newest run's slot in the ledger, or why it could not be read."""
    import sqlalchemy.exc

    from export_lib.ledger.database import ledger_url
    from export_lib.ledger.periods import latest_runs
    from export_lib.ledger.runs import open_ledger

    url = ledger_url()
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None, None
    try:
        ledger = open_ledger(url)
    except LedgerError as exc:
        return None, str(exc)
    try:
        run = latest_runs(ledger).get(schedule_id)
        return (run.slot if run else None), None
    except sqlalchemy.exc.SQLAlchemyError:
        return None, None  # no ledger tables yet: nothing ran
    finally:
        ledger.engine.dispose()


def _record(edit) -> str | None:
    """Record the applied change in the ledger's audit trail (who: this OS user), as the
    company page does; a line saying why not when the ledger cannot be written."""
    import getpass

    import sqlalchemy.exc

    from export_lib.ledger.controls import Action, record_action
    from export_lib.ledger.database import ledger_url
    from export_lib.ledger.runs import open_ledger
    from export_lib.pipeline.reschedule_edit import ACTION

    url = ledger_url()
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return "note: no ledger yet, so the change is not in its audit trail"
    schedule = edit.plan.schedule
    try:
        ledger = open_ledger(url)
        try:
            record_action(ledger, Action(
                at=_now(), who=f"{getpass.getuser()} (exportctl)", action=ACTION,
                target_kind="schedule", target_id=schedule.schedule_id,
                why="exportctl reschedule --apply", changed=True,
                outcome=f"{edit.change_text}; wrote {edit.path.name}",
                company=schedule.company.id, schedule_id=schedule.schedule_id))
        finally:
            ledger.engine.dispose()
    except (LedgerError, sqlalchemy.exc.SQLAlchemyError) as exc:
        return f"warning: the change is written but not recorded in the ledger ({exc})"
    return None


def cmd_reschedule(args: argparse.Namespace) -> int:
    from export_lib.cli.audit_commands import _config_dir
    from export_lib.ledger.seniority import open_catalog
    from export_lib.periods.instants import parse_instant
    from export_lib.pipeline.reschedule_edit import apply_reschedule, prepare_reschedule

    config_dir = Path(_config_dir(args.config))
    schedule = open_catalog(config_dir).schedule(args.schedule_id)
    changes = {"export_hour": args.export_hour, "interval_hours": args.interval_hours,
               "timezone": args.timezone, "cron": args.cron, "dst_gap": args.dst_gap,
               "dst_fold": args.dst_fold}
    newest, unread = _newest_run(schedule.schedule_id)
    if unread:
        print(f"warning: the ledger could not be read ({unread}); planning from now only",
              file=sys.stderr)
    start = parse_instant(args.start, "--from") if args.start else None
    # The same path as the company page's "Change the export time" (pipeline.reschedule_edit).
    edit = prepare_reschedule(config_dir, schedule.schedule_id, changes, now=_now(),
                              newest_run=newest, effective_from=start)
    plan = edit.plan
    if args.json:
        data = edit.as_json()
        print(json.dumps({**{k: data[k] for k in ("schedule", "changes", "effective_from",
                                                  "old_next", "new_next", "periods",
                                                  "uncovered")},
                          "applied": bool(args.apply)}, indent=2))
    else:
        print("\n".join(plan.lines()))
    if not args.apply:
        if not args.json:
            print("\nnothing written; add --apply to write the file")
        return 0
    apply_reschedule(config_dir, edit)
    recorded = _record(edit)
    if recorded and not args.json:
        print(recorded, file=sys.stderr)
    if not args.json:
        print(f"\nwrote {edit.path}: the new timing from {plan.effective_from:%Y-%m-%dT%H:%M:%SZ}, "
              "the old one in its history; Airflow follows at the next parse of the DAG")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from export_lib.cli.commands import guarded

    p = sub.add_parser("reschedule", help="change a schedule's timing from an explicit slot "
                                          "(prints the plan; --apply writes the file)")
    p.add_argument("schedule_id", metavar="SCHEDULE_ID", help="e.g. acme/daily-spend")
    p.add_argument("--config", help="config directory (default $EXPORT_CONFIG_DIR or "
                                    "./dags/config)")
    p.add_argument("--export-hour", type=int, help="widget exports: the new local hour (0-23)")
    p.add_argument("--interval-hours", type=int, help="widget exports: hours between slots")
    p.add_argument("--timezone", help="the IANA timezone the slots are in")
    p.add_argument("--cron", help="data exports: the new cron expression")
    p.add_argument("--dst-gap", choices=("shift", "skip"))
    p.add_argument("--dst-fold", choices=("first", "second", "both"))
    p.add_argument("--from", dest="start", help="the first instant of the new timing (ISO "
                   "8601; default: its first slot after now and after the newest run)")
    p.add_argument("--apply", action="store_true", help="write the company file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_reschedule))
