"""Airflow local settings of the export package: copied to $AIRFLOW_HOME/config/ by `make setup`
(compose mounts it at /opt/airflow/config/). Airflow puts that directory and the plugins folder
on sys.path, so the policy lives with the rest of the Airflow edge in plugins/."""

from export_airflow.cluster_policy import task_instance_mutation_hook, task_policy  # noqa: F401
from export_airflow.preload import install

# Task and parse processes are forks: the scheduler, dag-processor and Celery workers import
# the DAG factory once before they fork, so no task pays for it (plugins/export_airflow/preload.py).
install()
