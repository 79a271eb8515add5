"""``exportctl schema <company>/<export>``: a schedule's schema contract and its history.

The current contract (the newest published schema: its columns, fingerprint and major version)
and every earlier one, oldest first, with the change that made it (``initial``, ``warn``,
``new_major``), its diff, the first period and run published under it and when (ADR 0025).
The ledger is ``EXPORT_LEDGER_URL``'s; the schedule's ``schema_policy`` is read from the
current config (``--config``, ``$EXPORT_CONFIG_DIR`` or ./dags/config) when there is one.
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from export_lib.errors import ConfigError, WindowError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``schema`` to exportctl's subcommands."""
    from export_lib.cli.commands import guarded

    p = sub.add_parser("schema", help="a schedule's schema contract and its history",
                       description="Show the schema contract of SCHEDULE (e.g. acme/daily-spend"
                       " or acme/google-ads/primary): the columns, types and nullability of its "
                       "published files, the fingerprint and major version, and every earlier "
                       "contract with what changed. Exit 2 for a schedule neither the config nor"
                       " the ledger knows.")
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("--config", help="the current config directory, for the schedule's "
                                    "schema_policy (default: $EXPORT_CONFIG_DIR or ./dags/config)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=functools.partial(guarded, cmd_schema))


def cmd_schema(args: argparse.Namespace) -> int:
    from export_lib.cli.commands import current_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline.schema_contract import contract_history

    ledger = open_ledger()
    ledger.ensure_schema()
    entries = contract_history(ledger, args.schedule)
    policy, unknown = _policy(current_catalog(args.config), args.schedule)
    if unknown and not entries:
        # An unknown id is a usage error (exit 2 through guarded), as for exportctl run.
        raise WindowError(f"{unknown} (and the ledger has no schema contract for it)")
    report: dict[str, Any] = {
        "schedule": args.schedule, "schema_policy": policy,
        "current": entries[-1].as_json() if entries else None,
        "history": [e.as_json() for e in entries]}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("\n".join(_text(args.schedule, policy, entries, unknown)))
    return 0


def _policy(catalog: Any, schedule_id: str) -> tuple[str | None, str | None]:
    """(the schedule's schema_policy in the current config, why it is not known there)."""
    if catalog is None:
        return None, f"no config directory to find schedule {schedule_id!r} in"
    try:
        return catalog.schedule(schedule_id).policies.schema_policy, None
    except ConfigError as exc:
        return None, str(exc)


def _text(schedule_id: str, policy: str | None, entries: list[Any],
          unknown: str | None) -> list[str]:
    policy_text = f"schema_policy {policy}" if policy else "schema_policy unknown (no config)"
    if not entries:
        return [f"{schedule_id}: no schema published yet ({policy_text}); its first published "
                "file's schema becomes the contract"]
    current = entries[-1]
    lines = [f"{schedule_id}: schema contract {current.fingerprint[:12]}, major "
             f"{current.major} ({policy_text})",
             f"  since {current.period} (run {current.run_key}, recorded "
             f"{current.recorded_at:%Y-%m-%dT%H:%MZ})"]
    if unknown:
        lines.append(f"  note: {unknown}")
    width = max(len(c.name) for c in current.schema.columns)
    lines += [f"  {c.name:<{width}}  {c.type:<16} {'nullable' if c.nullable else 'not null'}"
              for c in current.schema.columns]
    lines += ["", "history (oldest first):"]
    for entry in entries:
        lines.append(f"  #{entry.seq} major {entry.major}  {entry.fingerprint[:12]}  "
                     f"{entry.change:<9}  first period {entry.period}  recorded "
                     f"{entry.recorded_at:%Y-%m-%dT%H:%MZ}  run {entry.run_key}")
        lines += [f"      {line}" for line in entry.diff]
    return lines
