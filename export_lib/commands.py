"""``exportctl`` subcommands over the ledger: ``run``, ``runs``, ``ledger upgrade|gc``, ``demo seed``.

They call the same pipeline functions as the Airflow operators. Ledger, sources and stores come
from the environment (``EXPORT_LEDGER_URL``, ``AIRFLOW_CONN_<ID>``, ``EXPORT_ARTIFACT_ROOT``);
with nothing set, the embedded defaults of ``make run`` apply, so
``.venv/bin/exportctl run dags/config --schedule acme/daily-spend --slot ...`` works right after
``make setup``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from export_lib.errors import ConfigError, ExportError, WindowError

EXIT_USAGE = 2


def _z(iso: str) -> str:
    return iso.replace("+00:00", "Z")


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_instant(text: str, flag: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise WindowError(f"{flag} {text!r} is not an ISO 8601 date-time "
                          "(e.g. 2026-03-29T05:00Z or 2026-03-29T07:00+02:00)") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def run_one(config_dir: str, schedule_id: str, slot_text: str, *, now: datetime) -> dict[str, Any]:
    """Register → render → publish → deliver one export; idempotent on the run key."""
    from export_lib.config import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, deliver_run, publish_run, render_run, resolve_run
    from export_lib.slots import require_slot
    from export_lib.storage import open_store

    try:
        schedule = load_catalog(config_dir, only=schedule_id.split("/", 1)[0]).schedule(schedule_id)
    except ConfigError:
        # An unknown id is a usage error (exit 2), like an off-schedule slot. Ask the whole
        # catalog, so the suggestions span every company (a mistyped company too).
        try:
            schedule = load_catalog(config_dir).schedule(schedule_id)
        except ConfigError as exc:
            raise WindowError(str(exc)) from exc
    slot = require_slot(schedule.timing, _parse_instant(slot_text, "--slot"), schedule_id)
    ledger, store = open_ledger(), open_store()
    ledger.ensure_schema()
    ctx = RunContext(origin="cli", trigger="cli")
    resolved = resolve_run(ledger, schedule, slot, now=now, ctx=ctx)
    key = resolved["run_key"]
    rendered = render_run(ledger, store, key, now=now, ctx=ctx)
    published = publish_run(ledger, store, key, rendered.get("attempt_id") if rendered["rendered"]
                            else None, now=now, columns=rendered.get("columns"))
    run = ledger.get_run(key)
    from export_lib.pipeline import schedule_of

    deliveries = [deliver_run(ledger, key, dest.id, now=now, config_dir=config_dir)
                  for dest in schedule_of(run).destinations]
    return {
        "run_key": key, "state": ledger.get_run(key).state,
        "window_start_utc": _z(resolved["window_start"]), "window_end_utc": _z(resolved["window_end"]),
        "artifact": {k: published[k] for k in ("uri", "version", "sha256", "rows")},
        "deliveries": [{"destination": d["destination"], "state": d["state"]} for d in deliveries],
    }


def cmd_run(args: argparse.Namespace) -> int:
    result = run_one(args.config_dir, args.schedule, args.slot, now=_now())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        art = result["artifact"]
        print(f"run {result['run_key']}: {result['state']}")
        print(f"  window   {result['window_start_utc']} → {result['window_end_utc']}")
        print(f"  artifact v{art['version']} {art['uri']} ({art['rows']} rows, sha256 {art['sha256']})")
        for d in result["deliveries"]:
            print(f"  delivery {d['destination']}: {d['state']}")
    return 0


def runs_report(company: str | None, schedule_id: str | None) -> list[dict[str, Any]]:
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import list_deliveries

    ledger = open_ledger()
    ledger.ensure_schema()
    out = []
    for run in ledger.list_runs(company, schedule_id):
        out.append({
            "run_key": run.run_key, "state": run.state, "reason": run.reason,
            "company": run.company, "schedule": run.schedule_id,
            "window_start_utc": run.window_start.isoformat().replace("+00:00", "Z"),
            "window_end_utc": run.window_end.isoformat().replace("+00:00", "Z"),
            "timezone": run.timezone, "config_version": run.config_version,
            "artifacts": [{"version": a.version, "sha256": a.sha256, "uri": a.uri, "rows": a.rows,
                           "supersedes": a.supersedes} for a in ledger.artifacts(run.run_key)],
            "deliveries": list_deliveries(ledger, run.run_key),
        })
    return out


def cmd_runs(args: argparse.Namespace) -> int:
    report = runs_report(args.company, args.schedule)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if not report:
        print("no runs recorded yet")
    for r in report:
        versions = ", ".join(f"v{a['version']} {a['sha256'][:12]}" for a in r["artifacts"]) or "-"
        dels = ", ".join(f"{d['destination']}={d['state']}" for d in r["deliveries"]) or "-"
        print(f"{r['run_key']:<55} {r['state']:<10} {r['window_start_utc']} → "
              f"{r['window_end_utc']}  artifacts: {versions}  deliveries: {dels}")
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    from export_lib.ledger import open_ledger
    from export_lib.ledger.database import masked

    ledger = open_ledger()
    if args.action == "upgrade":
        ledger.upgrade()
        print(f"ledger {masked(ledger.url)} is at the newest schema")
        return 0
    from export_lib.pipeline import collect_staging_garbage
    from export_lib.storage import open_store

    ledger.ensure_schema()
    report = collect_staging_garbage(ledger, open_store())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for item in report["cleaned"]:
            print(f"deleted {item['uri']} (attempt {item['attempt_id'][:12]} of {item['run_key']})")
        for item in report["kept"]:
            print(f"kept {item['uri']}: {item['error']}", file=sys.stderr)
        print(f"{len(report['cleaned'])} staging object(s) cleaned, {len(report['kept'])} kept")
    return 1 if report["kept"] else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from export_lib.connections import get_connection
    from export_lib.demo import seed_source

    conn = get_connection("demo_source")
    companies = sorted(p.stem for p in Path(args.config).glob("*.yaml") if p.stem != "defaults")
    added = seed_source(conn, companies, now=_now(), days=args.days)
    print(f"demo source {conn.masked_uri()}: {added} new rows for {', '.join(companies)}")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    """An operator's decision to export a run held by ``late_start: hold``."""
    from export_lib.ledger import open_ledger

    ledger = open_ledger()
    if ledger.get_run(args.run_key) is None:
        raise WindowError(f"run {args.run_key} is not in the ledger; see 'exportctl runs'")
    ledger.release(args.run_key, _now(), who=args.by)
    print(f"run {args.run_key} released by {args.by}: clear its resolve_window task to export it")
    return 0


def register(sub: Any) -> None:
    """Add the ledger subcommands to exportctl's argparse subparsers."""
    p = sub.add_parser("run", help="run one export end to end (idempotent on the run key)")
    p.add_argument("config_dir")
    p.add_argument("--schedule", required=True,
                   help="schedule id as printed by 'exportctl preview', e.g. acme/daily-spend "
                        "or acme/facebook/primary")
    p.add_argument("--slot", required=True, help="the slot (ISO 8601; no offset means UTC)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_run))

    p = sub.add_parser("runs", help="list runs with artifacts and deliveries")
    p.add_argument("--company")
    p.add_argument("--schedule")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_runs))

    p = sub.add_parser("release", help="let a run held by late_start=hold export anyway")
    p.add_argument("run_key")
    p.add_argument("--by", default="operator", help="who decided (kept in the run's history)")
    p.set_defaults(func=functools.partial(guarded, cmd_release))

    p = sub.add_parser("ledger", help="ledger maintenance: 'upgrade' the schema, 'gc' deletes "
                                          "staging objects of abandoned/failed attempts")
    p.add_argument("action", choices=["upgrade", "gc"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_ledger))

    p = sub.add_parser("demo", help="embedded demo data")
    p.add_argument("action", choices=["seed"])
    p.add_argument("--config", default="dags/config")
    p.add_argument("--days", type=int, default=21)
    p.set_defaults(func=functools.partial(guarded, cmd_demo))


def guarded(func, args: argparse.Namespace) -> int:
    """Run a subcommand; export errors become one clear line and exit code, never a traceback."""
    try:
        return func(args)
    except WindowError as exc:
        print(f"exportctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ExportError as exc:
        print(f"exportctl: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
