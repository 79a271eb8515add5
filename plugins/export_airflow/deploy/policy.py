"""The cluster policy as Airflow loads it from a package: the ``airflow.policy`` entry point
(setup.cfg) names this module, and Airflow registers its pluggy hook implementations in every
process (``airflow.settings.initialize`` → ``load_policy_plugins``), so an installed wheel needs
no ``airflow_local_settings.py``. Importing it also registers the before-fork preload
(:mod:`export_airflow.deploy.preload`), as that file did.

Two things the entry point alone does not do in Airflow 3.3, done here:

- The scheduler skips ``task_instance_mutation_hook`` when creating a run's task instances
  while ``airflow.settings.task_instance_mutation_hook.is_noop`` is set, and only the import of
  an ``airflow_local_settings`` module clears it (``airflow/settings.py``,
  ``import_local_settings``). Cleared on import here, or backfill renders would not move to
  the catch-up pool (tests/dags/test_policy_entry_point.py pins it to the Airflow version).
- A deployment may still hold a copy of deploy/airflow_local_settings.py made before (it
  imports our two hooks, which Airflow registers as well): each hook here then stands aside,
  so nothing is applied twice (a backfill task would lose its priority twice).
"""

from __future__ import annotations

import sys
from typing import Any

from airflow.policies import hookimpl

from export_airflow.deploy import cluster_policy
from export_airflow.deploy.preload import install


def _local_settings_has(name: str) -> bool:
    """True when an ``airflow_local_settings`` module defines our hook ``name`` itself."""
    local = sys.modules.get("airflow_local_settings")
    return getattr(local, name, None) is getattr(cluster_policy, name)


@hookimpl
def task_policy(task: Any) -> None:
    if not _local_settings_has("task_policy"):
        cluster_policy.task_policy(task)


@hookimpl
def task_instance_mutation_hook(task_instance: Any, dag_run: Any) -> None:
    # no default: pluggy passes only the arguments an implementation declares without one
    if not _local_settings_has("task_instance_mutation_hook"):
        cluster_policy.task_instance_mutation_hook(task_instance, dag_run)


def _enable_mutation_hook() -> None:
    settings = sys.modules.get("airflow.settings")
    hook = getattr(settings, "task_instance_mutation_hook", None)
    if hook is not None:
        hook.is_noop = False


_enable_mutation_hook()
install()
