"""Airflow local settings of the export package: copied to $AIRFLOW_HOME/config/ by `make setup`
(compose mounts it at /opt/airflow/config/). Airflow puts that directory and the plugins folder
on sys.path, so the policy lives with the rest of the Airflow edge in plugins/."""

from export_airflow.cluster_policy import task_instance_mutation_hook, task_policy  # noqa: F401
