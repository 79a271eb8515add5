"""The company view's changes, each a POST (``company_ui`` has the reading side and the helpers):
``reschedule`` (change an export's timing), ``export-now`` (a one-off export) and ``recover``
(the gap audit for this company).

Every change goes through :func:`change`: the same-origin check, a company the user may see
(else 404), operator rights (edit access to the company's DAGs; else 403), a form token made for
this user and company (else 403), then the input checked field by field (422 naming the field
and the fix), and only then the token is spent — once: a replayed form is refused — and the
work done. Answered in JSON when the request asks for it (``Accept: application/json``), else
as the page (a redirect to it, or the page with the change to commit for a read-only config).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from export_airflow.airflow_compat import get_user_dependency
from export_airflow.pages import company_html as ch
from export_airflow.pages.company_ui import (
    company_schedules,
    error_page,
    form_token,
    local_window,
    may_change,
    pick_schedule,
    plan_edit,
    token_scope,
    view_data,
    wants_json,
)
from export_airflow.pages.obligations_ui import _ledger, _now, config_directory
from export_airflow.pages.ui_access import Visible, check_same_origin, may_edit, secret
from export_lib import settings
from export_lib.errors import ActionTokenError, ConfigError, ExportError, FormError
from export_lib.logfmt import get_logger

# The signed-in user, as Airflow's own API routes resolve it (not public: airflow_compat).
GetUserDep = get_user_dependency()

router = APIRouter(prefix="/companies", tags=["company view"])
log = get_logger(__name__)
MAX_FORM = 16_384  # bytes: every form of the page is far smaller
REPLAYED = ("this form was already used (a replayed request): reload the page for a new form; "
            "nothing was changed")


async def _posted(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM:
        raise HTTPException(status_code=413, detail=f"the form is larger than {MAX_FORM} bytes; "
                            "nothing was changed")
    try:
        return {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
    except UnicodeDecodeError:
        raise HTTPException(status_code=422, detail="the form is not UTF-8 text; nothing was "
                            "changed") from None


def _check(user: Any, company: str, form: dict[str, str],
           visible: frozenset[str] | None) -> tuple[list[Any], str, datetime]:
    """A company the user may see, operator rights, a valid form token: the schedules, and
    the token's MAC and expiry to spend. 403/404 and nothing changed else."""
    from export_lib.views.action_tokens import check_form_token

    schedules = company_schedules(company, visible)
    if not may_change(user, schedules):
        raise HTTPException(status_code=403, detail=f"{user.get_name()} may read company "
                            f"{company} but not change it (its operators may); nothing was "
                            "changed")
    try:
        mac, expires = check_form_token(secret(), user.get_name(), token_scope(company),
                                        form.get("token"), now=_now(),
                                        ttl=settings.ui_token_ttl())
    except ActionTokenError as exc:
        raise HTTPException(status_code=403, detail=str(exc)) from None
    from export_lib.ledger.controls import form_token_spent

    with _ledger() as ledger:  # a replay is refused as one, whatever it now asks for
        if form_token_spent(ledger, mac):
            raise HTTPException(status_code=403, detail=REPLAYED)
    return schedules, mac, expires


def _spend(ledger: Any, mac: str, who: str, expires: datetime) -> None:
    from export_lib.ledger.controls import spend_form_token

    if not spend_form_token(ledger, mac, who=who, now=_now(), expires_at=expires):
        raise HTTPException(status_code=403, detail=REPLAYED)


async def _change(name: str, company: str, request: Request, user: Any,
                  visible: frozenset[str] | None, work: Callable[..., dict[str, Any]]) -> Any:
    form = await _posted(request)
    check_same_origin(request)
    # The rest reads the config, the auth manager and the ledger: off the event loop.
    return await run_in_threadpool(_changed, name, company, request, user, visible, form, work)


def _changed(name: str, company: str, request: Request, user: Any,
             visible: frozenset[str] | None, form: dict[str, str],
             work: Callable[..., dict[str, Any]]) -> Any:
    schedules, mac, expires = _check(user, company, form, visible)
    try:
        result = work(company, schedules, form, user, mac, expires)
    except FormError as exc:
        if wants_json(request):
            return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=422)
        return error_page(company, user, visible, exc)
    except ExportError as exc:
        if wants_json(request):
            return JSONResponse({"detail": str(exc), "field": None}, status_code=409)
        return error_page(company, user, visible, exc, status=409)
    if wants_json(request):
        return result
    if result.get("applied") is False:  # read-only config: the change to commit, on the page
        data = view_data(company, user, visible)
        return HTMLResponse(ch.company_page(data, form_token(user, company), note=result["note"],
                                            explained=None, gaps=None))
    done = {"done": name, **({"run": result["run_id"]} if "run_id" in result else {})}
    return RedirectResponse(f"../{company}?{urlencode(done)}", status_code=303)


@router.post("/{company}/reschedule", summary="Change an export's timing (operators)")
async def reschedule(company: str, request: Request, user: GetUserDep,
                     visible: frozenset[str] | None = Visible) -> Any:
    """Form fields: ``schedule``, ``export_hour`` / ``interval_hours`` / ``timezone`` / ``cron``
    (empty: unchanged), ``why``, ``token``. Plans, validates and writes the company file like
    ``exportctl reschedule --apply`` and records who, when, before and after; where the config
    directory is read-only nothing is written and the answer is the change to commit."""
    return await _change("reschedule", company, request, user, visible, _reschedule)


def _reschedule(company: str, schedules: list[Any], form: dict[str, str], user: Any,
                mac: str, expires: datetime) -> dict[str, Any]:
    from export_lib.pipeline.reschedule_edit import apply_reschedule, check_edit, writable
    from export_lib.views.company import form_text

    why = form_text(form, "why") or "export time changed on the company page"
    edit = plan_edit(company, form, visible=None)  # the company was checked against the reader
    dag_id = edit.plan.schedule.dag_id
    if not may_edit(user, dag_id):
        raise HTTPException(status_code=403, detail=f"{user.get_name()} may not edit DAG "
                            f"{dag_id}; nothing was changed")
    check_edit(config_directory(), edit)  # validated before anything is written or spent
    who = f"{user.get_name()} (company page)"
    now = _now()
    with _ledger() as ledger:
        _spend(ledger, mac, user.get_name(), expires)
        if not writable(config_directory()):
            return {"applied": False, "plan": edit.as_json(),
                    "note": f"The config directory is read-only: nothing was written. Commit "
                            f"this change to {edit.path.name}:\n{edit.diff}"}
        apply_reschedule(config_directory(), edit, ledger=ledger, who=who, why=why, now=now)
    log.warning("company=%s schedule=%s period=%s: timing changed by %s: %s", company,
                edit.plan.schedule.schedule_id, f"{edit.plan.effective_from:%Y-%m-%dT%H:%MZ}",
                who, edit.change_text, extra={"company": company,
                                              "schedule": edit.plan.schedule.schedule_id})
    return {"applied": True, "plan": edit.as_json(),
            "note": f"Changed by {user.get_name()}: {edit.change_text}. Airflow follows at the "
                    "next parse of the DAG."}


@router.post("/{company}/export-now", summary="A one-off export of a period (operators)")
async def export_now(company: str, request: Request, user: GetUserDep,
                     visible: frozenset[str] | None = Visible) -> Any:
    """Form fields: ``base_export``, ``preset`` or ``start``/``end`` (local time), ``format``,
    ``destinations`` (comma-separated, empty: all), ``reason``, ``token``. Checked like the
    manual DAG's trigger form (recipients, destinations, window inside the source's
    retention), then triggers ``manual_export__<company>`` through Airflow's own trigger."""
    return await _change("export-now", company, request, user, visible, _export_now)


def _export_now(company: str, schedules: list[Any], form: dict[str, str], user: Any,
                mac: str, expires: datetime) -> dict[str, Any]:
    from export_airflow.pages.company_trigger import trigger_manual
    from export_lib.config.manual import manual_run_key, manual_schedule, parse_request
    from export_lib.ledger.seniority import open_catalog
    from export_lib.views.company import form_text, manual_conf

    schedule = pick_schedule(schedules, form.get("base_export"), "base_export")
    start, end = local_window(schedule, form)
    wanted = [d.strip() for d in (form_text(form, "destinations") or "").split(",") if d.strip()]
    conf = manual_conf(company, schedule.schedule_id, start, end,
                       reason=form.get("reason") or "", format=form_text(form, "format"),
                       destinations=wanted, regenerate=form.get("regenerate") == "true")
    try:  # the checks resolve_window makes when the run starts, made before it exists
        request = parse_request(conf)
        manual_schedule(open_catalog(config_directory()), request, run_id="check", now=_now())
    except ConfigError as exc:  # "manual export form: <field>…: <what and the fix>"
        text = re.sub(r"^(manual export form|manual_export): ", "", str(exc))
        first = re.match(r"[a-z_]+", text)
        field = first.group() if first and first.group() in conf else next(
            (f for word, f in (("destination", "destinations"), ("column", "columns"),
                               ("window", "end")) if word in text), "base_export")
        raise FormError({"window_start": "start", "window_end": "end"}.get(field, field),
                        text) from None
    with _ledger() as ledger:
        _spend(ledger, mac, user.get_name(), expires)
    run_id = trigger_manual(f"manual_export__{company}", conf, user)
    return {"dag_id": f"manual_export__{company}", "run_id": run_id,
            "run_key": manual_run_key(company, run_id), "conf": conf,
            "note": f"Export started: run {run_id} of manual_export__{company}, window "
                    f"{conf['window_start']} → {conf['window_end']}."}


@router.post("/{company}/recover", summary="Recover the gaps of the last N days (operators)")
async def recover(company: str, request: Request, user: GetUserDep,
                  visible: frozenset[str] | None = Visible) -> Any:
    """Form fields: ``days`` (1-90), ``token``. Runs the gap audit for this company
    (``exportctl audit --company``): backfills through Airflow's API, skips and unrecoverable
    periods recorded per each schedule's recovery policy."""
    return await _change("recover", company, request, user, visible, _recover)


def _recover(company: str, schedules: list[Any], form: dict[str, str], user: Any,
             mac: str, expires: datetime) -> dict[str, Any]:
    from export_airflow.pages.company_trigger import airflow_api
    from export_lib.ledger.seniority import open_catalog
    from export_lib.pipeline.audit_apply import run_audit
    from export_lib.views.company import form_whole

    days = form_whole(form, "days", 1, 90, "the gap audit looks back 1 to 90 days") or 7
    api, why_not = airflow_api()
    now = _now()
    with _ledger() as ledger:
        _spend(ledger, mac, user.get_name(), expires)
        result = run_audit(open_catalog(config_directory()), ledger,
                           since=now - timedelta(days=days), until=now, now=now,
                           company=company, api=api)
    note = f"Recovery by {user.get_name()}: {result.summary()}"
    if why_not:
        note += f" (backfills not requested: {why_not})"
    return {"result": result.plan.as_dict(), "note": note}
