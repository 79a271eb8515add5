"""The UI pages are Jinja2 templates (export_airflow/pages/templates/, render.py): hostile values
from a company file, the ledger or a request come out escaped on every page — as text, in
attributes, in links — a template naming a variable the page did not pass fails, and no page
module builds HTML in Python any more. Plain rendering: no Airflow, no server (the pages' routes
are exercised in tests/dags/test_obligations_ui.py and test_company_ui.py)."""

from __future__ import annotations

import ast
import configparser
import fnmatch
import re
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = REPO / "plugins" / "export_airflow" / "pages"
TEMPLATES = PAGES / "templates"

SCRIPT = "<script>alert(1)</script>"
QUOTE1 = "x' onmouseover='alert(1)"  # ends a single-quoted attribute (the pages' style)
QUOTE2 = 'x" onmouseover="alert(1)'
JS = "javascript:alert(1)"
EVIL = f"{SCRIPT}{QUOTE1}{QUOTE2}"  # one value carrying every attack at once
LINK_ATTRIBUTES = ("href", "action", "src", "formaction")


class _Page(HTMLParser):
    """A page as the browser reads it: its elements' tags and attributes, its text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _assert_inert(html: str, *, shown: tuple[str, ...] = (EVIL,)) -> _Page:
    """No element or attribute the data put there, no link a browser would run, and each
    hostile value in ``shown`` read back whole as the page's text or an attribute's value."""
    page = _Page(html)
    assert "script" not in {tag for tag, _ in page.tags}
    injected = [(tag, name) for tag, attrs in page.tags for name in attrs
                if name.startswith("on")]
    assert injected == []
    links = [attrs[name] for _, attrs in page.tags for name in LINK_ATTRIBUTES
             if attrs.get(name) is not None]
    assert links, "the page has no link to check"
    assert [u for u in links if urlsplit(u).scheme not in ("", "http", "https")] == []
    values = {v for _, attrs in page.tags for v in attrs.values() if v}
    text = "".join(page.text)
    for value in shown:
        assert value in text or value in values, value
    assert SCRIPT not in html and "<script" not in html
    return page


# -- the pages' data, every field a person or a file can set made hostile ------------------------

def _cell(**extra):
    return {"kind": "run", "outcome": "late", "run_key": f"acme/{EVIL}", "slot_utc": EVIL,
            "slot_local": EVIL, "outcome_text": EVIL, "lateness": EVIL, "reason": EVIL,
            **extra}


def _obligations_data():
    strip = {"schedule": f"acme/{EVIL}", "company": EVIL, "company_status": "paused",
             "timing": EVIL, "owner": EVIL, "last_delivered_period": EVIL,
             "due": {"expected": 2, "missing": 1, "missed": 0, "at_risk": 1},
             "next_runs": [{"local": EVIL, "utc": EVIL}],
             "strip": [_cell(), _cell(kind="slot", outcome="due", at_risk=True,
                                      risk_point_utc=EVIL, deadline_utc=EVIL,
                                      version_change=EVIL)]}
    run = {"run_key": f"acme/{EVIL}", "outcome": "held", "period": EVIL, "slot_local": EVIL,
           "slot_utc": EVIL, "deadline_utc": EVIL, "lateness": EVIL, "delivered_at_utc": EVIL,
           "reason": EVIL, "at_risk": True, "risk_point_utc": EVIL}
    return {"now": datetime(2026, 3, 30, 12, 0), "companies": [EVIL],
            "schedule_ids": [f"acme/{EVIL}"], "schedules": [strip],
            "runs": {"runs": [run], "offset": 5, "limit": 5, "total": 20}}


def _detail():
    return {
        "run_key": f"acme/{EVIL}", "outcome": "held", "outcome_text": EVIL, "reason": EVIL,
        "company": EVIL, "schedule": f"acme/{EVIL}", "owner": EVIL, "period": EVIL,
        "timezone": EVIL, "window_start_utc": EVIL, "window_end_utc": EVIL, "slot_local": EVIL,
        "slot_utc": EVIL, "deadline_utc": EVIL, "lateness": EVIL, "delivered_at_utc": EVIL,
        "config_version": EVIL, "trigger": EVIL,
        "attempts": [{"generation": 1, "state": EVIL, "origin": f"airflow:{JS}/{EVIL}/render/try1",
                      "started_at_utc": EVIL, "finished_at_utc": EVIL, "rows": 1, "error": EVIL}],
        "artifacts": [{"version": 2, "rows": 1, "bytes": 1, "sha256": EVIL, "supersedes": 1,
                       "correction": True, "generated_at_utc": EVIL, "uri": EVIL}],
        "deliveries": [{"destination": EVIL, "type": EVIL, "version": 2, "state": EVIL,
                        "target": EVIL, "attempts": 1, "acknowledged_at_utc": EVIL,
                        "receipt": EVIL, "last_error": EVIL,
                        "history": [{"attempt": 1, "started_at_utc": EVIL, "duration_ms": 1,
                                     "outcome": EVIL, "error": EVIL, "receipt": EVIL}]}],
        "events": [{"at_utc": EVIL, "from": EVIL, "to": EVIL, "detail": EVIL}]}


def _company_data():
    card = {"schedule": f"acme/{EVIL}", "kind": "widget", "dag_id": JS, "timing": EVIL,
            "window": EVIL, "deadline_minutes": 30, "owner": EVIL,
            "configured": [{"key": EVIL, "value": EVIL, "source": EVIL, "default": True}],
            "next_runs": [{"slot_local": EVIL, "slot_utc": EVIL, "window_local": EVIL,
                           "window_start_utc": EVIL, "window_end_utc": EVIL,
                           "deadline_local": EVIL, "deadline_utc": EVIL}],
            "last_delivered": [{"destination": EVIL, "period": EVIL,
                                "acknowledged_at_utc": EVIL, "run_key": EVIL}],
            "versions": [{"config_version": EVIL, "current": True, "effective_from_utc": EVIL,
                          "timing": EVIL}],
            "switch_problems": [{"kind": EVIL, "period": EVIL, "timezone": EVIL,
                                 "switch": EVIL, "what": EVIL, "fix_text": EVIL}]}
    return {"company": JS, "name": EVIL, "timezone": EVIL, "status": EVIL, "now_utc": EVIL,
            "config_writable": False, "schedules": [card],
            "history": [{"at_utc": EVIL, "who": EVIL, "action": EVIL, "target": EVIL,
                         "outcome": EVIL, "why": EVIL}]}


def _explained():
    return [{"slot_utc": EVIL, "answer": EVIL, "run_key": EVIL, "in_ledger": True,
             "logs": [{"href": JS, "generation": 1, "state": EVIL, "task_id": EVIL,
                       "try_number": 1, "dag_id": JS, "run_id": EVIL},
                      {"href": f" Java\tScript:{EVIL}", "generation": 2, "state": EVIL,
                       "task_id": EVIL, "try_number": 2, "dag_id": JS, "run_id": EVIL}]}]


# -- every page ----------------------------------------------------------------------------------

def test_the_obligations_page_shows_hostile_values_as_text():
    from export_airflow.pages.obligations_html import obligations_page

    html = obligations_page(_obligations_data(), {"company": EVIL, "since": EVIL})
    page = _assert_inert(html)
    # the strip's square: a tooltip of hostile text, a link with the run key as a query value
    (square,) = [a for tag, a in page.tags if tag == "a" and "cell" in (a.get("class") or "")]
    assert square["title"].startswith(f"{EVIL} ({EVIL}): {EVIL}")
    (bar,) = [a for tag, a in page.tags if "data-version-change" in a]
    assert (bar["data-version-change"], bar["data-at-risk"]) == (EVIL, "true")
    assert square["href"].startswith("obligations/run?key=acme%2F%3Cscript%3E")
    filters = [a for tag, a in page.tags if tag == "input" and a.get("name") == "since"]
    assert filters == [{"type": "date", "name": "since", "id": "f-since", "value": EVIL}]


def test_the_run_page_shows_hostile_values_as_text_and_no_script_link():
    from export_airflow.pages.obligations_html import run_page

    forms = {"kind": "forms", "token": EVIL, "run_key": EVIL, "dag_id": JS,
             "forms": [{"name": "requeue", "target": EVIL, "label": EVIL,
                        "field": "destination", "why": True}]}
    html = run_page(_detail(), forms, note=EVIL, summary=EVIL)
    page = _assert_inert(html)
    hidden = {a["name"]: a["value"] for tag, a in page.tags
              if tag == "input" and a.get("type") == "hidden"}
    assert hidden == {"run_key": EVIL, "token": EVIL, "destination": EVIL}
    # the DAG link: the hostile DAG id is one path segment, never a scheme
    assert ("a", {"target": "_top", "href": "/dags/javascript%3Aalert%281%29"}) in page.tags
    # the task-log link of an attempt built from a hostile origin stays under /dags/
    (log,) = [a for tag, a in page.tags if tag == "a" and a.get("class") == "log"]
    assert log["href"].startswith("/dags/javascript%3Aalert%281%29/runs/%3Cscript%3E")
    for kind, extra in (("read-only", {"dag_id": EVIL}), ("no-secret", {"error": EVIL})):
        _assert_inert(run_page(_detail(), {"kind": kind, **extra}, note=None))


def test_the_company_page_shows_hostile_values_as_text_and_no_script_link():
    from export_airflow.pages.company_html import company_page

    html = company_page(_company_data(), EVIL, note=EVIL, error=EVIL, explained=_explained(),
                        gaps={"days": 7, "notes": [EVIL], "actions": [
                            {"action": EVIL, "schedule": EVIL, "slot_utc": EVIL,
                             "recovery": EVIL, "reason": EVIL}]},
                        done=("export-now", EVIL))
    page = _assert_inert(html)
    links = [a.get("href") or a.get("action") for tag, a in page.tags if tag in ("a", "form")]
    # the company id in a form's action: one path segment, so no "javascript:" scheme
    assert "javascript%3Aalert%281%29/plan" in links and "javascript%3Aalert%281%29" in links
    # log links taken whole from data: a script link (however spelt) becomes "#"
    assert links.count("#") == 2
    tokens = {a["value"] for tag, a in page.tags if a.get("name") == "token"}
    assert tokens == {EVIL}
    started = next(a for tag, a in page.tags if a.get("id") == "started-run")
    assert started["href"] == ("/dags/manual_export__javascript%3Aalert%281%29/runs/"
                               "%3Cscript%3Ealert%281%29%3C%2Fscript%3Ex%27%20onmouseover%3D"
                               "%27alert%281%29x%22%20onmouseover%3D%22alert%281%29")


def test_the_plan_and_companies_pages_show_hostile_values_as_text():
    from export_airflow.pages.company_html import companies, plan_page

    plan = {"schedule": EVIL, "periods": [{"period": EVIL, "slot": EVIL, "timing": EVIL,
                                           "outcome": EVIL}],
            "old_next_local": [EVIL], "old_next": [EVIL], "new_next_local": [EVIL],
            "new_next": [EVIL], "uncovered": [EVIL], "effective_from": EVIL,
            "changes": {EVIL: {"old": EVIL, "new": EVIL}}, "reported_twice_sent_once": 0,
            "file": EVIL, "diff": EVIL}
    page = _assert_inert(plan_page(JS, plan, [EVIL], {"schedule": EVIL, "cron": EVIL,
                                                      "why": "not carried"}, EVIL, True))
    assert {a["name"]: a["value"] for tag, a in page.tags if a.get("type") == "hidden"} == {
        "schedule": EVIL, "cron": EVIL, "token": EVIL}
    listing = _assert_inert(companies([{"company": JS, "name": EVIL, "timezone": EVIL}]))
    assert ("a", {"id": f"c-{JS}", "href": "companies/javascript%3Aalert%281%29"}) \
        in listing.tags


def test_the_runs_page_shows_hostile_values_as_text():
    from export_airflow.pages.render import render

    page = _assert_inert(render("runs.html", title=EVIL, rows=[[EVIL] * 8],
                                q={"company": EVIL, "schedule": EVIL, "state": EVIL,
                                   "unresolved": True},
                                nav={"shown": EVIL, "newer": "company=x&offset=0",
                                     "older": None}))
    assert {a.get("name"): a.get("value") for tag, a in page.tags if tag == "input"} == {
        "company": EVIL, "schedule": EVIL, "state": EVIL, "unresolved": "true"}


@pytest.mark.parametrize("url, kept", [
    ("/dags/a/runs/b/tasks/c?try_number=1", True), ("obligations/run?key=a", True),
    ("https://airflow.example/x", True), (JS, False), ("  JAVASCRIPT:alert(1)", False),
    ("java\tscript:alert(1)", False), ("java\nscript:alert(1)", False),
    ("data:text/html,<b>x</b>", False), ("vbscript:x", False),
    ("//evil.example/x", False), ("/\\evil.example/x", False), ("\x01//evil.example", False)])
def test_a_link_taken_from_data_is_kept_only_when_a_browser_would_not_run_it(url, kept):
    from export_airflow.pages.render import href

    assert href(url) == (url if kept else "#")


# -- StrictUndefined -----------------------------------------------------------------------------

def test_a_variable_the_page_did_not_pass_is_an_error_not_a_blank():
    from export_airflow.pages.company_html import company_page
    from export_airflow.pages.render import render
    from jinja2 import UndefinedError

    with pytest.raises(UndefinedError, match="'rows' is undefined"):
        render("companies.html", title="Export companies")
    data = _company_data()
    del data["schedules"][0]["owner"]
    with pytest.raises(UndefinedError, match="'dict object' has no attribute 'owner'"):
        company_page(data, None)
    # an optional value passed as None prints as the pages' dash, not "None"
    assert "<td>–</td>" in render("runs.html", title="t", rows=[[None]],
                                  q={"company": None, "schedule": None, "state": None,
                                     "unresolved": False},
                                  nav={"shown": "", "newer": None, "older": None})


# -- no HTML built in Python, none marked safe -----------------------------------------------------

MARKUP = re.compile(r"<\s*/?[A-Za-z!]|&[a-z]+;|&#")


def _markup_in_python(source: str) -> list[tuple[int, str]]:
    """Each string literal (f-strings' parts included) that holds a tag or an entity, with its
    line; docstrings excepted (they name paths like ``/companies/<company>``)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings and MARKUP.search(node.value))


def _escaping_by_hand(source: str) -> list[tuple[int, str]]:
    """Each use of an escaper or of Markup (what would mark a value safe) in Python."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.split(".")[0] in ("html", "markupsafe")]
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            found += [(node.lineno, a.name) for a in node.names
                      if module in ("html", "markupsafe") or a.name in ("Markup", "escape")]
        elif isinstance(node, ast.Name) and node.id in ("Markup", "escape"):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in ("Markup", "escape"):
            found.append((node.lineno, node.attr))
    return found


def test_the_check_finds_html_built_in_python():
    found = _markup_in_python('"""A <b>docstring</b> may."""\n'
                              'def f(x):\n    """<p> too."""\n    return f"<p>{x}</p>" + "&nbsp;"\n')
    assert found == [(4, "&nbsp;"), (4, "</p>"), (4, "<p>")]
    assert _escaping_by_hand("import html\nfrom jinja2 import Markup\nx = html.escape(y)\n") \
        == [(1, "html"), (2, "Markup"), (3, "escape")]


def test_no_page_module_builds_html_or_marks_anything_safe():
    modules = sorted(PAGES.glob("*.py"))
    assert {p.name for p in modules} >= {"obligations_html.py", "company_html.py", "ui.py",
                                         "obligations_ui.py", "company_ui.py",
                                         "company_actions.py", "render.py"}
    for path in modules:
        source = path.read_text()
        assert _markup_in_python(source) == [], path.name
        assert _escaping_by_hand(source) == [], path.name
    for path in sorted(TEMPLATES.iterdir()):
        text = path.read_text()
        assert not re.search(r"\|\s*safe\b|Markup|autoescape\s+false", text), path.name


def _glued(lines: list[str]) -> list[str]:
    """The lines whose break, dropped by render.JoinLines, would glue two words or a word and a
    printed value: a break must touch a tag (``<…>``) or a Jinja statement (``{%…%}``)."""
    out = []
    for line, after in zip(lines, lines[1:], strict=False):
        ends_in_text = not line.endswith((">", "%}", "#}"))
        starts_text = not after.startswith(("<", "{%", "{#"))
        if ends_in_text and starts_text and not (line.endswith("}}") and after.startswith("{{")):
            out.append(line)
    return out


def test_the_check_finds_words_glued_by_a_line_break():
    assert _glued(["<p>one", "two</p>", "{{ a }}", "{{ b }}", "<i>{{ c }}", "words"]) == [
        "<p>one", "<i>{{ c }}"]


def test_a_template_line_breaks_only_where_no_words_meet():
    glued = []
    for path in sorted(TEMPLATES.glob("*.html")):
        text = re.sub(r"{#.*?#}", "{##}", path.read_text(), flags=re.S)  # comments: one line
        glued += [(path.name, line) for line in _glued(
            [line.strip() for line in text.splitlines() if line.strip()])]
    assert glued == []


def test_the_templates_ship_in_the_wheel():
    """setup.cfg's package_data names every template (the wheel has no other way to get them:
    templates/ is not a Python package)."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    globs = [g.strip() for g in config["options.package_data"]["export_airflow"].split(",")]
    files = [f"pages/templates/{p.name}" for p in TEMPLATES.iterdir()]
    assert len(files) >= 9
    assert [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []
