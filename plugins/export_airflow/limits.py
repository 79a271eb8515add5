"""Every export task has an ``execution_timeout``: nothing an export starts runs unbounded.

Defaults per task kind, each overridable for the deployment from the environment the
dag-processor parses with (``EXPORT_TIMEOUT_RENDER=3h``, ``EXPORT_TIMEOUT_DELIVER=90m``, …;
``1h30m``/``45s`` forms) and per export with ``timeouts: {render: 3h, …}`` (ADR 0015).
Render's default (1 h) sits above the sources' ``statement_timeout`` (30 min,
export_lib/source/session.py) plus the upload of what was read; a sensor's is per poke (its
overall limit is the sensor's own ``timeout``). On a timeout Airflow raises in the task: the
exception unwinds through the COPY reader, which cancels the source query and closes its
connection (export_lib/render/copy.py); Airflow then calls ``on_kill`` as a backstop, which
finds nothing left to cancel (tests/system/scheduler/test_runaway.py observes both).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any

from export_lib.errors import ConfigError

DEFAULTS = {
    "resolve": timedelta(minutes=10),
    "sensor": timedelta(minutes=10),
    "render": timedelta(hours=1),
    "publish": timedelta(minutes=30),
    "deliver": timedelta(hours=1),
    "small": timedelta(minutes=5),
}
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def task_timeout(kind: str, environ: dict[str, str] | None = None) -> timedelta:
    """The ``execution_timeout`` of a task of ``kind`` (a key of :data:`DEFAULTS`)."""
    env = os.environ if environ is None else environ
    var = f"EXPORT_TIMEOUT_{kind.upper()}"
    text = env.get(var, "").strip()
    if not text:
        return DEFAULTS[kind]
    match = _DURATION.match(text)
    if not match or not any(match.groups()):
        raise ConfigError(f"{var}: {text!r} is not a duration; use e.g. '2h', '90m', '1h30m' or "
                          "'45s', or unset it for the default "
                          f"({int(DEFAULTS[kind].total_seconds())} s)")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if not value:
        raise ConfigError(f"{var}: {text!r} is zero; every export task needs a time limit")
    return value


def timeout_for(schedule: Any, kind: str) -> timedelta:
    """The ``execution_timeout`` of ``schedule``'s task of ``kind``: its ``timeouts.<kind>``,
    else the deployment's (:func:`task_timeout`)."""
    own = schedule.policies.timeouts
    return (own.get(kind) if own is not None else None) or task_timeout(kind)
