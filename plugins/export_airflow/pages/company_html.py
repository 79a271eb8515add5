"""HTML of the company view: plain HTML and CSS over the dicts of ``export_lib.views.company``
(``company_ui`` builds them); every value escaped. Change forms are drawn only for a user who may
change the company's exports and only with a form token; the server checks both again.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from export_airflow.pages.obligations_html import doc, esc, table
from export_lib.views.company import PRESETS

PRESET_TEXT = {"yesterday": "yesterday", "last_week": "last week (Monday to Monday)",
               "last_month": "last month"}


def companies(rows: list[dict[str, str]]) -> str:
    items = "".join(f"<li><a id='c-{esc(r['company'])}' href='companies/{esc(r['company'])}'>"
                    f"{esc(r['name'])}</a> <small>({esc(r['company'])}, {esc(r['timezone'])})"
                    "</small></li>" for r in rows)
    return doc("Export companies", "<h2>Export companies</h2><p>Each customer's schedules, "
               "next runs and history; change an export time, export a period now, ask why a "
               f"file is missing.</p><ul id='companies'>{items or '<li>none</li>'}</ul>"
               "<p><small>JSON: <code>companies.json</code>; API: <a href='docs'>docs</a>"
               "</small></p>")


def _configured(card: dict[str, Any]) -> str:
    cells = []
    for c in card["configured"]:
        mark = f" <small class='default'>({esc(c['source'])})</small>" if c["default"] else ""
        cells.append(f"<span data-key='{esc(c['key'])}'>{esc(c['key'])} = "
                     f"<b>{esc(c['value'])}</b>{mark}</span>")
    return " · ".join(cells)


def _card(company: str, card: dict[str, Any], token: str | None, writable: bool) -> str:
    sid = card["schedule"]
    runs = table(["slot (local)", "slot (UTC)", "period (local)", "window (UTC)",
                  "deadline (local)", "deadline (UTC)"],
                 [[r["slot_local"], r["slot_utc"], r["window_local"],
                   f"{r['window_start_utc']} → {r['window_end_utc']}", r["deadline_local"],
                   r["deadline_utc"]] for r in card["next_runs"]], f"next-{sid}")
    delivered = table(["destination", "last period delivered", "acknowledged (UTC)", "run"],
                      [[d["destination"], d.get("period") or "nothing delivered yet",
                        d.get("acknowledged_at_utc"), d.get("run_key")]
                       for d in card["last_delivered"]], f"delivered-{sid}")
    versions = table(["config version", "from (UTC)", "timing"],
                     [[v["config_version"] + (" (current)" if v["current"] else ""),
                       v["effective_from_utc"] or "the beginning", v["timing"]]
                      for v in card["versions"]], f"versions-{sid}")
    return (f"<section class='card' data-schedule='{esc(sid)}'><h3>{esc(sid)} "
            f"<small>({esc(card['kind'])}, DAG <a target='_top' href='/dags/"
            f"{esc(card['dag_id'])}'>{esc(card['dag_id'])}</a>)</small></h3>"
            f"<p>Timing: <b class='timing'>{esc(card['timing'])}</b>; window "
            f"{esc(card['window'])}; deadline {card['deadline_minutes']} min after the slot; "
            f"owner {esc(card['owner'])}.<br>As configured: {_configured(card)}</p>"
            "<h4>Next runs</h4>" + runs + "<h4>Last delivered</h4>" + delivered
            + "<h4>Config versions</h4>" + versions + _switches(card)
            + _change_form(company, card, token, writable) + "</section>")


def _switches(card: dict[str, Any]) -> str:
    """The periods around a timing switch that no slot or two slots report (as `exportctl
    validate` warns), with the effective_from that avoids each."""
    items = "".join(
        f"<li data-kind='{esc(p['kind'])}'>period <b>{esc(p['period'])}</b> "
        f"({esc(p['timezone'])}) around the switch at {esc(p['switch'])}: {esc(p['what'])}"
        + (f"; to avoid it write <code>{esc(p['fix_text'])}</code>" if p["fix_text"] else
           "; no effective_from avoids it (the two timings' windows do not line up)")
        + "</li>" for p in card["switch_problems"])
    return f"<ul class='note' id='switches-{esc(card['schedule'])}'>{items}</ul>" if items else ""


def _change_form(company: str, card: dict[str, Any], token: str | None, writable: bool) -> str:
    if token is None:
        return ("<p class='readonly'><small>You can read this company's exports; its operators "
                "can change them.</small></p>")
    sid = card["schedule"]
    if card["kind"] == "widget":
        fields = ("new export hour <input name='export_hour' size='3' placeholder='0-23'> "
                  "interval hours <input name='interval_hours' size='3' placeholder='1-24'> ")
    else:
        fields = "new cron <input name='cron' size='16' placeholder='0 9 * * *'> "
    where = ("" if writable else " <small>(the config directory is read-only here: the plan "
             "ends with the change to commit)</small>")
    return (f"<form method='get' action='{esc(company)}/plan' class='change'>"
            f"<input type='hidden' name='schedule' value='{esc(sid)}'><b>Change the export "
            f"time:</b> {fields}timezone <input name='timezone' size='16' "
            "placeholder='unchanged'> "
            f"<button type='submit' id='plan-{esc(sid)}'>show the plan</button>{where}</form>")


def _done(company: str, done: tuple[str | None, str | None]) -> str | None:
    """The note after a change (fixed texts: nothing from the address is shown but a run id,
    escaped, in its link)."""
    what, run = done
    if what == "reschedule":
        return "<p class='note' id='note'>Changed: the new timing and who changed it are in " \
               "the history below; Airflow follows at the next parse of the DAG.</p>"
    if what == "recover":
        return "<p class='note' id='note'>Recovery requested: see the history and the gaps.</p>"
    if what == "export-now" and run:
        from export_lib.config.manual import manual_run_key

        dag, key = f"manual_export__{company}", manual_run_key(company, run)
        return (f"<p class='note' id='note'>Export started: <a id='started-run' target='_top' "
                f"href='/dags/{esc(dag)}/runs/{esc(quote(run, safe=''))}'>{esc(run)}</a> of "
                f"{esc(dag)}; in the ledger as <a id='started-key' href='../obligations/run?"
                f"{esc(urlencode({'key': key}))}'>{esc(key)}</a> once its first task ran.</p>")
    return None


def company_page(data: dict[str, Any], token: str | None, *, note: str | None = None,
                 error: str | None = None, explained: list[dict[str, Any]] | None = None,
                 gaps: dict[str, Any] | None = None,
                 done: tuple[str | None, str | None] = (None, None)) -> str:
    company = data["company"]
    banner = (_done(company, done) or "") + (
        f"<pre class='note' id='note'>{esc(note)}</pre>" if note else "") + (
        f"<p class='note err' id='error'>{esc(error)}</p>" if error else "")
    cards = "".join(_card(company, c, token, data["config_writable"])
                    for c in data["schedules"])
    body = (f"<p><a href='../companies'>← all companies</a> · <a href='../obligations?"
            f"{esc(urlencode({'company': company}))}'>obligations</a></p>"
            f"<h2>{esc(data['name'])} <small>({esc(company)})</small></h2>"
            f"<p>Timezone <b>{esc(data['timezone'])}</b>; status {esc(data['status'])}; as of "
            f"{esc(data['now_utc'])}. Times are shown in local time and UTC.</p>" + banner
            + cards + _export_now(company, data, token)
            + _explain(company, data, explained) + _gaps(company, gaps, token)
            + "<h3>History</h3>"
            + table(["at (UTC)", "who", "action", "target", "what changed", "why"],
                    [[h["at_utc"], h["who"], h["action"], h["target"], h["outcome"], h["why"]]
                     for h in data["history"]], "history")
            + f"<p><small>JSON: <code>{esc(company)}/schedules.json</code>; API: "
              "<a href='../docs'>docs</a></small></p>")
    return doc(f"Company {company}", body)


def _export_now(company: str, data: dict[str, Any], token: str | None) -> str:
    base = data["schedules"]
    explain = ("<p><small>“Based on export” decides what is exported: the export's query (its "
               "source, table, columns and tenant scoping), its format and its destinations; "
               "leave destinations empty for all of them, or list some of them. The period is "
               f"in {esc(data['timezone'])} local time, [start, end).</small></p>")
    if token is None:
        return "<h3>Export now</h3>" + explain + ("<p class='readonly'><small>Operators of "
                                                  "this company can start a one-off export."
                                                  "</small></p>")
    options = "".join(f"<option value='{esc(c['schedule'])}'>{esc(c['schedule'])} — "
                      f"{esc(c['kind'])}, {esc(', '.join(d['destination'] for d in c['last_delivered']))}"
                      "</option>" for c in base)
    presets = "".join(f"<option value='{p}'>{esc(PRESET_TEXT[p])}</option>" for p in PRESETS)
    return ("<h3>Export now</h3>" + explain
            + f"<form method='post' action='{esc(company)}/export-now' id='export-now'>"
            f"<input type='hidden' name='token' value='{esc(token)}'>"
            f"Based on export <select name='base_export' id='en-base'>{options}</select> "
            f"period <select name='preset' id='en-preset'><option value=''>— start and end —"
            f"</option>{presets}</select> or from <input type='datetime-local' name='start' "
            "id='en-start'> to <input type='datetime-local' name='end' id='en-end'> "
            "format <select name='format'><option>csv</option><option>jsonl</option>"
            "<option>parquet</option>"
            "</select> destinations <input name='destinations' size='14' placeholder='all'> "
            "reason <input name='reason' id='en-reason' size='24' required minlength='3'> "
            "<button type='submit' id='en-go'>Export now</button></form>")


def _explain(company: str, data: dict[str, Any], explained: list[dict[str, Any]] | None) -> str:
    options = "".join(f"<option>{esc(c['schedule'])}</option>" for c in data["schedules"])
    form = (f"<form method='get' action='{esc(company)}' id='explain-form'>Export <select "
            f"name='explain_schedule'>{options}</select> local day <input type='date' "
            "name='explain_day'> <button type='submit'>explain</button></form>")
    answers = ""
    for item in explained or []:
        logs = " · ".join(f"<a target='_top' href='{esc(link['href'])}'>attempt "
                          f"{esc(link['generation'])} ({esc(link['state'])}): "
                          f"{esc(link['task_id'])} log, try {esc(link['try_number'])}</a>"
                          for link in item["logs"])
        run = (f" <a href='../obligations/run?{esc(urlencode({'key': item['run_key']}))}'>"
               "run details</a>" if item["in_ledger"] else "")
        if item["logs"]:  # the Airflow run of the newest attempt: every task's log
            last = item["logs"][-1]
            run += (f" · <a target='_top' href='/dags/{esc(quote(last['dag_id'], safe=''))}/runs/"
                    f"{esc(quote(last['run_id'], safe=''))}'>Airflow run</a>")
        answers += (f"<p class='explained' data-slot='{esc(item['slot_utc'])}'>"
                    f"{esc(item['answer'])}{run}<br><small>{logs}</small></p>")
    if explained == []:
        answers = "<p class='explained'>No slot on that day.</p>"
    return "<h3>Why / what happened</h3>" + form + answers


def _gaps(company: str, gaps: dict[str, Any] | None, token: str | None) -> str:
    if gaps is None:
        return ""
    rows = [[a["action"], a["schedule"], a["slot_utc"], a["recovery"], a["reason"]]
            for a in gaps["actions"]]
    recover = ""
    if token is not None and rows:
        recover = (f"<form method='post' action='{esc(company)}/recover' id='recover'>"
                   f"<input type='hidden' name='token' value='{esc(token)}'>"
                   f"<input type='hidden' name='days' value='{gaps['days']}'>"
                   "<button type='submit' id='do-recover'>Recover (backfill, skip or record "
                   "each gap as its recovery policy says)</button></form>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in gaps["notes"])
    return (f"<h3>Gaps of the last {gaps['days']} days</h3><form method='get' "
            f"action='{esc(company)}'>days <input name='gap_days' size='3' "
            f"value='{gaps['days']}'> <button type='submit'>look</button></form>"
            + (table(["would", "schedule", "slot (UTC)", "recovery", "why"], rows, "gaps")
               if rows else "<p id='gaps'>No gaps: every expected slot has a run.</p>")
            + (f"<ul>{notes}</ul>" if notes else "") + recover)


def plan_page(company: str, plan: dict[str, Any], lines: list[str], form: dict[str, str],
              token: str | None, writable: bool) -> str:
    periods = table(["period", "slot (UTC)", "timing", "what happens"],
                    [[p["period"], p["slot"], p["timing"], p["outcome"]] for p in plan["periods"]],
                    "plan-periods")
    pairs = zip(plan["old_next_local"], plan["old_next"], plan["new_next_local"],
                plan["new_next"], strict=False)
    nexts = table(["#", "old timing (local)", "(UTC)", "new timing (local)", "(UTC)"],
                  [[n + 1, *row] for n, row in enumerate(pairs)], "plan-next")
    holes = "".join(f"<li>{esc(h)}: no slot of either timing reports it</li>"
                    for h in plan["uncovered"])
    hidden = "".join(f"<input type='hidden' name='{esc(k)}' value='{esc(v)}'>"
                     for k, v in form.items() if k in ("schedule", "export_hour",
                                                       "interval_hours", "timezone", "cron"))
    if token is None:
        act = "<p class='readonly'>Only this company's operators can apply a change.</p>"
    else:
        verb = "Apply (write the config file)" if writable else (
            "Show the change to commit (the config is read-only here: nothing is written)")
        act = (f"<form method='post' action='reschedule' id='apply'>{hidden}"
               f"<input type='hidden' name='token' value='{esc(token)}'>why "
               "<input name='why' size='30' placeholder='recorded in the history'> "
               f"<button type='submit' id='do-apply'>{esc(verb)}</button></form>")
    return doc(f"Plan for {plan['schedule']}", (
        f"<p><a href='../{esc(company)}'>← {esc(company)}</a></p>"
        f"<h2>Change {esc(plan['schedule'])}</h2><p id='plan-summary'>"
        + "; ".join(f"{esc(k)} {esc(v['old'])} → <b>{esc(v['new'])}</b>"
                    for k, v in plan["changes"].items())
        + f" from <b>{esc(plan['effective_from'])}</b>; earlier slots keep the old timing.</p>"
        + nexts + "<h3>Each period around the switch</h3>" + periods
        + (f"<ul id='holes'>{holes}</ul>" if holes else "<p>No period is left out; "
           f"{plan['reported_twice_sent_once']} reported twice and sent once.</p>")
        + f"<h3>The change to {esc(plan['file'])}</h3><pre id='diff'>{esc(plan['diff'])}</pre>"
        + act + f"<pre hidden id='plan-text'>{esc(chr(10).join(lines))}</pre>"))
