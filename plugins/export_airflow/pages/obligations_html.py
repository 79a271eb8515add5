"""HTML of the obligations page and the run drill-down: plain HTML and CSS, no script.

Small functions over the dicts of ``export_lib.views.obligations`` and
``export_lib.views.run_detail``; every value is escaped. Colours always come with words (the
legend, the cell's letter and its tooltip), so the page reads without colour too.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import urlencode

from export_lib.views.obligations import OUTCOMES, SLOT_ONLY

COLOURS = {
    "on_time": ("#2e7d32", "✓"), "late": ("#ef6c00", "L"), "missed": ("#c62828", "M"),
    "no_run": ("#7f0000", "✗"), "running": ("#1565c0", "R"), "waiting": ("#90caf9", "W"),
    "held": ("#6a1b9a", "H"), "released": ("#ab47bc", "r"), "skipped": ("#9e9e9e", "S"),
    "failed": ("#212121", "F"),
    "unresolved": ("#f9a825", "U"), "cancelled": ("#616161", "C"),
    "revoked": ("#4e342e", "V"), "due": ("#cfd8dc", "·"),
    "paused": ("#bdbdbd", "P"), "untracked": ("#e0e0e0", "–"),
}
STYLE = (
    "body{font-family:sans-serif;margin:1rem;color:#222}h2{margin:.2rem 0 .6rem}"
    "h3{margin:1.2rem 0 .4rem}table{border-collapse:collapse;font-size:13px;margin:.3rem 0}"
    "td,th{border:1px solid #ccc;padding:4px 6px;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}.strip{display:flex;gap:2px}.cell{display:inline-block;width:22px;"
    "height:22px;line-height:22px;text-align:center;color:#fff;font-weight:bold;font-size:12px;"
    "text-decoration:none;border-radius:3px}.badge{padding:1px 6px;border-radius:3px;color:#fff;"
    "white-space:nowrap}.legend span{margin-right:.8rem;white-space:nowrap}.note{background:"
    "#fff8e1;border:1px solid #f9a825;padding:6px 10px;margin:.5rem 0}.err{background:#ffebee;"
    "border-color:#c62828}form.inline{display:inline}code{font-size:12px}"
    "small{color:#555}.vchange{box-shadow:-3px 0 0 #1565c0;margin-left:3px}"
    + "".join(f".o-{k}{{background:{c}}}" for k, (c, _) in COLOURS.items())
    + ".o-waiting,.o-due,.o-paused,.o-untracked{color:#222}.o-untracked{border:1px solid #ccc}"
    + ".risk{outline:3px solid #ff6f00;outline-offset:1px}.o-at_risk{background:#ff6f00}"
)
AT_RISK_TEXT = ("at risk: not delivered and past its risk point (half the deadline, the "
                "median delivery time or at_risk.after), deadline still ahead")


def esc(value: Any) -> str:
    return html.escape("–" if value is None else str(value), quote=True)


def doc(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def badge(outcome: str) -> str:
    text = {**OUTCOMES, **SLOT_ONLY}[outcome].split(":")[0].split(" (")[0]
    return f"<span class='badge o-{outcome}' data-outcome='{outcome}'>{esc(text)}</span>"


def legend() -> str:
    items = "".join(f"<span><span class='cell o-{k}'>{COLOURS[k][1]}</span> {esc(v)}</span> "
                    for k, v in {**OUTCOMES, **SLOT_ONLY}.items())
    items += ("<span><span class='cell o-untracked'>✓</span> not tracked, delivered (a new "
              "schedule's first catch-up)</span> "
              "<span><span class='cell o-untracked vchange'>&nbsp;</span> a blue bar: a new "
              "config version (or timing) starts at this slot</span> "
              f"<span><span class='cell o-due risk'>!</span> {esc(AT_RISK_TEXT)}</span> ")
    return (f"<p class='legend'>{items}</p><p><small>Every time is shown in the company's local "
            "time and in UTC. A run is one export of one period; the deadline is when the "
            "customer must have it. “Late” is measured from the deadline to the first "
            "acknowledged delivery. “Not tracked” (grey) is a period whose deadline had "
            "already passed when the schedule was deployed (its first run was registered): a "
            "new schedule's first catch-up. It is never counted missed or late; hover it to "
            "see whether and when it was delivered. A period due after that is always tracked, "
            "so a catch-up after an outage still counts.</small></p>")


def filter_form(q: dict[str, Any], companies: list[str], schedules: list[str]) -> str:
    def select(name: str, options: list[tuple[str, str]]) -> str:
        opts = "".join(f"<option value='{esc(v)}'{' selected' if q.get(name) == v else ''}>"
                       f"{esc(t)}</option>" for v, t in [("", "any"), *options])
        return f"<select name='{name}' id='f-{name}'>{opts}</select>"

    return (
        "<form method='get' id='filters'>"
        f"company {select('company', [(c, c) for c in companies])} "
        f"schedule {select('schedule', [(s, s) for s in schedules])} "
        f"state {select('state', [(k, v.split(':')[0]) for k, v in OUTCOMES.items()])} "
        f"from <input type='date' name='since' id='f-since' value='{esc(q.get('since') or '')}'> "
        f"to <input type='date' name='until' id='f-until' value='{esc(q.get('until') or '')}'> "
        "<button type='submit' id='f-apply'>show</button> <a href='obligations'>clear</a></form>"
    )


def _cell(c: dict[str, Any]) -> str:
    outcome = c["outcome"]
    what = c.get("outcome_text") or outcome
    tip = f"{c['slot_local']} ({c['slot_utc']}): {what}"
    if c.get("lateness"):
        tip += f"; {c['lateness']}"
    if c.get("reason"):
        tip += f"; {c['reason']}"
    inner = COLOURS[outcome][1]
    if outcome == "untracked" and c.get("delivered_at_utc"):
        inner = "✓"  # delivered, without a verdict: grey, never counted late (ADR 0029)
    risky = bool(c.get("at_risk"))
    if risky:
        tip += f"; AT RISK since {c['risk_point_utc']} (deadline {c['deadline_utc']})"
        inner = "!"
    change = c.get("version_change")
    if change:  # a blue bar before the first slot of a new config version
        tip += f"; {change}"
    attrs = (f"class='cell o-{outcome}{' vchange' if change else ''}{' risk' if risky else ''}' "
             f"data-outcome='{outcome}' data-slot='{esc(c['slot_utc'])}' title='{esc(tip)}'"
             + (" data-at-risk='true'" if risky else "")
             + (f" data-version-change='{esc(change)}'" if change else ""))
    if c["kind"] == "run":
        return f"<a {attrs} href='obligations/run?{esc(urlencode({'key': c['run_key']}))}'>{inner}</a>"
    return f"<span {attrs}>{inner}</span>"


def schedules_table(strips: list[dict[str, Any]]) -> str:
    rows = []
    for s in strips:
        nxt = "<br>".join(f"{esc(n['local'])} <small>({esc(n['utc'])})</small>"
                          for n in s["next_runs"])
        paused = " <b>(company paused)</b>" if s["company_status"] == "paused" else ""
        rows.append(
            f"<tr data-schedule='{esc(s['schedule'])}'><td>{esc(s['company'])}{paused}</td>"
            f"<td>{esc(s['schedule'])}<br><small>{esc(s['timing'])}</small></td>"
            f"<td>{esc(s['owner'])}</td>"
            f"<td><div class='strip'>{''.join(_cell(c) for c in s['strip'])}</div>"
            "<small>oldest → newest</small></td>"
            f"<td>{esc(s['last_delivered_period'] or 'nothing delivered yet')}</td>"
            f"<td>{_due(s.get('due'))}</td><td>{nxt}</td></tr>")
    if not rows:
        return "<p>No schedule matches.</p>"
    return ("<table id='schedules'><tr><th>company</th><th>schedule</th><th>owner</th>"
            "<th>recent slots, whatever the date filter (hover or click a square)</th>"
            "<th>last period delivered</th><th>due in the last 24 h</th>"
            "<th>next runs (local, UTC)</th></tr>" + "".join(rows) + "</table>")


def _due(due: dict[str, Any] | None) -> str:
    """The schedule's due slots from its timetable (ADR 0020): an outage shows as missing."""
    if not due:
        return "–"
    parts = [f"<span data-due='expected'>{due['expected']}</span> expected",
             f"<span data-due='missing'>{due['missing']}</span> without a run",
             f"<span data-due='missed'>{due['missed']}</span> missed",
             f"<span data-due='at_risk'>{due['at_risk']}</span> at risk"]
    style = " class='badge o-at_risk'" if due["at_risk"] or due["missing"] else ""
    return f"<span{style}>{', '.join(parts)}</span>"


def _why(r: dict[str, Any]) -> str:
    """The run's reason where it explains the outcome (not "artifact v1" of a delivered run)."""
    return "" if r["outcome"] in ("on_time", "late", "running", "waiting", "untracked") \
        else r["reason"] or ""


def _risk_badge(r: dict[str, Any]) -> str:
    if not r.get("at_risk"):
        return ""
    return (f" <span class='badge o-at_risk' data-at-risk='true' title='{esc(AT_RISK_TEXT)}'>"
            f"at risk since {esc(r['risk_point_utc'])}</span>")


def runs_table(page: dict[str, Any], q: dict[str, Any]) -> str:
    rows = []
    for r in page["runs"]:
        link = f"obligations/run?{esc(urlencode({'key': r['run_key']}))}"
        rows.append(
            f"<tr data-run='{esc(r['run_key'])}' data-outcome='{r['outcome']}'>"
            f"<td>{badge(r['outcome'])}{_risk_badge(r)}</td>"
            f"<td><a href='{link}'>{esc(r['period'])}</a><br><small>{esc(r['run_key'])}</small></td>"
            f"<td>{esc(r['slot_local'])}<br><small>{esc(r['slot_utc'])}</small></td>"
            f"<td>{esc(r['deadline_utc'])}<br><small>{esc(r['lateness'] or '')}</small></td>"
            f"<td>{esc(r['delivered_at_utc'])}</td><td>{esc(_why(r))}</td></tr>")
    first, total = page["offset"], page["total"]
    nav = []
    keep = {k: v for k, v in q.items() if v}
    if first > 0:
        back = urlencode({**keep, "offset": max(0, first - page["limit"])})
        nav.append(f"<a id='newer' href='?{esc(back)}'>← newer</a>")
    if first + len(page["runs"]) < total:
        nav.append(f"<a id='older' href='?{esc(urlencode({**keep, 'offset': first + page['limit']}))}'>"
                   "older →</a>")
    shown = (f"runs {first + 1}–{first + len(page['runs'])} of {total}, newest first"
             if page["runs"] else f"no run matches ({total} in all)")
    return (f"<p id='shown'>{shown} {' · '.join(nav)}</p>"
            "<table id='runs'><tr><th>what happened</th><th>period</th><th>slot (local, UTC)</th>"
            "<th>deadline (UTC)</th><th>first delivered (UTC)</th><th>why</th></tr>"
            + "".join(rows) + "</table>")


def table(headers: list[str], rows: list[list[Any]], ident: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table id='{ident}'><tr>{head}</tr>{body}</table>" if rows else "<p>none</p>"


def detail_body(d: dict[str, Any], actions_html: str, note: str | None,
                summary: str | None = None) -> str:
    facts = [
        ("what happened", badge(d["outcome"]) + f" {esc(d['outcome_text'])}"),
        ("reason", esc(d["reason"] or "")), ("company / schedule", esc(f"{d['company']} / "
                                                                   f"{d['schedule']}")),
        ("owner", esc(d["owner"])), ("period", esc(f"{d['period']} ({d['timezone']})")),
        ("window (UTC)", esc(f"{d['window_start_utc']} → {d['window_end_utc']}")),
        ("slot", esc(f"{d['slot_local']} ({d['slot_utc']})")),
        ("deadline (UTC)", esc(f"{d['deadline_utc']} {d['lateness'] or ''}")),
        ("first delivered (UTC)", esc(d["delivered_at_utc"])),
        ("config version", f"<code>{esc(d['config_version'])}</code>"),
        ("started by", esc(d["trigger"])),
    ]
    banner = f"<p class='note' id='note'>{esc(note)}</p>" if note else ""
    dels = []
    for x in d["deliveries"]:
        tried = table(["attempt", "started (UTC)", "ms", "outcome", "error", "receipt"],
                      [[h["attempt"], h["started_at_utc"], h["duration_ms"], h["outcome"],
                        h["error"], h["receipt"]] for h in x["history"]], f"da-{x['destination']}")
        dels.append(f"<h4>to {esc(x['destination'])} ({esc(x['type'])}), artifact "
                    f"v{esc(x['version'])}: {esc(x['state'])}</h4><p>target "
                    f"<code>{esc(x['target'])}</code>; {esc(x['attempts'])} attempt(s); "
                    f"acknowledged {esc(x['acknowledged_at_utc'])}; receipt "
                    f"<code>{esc(x['receipt'])}</code>; last error {esc(x['last_error'])}</p>"
                    + tried)
    return (
        f"<p><a href='../obligations'>← all obligations</a></p><h2>Run {esc(d['run_key'])}</h2>"
        + banner
        # The same paragraph as `exportctl explain` (export_lib/pipeline/explain.py).
        + (f"<p id='explain'><b>In one paragraph:</b> {esc(summary)}</p>" if summary else "")
        + "<table id='facts'>"
        + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in facts) + "</table>"
        + "<h3>What you can do</h3>" + actions_html
        + "<h3>Render attempts</h3>"
        + _attempts(d["attempts"])
        + "<h3>Artifact manifest</h3>"
        + table(["version", "rows", "bytes", "sha256", "supersedes", "correction", "generated (UTC)",
                 "file"],
                [[a["version"], a["rows"], a["bytes"], a["sha256"],
                  f"v{a['supersedes']}" if a["supersedes"] else None,
                  "yes" if a["correction"] else "no", a["generated_at_utc"], a["uri"]]
                 for a in d["artifacts"]], "artifacts")
        + "<h3>Deliveries</h3>" + ("".join(dels) or "<p>none yet</p>")
        + "<h3>History</h3>"
        + table(["at (UTC)", "from", "to", "what"],
                [[e["at_utc"], e["from"], e["to"], e["detail"]] for e in d["events"]], "events")
    )


def _attempts(attempts: list[dict[str, Any]]) -> str:
    """The render attempts, each linked to its Airflow task log when Airflow ran it."""
    from types import SimpleNamespace

    from export_lib.views.company import log_links

    if not attempts:
        return "<p>none</p>"
    rows = []
    for a in attempts:
        (link,) = log_links([SimpleNamespace(**a)]) or [None]
        by = (f"<a target='_top' class='log' href='{esc(link['href'])}'>{esc(a['origin'])}"
              " (task log)</a>" if link else esc(a["origin"]))
        rows.append(f"<tr><td>{esc(a['generation'])}</td><td>{esc(a['state'])}</td><td>{by}</td>"
                    + "".join(f"<td>{esc(a[k])}</td>" for k in (
                        "started_at_utc", "finished_at_utc", "rows", "error")) + "</tr>")
    return ("<table id='attempts'><tr><th>#</th><th>state</th><th>by</th><th>started (UTC)</th>"
            "<th>finished (UTC)</th><th>rows</th><th>error</th></tr>" + "".join(rows)
            + "</table>")
