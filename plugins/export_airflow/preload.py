"""Compatibility path of the before-fork preload, which lives in
:mod:`export_airflow.deploy.preload`.

Kept because a deployment's ``$AIRFLOW_HOME/config/airflow_local_settings.py`` is a copy of
deploy/airflow_local_settings.py made at install time, and copies made before the plugin was laid
out in packages call ``install`` from here.
"""

from export_airflow.deploy.preload import install

__all__ = ["install"]
