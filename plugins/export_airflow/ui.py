"""Export status page served by the API server (Browse → Export runs).

Support staff and analysts see, per run: the period in UTC and local time, state and reason,
deadline, artifact versions with checksums, and every delivery's state. Plugin FastAPI apps are
not authenticated by Airflow, so every route requires a logged-in user allowed to read DAGs
(Airflow's own dependency; the UI's JWT cookie authenticates the iframe).
"""

from __future__ import annotations

import html
from typing import Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse

app = FastAPI(title="Export runs", dependencies=[Depends(requires_access_dag("GET"))])


def _report(company: str | None, schedule: str | None, limit: int) -> list[dict[str, Any]]:
    from export_lib.cli.commands import runs_report

    return runs_report(company, schedule)[-limit:]


@app.get("/runs.json")
def runs_json(company: str | None = None, schedule: str | None = None,
              limit: int = Query(200, ge=1, le=5000)) -> list[dict[str, Any]]:
    return _report(company, schedule, limit)


def _cell(value: Any) -> str:
    return f"<td>{html.escape(str(value if value is not None else '–'))}</td>"


@app.get("/", response_class=HTMLResponse)
def page(company: str | None = None, schedule: str | None = None,
         limit: int = Query(200, ge=1, le=5000)) -> str:
    rows = []
    for r in reversed(_report(company, schedule, limit)):
        arts = ", ".join(f"v{a['version']} ({a['rows']} rows, {a['sha256'][:12]})"
                         for a in r["artifacts"])
        dels = ", ".join(f"{d['destination']}: {d['state']}" for d in r["deliveries"])
        rows.append("<tr>" + "".join(_cell(v) for v in (
            r["run_key"], r["state"], r["reason"], f"{r['window_start_utc']} → {r['window_end_utc']}",
            r["timezone"], arts, dels)) + "</tr>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Export runs</title><style>"
        "body{font-family:sans-serif;margin:1rem}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:4px 6px;text-align:left;vertical-align:top}"
        "</style></head><body><h2>Export runs</h2>"
        "<p>Newest first. Filter with <code>?company=&lt;id&gt;</code> or "
        "<code>?schedule=&lt;id&gt;</code>; JSON at <code>runs.json</code>.</p><table><tr>"
        "<th>run</th><th>state</th><th>reason</th><th>window (UTC)</th><th>timezone</th>"
        "<th>artifacts</th><th>deliveries</th></tr>" + "".join(rows) + "</table></body></html>"
    )
