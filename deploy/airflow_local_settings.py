"""Airflow local settings of the export package: copied to $AIRFLOW_HOME/config/ by `make setup`
(compose mounts it at /opt/airflow/config/). Airflow puts that directory and the plugins folder
on sys.path, so the policy lives with the rest of the Airflow edge in plugins/.

Airflow imports this module in every one of its processes. The ones that fork a child per task
or per DAG-file parse (the scheduler, whose LocalExecutor workers fork the tasks; a Celery
worker; the dag-processor) also import the DAG factory here, once, so every child inherits
export_lib instead of importing it again: ~0.45 s of CPU per task and per parse (ADR 0015).
"""

import logging
import sys

from export_airflow.cluster_policy import task_instance_mutation_hook, task_policy  # noqa: F401

# `airflow <command> ...`: the commands whose process forks task or parse children.
FORKING_COMMANDS = frozenset({"scheduler", "dag-processor", "celery"})

if sys.argv[1:2] and sys.argv[1] in FORKING_COMMANDS:
    try:
        import export_airflow.dag_factory  # noqa: F401
    except Exception:  # noqa: BLE001 - the process must start; each DAG file reports the error
        logging.getLogger(__name__).exception(
            "Pre-importing export_airflow.dag_factory in `airflow %s` failed; every task and "
            "DAG-file parse imports it itself (slower), and the DAG files show the same error "
            "as import errors", sys.argv[1])
