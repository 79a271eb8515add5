"""Compatibility path of the cluster policy, which lives in
:mod:`export_airflow.deploy.cluster_policy`.

Kept because a deployment's ``$AIRFLOW_HOME/config/airflow_local_settings.py`` is a copy of
deploy/airflow_local_settings.py made at install time (``make setup``, the image), and copies
made before the plugin was laid out in packages import these two hooks from here.
"""

from export_airflow.deploy.cluster_policy import task_instance_mutation_hook, task_policy

__all__ = ["task_instance_mutation_hook", "task_policy"]
