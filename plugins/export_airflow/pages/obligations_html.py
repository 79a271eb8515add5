"""The obligations page and the run drill-down: plain HTML and CSS, no script.

The markup is in ``templates/`` (``obligations.html``, ``obligations_parts.html``, ``run.html``),
rendered by :mod:`export_airflow.pages.render` with every value autoescaped. This module holds
what the templates show as text (a square's tooltip, a badge's word) and the rows of the tables,
over the dicts of ``export_lib.views.obligations`` and ``export_lib.views.run_detail``. Colours
always come with words (the legend, the cell's letter and its tooltip), so the page reads without
colour too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from export_airflow.pages.render import ENV, macro, render
from export_lib.views.obligations import OUTCOMES, SLOT_ONLY

COLOURS = {
    "on_time": ("#2e7d32", "✓"), "late": ("#ef6c00", "L"), "missed": ("#c62828", "M"),
    "no_run": ("#7f0000", "✗"), "running": ("#1565c0", "R"), "waiting": ("#90caf9", "W"),
    "held": ("#6a1b9a", "H"), "released": ("#ab47bc", "r"), "skipped": ("#9e9e9e", "S"),
    "failed": ("#212121", "F"), "storage": ("#795548", "D"),
    "unresolved": ("#f9a825", "U"), "cancelled": ("#616161", "C"),
    "revoked": ("#4e342e", "V"), "due": ("#cfd8dc", "·"),
    "paused": ("#bdbdbd", "P"), "untracked": ("#e0e0e0", "–"),
}
AT_RISK_TEXT = ("at risk: not delivered and past its risk point (half the deadline, the "
                "median delivery time or at_risk.after), deadline still ahead")


def badge_text(outcome: str) -> str:
    """An outcome's word on its badge: the legend's text up to its explanation."""
    return {**OUTCOMES, **SLOT_ONLY}[outcome].split(":")[0].split(" (")[0]


def cell_facts(c: dict[str, Any]) -> dict[str, Any]:
    """A strip square's tooltip, its letter, whether it is at risk and the config version it
    starts (a blue bar), from one cell of ``schedule_strips``."""
    outcome = c["outcome"]
    tip = f"{c['slot_local']} ({c['slot_utc']}): {c.get('outcome_text') or outcome}"
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
    return {"tip": tip, "inner": inner, "risky": risky, "change": change}


def run_why(r: dict[str, Any]) -> str:
    """The run's reason where it explains the outcome (not "artifact v1" of a delivered run)."""
    return "" if r["outcome"] in ("on_time", "late", "running", "waiting", "untracked") \
        else r["reason"] or ""


ENV.globals.update(colours=COLOURS, outcome_texts={**OUTCOMES, **SLOT_ONLY},
                   at_risk_text=AT_RISK_TEXT, badge_text=badge_text, cell_facts=cell_facts,
                   run_why=run_why)


def legend() -> str:
    return str(macro("obligations_parts.html", "legend")())


def schedules_table(strips: list[dict[str, Any]]) -> str:
    return str(macro("obligations_parts.html", "schedules_table")(strips))


def _cell(c: dict[str, Any]) -> str:
    return str(macro("obligations_parts.html", "cell")(c))


def _choices(companies: list[str], schedules: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The filters' options, each list led by "any"."""
    anything = [("", "any")]
    return {"company": anything + [(c, c) for c in companies],
            "schedule": anything + [(s, s) for s in schedules],
            "state": anything + [(k, v.split(":")[0]) for k, v in OUTCOMES.items()]}


def _nav(page: dict[str, Any], q: dict[str, Any]) -> dict[str, Any]:
    """The runs' "n–m of total" line and the query strings of the newer and older pages."""
    first, total, shown = page["offset"], page["total"], len(page["runs"])
    keep = {k: v for k, v in q.items() if v}
    return {
        "shown": (f"runs {first + 1}–{first + shown} of {total}, newest first" if shown
                  else f"no run matches ({total} in all)"),
        "newer": urlencode({**keep, "offset": max(0, first - page["limit"])}) if first > 0
        else None,
        "older": urlencode({**keep, "offset": first + page["limit"]})
        if first + shown < total else None}


def obligations_page(data: dict[str, Any], q: dict[str, Any]) -> str:
    """The page: the legend, the filters (``q``: the request's), the schedules' strips and one
    page of runs; ``data`` is ``obligations_ui._obligations``'s."""
    now: datetime = data["now"]
    return render("obligations.html", title="Export obligations", now=now, q=q,
                  choices=_choices(data["companies"], data["schedule_ids"]),
                  schedules=data["schedules"], runs=data["runs"], nav=_nav(data["runs"], q))


def _run_tables(d: dict[str, Any]) -> dict[str, Any]:
    """The drill-down's tables as rows of plain values; each render attempt with the path of
    its Airflow task log when Airflow ran it."""
    from types import SimpleNamespace

    from export_lib.views.company import log_links

    attempts = []
    for a in d["attempts"]:
        (link,) = log_links([SimpleNamespace(**a)]) or [None]
        attempts.append({**a, "log": link["href"] if link else None})
    return {
        "attempts": attempts,
        "artifacts": [[a["version"], a["rows"], a["bytes"], a["sha256"],
                       f"v{a['supersedes']}" if a["supersedes"] else None,
                       "yes" if a["correction"] else "no", a["generated_at_utc"], a["uri"]]
                      for a in d["artifacts"]],
        "deliveries": [(x, [[h["attempt"], h["started_at_utc"], h["duration_ms"], h["outcome"],
                             h["error"], h["receipt"]] for h in x["history"]])
                       for x in d["deliveries"]],
        "events": [[e["at_utc"], e["from"], e["to"], e["detail"]] for e in d["events"]],
    }


def run_page(d: dict[str, Any], can: dict[str, Any], note: str | None,
             summary: str | None = None) -> str:
    """One run in full. ``can``: what the reader may do (``obligations_ui._actions``); ``note``:
    the line after an action; ``summary``: `exportctl explain`'s paragraph."""
    return render("run.html", title=f"Run {d['run_key']}", d=d, can=can, note=note,
                  summary=summary, tables=_run_tables(d))
