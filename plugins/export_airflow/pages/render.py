"""The pages' Jinja2 environment: the templates in ``templates/`` beside this module (shipped in
the wheel: ``package_data`` in setup.cfg), every value autoescaped, a missing variable an error.

What the templates may rely on:

- **Autoescaping, always on** (every template here is HTML): a value is escaped where it is
  written, so no Python code builds markup and nothing is marked safe. A value from data never
  goes through ``|safe`` or ``Markup`` (tests/unit/test_pages_templates.py checks both).
- **StrictUndefined**: a variable or key the template names that the context lacks raises
  :class:`jinja2.UndefinedError` instead of printing nothing, so a renamed field fails a test
  rather than leaving a blank cell. Optional keys are read with ``.get()``.
- **None prints as "–"** (``finalize``), the pages' mark for "not yet / not known".
- **A template's lines are joined** (:class:`JoinLines`): a line break, with the spaces around
  it, is not output, so a template is indented like the HTML it writes and the page stays as
  compact as it was. A break therefore sits next to a tag or a Jinja statement, never between
  two words or a word and a printed value (tests/unit/test_pages_templates.py checks it); a
  space a line must end with is written before an empty comment, ``… </span> {# #}``.
- URL filters: ``query`` (a dict as a query string), ``pathpart`` (one path segment, ``/`` and
  ``:`` encoded, so a value never becomes a scheme or another path) and ``href`` (a link taken
  whole from data: only http(s) and scheme-less URLs pass, anything else — ``javascript:``,
  ``data:``, ``//other.host`` — becomes ``#``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from jinja2.ext import Extension

TEMPLATES = Path(__file__).with_name("templates")
SAFE_SCHEMES = ("", "http", "https")
OTHER_HOST = re.compile(r"^[\x00-\x20]*[/\\]{2}")  # "//host" or "/\host": another site


class JoinLines(Extension):
    """Drop each line break of a template's source, and the spaces around it."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return re.sub(r"[ \t]*\n[ \t]*", "", source)


def _dash(value: Any) -> Any:
    return "–" if value is None else value


def query(params: dict[str, Any]) -> str:
    return urlencode(params)


def pathpart(value: Any) -> str:
    return quote(str(value), safe="")


def href(value: Any) -> str:
    """``value`` when it is a link a page may follow, else ``#``: an http(s) URL or a path.
    urlsplit strips what browsers strip (leading spaces and controls, tabs and line breaks
    inside), so ``" java\\tscript:"`` is read as the scheme a browser would run."""
    text = str(value)
    if urlsplit(text).scheme.lower() not in SAFE_SCHEMES or OTHER_HOST.match(text):
        return "#"
    return text


ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True,
                  undefined=StrictUndefined, finalize=_dash, extensions=[JoinLines],
                  auto_reload=False)
ENV.filters.update(query=query, pathpart=pathpart, href=href)


def render(name: str, **context: Any) -> str:
    """The template ``name`` rendered with ``context``."""
    return ENV.get_template(name).render(**context)


def macro(template: str, name: str) -> Any:
    """The macro ``name`` of ``template``, callable from Python (its output is escaped)."""
    return getattr(ENV.get_template(template).module, name)
