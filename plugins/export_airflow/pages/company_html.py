"""The company view's pages over the dicts of ``export_lib.views.company`` (``company_ui`` builds
them): the markup is in ``templates/`` (``companies.html``, ``company.html``,
``company_parts.html``, ``plan.html``), every value autoescaped; this module gives the templates
their rows of plain values. Change forms are drawn only for a user who may change the company's
exports and only with a form token; the server checks both again.
"""

from __future__ import annotations

from typing import Any

from export_airflow.pages import obligations_html  # noqa: F401 - the pages' shared globals
from export_airflow.pages.render import ENV, render
from export_lib.views.company import PRESETS

PRESET_TEXT = {"yesterday": "yesterday", "last_week": "last week (Monday to Monday)",
               "last_month": "last month"}
ENV.globals.update(presets=PRESETS, preset_text=PRESET_TEXT)


def companies(rows: list[dict[str, str]]) -> str:
    return render("companies.html", title="Export companies", rows=rows)


def _card(card: dict[str, Any]) -> dict[str, Any]:
    """A schedule's card and the rows of its three tables."""
    return {"card": card,
            "next_runs": [[r["slot_local"], r["slot_utc"], r["window_local"],
                           f"{r['window_start_utc']} → {r['window_end_utc']}",
                           r["deadline_local"], r["deadline_utc"]] for r in card["next_runs"]],
            "delivered": [[d["destination"], d.get("period") or "nothing delivered yet",
                           d.get("acknowledged_at_utc"), d.get("run_key")]
                          for d in card["last_delivered"]],
            "versions": [[v["config_version"] + (" (current)" if v["current"] else ""),
                          v["effective_from_utc"] or "the beginning", v["timing"]]
                         for v in card["versions"]]}


def _done(company: str, done: tuple[str | None, str | None]) -> dict[str, Any]:
    """After a change (``?done=…&run=…``): which change, and for Export now the run's DAG, run
    id and ledger key. The note's texts are fixed; only the run id from the address is shown."""
    what, run = done
    out: dict[str, Any] = {"what": what, "run": run}
    if what == "export-now" and run:
        from export_lib.config.manual import manual_run_key

        out.update(dag=f"manual_export__{company}", key=manual_run_key(company, run))
    return out


def company_page(data: dict[str, Any], token: str | None, *, note: str | None = None,
                 error: str | None = None, explained: list[dict[str, Any]] | None = None,
                 gaps: dict[str, Any] | None = None,
                 done: tuple[str | None, str | None] = (None, None)) -> str:
    company = data["company"]
    gap_rows = [[a["action"], a["schedule"], a["slot_utc"], a["recovery"], a["reason"]]
                for a in gaps["actions"]] if gaps is not None else []
    history = [[h["at_utc"], h["who"], h["action"], h["target"], h["outcome"], h["why"]]
               for h in data["history"]]
    return render("company.html", title=f"Company {company}", company=company, data=data,
                  token=token, note=note, error=error, explained=explained, gaps=gaps,
                  gap_rows=gap_rows, done=_done(company, done), history=history,
                  cards=[_card(c) for c in data["schedules"]])


HIDDEN = ("schedule", "export_hour", "interval_hours", "timezone", "cron")  # the plan's fields


def plan_page(company: str, plan: dict[str, Any], lines: list[str], form: dict[str, str],
              token: str | None, writable: bool) -> str:
    pairs = zip(plan["old_next_local"], plan["old_next"], plan["new_next_local"],
                plan["new_next"], strict=False)
    verb = "Apply (write the config file)" if writable else (
        "Show the change to commit (the config is read-only here: nothing is written)")
    return render(
        "plan.html", title=f"Plan for {plan['schedule']}", company=company, plan=plan,
        token=token, verb=verb, plan_text="\n".join(lines),
        hidden=[(k, v) for k, v in form.items() if k in HIDDEN],
        nexts=[[n + 1, *row] for n, row in enumerate(pairs)],
        periods=[[p["period"], p["slot"], p["timing"], p["outcome"]] for p in plan["periods"]])
