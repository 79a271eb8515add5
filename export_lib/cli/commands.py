"""``exportctl`` subcommands over the ledger: ``run``, ``runs``, ``release``, ``requeue``,
``ledger upgrade|gc``, ``demo seed``.

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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_lib.errors import STORAGE_FULL_PREFIX, ConfigError, ExportError, WindowError
from export_lib.periods.instants import format_instant, parse_instant, parse_since

if TYPE_CHECKING:
    from export_lib.pipeline.results import RunOutcome

EXIT_USAGE = 2


def one_line(text: str) -> str:
    """argparse type of ``--by``/``--why``/``--reason``: text kept in the audit trail, shown in
    logs and on the obligations page, so one line of printable characters."""
    from export_lib.config.text import control_char

    found = control_char(text)
    if found:
        raise argparse.ArgumentTypeError(f"contains a control character ({found}); write one line")
    return text


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_instant(text: str, flag: str) -> datetime:
    return parse_instant(text, flag)


def current_catalog(config: str | None):
    """The current config (``--config``, ``$EXPORT_CONFIG_DIR`` or ./dags/config), or None
    (retention and ``ledger gc`` then keep everything, saying why)."""
    from export_lib import settings
    from export_lib.ledger.seniority import open_catalog

    directory = config or settings.config_dir()
    if directory is None and Path("dags/config").is_dir():
        directory = "dags/config"
    return open_catalog(directory) if directory else None


def run_one(config_dir: str, schedule_id: str, slot_text: str, *, now: datetime,
            regenerate: bool = False) -> RunOutcome:
    """Start → render → publish → deliver one export; idempotent on the run key unless
    ``regenerate`` (a new artifact version, delivered again).

    The start policies are the DAG's (``pipeline.start_run``): a paused company's slot is
    skipped, a late start follows ``late_start``, with the same recorded reason as in Airflow.
    """
    from export_lib.config.loader import allowlist
    from export_lib.ledger import open_ledger
    from export_lib.ledger.runs import render_lease
    from export_lib.ledger.seniority import open_catalog
    from export_lib.periods.slots import require_slot
    from export_lib.pipeline import (
        ArtifactLine,
        DeliveryLine,
        Rendered,
        RenderSkipped,
        RunContext,
        RunOutcome,
        deliver_run,
        publish_run,
        render_run,
        schedule_of,
        start_run,
    )
    from export_lib.storage.stores import open_store

    try:
        schedule = open_catalog(config_dir, only=schedule_id.split("/", 1)[0]).schedule(schedule_id)
    except ConfigError:
        # An unknown id is a usage error (exit 2), like an off-schedule slot. Ask the whole
        # catalog, so the suggestions span every company (a mistyped company too).
        try:
            schedule = open_catalog(config_dir).schedule(schedule_id)
        except ConfigError as exc:
            raise WindowError(str(exc)) from exc
    slot = require_slot(schedule.timing, _parse_instant(slot_text, "--slot"), schedule_id)
    ledger, store = open_ledger(), open_store()
    ledger.ensure_schema()
    ctx = RunContext(origin="cli", trigger="cli")
    started = start_run(ledger, schedule, slot, now=now, ctx=ctx, regenerate=regenerate)
    key = started.run_key
    outcome = RunOutcome(run_key=key, state=started.state,
                         window_start_utc=format_instant(started.window.start),
                         window_end_utc=format_instant(started.window.end))
    if started.skip_reason:
        return outcome.model_copy(update={"skipped": started.skip_reason})
    # Another attempt holding the run (Airflow, a second exportctl) is waited for, bounded:
    # it publishes (its artifact is ours) or its lease lapses (a killed worker) and we take over.
    rendered = render_run(ledger, store, key, now=now, ctx=ctx, regenerate=regenerate,
                          wait=render_lease() + timedelta(seconds=10),
                          allowlist=allowlist(config_dir))
    if isinstance(rendered, RenderSkipped):
        return outcome.model_copy(update={"state": ledger.get_run(key).state,
                                          "skipped": rendered.skipped})
    fresh = rendered if isinstance(rendered, Rendered) else None
    published = publish_run(ledger, store, key, fresh.attempt_id if fresh else None, now=now,
                            columns=list(fresh.columns) if fresh else None)
    deliveries = [deliver_run(ledger, key, dest.id, now=now, config_dir=config_dir)
                  for dest in schedule_of(ledger.get_run(key)).destinations]
    artifact = ledger.latest_artifact(key)
    if published.created and artifact.schema_change:  # ADR 0025: say so, not only in the log
        outcome = outcome.model_copy(update={"warnings": (
            f"published v{artifact.version} under a changed schema (schema_policy "
            f"{artifact.schema_change}, schema major {artifact.schema_major}): "
            f"{'; '.join((artifact.schema_diff or '').splitlines())}",)})
    return outcome.model_copy(update={
        "state": ledger.get_run(key).state,
        "artifact": ArtifactLine(uri=published.uri, version=published.version,
                                 sha256=published.sha256, rows=published.rows),
        "deliveries": tuple(DeliveryLine(destination=d.destination, state=d.state)
                            for d in deliveries),
    })


def cmd_run(args: argparse.Namespace) -> int:
    result = run_one(args.config_dir, args.schedule, args.slot, now=_now(),
                     regenerate=args.regenerate)
    for warning in result.warnings:
        print(f"exportctl: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_xcom(), indent=2))
    else:
        art = result.artifact
        print(f"run {result.run_key}: {result.state}")
        print(f"  window   {result.window_start_utc} → {result.window_end_utc}")
        if result.skipped:
            print(f"  skipped  {result.skipped}")
        if art:
            print(f"  artifact v{art.version} {art.uri} ({art.rows} rows, sha256 {art.sha256})")
        for d in result.deliveries:
            print(f"  delivery {d.destination}: {d.state}")
    return 0


def _nothing_found(args: argparse.Namespace) -> str:
    """What an empty answer means: nothing in the ledger, or nothing that matches."""
    what = ("missed runs (deadline passed, nothing delivered)" if args.missed and not args.late
            else "late runs (delivered after the deadline)" if args.late and not args.missed
            else "missed or late runs" if args.missed else "runs")
    scope = [f"--{name.replace('_', '-')} {value}" for name, value in (
        ("company", args.company), ("schedule", args.schedule), ("state", args.state),
        ("since", args.since), ("until", args.until)) if value]
    if not scope and not (args.missed or args.late or args.unresolved):
        return "no runs recorded yet"
    return f"no {what}" + (f" for {' '.join(scope)}" if scope else "")


def cmd_runs(args: argparse.Namespace) -> int:
    from export_lib.ledger import open_ledger
    from export_lib.views.reports import run_filter, runs_page

    now = _now()  # the one reading of the clock: --since 48h and every verdict measure from it
    wanted = run_filter(company=args.company, schedule_id=args.schedule, state=args.state,
                        since=args.since and parse_since(args.since, now, "--since"),
                        until=args.until and _parse_instant(args.until, "--until"),
                        unresolved_deliveries=args.unresolved, missed=args.missed,
                        late=args.late, limit=args.limit, offset=args.offset)
    ledger = open_ledger()
    ledger.ensure_schema()
    page = runs_page(ledger.engine, wanted, now=now, risk=_risk_rules(ledger, args.config, now))
    shown_to = page.offset + len(page.runs)
    if page.total > shown_to:
        print(f"showing runs {page.offset + 1}-{shown_to} of {page.total}, newest first; "
              f"the next page: --offset {shown_to}", file=sys.stderr)
    if args.json:
        print(json.dumps(list(page.runs), indent=2))
        return 0
    if not page.runs:
        print(_nothing_found(args) if page.total == 0 else "no runs on this page")
        return 0
    print(f"{'RUN':<55} {'STATE':<10} {'DEADLINE':<20} {'DELIVERED AT':<20} {'LATE BY':<9} "
          f"{'RISK':<8} WINDOW / ARTIFACTS / DELIVERIES")
    for r in page.runs:
        versions = ", ".join(f"v{a['version']} {a['sha256'][:12]}" for a in r["artifacts"]) or "-"
        dels = ", ".join(f"{d['destination']}={d['state']}" for d in r["deliveries"]) or "-"
        late = (f"{r['late_by_minutes']} min" if r["deadline_status"] in ("late", "overdue")
                else "-")
        if r["deadline_status"] == "overdue":
            late += " (overdue)"
        if r["deadline_status"] in ("late", "overdue") and not r["tracked"]:
            late += " (not tracked)"  # due before the schedule was deployed (ADR 0029)
        print(f"{r['run_key']:<55} {r['state']:<10} {r['deadline_utc'] or '-':<20} "
              f"{r['delivered_at_utc'] or '-':<20} {late:<9} "
              f"{'AT RISK' if r['at_risk'] else '-':<8} {r['window_start_utc']} → "
              f"{r['window_end_utc']}  artifacts: {versions}  deliveries: {dels}")
        if r["state"] == "failed" and (r["reason"] or "").startswith(STORAGE_FULL_PREFIX):
            print(f"  waiting on storage: {r['reason'][len(STORAGE_FULL_PREFIX):]}")
    return 0


def _risk_rules(ledger: Any, config: str | None, now: datetime) -> dict[str, Any] | None:
    """Each configured schedule's risk rule (its ``at_risk`` and median delivery time); None
    (every run at half its deadline) when there is no readable config, said on stderr."""
    from export_lib.views.risk import risk_rules

    try:
        catalog = current_catalog(config)
    except ConfigError as exc:
        print(f"at risk: the config cannot be read ({exc}); every run's risk point is half its "
              "deadline", file=sys.stderr)
        return None
    return risk_rules(ledger.engine, catalog.schedules, now=now) if catalog else None


def cmd_ledger(args: argparse.Namespace) -> int:
    from export_lib.ledger import open_ledger
    from export_lib.ledger.database import masked

    ledger = open_ledger()
    if args.action == "upgrade":
        before, after = ledger.upgrade()
        print(f"ledger {masked(ledger.url)} is at schema revision {after}" + (
            " (it was already)" if before == after else f" (was {before or 'empty'})"))
        return 0
    from export_lib.pipeline import collect_staging_garbage
    from export_lib.storage.stores import open_store

    ledger.ensure_schema()
    report = collect_staging_garbage(ledger, open_store(), current_catalog(args.config))
    if args.json:
        print(json.dumps(report.as_xcom(), indent=2))
    else:
        for item in report.cleaned:
            print(f"deleted {item.uri} (attempt {item.attempt_id[:12]} of {item.run_key})")
        for held in report.held:
            print(f"kept {held.uri} ({held.run_key}): {held.reason}")
        for kept in report.kept:
            print(f"kept {kept.uri}: {kept.error}", file=sys.stderr)
        print(f"{len(report.cleaned)} staging object(s) cleaned, {len(report.held)} kept "
              f"(held), {len(report.kept)} not deletable")
    return 1 if report.kept else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from export_lib.source.connections import get_connection
    from export_lib.source.demo import seed_source

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
    from export_lib.ledger.controls import Action, record_action

    now, run = _now(), ledger.get_run(args.run_key)
    ledger.release(args.run_key, now, who=args.by)
    record_action(ledger, Action(at=now, who=args.by, action="release", target_kind="run",
                                 target_id=args.run_key, why="released with exportctl",
                                 changed=True, outcome="released: the held run may export",
                                 company=run.company, schedule_id=run.schedule_id))
    print(f"run {args.run_key} released by {args.by}: clear its resolve_window task to export it")
    return 0


def cmd_requeue(args: argparse.Namespace) -> int:
    """An operator's decision to retry deliveries that gave up: requeue, then deliver now."""
    import getpass

    from export_lib import settings
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import deliver_run, requeue_deliveries

    ledger = open_ledger()
    if ledger.get_run(args.run_key) is None:
        raise WindowError(f"run {args.run_key} is not in the ledger; see 'exportctl runs'")
    now = _now()
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no login name in this environment (a bare container)
        login = "unknown user"
    who = args.by or f"{login} via exportctl"
    requeued = requeue_deliveries(ledger, args.run_key, destination_id=args.destination, who=who,
                                  why=args.reason, now=now)
    if not requeued:
        target = f"destination {args.destination}" if args.destination else "any destination"
        print(f"exportctl: nothing to requeue: no delivery of {args.run_key} to {target} is "
              "exhausted or refused (see 'exportctl runs --unresolved')", file=sys.stderr)
        return 1
    config_dir = args.config or settings.config_dir()
    if config_dir is None and Path("dags/config").is_dir():
        config_dir = "dags/config"
    failed = 0
    for item in requeued:
        print(f"requeued {item.delivery_id} to {item.destination_id} (was {item.was}) by {who}")
        if args.no_deliver:
            continue
        try:
            outcome = deliver_run(ledger, args.run_key, item.destination_id, now=now,
                                  config_dir=config_dir)
        except ExportError as exc:
            failed += 1
            print(f"  delivery to {item.destination_id} failed again: {type(exc).__name__}: "
                  f"{exc}", file=sys.stderr)
            continue
        print(f"  delivered to {item.destination_id}: {outcome.state} ({outcome.receipt})")
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ledger subcommands to exportctl's argparse subparsers."""
    p = sub.add_parser("run", help="run one export end to end (idempotent on the run key)")
    p.add_argument("config_dir")
    p.add_argument("--schedule", required=True,
                   help="schedule id as printed by 'exportctl preview', e.g. acme/daily-spend "
                        "or acme/facebook/primary")
    p.add_argument("--slot", required=True, help="the slot (ISO 8601; no offset means UTC)")
    p.add_argument("--regenerate", action="store_true",
                   help="export the period again: a new artifact version even when it was "
                        "already delivered (under this slot or an earlier timing)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_run))

    p = sub.add_parser("runs", help="list runs (newest slot first) with artifacts, deliveries "
                                     "and deadline verdicts")
    p.add_argument("--company")
    p.add_argument("--schedule")
    p.add_argument("--state", help="only runs in this state (e.g. failed, skipped, ready)")
    p.add_argument("--since", help="only slots at or after this: a duration back from now "
                                   "(48h, 7d, 90m) or an instant (ISO 8601, e.g. 2026-03-29)")
    p.add_argument("--until", help="only slots before this instant (ISO 8601)")
    p.add_argument("--unresolved", action="store_true",
                   help="only runs with a delivery that is not acknowledged")
    p.add_argument("--missed", action="store_true",
                   help="only runs that missed their deadline: it passed with nothing delivered "
                        "(failed, held and still-running runs included; skipped and cancelled "
                        "ones owe nothing). With --late: every deadline (SLA) miss. Periods "
                        "due before the schedule was first deployed are not tracked: never "
                        "listed. Slots with no run at all (an outage): 'exportctl audit "
                        "--dry-run'")
    p.add_argument("--late", action="store_true",
                   help="only runs first delivered after their deadline (tracked periods only, "
                        "as --missed)")
    p.add_argument("--limit", type=int, default=500, help="runs per page (1-500, default 500)")
    p.add_argument("--config", help="the config directory for each export's at_risk setting "
                                    "(default: $EXPORT_CONFIG_DIR or ./dags/config)")
    p.add_argument("--offset", type=int, default=0, help="skip this many runs (next page)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=functools.partial(guarded, cmd_runs))

    p = sub.add_parser("release", help="let a run held by late_start=hold export anyway")
    p.add_argument("run_key")
    p.add_argument("--by", default="operator", type=one_line,
                   help="who decided (kept in the run's history)")
    p.set_defaults(func=functools.partial(guarded, cmd_release))

    p = sub.add_parser("requeue", help="retry a run's exhausted or refused deliveries now "
                                        "(recorded as an operator action)")
    p.add_argument("run_key")
    p.add_argument("--destination", help="only this destination id (default: every one that "
                                         "is exhausted or refused)")
    p.add_argument("--by", type=one_line, help="who decided (default: your login name)")
    p.add_argument("--reason", default="requeued with exportctl", type=one_line,
                   help="why (kept in the run's history)")
    p.add_argument("--config", help="the current config directory, for the owner's "
                                    "authorisation check (default: $EXPORT_CONFIG_DIR or "
                                    "./dags/config)")
    p.add_argument("--no-deliver", action="store_true",
                   help="only requeue; clear the deliver task in Airflow to deliver")
    p.set_defaults(func=functools.partial(guarded, cmd_requeue))

    p = sub.add_parser("ledger", help="ledger maintenance: 'upgrade' the schema, 'gc' deletes "
                                          "staging objects of abandoned/failed attempts (not "
                                          "those retention's holds keep)")
    p.add_argument("action", choices=["upgrade", "gc"])
    p.add_argument("--config", help="gc: the current config directory, for legal_hold "
                                    "(default: $EXPORT_CONFIG_DIR or ./dags/config; without "
                                    "one nothing is deleted)")
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
