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

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from export_lib import settings

DEFAULTS = settings.TASK_TIMEOUTS


def task_timeout(kind: str, environ: Mapping[str, str] | None = None) -> timedelta:
    """The deployment's ``execution_timeout`` of a task of ``kind`` (a key of
    :data:`DEFAULTS`): ``EXPORT_TIMEOUT_<KIND>``, else the default (export_lib.settings)."""
    return settings.task_timeout(kind, environ)


def timeout_for(schedule: Any, kind: str) -> timedelta:
    """The ``execution_timeout`` of ``schedule``'s task of ``kind``: its ``timeouts.<kind>``,
    else the deployment's (:func:`task_timeout`)."""
    own = schedule.policies.timeouts
    return (own.get(kind) if own is not None else None) or task_timeout(kind)
