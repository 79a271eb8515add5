"""Our log lines and the run each is about (ADR 0010).

Every line we log carries ``company``, ``schedule``, ``run``, ``period`` and ``status``. The
first four are bound once, where a run's work starts (a pipeline entry point, an operator's
``execute``: :func:`run_context` around a block, or :func:`scope` on the function and
:func:`bind` once it knows its run), in a context variable, so everything called from there —
the ledger, the source, the store, the delivery engine — logs them without being handed the run.
``status`` is the run's state in the ledger as this process last knew it: the state a bound run
record had (the first one bound for that run in the scope), then each state the ledger moved the
run to (:func:`note_status`, after the transaction committed). It is kept per run key and shared
by nested scopes, so a state change inside a stage shows on the operator's lines after it. Our
loggers (:func:`get_logger`, the one way we log) read them at each call, together with any a
call passes in ``extra``, and put them on the record:

* always as record attributes (``record.company`` …, ``None`` when unknown);
* ``text`` (the default): also as ``company=… schedule=… run=… period=…`` words in front of a
  message that does not name the company itself, so a person reading or grepping the line
  finds them (not the status: it changes within a run, and grepping is by run);
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

FIELDS = ("company", "schedule", "run", "period")  # which run: merged narrowest last
STATUS = "status"
RECORD_FIELDS = (*FIELDS, STATUS)  # what a record carries
# What each field holds (docs/reference/metrics-and-logs.md is generated from it).
FIELD_HELP = {"company": "the company id",
              "schedule": "the schedule id: <company>/<export> or <company>/<channel>/<kind>",
              "run": "the run key: <schedule>/<slot in UTC>",
              "period": "the period exported, named in the company's time zone",
              STATUS: "the run's state in the ledger as the process writing the line last "
                      "knew it (registered, reading, rendering, validating, ready, failed, "
                      "skipped, cancelled)"}
Binder = Callable[..., AbstractContextManager[Any]]

# Immutable default: a context is replaced, never changed in place, so a thread or task that
# copied it keeps its own.
_context: ContextVar[Mapping[str, str]] = ContextVar("export_log_fields")
# True inside a scope (run_context, @scope) that resets what bind() sets.
_scoped: ContextVar[bool] = ContextVar("export_log_scoped", default=False)
# Run key -> its state as last known here. One dict per outermost scope, shared (not copied) by
# the scopes inside it: a state the ledger moved a run to inside a stage still holds on the
# operator's lines after the stage returned. Threads started inside share it, as they share the
# run.
_statuses: ContextVar[dict[str, str] | None] = ContextVar("export_log_statuses", default=None)
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


def note_status(run: str, status: str) -> None:
    """The ledger moved ``run`` to ``status``: lines about that run say so from now on, in the
    enclosing outermost scope (outside any scope there is no one to tell)."""
    board = _statuses.get()
    if board is not None:
        board[run] = str(status)


def _learn_status(fields: Mapping[str, str], status: str | None) -> None:
    """A bound run's state is the first known for it here: a record read earlier (a summary
    handed on from another task) must not undo a move this process made."""
    board = _statuses.get()
    if status is not None and board is not None and "run" in fields:
        board.setdefault(fields["run"], str(status))


@contextmanager
def _outermost() -> Iterator[None]:
    """A fresh status board for the outermost scope; an inner scope shares its parent's."""
    token = _statuses.set({}) if _statuses.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _statuses.reset(token)


@contextmanager
def run_context(*, company: str | None = None, schedule: str | None = None,
                run: str | None = None, period: str | None = None,
                status: str | None = None) -> Iterator[dict[str, str]]:
    """Every line of ours logged inside the block (in this thread or task, by whatever it
    calls) carries these fields, merged over the enclosing context's (see :func:`_merged`);
    ``status``: the run's state when it was read (see :func:`_learn_status`)."""
    fields = _merged(current(), {"company": company, "schedule": schedule, "run": run,
                                 "period": period})
    with _outermost():
        tokens = _context.set(fields), _scoped.set(True)
        try:
            _learn_status(fields, status)
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
        with _outermost():
            tokens = _context.set(current()), _scoped.set(True)
            try:
                return func(*args, **kwargs)
            finally:
                _scoped.reset(tokens[1])
                _context.reset(tokens[0])

    return scoped


def bind(*, company: str | None = None, schedule: str | None = None, run: str | None = None,
         period: str | None = None, status: str | None = None) -> None:
    """Bind fields for the rest of the enclosing :func:`scope` function or :func:`run_context`
    block. Refused anywhere else: the fields would stay on the caller's later lines."""
    if not _scoped.get():
        raise RuntimeError("logfmt.bind() outside a @scope function or run_context block")
    fields = _merged(current(), {"company": company, "schedule": schedule, "run": run,
                                 "period": period})
    _context.set(fields)
    _learn_status(fields, status)


def _status(fields: Mapping[str, str], given: Any) -> str | None:
    """The status a line about ``fields``' run carries: the run's last known here, else the one
    its call names (``extra=run.log_context()`` of a record that may be older)."""
    board = _statuses.get()
    known = board.get(fields["run"]) if board is not None and "run" in fields else None
    return known if known is not None else None if given is None else str(given)


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
        status = _status(fields, extra.pop(STATUS, None))
        if not _Mode.json and fields and isinstance(msg, str) and "company=" not in msg:
            # Escaped only when the message is %-formatted (it has args), as logging does.
            prefix = words(fields).replace("%", "%%") if args else words(fields)
            msg = f"{prefix}: {msg}"
        kwargs["extra"] = {**extra, **{name: fields.get(name) for name in FIELDS},
                           STATUS: status}
        # One frame more than logging expects (this method): the caller's file and line.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        bind = _Mode.bind if _Mode.json and fields else None
        keys = {**fields, STATUS: status} if status is not None else fields
        with bind(**keys) if bind is not None else nullcontext():
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
        for name in RECORD_FIELDS:
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
