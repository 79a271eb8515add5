"""Airflow local settings of the export package: copied to $AIRFLOW_HOME/config/ by `make setup`
(the image copies it to /opt/airflow/config/). Airflow puts that directory on sys.path; the
policy lives with the rest of the Airflow edge in the installed export_airflow package."""

from export_airflow.deploy.cluster_policy import (  # noqa: F401
    task_instance_mutation_hook,
    task_policy,
)
from export_airflow.deploy.preload import install

# Task and parse processes are forks: the scheduler, dag-processor and Celery workers import
# the DAG factory once before they fork, so no task pays for it
# (plugins/export_airflow/deploy/preload.py).
install()
