"""Export status page served by the API server (Browse → Export runs).

Support staff and analysts see, per run, newest slot first: the period in the company's
timezone and the window in UTC, state and reason, the deadline with a verdict (on time, late by
how much, overdue), artifact versions with checksums, and every delivery's state. Filters:
company, schedule, state, unresolved deliveries; pages of ``limit`` runs read in SQL
(``export_lib.views.reports``).

Per-tenant visibility: a reader sees only the companies whose DAGs Airflow's auth manager lets
them read (``get_authorized_dag_ids`` → companies, ``export_lib.views.visibility``); a reader
allowed every DAG sees every company. Plugin FastAPI apps are not authenticated by Airflow, so
every route — ``/docs`` and ``/openapi.json`` included — requires a logged-in user (Airflow's
own ``get_user``; the UI's JWT cookie authenticates the iframe), and a user who may read no
export DAG gets 403.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from export_airflow.pages.company_actions import router as company_changes
from export_airflow.pages.company_ui import router as company_router
from export_airflow.pages.obligations_ui import router as obligations_router
from export_airflow.pages.render import render
from export_airflow.pages.ui_access import Visible, visible_companies

# FastAPI's own /docs and /openapi.json would be public: they are served below, behind a login.
app = FastAPI(title="Export runs", docs_url=None, redoc_url=None, openapi_url=None)
# The obligations page and its actions (obligations_ui.py), on the same app under /exports.
app.include_router(obligations_router)
# The company view (company_ui.py): a customer's schedules, export time, Export now, why.
app.include_router(company_router)
app.include_router(company_changes)  # its POSTs (company_actions.py)
__all__ = ["app", "visible_companies"]

@app.get("/openapi.json", include_in_schema=False)
def openapi(_: frozenset[str] | None = Visible) -> JSONResponse:
    return JSONResponse(app.openapi())


@app.get("/docs", include_in_schema=False)
def docs(request: Request, _: frozenset[str] | None = Visible) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(openapi_url=f"{root}/openapi.json", title="Export runs API")


def _page(**filters: Any) -> Any:
    from export_airflow.runtime.ledger import server_ledger
    from export_lib.errors import ConfigError
    from export_lib.views.reports import run_filter, runs_page

    try:
        wanted = run_filter(**filters)
    except ConfigError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    ledger = server_ledger()  # one engine per api-server process, not per request
    ledger.ensure_schema()
    return runs_page(ledger.engine, wanted, now=datetime.now(UTC))


@app.get("/runs.json")
def runs_json(company: str | None = None, schedule: str | None = None, state: str | None = None,
              unresolved: bool = False, missed: bool = False, late: bool = False,
              limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0),
              visible: frozenset[str] | None = Visible) -> dict[str, Any]:
    """``missed``/``late``: as ``exportctl runs --missed/--late`` (ADR 0029)."""
    return _page(company=company, schedule_id=schedule, state=state,
                 unresolved_deliveries=unresolved, missed=missed, late=late, limit=limit,
                 offset=offset, visible_companies=visible).as_json()


def _deadline(r: dict[str, Any]) -> str:
    status = r["deadline_status"]
    # ADR 0029: a deadline that passed before the schedule was deployed is not counted.
    untracked = "" if r.get("tracked") else "; not tracked: due before the schedule was deployed"
    if status == "late":
        return f"late by {r['late_by_minutes']} min (due {r['deadline_utc']}){untracked}"
    if status == "overdue":
        return f"OVERDUE by {r['late_by_minutes']} min (due {r['deadline_utc']}){untracked}"
    if status in ("on_time", "pending"):
        return f"{status.replace('_', ' ')} (due {r['deadline_utc']})"
    return "–"


@app.get("/", response_class=HTMLResponse)
def page(company: str | None = None, schedule: str | None = None, state: str | None = None,
         unresolved: bool = False, limit: int = Query(50, ge=1, le=500),
         offset: int = Query(0, ge=0), visible: frozenset[str] | None = Visible) -> str:
    result = _page(company=company, schedule_id=schedule, state=state,
                   unresolved_deliveries=unresolved, limit=limit, offset=offset,
                   visible_companies=visible)
    rows = [[r["run_key"], r["state"], r["reason"], f"{r['period']} ({r['timezone']})",
             f"{r['window_start_utc']} → {r['window_end_utc']}", _deadline(r),
             ", ".join(f"v{a['version']} ({a['rows']} rows, {a['sha256'][:12]})"
                       for a in r["artifacts"]),
             ", ".join(f"{d['destination']}: {d['state']}" for d in r["deliveries"])]
            for r in result.runs]
    query = {k: v for k, v in {"company": company, "schedule": schedule, "state": state,
                               "unresolved": "true" if unresolved else None,
                               "limit": limit}.items() if v}
    nav = {"shown": (f"runs {offset + 1}–{offset + len(result.runs)} of {result.total}"
                     if result.runs else f"no runs match ({result.total} in all)"),
           "newer": urlencode({**query, "offset": max(0, offset - limit)}) if offset > 0
           else None,
           "older": urlencode({**query, "offset": offset + limit})
           if offset + len(result.runs) < result.total else None}
    q = {"company": company, "schedule": schedule, "state": state, "unresolved": unresolved}
    return render("runs.html", title="Export runs", q=q, nav=nav, rows=rows)
