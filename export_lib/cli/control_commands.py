"""``exportctl`` operator controls: ``pause``, ``unpause``, ``cancel``, ``revoke``, ``hold``,
``unhold``, ``retention`` and ``actions`` (the audit trail).

Each control calls one function of :mod:`export_lib.pipeline.controls` (the operations page
calls the same ones) and prints one line. A control that changes nothing (an unknown id, a
finished run, a deleted artifact) prints ``exportctl: nothing changed: <why>`` and exits 1.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from export_lib.pipeline.controls import ControlResult

EXIT_OK, EXIT_UNCHANGED = 0, 1


def _now() -> datetime:
    return datetime.now(UTC)


def _ledger():
    from export_lib.ledger import open_ledger

    ledger = open_ledger()
    ledger.ensure_schema()
    return ledger


def _report(result: ControlResult, as_json: bool) -> int:
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
    elif result.changed:
        print(result.outcome)
    else:
        print(f"exportctl: {result.outcome}", file=sys.stderr)
    return EXIT_OK if result.changed else EXIT_UNCHANGED


def cmd_pause(args: argparse.Namespace) -> int:
    from export_lib.cli.commands import current_catalog
    from export_lib.pipeline import controls

    control = controls.pause if args.command == "pause" else controls.unpause
    result = control(_ledger(), args.company, args.schedule, who=args.by, why=args.why,
                     now=_now(), catalog=current_catalog(args.config))
    return _report(result, args.json)


def cmd_target(args: argparse.Namespace) -> int:
    from export_lib.pipeline import controls

    control = {"cancel": controls.cancel_run, "revoke": controls.revoke_artifact,
               "hold": controls.hold, "unhold": controls.unhold}[args.command]
    return _report(control(_ledger(), args.target, who=args.by, why=args.why, now=_now()),
                   args.json)


def cmd_retention(args: argparse.Namespace) -> int:
    from export_lib.cli.commands import current_catalog
    from export_lib.pipeline.retention import apply_retention
    from export_lib.storage.stores import open_store

    report = apply_retention(_ledger(), current_catalog(args.config), open_store(), now=_now(),
                             dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        verb = "would delete" if args.dry_run else "deleted"
        for item in report.deleted:
            print(f"{verb} artifact {item.artifact_id} {item.uri} ({item.run_key} "
                  f"v{item.version}, generated {item.generated_at}, retention "
                  f"{item.retention_days} days)")
        for leftover in report.staging_deleted:
            print(f"{verb} staging leftover {leftover.uri} ({leftover.run_key})")
        for held in report.kept:
            print(f"kept artifact {held.artifact_id} {held.uri}: {held.reason}")
        for kept in report.staging_kept:
            print(f"kept staging leftover {kept.uri} ({kept.run_key}): {kept.reason}")
        for failed in report.failed:
            print(f"not deleted {failed.uri}: {failed.error}", file=sys.stderr)
        staging_kept = (f", {len(report.staging_kept)} staging leftover(s) kept (held)"
                        if report.staging_kept else "")
        print(f"{len(report.deleted)} artifact(s) {verb}, {len(report.kept)} kept (held), "
              f"{len(report.failed)} not deletable, {len(report.staging_deleted)} staging "
              f"leftover(s){staging_kept}{' (dry run: nothing changed)' if args.dry_run else ''}")
    return 1 if report.failed else EXIT_OK


def cmd_actions(args: argparse.Namespace) -> int:
    from export_lib.ledger.controls import list_actions

    found = list_actions(_ledger(), company=args.company, target_id=args.target,
                         limit=args.limit)
    if args.json:
        print(json.dumps([a.as_dict() for a in found], indent=2))
        return EXIT_OK
    if not found:
        print("no operator actions recorded")
    for a in found:
        print(f"{a.as_dict()['at']}  {a.who:<20} {a.action:<16} {a.target_kind} {a.target_id}"
              f"  why: {a.why}  → {a.outcome}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add the control subcommands to exportctl's argparse subparsers."""
    from export_lib.cli.commands import guarded, one_line

    def who_why(p: argparse.ArgumentParser) -> None:
        p.add_argument("--by", required=True, type=one_line,
                       help="who decides (kept in the audit trail)")
        p.add_argument("--why", required=True, type=one_line,
                       help="why (kept in the audit trail)")
        p.add_argument("--json", action="store_true")

    for name, text in (("pause", "stop new runs of a company or schedule (running ones "
                                 "finish; slots are recorded skipped)"),
                       ("unpause", "end a pause made with 'exportctl pause'")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--company", required=True)
        p.add_argument("--schedule", help="only this schedule id, e.g. acme/daily-spend")
        p.add_argument("--config", help="the current config directory, to check the ids "
                                        "(default: $EXPORT_CONFIG_DIR or ./dags/config)")
        who_why(p)
        p.set_defaults(func=functools.partial(guarded, cmd_pause))

    for name, metavar, text in (
            ("cancel", "RUN_KEY", "cancel a run that has not finished: nothing of it publishes, "
                                  "its open deliveries are cancelled"),
            ("revoke", "ARTIFACT|RUN_KEY", "revoke an artifact (id, or a run's newest): "
                                           "withdrawn where possible, never delivered again"),
            ("hold", "ARTIFACT|RUN_KEY", "keep an artifact or every artifact of a run from "
                                         "retention"),
            ("unhold", "ARTIFACT|RUN_KEY", "release a hold made with 'exportctl hold'")):
        p = sub.add_parser(name, help=text)
        p.add_argument("target", metavar=metavar)
        who_why(p)
        p.set_defaults(func=functools.partial(guarded, cmd_target))

    p = sub.add_parser("retention", help="delete artifacts older than retention_days (not "
                                         "under legal_hold, held, or waiting for a delivery); "
                                         "--dry-run only lists")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    p.add_argument("--config", help="the current config directory (default: "
                                    "$EXPORT_CONFIG_DIR or ./dags/config)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_retention))

    p = sub.add_parser("actions", help="the audit trail of operator actions, newest first")
    p.add_argument("--company")
    p.add_argument("--target", help="only actions on this run key, artifact or delivery id")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_actions))
