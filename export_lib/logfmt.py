"""Our log lines and the run each is about (ADR 0010).

Every line we log carries ``company``, ``schedule``, ``run`` and ``period``. They are bound once,
where a run's work starts (a pipeline entry point, an operator's ``execute``: :func:`run_context`
around a block, or :func:`scope` on the function and :func:`bind` once it knows its run), in a
context variable, so everything called from there — the ledger, the source, the store, the
delivery engine — logs them without being handed the run. Our loggers
(:func:`get_logger`, the one way we log) read them at each call, together with any of the four
a call passes in ``extra``, and put them on the record:

* always as record attributes (``record.company`` …, ``None`` when unknown);
* ``text`` (the default): also as ``company=… schedule=… run=… period=…`` words in front of a
  message that does not name the company itself, so a person reading or grepping the line
  finds them;
* ``json`` (``EXPORT_LOG_FORMAT=json``): as fields of the structured record, the message left
  as written. Airflow writes every task log line as a structlog JSON record and routes stdlib
  records through ``structlog.stdlib.ProcessorFormatter``, whose ``foreign_pre_chain`` has no
  ``ExtraAdder`` (record attributes are dropped) but has ``merge_contextvars``. So the Airflow
  edge hands :func:`install` structlog's ``bound_contextvars``; we bind the fields around each of
  our records only, and they become top-level keys of that record (not of Airflow's own lines).
  Where we own the handler (``exportctl``), :class:`JsonFormatter` writes one JSON object per
  line with the same keys as Airflow's records.

A line about no run (the settings, a config file, a summary over many companies) carries the
fields it has, or none. Bottom layer: this module reads no setting and imports nothing of ours.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

FIELDS = ("company", "schedule", "run", "period")
# What each field holds (docs/reference/metrics-and-logs.md is generated from it).
FIELD_HELP = {"company": "the company id",
              "schedule": "the schedule id: <company>/<export> or <company>/<channel>/<kind>",
              "run": "the run key: <schedule>/<slot in UTC>",
              "period": "the period exported, named in the company's time zone"}
Binder = Callable[..., AbstractContextManager[Any]]

# Immutable default: a context is replaced, never changed in place, so a thread or task that
# copied it keeps its own.
_context: ContextVar[Mapping[str, str]] = ContextVar("export_log_fields")
# True inside a scope (run_context, @scope) that resets what bind() sets.
_scoped: ContextVar[bool] = ContextVar("export_log_scoped", default=False)
P = ParamSpec("P")
R = TypeVar("R")


class _Mode:
    """What :func:`install` chose for this process."""

    json: bool = False
    bind: Binder | None = None


def current() -> dict[str, str]:
    """The fields bound here (by the innermost :func:`run_context`), without the unknown ones."""
    return dict(_context.get({}))


def _merged(outer: Mapping[str, str], given: Mapping[str, Any]) -> dict[str, str]:
    """``given`` over ``outer``, narrowest last: once a field names another company (schedule,
    run) than the outer context, the outer's narrower fields belong to something else and are
    dropped, so a line about another run never borrows this run's period."""
    out: dict[str, str] = {}
    same = True
    for name in FIELDS:
        value = given.get(name)
        if value is not None:
            same = same and str(value) == outer.get(name)
            out[name] = str(value)
        elif same and name in outer:
            out[name] = outer[name]
    return out


@contextmanager
def run_context(*, company: str | None = None, schedule: str | None = None,
                run: str | None = None, period: str | None = None) -> Iterator[dict[str, str]]:
    """Every line of ours logged inside the block (in this thread or task, by whatever it
    calls) carries these fields, merged over the enclosing context's (see :func:`_merged`)."""
    fields = _merged(current(), {"company": company, "schedule": schedule, "run": run,
                                 "period": period})
    tokens = _context.set(fields), _scoped.set(True)
    try:
        yield dict(fields)
    finally:
        _scoped.reset(tokens[1])
        _context.reset(tokens[0])


def scope(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator of an entry point that learns its run only once it has looked it up: what
    :func:`bind` binds inside ``func`` holds until ``func`` returns or raises (no indented
    block around the whole body)."""

    @functools.wraps(func)
    def scoped(*args: P.args, **kwargs: P.kwargs) -> R:
        tokens = _context.set(current()), _scoped.set(True)
        try:
            return func(*args, **kwargs)
        finally:
            _scoped.reset(tokens[1])
            _context.reset(tokens[0])

    return scoped


def bind(*, company: str | None = None, schedule: str | None = None, run: str | None = None,
         period: str | None = None) -> None:
    """Bind fields for the rest of the enclosing :func:`scope` function or :func:`run_context`
    block. Refused anywhere else: the fields would stay on the caller's later lines."""
    if not _scoped.get():
        raise RuntimeError("logfmt.bind() outside a @scope function or run_context block")
    _context.set(_merged(current(), {"company": company, "schedule": schedule, "run": run,
                                     "period": period}))


def words(fields: Mapping[str, str]) -> str:
    """``company=acme schedule=acme/daily-spend run=… period=2026-03-28``: the text form."""
    return " ".join(f"{name}={fields[name]}" for name in FIELDS if name in fields)


class RunLogger(logging.LoggerAdapter):
    """One of our loggers (:func:`get_logger`): every record carries the run context's fields
    (plus those a call passes in ``extra``) as described in the module docstring."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        extra = dict(kwargs.pop("extra", None) or {})
        fields = _merged(current(), {name: extra.pop(name, None) for name in FIELDS})
        if not _Mode.json and fields and isinstance(msg, str) and "company=" not in msg:
            # Escaped only when the message is %-formatted (it has args), as logging does.
            prefix = words(fields).replace("%", "%%") if args else words(fields)
            msg = f"{prefix}: {msg}"
        kwargs["extra"] = {**extra, **{name: fields.get(name) for name in FIELDS}}
        # One frame more than logging expects (this method): the caller's file and line.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        bind = _Mode.bind if _Mode.json and fields else None
        with bind(**fields) if bind is not None else nullcontext():
            self.logger.log(level, msg, *args, **kwargs)


def get_logger(name: str) -> RunLogger:
    """``log = get_logger(__name__)``: the logger every module of ours uses."""
    return RunLogger(logging.getLogger(name))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, shaped like Airflow's task log records: ``timestamp``,
    ``level``, ``event`` (the message), ``logger`` and the fields the record carries; a
    traceback goes under ``exception``. Never a JSON string inside a string."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def install(log_format: str = "text", *, bind: Binder | None = None) -> bool:
    """Choose this process's mode; returns whether it is JSON. The caller passes
    ``EXPORT_LOG_FORMAT`` (:func:`export_lib.settings.log_format`: this module reads no
    setting) and, where structlog renders the records (Airflow), ``bind``: a context manager
    factory taking the fields as keywords (``structlog.contextvars.bound_contextvars``).
    Idempotent: a second call simply chooses again."""
    _Mode.json = log_format == "json"
    _Mode.bind = bind
    return _Mode.json


@contextmanager
def installed(log_format: str = "text", *, bind: Binder | None = None) -> Iterator[bool]:
    """:func:`install` for a block (one ``exportctl`` command), then the mode before it."""
    saved = _Mode.json, _Mode.bind
    try:
        yield install(log_format, bind=bind)
    finally:
        _Mode.json, _Mode.bind = saved


def uninstall() -> None:
    """Back to text (tests)."""
    install("text")
