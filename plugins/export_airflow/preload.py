"""Import the export DAG factory once in the processes that fork task and parse processes.

Every export task process parses its company's loader, which imports the DAG factory, the
operators and the config models (pydantic builds ~100 schemas): ~0.2 s of CPU per task, as much
again per parse child of the dag-processor (issue 25 item 2). Those processes are forks: the
LocalExecutor's workers are forked from the scheduler, each task from its worker, a Celery
worker's pool from the worker, and parse children from the dag-processor. What the parent has
imported before it forks, every child has for free (copy-on-write).

So :func:`install` (called from ``airflow_local_settings``, which every Airflow process imports
early) registers a before-fork hook in the scheduler, the dag-processor and a Celery worker
only: just before such a process forks for the first time, Airflow is fully initialised, and
the hook imports the factory then. Not at settings import: Airflow is still initialising there,
and the factory imports Airflow models. The other components (api-server, triggerer, the CLI)
and the task processes themselves import nothing more.

A change to the plugin's code needs those components restarted (``make stop && make run``),
as Airflow already says of ``[dag_processor] parsing_pre_import_modules``.
"""

from __future__ import annotations

import logging
import os
import sys
import time

log = logging.getLogger(__name__)

# The modules an export task's parse and execute import (the factory brings the config models,
# the timetable and the deadlines).
MODULES = ("export_airflow.dag_factory", "export_airflow.operators", "export_airflow.sensors")
_done = False


def forking_component(argv: list[str]) -> str | None:
    """The component ``argv`` starts when its children are forks that parse export DAGs
    (``airflow scheduler``, ``airflow dag-processor``, ``airflow celery worker``), else None."""
    args = [a for a in argv[1:] if not a.startswith("-")]
    if not argv or os.path.basename(argv[0]) not in ("airflow", "__main__.py") or not args:
        return None
    if args[0] in ("scheduler", "dag-processor"):
        return args[0]
    if args[:2] == ["celery", "worker"]:
        return "celery worker"
    return None


def preload() -> None:
    """Import :data:`MODULES` (once); a failure is logged and left to the task to report."""
    global _done
    if _done:
        return
    _done = True
    started = time.process_time()
    try:
        for name in MODULES:
            __import__(name)
    except Exception as exc:  # the task's own import names the error where people look
        log.warning("export_airflow.preload: could not import %s: %s", MODULES, exc)
        return
    log.info("export_airflow.preload: %s imported before this process forks (%.0f ms of CPU "
             "once, instead of in every task or parse child)", ", ".join(MODULES),
             (time.process_time() - started) * 1000)


def install(argv: list[str] | None = None) -> str | None:
    """Register :func:`preload` to run before this process's forks, when it is one of the
    forking components; returns the component's name (None: nothing registered)."""
    component = forking_component(sys.argv if argv is None else argv)
    if component is not None:
        os.register_at_fork(before=preload)
    return component
