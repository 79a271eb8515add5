"""Our log lines as JSON: ``EXPORT_LOG_FORMAT=json`` (issue 13, item 6).

Every line we log carries ``company= schedule= run= period=`` (style guide). With the switch on,
each record of our loggers (``export_lib.*`` and the operators of ``export_airflow``) has its
message replaced by one JSON object — ``message`` plus ``company``, ``schedule``, ``run`` and
``period`` when the line names them — before any handler sees it, so Airflow's task log (or
whatever handler the process has) carries the JSON as the message. Off (the default), nothing
changes. Installed once per process by :func:`install` (``exportctl`` and the Airflow plugin
package call it).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

FIELDS = ("company", "schedule", "run", "period")
_FIELD = re.compile(r"\b(company|schedule|run|period)=([^\s,;:]+(?::\d\dZ)?)")
_OURS = re.compile(r"^(export_lib(\.|$)|.*export_airflow)")
_installed: list[Callable[..., logging.LogRecord]] = []


def fields_of(message: str) -> dict[str, str]:
    """``company``, ``schedule``, ``run`` and ``period`` named in a log message (first wins)."""
    found: dict[str, str] = {}
    for name, value in _FIELD.findall(message):
        found.setdefault(name, value)
    return found


def as_json(record: logging.LogRecord) -> str:
    """The record as one JSON object: level, logger, the named fields, message."""
    message = record.getMessage()
    data: dict[str, Any] = {"level": record.levelname.lower(), "logger": record.name}
    named = fields_of(message)
    for name in FIELDS:
        value = getattr(record, name, None) or named.get(name)
        if value is not None:
            data[name] = str(value)
    data["message"] = message
    return json.dumps(data, ensure_ascii=False, sort_keys=False)


def is_ours(name: str) -> bool:
    return bool(_OURS.match(name))


def install(log_format: str = "text") -> bool:
    """Turn our records into JSON if ``log_format`` is ``json`` (idempotent); returns whether it
    is on. The caller passes ``EXPORT_LOG_FORMAT`` (:func:`export_lib.settings.log_format`):
    this bottom-layer module reads no setting itself."""
    if log_format != "json" or _installed:
        return bool(_installed)
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if is_ours(record.name):
            try:
                record.msg, record.args = as_json(record), None
            except Exception:  # noqa: BLE001 - a bad format string stays a plain line
                pass
        return record

    logging.setLogRecordFactory(factory)
    _installed.append(previous)
    return True


def uninstall() -> None:
    """Back to plain lines (tests)."""
    if _installed:
        logging.setLogRecordFactory(_installed.pop())
