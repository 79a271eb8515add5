"""Import what export tasks import, once, in the processes that fork task and parse processes.

Every export task process parses its company's loader, which imports the DAG factory, the
operators and the config models (pydantic builds ~100 schemas): ~0.2 s of CPU per task, as much
again per parse child of the dag-processor (issue 25 item 2). Those processes are forks: the
LocalExecutor's workers are forked from the scheduler, each task from its worker, a Celery
worker's pool from the worker, and parse children from the dag-processor. What the parent has
imported before it forks, every child has for free (copy-on-write).

So :func:`install` (called from ``airflow_local_settings``, which every Airflow process imports
early) registers a before-fork hook in the scheduler, the dag-processor and a Celery worker
only: just before such a process forks for the first time, Airflow is fully initialised, and
the hook imports the factory then, with the modules the tasks import when they run
(:data:`MODULES`), and builds the Task SDK's listener manager (every plugin loaded). Not at
settings import: Airflow is still initialising there, and the factory imports Airflow models.
The other components (api-server, triggerer, the CLI) and the task processes themselves import
nothing more.

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
# the timetable and the deadlines), and what the tasks import when they run: measured with
# py-spy over a `make run` catch-up (136 task processes, 3 Dec), a task process spent 1.59 s of
# CPU, 1.0 s of it importing: psycopg and the ledger's SQLAlchemy dialect (0.45 s, every task),
# recover_missed's module and the pipeline behind it (0.27 s, every parse of a `recovery: each`
# DAG), the Postgres hook and pyarrow's CSV reader (renders), the S3 hook (the artifact store
# of `make cluster` and compose). ~1.0 s of CPU and ~60 MB once per forking process (its log
# line says), shared by its forks. The GCS hook (1.3 s, 54 MB of google-cloud) is not listed
# here, but building an Asset imports it (the providers' asset URI handlers, below).
# The stages' own lazy imports come last: the render engine (its pydantic models: ~10 ms of
# CPU in every render), the S3 artifact store (~4 ms, render, publish and deliver with
# artifacts on S3), the delivery metrics and the lease (cProfile of the task processes of
# bench/cluster.py, 4 Dec).
MODULES = (
    "export_airflow.building.dag_factory", "export_airflow.tasks.operators",
    "export_airflow.tasks.sensors", "export_airflow.tasks.recovery",
    "export_airflow.building.restatement", "export_airflow.building.manual_dag", "export_airflow.alerts",
    "export_airflow.runtime.connections", "export_airflow.runtime.ledger",
    "export_airflow.tasks.assets", "export_airflow.dag_factory", "export_lib.pipeline.asset_events",
    "export_lib.pipeline", "export_lib.delivery", "export_lib.ledger",
    "export_lib.ledger.seniority", "export_lib.render.engine", "export_lib.render.copy",
    "export_lib.storage.cloud", "export_lib.views.run_metrics", "export_lib.pipeline.lease",
    "psycopg", "sqlalchemy.dialects.postgresql.psycopg",
    "airflow.providers.postgres.hooks.postgres", "airflow.providers.amazon.aws.hooks.s3",
    "pyarrow", "pyarrow.csv",
)
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
    failed = []
    for name in MODULES:
        try:
            __import__(name)
        except Exception as exc:  # the task's own import names the error where people look
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    try:
        # Every task process builds the Task SDK's listener manager at start-up, which loads
        # every plugin (our UI plugin's entry point brings FastAPI and the pages): ~1 s
        # of CPU per task on a Celery worker, whose pool children had not loaded them (bench/
        # cluster.py, py-spy). Built here, the forks find it cached.
        from export_airflow.airflow_compat import get_listener_manager

        get_listener_manager()
    except Exception as exc:  # noqa: BLE001 - a broken plugin is reported by the task itself
        failed.append(f"the plugins' listeners ({type(exc).__name__}: {exc})")
    try:
        # A process's first DAG serialisation loads Airflow's DAG schema and its client
        # defaults (~12 ms of CPU): every parse child serialises its file's DAGs (bench/parse.py
        # "child_serialize_seconds"). One empty DAG here, and the children find them loaded.
        from airflow.sdk import DAG

        from export_airflow.airflow_compat import serialize_dag

        serialize_dag(DAG("export_airflow_preload", schedule=None))
    except Exception as exc:  # noqa: BLE001 - the parse children load them themselves
        failed.append(f"the DAG serialiser ({type(exc).__name__}: {exc})")
    try:
        # The first Asset a process builds (every export DAG has one: export_airflow.tasks.assets)
        # initialises the providers' asset URI handlers, which imports each provider's asset
        # module, the Google provider's GCS hook and google-cloud-storage among them: in every
        # task process and parse child, while parsing its loader (cProfile, bench/cluster.py:
        # the largest part of an export task's start-up). Built here, the forks have them.
        from export_airflow.tasks.assets import schedule_asset

        schedule_asset("preload", "preload/asset")
    except Exception as exc:  # noqa: BLE001 - the parse builds them itself
        failed.append(f"the providers' asset URI handlers ({type(exc).__name__}: {exc})")
    try:
        # botocore's data for an S3 client (~60 ms of JSON per boto3 session): render, publish
        # and deliver each open one (export_lib.storage.clients.share_loader).
        from export_lib.storage.clients import warm_s3

        warm_s3()
    except Exception as exc:  # noqa: BLE001 - the tasks load it themselves
        failed.append(f"botocore's S3 data ({type(exc).__name__}: {exc})")
    if failed:
        log.warning("export_airflow.deploy.preload: could not import %s; the tasks import them "
                    "themselves", "; ".join(failed))
    log.info("export_airflow.deploy.preload: %d modules and the plugins imported before this "
             "process forks (%.0f ms of CPU once, instead of in every task or parse child)",
             len(MODULES) - len(failed),
             (time.process_time() - started) * 1000)


def install(argv: list[str] | None = None) -> str | None:
    """Register :func:`preload` to run before this process's forks, when it is one of the
    forking components; returns the component's name (None: nothing registered)."""
    component = forking_component(sys.argv if argv is None else argv)
    if component is not None:
        os.register_at_fork(before=preload)
    return component
