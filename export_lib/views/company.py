"""The company view (Browse → Export companies): a customer's schedules at a glance, for
support.

Per export: its timing as configured — ``export_hour``, ``interval_hours`` or ``cron``, the
timezone — each key marked with where its value comes from (the company file, the defaults, the
company's timezone), the timing resolved into the next runs in local time and UTC with their
windows and deadlines (``periods.preview.schedule_rows``, the same rows as ``exportctl
preview``), the last period delivered to each destination, the config version in force and the
earlier versions. Also the pieces of "Export now": a period picked in the company's local time
(presets: yesterday, last week, last month), turned into the trigger form's conf of the
company's manual DAG, and what "Based on export" decides.

Pure where it can be (``now`` passed in); :func:`last_delivered` and :func:`company_history`
read the ledger.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from export_lib.config.timing import zone
from export_lib.errors import FormError
from export_lib.periods.instants import format_instant
from export_lib.periods.names import period_label

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from export_lib.config.models import Schedule
    from export_lib.ledger import Ledger

NEXT_RUNS = 5
WIDGET_KEYS = ("export_hour", "interval_hours", "timezone")
DATA_KEYS = ("cron", "timezone")
PRESETS = ("yesterday", "last_week", "last_month")
LOCAL_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2})?$")


def _export_entry(raw: Mapping[str, Any] | None, schedule: Schedule) -> Mapping[str, Any]:
    """The export's own mapping in the company file as written (its kind's for a data
    export), empty when the file does not state it."""
    if not isinstance(raw, Mapping):
        return {}
    if schedule.kind == "widget":
        section, key, ident = "widget_exports", "id", schedule.export_id
    else:
        section, key, ident = "data_exports", "channel", schedule.channel
    for entry in raw.get(section) or []:
        if isinstance(entry, Mapping) and entry.get(key) == ident:
            if schedule.kind == "widget":
                return entry
            own = entry.get(schedule.kind)
            return own if isinstance(own, Mapping) else {}
    return {}


def configured_timing(schedule: Schedule, raw: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The timing keys in force now, each with ``source``: ``company file`` (stated for this
    export), ``company timezone`` (a widget export's zone when it states none) or ``default``
    (``defaults.yaml``, or the built-in default when it says nothing either)."""
    own = _export_entry(raw, schedule)
    current = schedule.timing.segments[-1][2]
    out = []
    for key in WIDGET_KEYS if schedule.kind == "widget" else DATA_KEYS:
        if key in own:
            source = "company file"
        elif key == "timezone" and schedule.kind == "widget":
            source = "company timezone"
        else:
            source = "default"
        out.append({"key": key, "value": getattr(current, key), "source": source,
                    "default": source != "company file"})
    return out


def _local(instant: str, tz: str) -> str:
    moment = datetime.fromisoformat(instant.replace("Z", "+00:00")).astimezone(zone(tz))
    return f"{moment:%Y-%m-%d %H:%M %Z}"


def next_runs(schedule: Schedule, now: datetime, count: int = NEXT_RUNS) -> list[dict[str, Any]]:
    """The next ``count`` runs: slot, window and deadline in local time and UTC."""
    from export_lib.periods.preview import schedule_rows

    tz = schedule.timing.segments[-1][2].timezone
    rows = []
    for row in schedule_rows(schedule, now, count):
        rows.append({
            "slot_utc": row["slot_utc"], "slot_local": _local(row["slot_utc"], tz),
            "window_start_utc": row["window_start_utc"],
            "window_end_utc": row["window_end_utc"],
            "window_local": period_label(
                datetime.fromisoformat(row["window_start_utc"].replace("Z", "+00:00")),
                datetime.fromisoformat(row["window_end_utc"].replace("Z", "+00:00")),
                schedule.window_timezone),
            "deadline_utc": row["deadline_utc"],
            "deadline_local": _local(row["deadline_utc"], tz),
            "run_key": row["run_key"], "config_version": row["config_version"][:12],
        })
    return rows


def versions(schedule: Schedule) -> list[dict[str, Any]]:
    """The config versions, newest first: version hash, from when, the timing then."""
    return [{"config_version": version.config_version[:12],
             "effective_from_utc": (format_instant(version.effective_from)
                                    if version.effective_from else None),
             "timing": version.own_timing.summary, "current": version is schedule}
            for version in reversed(schedule.versions)]


def schedule_card(schedule: Schedule, raw: Mapping[str, Any] | None,
                  delivered: Mapping[str, Mapping[str, Any]], *, now: datetime
                  ) -> dict[str, Any]:
    """One export as the page shows it (``delivered``: destination id → its last delivered
    period, from :func:`last_delivered`)."""
    current = schedule.timing.segments[-1][2]
    return {
        "schedule": schedule.schedule_id, "kind": schedule.kind, "dag_id": schedule.dag_id,
        "owner": schedule.owner, "timing": current.summary,
        "configured": configured_timing(schedule, raw),
        "window": schedule.window.kind, "deadline_minutes": int(
            schedule.policies.deadline.total_seconds() // 60),
        "next_runs": next_runs(schedule, now),
        "last_delivered": [
            {"destination": d.id, "type": d.type, **(delivered.get(d.id) or {"period": None})}
            for d in schedule.destinations],
        "config_version": schedule.config_version[:12],
        "versions": versions(schedule),
        "switch_problems": switch_notes(schedule, now),
    }


def switch_notes(schedule: Schedule, now: datetime) -> list[dict[str, Any]]:
    """The periods around the timeline's switches that no slot reports or two report
    (``periods.switches``, what ``exportctl validate`` warns about), each with what happens to
    it and the ``effective_from`` that avoids it."""
    from export_lib.periods.switches import switch_problems

    out = []
    for problem in switch_problems(schedule, now=now):
        if problem.kind == "unreported":
            what = "reported by no slot: the gap audit exports it once if the switch is kept"
        elif problem.guarded:
            what = "reported by two slots: the second is skipped as already delivered (sent once)"
        else:
            what = "reported by two slots, in part: that part is exported twice"
        out.append({**problem.as_dict(), "what": what, "fix_text": problem.fix_text})
    return out


def last_delivered(engine: Engine, schedule_ids: Iterable[str]
                   ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per schedule and destination: the newest period whose delivery was acknowledged."""
    from export_lib.ledger.schema import deliveries, runs
    from export_lib.ledger.states import DeliveryState

    ids = list(schedule_ids)
    if not ids:
        return {}
    acked = (sa.select(runs.c.schedule_id, deliveries.c.destination_id, runs.c.slot,
                       runs.c.window_start, runs.c.window_end, runs.c.timezone, runs.c.run_key,
                       deliveries.c.acknowledged_at)
             .join(deliveries, deliveries.c.run_key == runs.c.run_key)
             .where(runs.c.schedule_id.in_(ids),
                    deliveries.c.state == DeliveryState.ACKNOWLEDGED.value)
             .order_by(runs.c.slot))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    with engine.connect() as conn:
        newest = (sa.select(runs.c.schedule_id, deliveries.c.destination_id,
                            sa.func.max(runs.c.slot).label("slot"))
                  .join(deliveries, deliveries.c.run_key == runs.c.run_key)
                  .where(runs.c.schedule_id.in_(ids),
                         deliveries.c.state == DeliveryState.ACKNOWLEDGED.value)
                  .group_by(runs.c.schedule_id, deliveries.c.destination_id).subquery())
        query = acked.join(newest, sa.and_(newest.c.schedule_id == runs.c.schedule_id,
                                           newest.c.destination_id == deliveries.c.destination_id,
                                           newest.c.slot == runs.c.slot))
        for r in conn.execute(query):
            out.setdefault(r.schedule_id, {})[r.destination_id] = {
                "period": period_label(r.window_start, r.window_end, r.timezone),
                "run_key": r.run_key,
                "acknowledged_at_utc": (format_instant(r.acknowledged_at)
                                        if r.acknowledged_at else None)}
    return out


def company_history(ledger: Ledger, company: str, limit: int = 50) -> list[dict[str, Any]]:
    """The company's operator actions, newest first: timing changes (who, when, before →
    after) and every other control."""
    from export_lib.ledger.controls import list_actions

    return [{"at_utc": format_instant(a.at), "who": a.who, "action": a.action,
             "target": a.target_id, "changed": a.changed, "outcome": a.outcome, "why": a.why}
            for a in list_actions(ledger, company=company, limit=limit)]


ORIGIN = re.compile(r"^airflow:(?P<dag>[^/]+)/(?P<run>.+)/(?P<task>[^/]+)/try(?P<try>\d+)$")


def log_links(attempts: Iterable[Any]) -> list[dict[str, Any]]:
    """Each render attempt's Airflow task log, from the attempt's ``origin``
    (``airflow:<dag>/<run id>/<task>/try<n>``, recorded by the operators): the path of the
    task's page in the Airflow UI (its Logs tab) and the try."""
    from urllib.parse import quote

    out = []
    for attempt in attempts:
        found = ORIGIN.match(getattr(attempt, "origin", "") or "")
        if found is None:
            continue  # rendered outside Airflow (exportctl run): no task log
        out.append({"generation": attempt.generation, "state": attempt.state,
                    "dag_id": found["dag"], "run_id": found["run"], "task_id": found["task"],
                    "try_number": int(found["try"]),
                    "href": (f"/dags/{quote(found['dag'], safe='')}/runs/"
                             f"{quote(found['run'], safe='')}/tasks/"
                             f"{quote(found['task'], safe='')}?try_number={found['try']}")})
    return out


# -- the form of "Change the export time" ----------------------------------------------------

MAX_FIELD = 100  # no timing value is longer; a longer one is refused before it is parsed


def form_text(form: Mapping[str, str], field: str) -> str | None:
    """The stripped value of ``field`` (None when empty); FormError on a control character or
    a value longer than any valid one."""
    from export_lib.config.text import control_char

    value = form.get(field)
    if value is None or not str(value).strip():
        return None
    found = control_char(value)
    if found:
        raise FormError(field, f"contains a control character ({found}); type the value on "
                               "one line; nothing was changed")
    if len(value) > MAX_FIELD:
        raise FormError(field, f"is {len(value)} characters long; no valid value is longer "
                               f"than {MAX_FIELD}; nothing was changed")
    return value.strip()


def form_whole(form: Mapping[str, str], field: str, low: int, high: int, fix: str) -> int | None:
    text = form_text(form, field)
    if text is None:
        return None
    if not text.isdigit() or not low <= int(text) <= high:
        raise FormError(field, f"{text[:20]!r} is not a whole number from {low} to {high}; "
                               f"{fix}; nothing was changed")
    return int(text)


def timing_changes(schedule: Schedule, form: Mapping[str, str]) -> dict[str, Any]:
    """The timing keys the form changes (empty fields keep their value), each checked with
    the field named in the error: hour 0-23, interval 1-24, an IANA timezone, a 5-field cron;
    ``export_hour``/``interval_hours`` for widget exports, ``cron`` for data exports."""
    from export_lib.config.timing import check_cron, check_timezone

    changes: dict[str, Any] = {
        "export_hour": form_whole(form, "export_hour", 0, 23, "midnight is 0, 23:00 is 23"),
        "interval_hours": form_whole(form, "interval_hours", 1, 24, "24 is once a day")}
    timezone = form_text(form, "timezone")
    if timezone is not None:
        try:
            changes["timezone"] = check_timezone(timezone)
        except ValueError as exc:
            raise FormError("timezone", f"{exc}; nothing was changed") from None
    cron = form_text(form, "cron")
    if cron is not None:
        try:
            changes["cron"] = check_cron(cron)
        except ValueError as exc:
            raise FormError("cron", f"{exc}; nothing was changed") from None
    if schedule.kind == "widget" and "cron" in changes:
        raise FormError("cron", f"{schedule.schedule_id} is a widget export: it fires at "
                                "export_hour every interval_hours; leave cron empty")
    if schedule.kind != "widget":
        for field in ("export_hour", "interval_hours"):
            if changes[field] is not None:
                raise FormError(field, f"{schedule.schedule_id} is a data export: it fires "
                                       "on its cron; leave this empty and change cron")
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise FormError("export_hour", "nothing to change: fill in the new export hour, "
                                       "interval, timezone or cron")
    return changes


# -- Export now --------------------------------------------------------------------------------

def preset_window(preset: str, timezone: str, now: datetime) -> tuple[datetime, datetime]:
    """A preset period in local time: ``yesterday``, ``last_week`` (Monday to Monday) or
    ``last_month``, as aware local instants (half-open)."""
    tz = zone(timezone)
    today = now.astimezone(tz).date()
    if preset == "yesterday":
        start, end = today - timedelta(days=1), today
    elif preset == "last_week":
        end = today - timedelta(days=today.weekday())
        start = end - timedelta(days=7)
    elif preset == "last_month":
        end = today.replace(day=1)
        start = (end - timedelta(days=1)).replace(day=1)
    else:
        raise FormError("preset", f"{preset[:40]!r} is not a preset; use one of "
                          f"{', '.join(PRESETS)}, or give start and end")
    return _midnight(start, timezone), _midnight(end, timezone)


def _midnight(day: date, timezone: str) -> datetime:
    from export_lib.periods.slots import start_of_day

    return start_of_day(zone(timezone), day).astimezone(zone(timezone))


def local_instant(text: str, field: str, timezone: str) -> datetime:
    """``YYYY-MM-DD`` (local midnight) or ``YYYY-MM-DDTHH:MM`` in ``timezone``, aware; a
    ConfigError naming the field and the form otherwise. A wall time the clocks skip moves
    forward by the gap; a repeated one is its first occurrence."""
    value = (text or "").strip()
    if not LOCAL_TIME.match(value):
        raise FormError(field, f"{value[:40]!r} is not a local date or time; write "
                          "YYYY-MM-DD or YYYY-MM-DDTHH:MM in the company's timezone "
                          f"({timezone}), e.g. 2026-11-01T00:00")
    try:
        naive = datetime.fromisoformat(value.replace(" ", "T"))
    except ValueError:
        raise FormError(field, f"{value!r} is not a real date; e.g. 2026-11-01") from None
    if len(value) == 10:
        return _midnight(naive.date(), timezone)
    local = naive.replace(tzinfo=zone(timezone))
    return local.astimezone(UTC).astimezone(zone(timezone))  # normalises a skipped wall time


def based_on(schedule: Schedule) -> dict[str, Any]:
    """What "Based on export" decides for a one-off export: the query (source, table, tenant
    scoping, columns), the format and the destinations, unless the form narrows them."""
    return {"schedule": schedule.schedule_id, "source": schedule.query.source,
            "table": schedule.query.table, "columns": list(schedule.query.columns),
            "format": schedule.format,
            "destinations": [d.id for d in schedule.destinations]}


def manual_conf(company: str, base_export: str, start: datetime, end: datetime, *,
                reason: str, format: str | None = None,
                destinations: Iterable[str] = (), columns: Iterable[str] = (),
                regenerate: bool = False) -> dict[str, Any]:
    """The conf the manual DAG's trigger form produces for this request (local instants
    in UTC, as the form takes them)."""
    return {"company": company, "base_export": base_export,
            "window_start": start.isoformat(), "window_end": end.isoformat(),
            "columns": list(columns), "format": format or "csv",
            "destinations": list(destinations), "reason": reason, "regenerate": regenerate}


__all__ = ["PRESETS", "based_on", "company_history", "configured_timing", "form_text",
           "form_whole", "log_links",
           "last_delivered", "local_instant", "manual_conf", "next_runs", "preset_window",
           "schedule_card", "switch_notes", "timing_changes", "versions"]
