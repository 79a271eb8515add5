"""The company view (Browse → Export companies; a tab on every export DAG and DAG run): a
customer's schedules, changing their export time, a one-off export, why a period is missing.

Pages: ``GET /exports/companies`` (the companies the reader may see) and ``GET
/exports/companies/<company>``; a DAG's or run's tab opens ``GET
/exports/companies/for-dag/<dag id>``, which sends the reader to the DAG's company. JSON, the
same data the page shows (listed in ``/exports/docs``): ``…/<company>/schedules.json``,
``plan.json`` (a timing change's plan, nothing written), ``window.json`` (a local period in
UTC), ``explain.json``, ``gaps.json``. Changes, each a POST (``company_actions``) answered in
JSON when asked for, else as the page: ``reschedule``, ``export-now``, ``recover``.

Who: the company's viewers read (``ui_access.Visible``; any other company is a 404 that says no
more than an unknown one); only those who may edit its DAGs (its operators) change anything,
each change with the same-origin check and a form token spent once (a replayed form is
refused). Bad input is a 422 naming the field and the fix; nothing is written then. The logic is
``export_lib`` (views.company, pipeline.reschedule_edit, pipeline.explain, pipeline.audit_apply,
config.manual); this module only wires it to Airflow.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from export_airflow.airflow_compat import get_user_dependency
from export_airflow.pages import company_html as ch
from export_airflow.pages.obligations_ui import _catalog_schedules, _ledger, _now, config_directory
from export_airflow.pages.ui_access import Visible, may_edit, secret
from export_lib import settings
from export_lib.errors import ActionTokenError, ConfigError, FormError
from export_lib.logfmt import get_logger

# The signed-in user, as Airflow's own API routes resolve it (not public: airflow_compat).
GetUserDep = get_user_dependency()

router = APIRouter(prefix="/companies", tags=["company view"])
log = get_logger(__name__)
COMPANY = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")


def company_schedules(company: str, visible: frozenset[str] | None) -> list[Any]:
    """The company's schedules, or 404 — the same answer for an unknown company and for one
    the reader may not see, so a user of another company learns nothing."""
    if not COMPANY.match(company or "") or len(company) > 64 or (
            visible is not None and company not in visible):
        raise HTTPException(status_code=404, detail="no company by that id that you may see")
    found = [s for s in _catalog_schedules() if s.company.id == company]
    if not found:
        raise HTTPException(status_code=404, detail="no company by that id that you may see")
    return found


def pick_schedule(schedules: list[Any], schedule_id: str | None, field: str = "schedule") -> Any:
    for s in schedules:
        if s.schedule_id == schedule_id:
            return s
    raise FormError(field, f"{(schedule_id or '')[:80]!r} is not an export of this company; "
                           f"choose one of {', '.join(s.schedule_id for s in schedules)}")


def _raw(company: str) -> dict[str, Any]:
    import yaml

    from export_lib.pipeline.reschedule_edit import company_path

    try:
        return yaml.safe_load(company_path(config_directory(), company).read_text()) or {}
    except (ConfigError, OSError, yaml.YAMLError):
        return {}  # the page still shows the timing; only "default" marks are unknown


def token_scope(company: str) -> str:
    return f"company/{company}"


def form_token(user: Any, company: str) -> str | None:
    """A fresh token for one change form (None: no secret, so no change is possible)."""
    from export_lib.views.action_tokens import make_form_token

    try:
        return make_form_token(secret(), user.get_name(), token_scope(company), now=_now(),
                               ttl=settings.ui_token_ttl(), nonce=secrets.token_hex(8))
    except ActionTokenError:
        return None


def may_change(user: Any, schedules: list[Any]) -> bool:
    """Is the user an operator of the company: may they edit its DAGs? (A company's roles
    grant all its DAGs alike; a change also asks for the DAG it changes.)"""
    return may_edit(user, schedules[0].dag_id)


def view_data(company: str, user: Any, visible: frozenset[str] | None) -> dict[str, Any]:
    """What the company page shows, as data."""
    from export_lib.pipeline.reschedule_edit import writable
    from export_lib.views.company import company_history, last_delivered, schedule_card

    schedules = company_schedules(company, visible)
    now, raw = _now(), _raw(company)
    with _ledger() as ledger:
        delivered = last_delivered(ledger.engine, [s.schedule_id for s in schedules])
        history = company_history(ledger, company)
    first = schedules[0].company
    return {"company": company, "name": first.name, "timezone": first.timezone,
            "status": first.status, "now_utc": f"{now:%Y-%m-%dT%H:%M:%SZ}",
            "may_change": may_change(user, schedules),
            "config_writable": writable(config_directory()),
            "schedules": [schedule_card(s, raw, delivered.get(s.schedule_id, {}), now=now)
                          for s in schedules],
            "history": history}


# -- reading ------------------------------------------------------------------------------------

@router.get("", response_class=HTMLResponse, summary="The companies you may see (HTML)")
def companies_page(visible: frozenset[str] | None = Visible) -> str:
    return ch.companies(_visible_companies(visible))


@router.get(".json", summary="The companies you may see")
def companies_json(visible: frozenset[str] | None = Visible) -> dict[str, Any]:
    return {"companies": _visible_companies(visible)}


def _visible_companies(visible: frozenset[str] | None) -> list[dict[str, str]]:
    seen: dict[str, Any] = {}
    for s in _catalog_schedules():
        if visible is None or s.company.id in visible:
            seen.setdefault(s.company.id, s.company)
    return [{"company": c.id, "name": c.name, "timezone": c.timezone} for c in
            sorted(seen.values(), key=lambda c: c.id)]


@router.get("/for-dag/{dag_id}", summary="The company page of an export DAG (its tab)")
def for_dag(dag_id: str, visible: frozenset[str] | None = Visible) -> RedirectResponse:
    from export_lib.views.visibility import company_of_dag

    company = company_of_dag(dag_id)
    if company is None:
        raise HTTPException(status_code=404, detail=f"{dag_id[:120]!r} is not an export DAG: "
                            "the company view belongs to export DAGs only")
    company_schedules(company, visible)
    return RedirectResponse(f"../{company}", status_code=303)


@router.get("/{company}", response_class=HTMLResponse, summary="The company page (HTML)")
def company_page(company: str, user: GetUserDep, request: Request,
                 visible: frozenset[str] | None = Visible) -> str:
    data = view_data(company, user, visible)
    q = request.query_params
    extra = _extras(company, visible, q)
    return ch.company_page(data, form_token(user, company) if data["may_change"] else None,
                           done=(q.get("done"), q.get("run")), **extra)


def _extras(company: str, visible: frozenset[str] | None, q: Any) -> dict[str, Any]:
    """The page's optional panels, from its query: an explained day, the gaps."""
    out: dict[str, Any] = {"explained": None, "gaps": None, "error": None}
    try:
        if q.get("explain_schedule") and q.get("explain_day"):
            out["explained"] = explain(company, q.get("explain_schedule"), q.get("explain_day"),
                                       visible)
        days = q.get("gap_days")
        out["gaps"] = gaps(company, int(days) if days and days.isdigit() else 7, visible)
    except FormError as exc:
        out["error"] = str(exc)
    return out


@router.get("/{company}/schedules.json", summary="Schedules at a glance")
def schedules_json(company: str, user: GetUserDep,
                   visible: frozenset[str] | None = Visible) -> dict[str, Any]:
    """Per export: timing as configured (each key's ``source``: company file, company timezone
    or default) and resolved (the next 5 runs, local and UTC, with windows and deadlines), the
    last period delivered per destination, the config version and its history; the company's
    history of changes; ``may_change``; ``config_writable`` (else a change is shown as the
    change to commit)."""
    return view_data(company, user, visible)


def plan_edit(company: str, form: dict[str, str], visible: frozenset[str] | None) -> Any:
    from export_lib.ledger.periods import latest_runs
    from export_lib.pipeline.reschedule_edit import prepare_reschedule
    from export_lib.views.company import timing_changes

    schedule = pick_schedule(company_schedules(company, visible), form.get("schedule"))
    changes = timing_changes(schedule, form)
    with _ledger() as ledger:
        newest = latest_runs(ledger).get(schedule.schedule_id)
    try:
        return prepare_reschedule(config_directory(), schedule.schedule_id, changes,
                                  now=_now(), newest_run=newest.slot if newest else None)
    except FormError:
        raise
    except ConfigError as exc:  # the new timing as a whole (e.g. it changes nothing)
        raise FormError(next(iter(changes)), str(exc)) from None


@router.get("/{company}/plan.json", summary="Plan a timing change (nothing written)")
def plan_json(company: str, schedule: str, export_hour: str | None = None,
              interval_hours: str | None = None, timezone: str | None = None,
              cron: str | None = None,
              visible: frozenset[str] | None = Visible) -> Any:
    """The same plan as ``exportctl reschedule``: old and new next runs, each period around
    the switch and what happens to it, and the change to the company file as a diff."""
    form = {k: v for k, v in {"schedule": schedule, "export_hour": export_hour,
                              "interval_hours": interval_hours, "timezone": timezone,
                              "cron": cron}.items() if v is not None}
    return _guarded_json(lambda: plan_edit(company, form, visible).as_json())


@router.get("/{company}/plan", response_class=HTMLResponse, summary="Plan a timing change (HTML)")
def plan_page(company: str, request: Request, user: GetUserDep,
              visible: frozenset[str] | None = Visible) -> Any:
    from export_lib.pipeline.reschedule_edit import writable

    form = dict(request.query_params)
    schedules = company_schedules(company, visible)
    try:
        edit = plan_edit(company, form, visible)
    except FormError as exc:
        return error_page(company, user, visible, exc)
    may = may_change(user, schedules)
    return ch.plan_page(company, edit.as_json(), edit.plan.lines(), form,
                        form_token(user, company) if may else None,
                        writable(config_directory()))


@router.get("/{company}/window.json", summary="A local period as UTC (Export now)")
def window_json(company: str, base_export: str, preset: str | None = None,
                start: str | None = None, end: str | None = None,
                visible: frozenset[str] | None = Visible) -> Any:
    """The period picked in the company's local time (``preset`` yesterday, last_week or
    last_month, else ``start``/``end`` as YYYY-MM-DD or YYYY-MM-DDTHH:MM), its UTC window, and
    what "Based on export" decides (query, format, columns, destinations)."""
    from export_lib.views.company import based_on

    def answer() -> dict[str, Any]:
        schedule = pick_schedule(company_schedules(company, visible), base_export, "base_export")
        lo, hi = local_window(schedule, {"preset": preset or "", "start": start or "",
                                    "end": end or ""})
        return {"window_start": lo.isoformat(), "window_end": hi.isoformat(),
                "window_start_utc": f"{lo.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
                "window_end_utc": f"{hi.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
                "timezone": schedule.company.timezone, "based_on": based_on(schedule)}

    return _guarded_json(answer)


def local_window(schedule: Any, form: dict[str, str]) -> tuple[datetime, datetime]:
    from export_lib.views.company import form_text, local_instant, preset_window

    tz = schedule.company.timezone
    preset = form_text(form, "preset")
    if preset:
        return preset_window(preset, tz, _now())
    start, end = form_text(form, "start"), form_text(form, "end")
    if not start or not end:
        raise FormError("start" if not start else "end", "give the period's start and end in "
                        f"local time ({tz}), or pick a preset")
    return local_instant(start, "start", tz), local_instant(end, "end", tz)


@router.get("/{company}/explain.json", summary="Why / what happened to a period")
def explain_json(company: str, schedule: str, day: str,
                 visible: frozenset[str] | None = Visible) -> Any:
    """``exportctl explain`` for each slot of the local ``day`` (YYYY-MM-DD), with the run,
    its render attempts and links to their Airflow task logs."""
    return _guarded_json(lambda: explain(company, schedule, day, visible))


def explain(company: str, schedule_id: str, day: str,
            visible: frozenset[str] | None) -> list[dict[str, Any]]:
    from datetime import date

    from export_lib.periods.names import run_key
    from export_lib.pipeline.explain import explain_facts, explain_period, slots_of_day
    from export_lib.views.company import log_links

    schedule = pick_schedule(company_schedules(company, visible), schedule_id)
    try:
        wanted = date.fromisoformat((day or "")[:10]) if len(day or "") == 10 else None
    except ValueError:
        wanted = None
    if wanted is None:
        raise FormError("day", f"{(day or '')[:20]!r} is not a date; write YYYY-MM-DD, the "
                               "customer's local day")
    now, out = _now(), []
    with _ledger() as ledger:
        for slot in slots_of_day(schedule, wanted):
            facts = explain_facts(ledger, schedule.schedule_id, slot)
            key = run_key(schedule.schedule_id, slot)
            out.append({"slot_utc": f"{slot:%Y-%m-%dT%H:%M:%SZ}", "run_key": key,
                        "answer": explain_period(schedule, slot, facts, now=now),
                        "in_ledger": facts.run is not None,
                        "logs": log_links(facts.attempts) if facts.run is not None else []})
    return out


@router.get("/{company}/gaps.json", summary="Gaps of the last N days (the gap audit's plan)")
def gaps_json(company: str, days: int = Query(7, ge=1, le=90),
              visible: frozenset[str] | None = Visible) -> Any:
    """Expected slots without a run, each with what the audit (``exportctl audit``) would do:
    backfill, skip, unrecoverable or leave untouched."""
    return gaps(company, days, visible)


def gaps(company: str, days: int, visible: frozenset[str] | None) -> dict[str, Any]:
    from export_lib.ledger.seniority import open_catalog
    from export_lib.pipeline.audit_apply import run_audit

    company_schedules(company, visible)
    now = _now()
    days = max(1, min(days, 90))
    with _ledger() as ledger:
        result = run_audit(open_catalog(config_directory()), ledger,
                           since=now - timedelta(days=days), until=now, now=now,
                           company=company, dry_run=True)
    return {"days": days, **result.plan.as_dict()}


def error_page(company: str, user: Any, visible: frozenset[str] | None,
                exc: Exception, status: int = 422) -> HTMLResponse:
    data = view_data(company, user, visible)
    token = form_token(user, company) if data["may_change"] else None
    return HTMLResponse(ch.company_page(data, token, error=str(exc), explained=None,
                                        gaps=None), status_code=status)


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _guarded_json(answer: Callable[[], Any]) -> Any:
    try:
        return answer()
    except FormError as exc:
        return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=422)
    except ConfigError as exc:
        return JSONResponse({"detail": str(exc), "field": None}, status_code=422)
