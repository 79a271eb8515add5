"""The obligations page (Browse → Export obligations), its drill-down and its actions.

``GET /exports/obligations``: per schedule, the last slots as a coloured strip (missing slots
included), the next runs, the owner and the last period delivered; below, every run newest
slot first, filtered by company, schedule, state and date range and paginated in SQL.
``GET /exports/obligations.json``: the same as data. ``GET /exports/metrics``: the due, missing,
missed and at-risk slots in Prometheus text (ADR 0020). ``GET
/exports/obligations/run?key=RUN_KEY``: one run in full. ``POST
/exports/obligations/action/<name>``: an operator action on one run — ``release`` (a held
run), ``requeue`` (a delivery that gave up); ``revoke`` is listed in :data:`ACTIONS` and wired
when the artifact controls land. Who may read and act: ``ui_access``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from export_airflow.airflow_compat import get_user_dependency
from export_airflow.pages import obligations_html as h
from export_airflow.pages.ui_access import (
    Visible,
    action_token,
    check_same_origin,
    check_token,
    may_edit,
)
from export_lib import settings
from export_lib.config.text import control_char
from export_lib.errors import ActionTokenError
from export_lib.logfmt import get_logger

# The signed-in user, as Airflow's own API routes resolve it (not public: airflow_compat).
GetUserDep = get_user_dependency()

router = APIRouter()

log = get_logger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def _ledger() -> Iterator[Any]:
    from export_airflow.runtime.ledger import server_ledger

    ledger = server_ledger()  # one engine per api-server process, not per request
    ledger.ensure_schema()
    yield ledger


def config_directory() -> Path:
    """The config catalog directory: ``EXPORT_CONFIG_DIR``, else ``<dags folder>/config``."""
    from airflow.configuration import conf

    return Path(settings.config_dir() or Path(conf.get("core", "dags_folder")) / "config")


def _catalog_schedules() -> list[Any]:
    """The configured schedules (:func:`config_directory`)."""
    from export_lib.ledger.seniority import open_catalog

    directory = config_directory()
    return list(open_catalog(directory).schedules) if directory.is_dir() else []


def _day(text: str | None, field: str) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise HTTPException(status_code=422, detail=f"{field}: {text!r} is not a date; use "
                                                    "YYYY-MM-DD, e.g. 2026-03-29") from None


def _obligations(company: str | None, schedule: str | None, state: str | None,
                 since: str | None, until: str | None, limit: int, offset: int,
                 visible: frozenset[str] | None) -> dict[str, Any]:
    """What the page shows, as data: the strips (with at-risk cells and the due figures of the
    last 24 h, ADR 0020), one page of runs, the schedules the reader may filter by."""
    from export_lib.errors import ConfigError
    from export_lib.views.obligations import (
        obligation_filter,
        obligations_page,
        schedule_strips,
        visible_schedules,
    )
    from export_lib.views.risk import mark_page, outage_report, risk_rules

    end = _day(until, "until")
    try:
        wanted = obligation_filter(company=company, schedule_id=schedule, outcome=state,
                                   since=_day(since, "since"),
                                   until=end + timedelta(days=1) if end else None,
                                   visible_companies=visible, limit=limit, offset=offset)
    except ConfigError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    now = _now()
    everything = visible_schedules(_catalog_schedules(), wanted.model_copy(
        update={"company": None, "schedule_id": None}))
    shown = visible_schedules(everything, wanted)
    with _ledger() as ledger:
        strips = schedule_strips(ledger.engine, shown, now=now)
        page = obligations_page(ledger.engine, wanted, now=now)
        rules = risk_rules(ledger.engine, everything, now=now)
        tallies = outage_report(ledger.engine, shown, now=now, rules=rules)
    mark_page(strips, page["runs"], rules, tallies, now)
    return {"now_utc": f"{now:%Y-%m-%dT%H:%M:%SZ}", "schedules": strips, "runs": page,
            "companies": sorted({s.company.id for s in everything}),
            "schedule_ids": [s.schedule_id for s in everything], "now": now}


@router.get("/obligations", response_class=HTMLResponse)
def obligations(company: str | None = None, schedule: str | None = None,
                state: str | None = None, since: str | None = None, until: str | None = None,
                limit: int = Query(25, ge=1, le=200), offset: int = Query(0, ge=0),
                visible: frozenset[str] | None = Visible) -> str:
    data = _obligations(company, schedule, state, since, until, limit, offset, visible)
    q = {"company": company, "schedule": schedule, "state": state, "since": since,
         "until": until, "limit": limit if limit != 25 else None}
    return h.obligations_page(data, q)


@router.get("/obligations.json")
def obligations_json(company: str | None = None, schedule: str | None = None,
                     state: str | None = None, since: str | None = None,
                     until: str | None = None, limit: int = Query(25, ge=1, le=200),
                     offset: int = Query(0, ge=0),
                     visible: frozenset[str] | None = Visible) -> dict[str, Any]:
    """The page as JSON: ``schedules`` (strips, ``due`` figures), ``runs`` (one page)."""
    data = _obligations(company, schedule, state, since, until, limit, offset, visible)
    return {k: data[k] for k in ("now_utc", "schedules", "runs")}


@router.get("/metrics")
def metrics(hours: int = Query(24, ge=1, le=24 * 31),
            visible: frozenset[str] | None = Visible) -> Response:
    """Prometheus text: due, missing, missed and at-risk slots per schedule the reader may see,
    computed from the timetables and the ledger on each scrape (never from the scheduler, so
    an outage shows while it lasts; ADR 0020)."""
    from export_lib.views.obligations import ObligationFilter, visible_schedules
    from export_lib.views.prometheus import CONTENT_TYPE, prometheus_text
    from export_lib.views.risk import outage_report

    horizon = timedelta(hours=hours)
    schedules = visible_schedules(_catalog_schedules(), ObligationFilter(
        visible_companies=visible))
    with _ledger() as ledger:
        tallies = outage_report(ledger.engine, schedules, now=_now(), horizon=horizon)
    return Response(prometheus_text(tallies, horizon), media_type=CONTENT_TYPE)


# -- the drill-down and its actions ------------------------------------------------------------
def _release(ledger: Any, run_key: str, form: dict[str, str], who: str, now: datetime) -> str:
    from export_lib.views.run_detail import release_held

    return release_held(ledger, run_key, who=who, now=now)


def _requeue(ledger: Any, run_key: str, form: dict[str, str], who: str, now: datetime) -> str:
    from export_lib.views.run_detail import requeue_delivery

    return requeue_delivery(ledger, run_key, form.get("destination", ""), who=who,
                            why=form.get("why") or "requeued from the obligations page", now=now)


def _controlled(result: Any) -> str:
    """A control that changed nothing answers 409 with its one line (nothing was changed)."""
    from export_lib.errors import WindowError

    if not result.changed:
        raise WindowError(result.outcome)
    return result.outcome


def _why(form: dict[str, str], default: str) -> str:
    return (form.get("why") or "").strip() or default


def _revoke(ledger: Any, run_key: str, form: dict[str, str], who: str, now: datetime) -> str:
    from export_airflow.runtime.connections import airflow_resolver
    from export_lib.errors import WindowError
    from export_lib.pipeline.controls import revoke_artifact

    version = form.get("version", "")
    found = [a for a in ledger.artifacts(run_key) if str(a.version) == version]
    if not found:
        raise WindowError(f"run {run_key} has no artifact version {version!r}; nothing changed")
    return _controlled(revoke_artifact(ledger, str(found[0].id), who=who, now=now,
                                       why=_why(form, "revoked from the obligations page"),
                                       resolver=airflow_resolver()))


def _cancel(ledger: Any, run_key: str, form: dict[str, str], who: str, now: datetime) -> str:
    from export_lib.pipeline.controls import cancel_run

    return _controlled(cancel_run(ledger, run_key, who=who, now=now,
                                  why=_why(form, "cancelled from the obligations page")))


def _pause(ledger: Any, run_key: str, form: dict[str, str], who: str, now: datetime) -> str:
    from export_lib.pipeline import controls

    run = ledger.get_run(run_key)
    if run.trigger == "manual" and run.window_kind == "manual":
        from export_lib.errors import WindowError

        raise WindowError(f"run {run_key} is a one-off export: its schedule {run.schedule_id} "
                          "is this run alone, so there is nothing to pause; nothing changed")
    control = controls.unpause if form.get("verb") == "unpause" else controls.pause
    return _controlled(control(ledger, run.company, run.schedule_id, who=who, now=now,
                               why=_why(form, f"{form.get('verb') or 'pause'}d from the "
                                              "obligations page")))


def _unpause(ledger: Any, run_key: str, form: dict[str, str], who: str, now: datetime) -> str:
    return _pause(ledger, run_key, {**form, "verb": "unpause"}, who, now)


Action = Callable[[Any, str, dict[str, str], str, datetime], str]
# The one place an operator action is wired: each calls one export_lib function with who (the
# Airflow user), why (the form's field, else a default) and now; each is audited there.
ACTIONS: dict[str, Action | None] = {"release": _release, "requeue": _requeue,
                                     "revoke": _revoke, "cancel": _cancel, "pause": _pause,
                                     "unpause": _unpause}
LABELS = {"release": "Release this held run (export it anyway)",
          "requeue": "Requeue the delivery to {}", "revoke": "Revoke artifact v{}",
          "cancel": "Cancel this run (nothing of it publishes)",
          "pause": "Pause schedule {} (no new runs)", "unpause": "Resume schedule {}"}


def _detail_or_404(ledger: Any, run_key: str, visible: frozenset[str] | None,
                   now: datetime) -> dict[str, Any]:
    from export_lib.views.run_detail import run_detail

    detail = run_detail(ledger.engine, run_key, now=now)
    if detail is None or (visible is not None and detail["company"] not in visible):
        raise HTTPException(status_code=404, detail=f"no run {run_key!r} you may see")
    return detail


def _dag_id(ledger: Any, run_key: str) -> str:
    from export_lib.pipeline.stages import schedule_of

    return schedule_of(ledger.get_run(run_key)).dag_id


def _actions(detail: dict[str, Any], user: Any, dag_id: str) -> dict[str, Any]:
    """What the reader may do to the run, for run.html: ``kind`` nothing (no action applies),
    read-only (no edit access to the DAG), no-secret (no form token can be made: ``error``
    says why) or forms (one per action and target, each with the user's token)."""
    from export_lib.views.run_detail import available_actions

    possible = {k: v for k, v in available_actions(detail).items() if v and ACTIONS.get(k)}
    if not possible:
        return {"kind": "nothing"}
    if not may_edit(user, dag_id):
        return {"kind": "read-only", "dag_id": dag_id}
    try:
        token = action_token(user.get_name(), detail["run_key"])
    except ActionTokenError as exc:
        return {"kind": "no-secret", "error": str(exc)}
    forms = [{"name": name, "target": target, "label": LABELS[name].format(target),
              "field": {"requeue": "destination", "revoke": "version"}.get(name),
              "why": name in ("revoke", "cancel", "pause", "unpause")}
             for name, targets in possible.items() for target in targets]
    return {"kind": "forms", "forms": forms, "token": token, "run_key": detail["run_key"],
            "dag_id": dag_id}


@router.get("/obligations/run", response_class=HTMLResponse)
def run_page(user: GetUserDep, key: str, done: str | None = None,
             visible: frozenset[str] | None = Visible) -> str:
    now = _now()
    with _ledger() as ledger:
        detail = _detail_or_404(ledger, key, visible, now)
        detail["paused"] = _paused(ledger, detail)
        can = _actions(detail, user, _dag_id(ledger, key))
        summary = _explained(ledger, key, now)
    note = {"release": "Released: the run will export when its resolve_window task is "
                       "cleared in Airflow.",
            "requeue": "Requeued: the delivery will be sent when its deliver task is cleared "
                       "in Airflow.",
            "revoke": "Revoked: withdrawn where the destination allows it; later deliveries "
                      "are refused.",
            "cancel": "Cancelled: nothing of this run publishes; pending deliveries cancelled.",
            "pause": "Paused: this schedule's new slots are recorded skipped until resumed.",
            "unpause": "Resumed: this schedule exports again from its next slot."}.get(done or "")
    return h.run_page(detail, can, note, summary)


def _paused(ledger: Any, detail: dict[str, Any]) -> str | None:
    from export_lib.pipeline.controls import pause_reason

    return pause_reason(ledger, detail["company"], detail["schedule"])


def _explained(ledger: Any, run_key: str, now: datetime) -> str | None:
    """`exportctl explain`'s paragraph for this run's period (None if it cannot be told)."""
    from export_lib.errors import ExportError
    from export_lib.periods.names import run_key as scheduled_key
    from export_lib.pipeline.explain import explain_facts, explain_period
    from export_lib.pipeline.stages import schedule_of

    run = ledger.get_run(run_key)
    if run is None or scheduled_key(run.schedule_id, run.slot) != run_key:
        return None  # a manual export: not one of the schedule's slots
    try:
        schedule = schedule_of(run)
        return explain_period(schedule, run.slot, explain_facts(ledger, schedule.schedule_id,
                                                                 run.slot), now=now)
    except ExportError as exc:  # the page still shows every fact below
        log.warning("company=%s schedule=%s period=%s: cannot explain: %s", run.company,
                    run.schedule_id, f"{run.slot:%Y-%m-%dT%H:%MZ}", exc,
                    extra=run.log_context())
        return None


@router.post("/obligations/action/{name}", response_class=HTMLResponse)
async def act(name: str, request: Request, user: GetUserDep,
              visible: frozenset[str] | None = Visible) -> Any:
    """Perform one action: same origin, the user's form token, edit access to the run's DAG;
    403 (nothing changed) otherwise, 409 when the action does not apply to the run."""
    action = ACTIONS.get(name)
    if action is None:
        raise HTTPException(status_code=404, detail=f"no action {name!r} on this page; "
                            f"available: {', '.join(k for k, v in ACTIONS.items() if v)}")
    check_same_origin(request)
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    check_token(user.get_name(), form.get("run_key", ""), form.get("token"))
    for field, value in form.items():  # ``why`` lands in the audit trail, logs and this page
        found = control_char(value)
        if found:
            raise HTTPException(status_code=422, detail=f"{field[:40]}: contains a control "
                                f"character ({found}); write one line; nothing was changed")
    return await run_in_threadpool(_act, name, action, form, user, visible)


def _act(name: str, action: Action, form: dict[str, str], user: Any,
         visible: frozenset[str] | None) -> Any:
    from export_lib.errors import ExportError

    run_key, now = form.get("run_key", ""), _now()
    with _ledger() as ledger:
        _detail_or_404(ledger, run_key, visible, now)
        dag_id = _dag_id(ledger, run_key)
        if not may_edit(user, dag_id):
            raise HTTPException(status_code=403, detail=f"{user.get_name()} may not edit DAG "
                                f"{dag_id}; nothing was changed")
        try:
            action(ledger, run_key, form, f"{user.get_name()} (obligations page)", now)
        except ExportError as exc:
            detail = _detail_or_404(ledger, run_key, visible, now)
            page = h.run_page(detail, _actions(detail, user, dag_id), str(exc))
            return HTMLResponse(page, status_code=409)
    return RedirectResponse(f"../run?{urlencode({'key': run_key, 'done': name})}",
                            status_code=303)
