"""The Airflow edge of the export library, laid out by concern:

- :mod:`export_airflow.building`: DAG building (the factory, the manual, restatement, gap audit and
  retention DAGs, trigger forms, retry schedules);
- :mod:`export_airflow.tasks`: what runs in a task (operators, sensors, recovery, lineage, time
  limits, assets);
- :mod:`export_airflow.pages`: the export pages of the Airflow UI (obligations, company view);
- :mod:`export_airflow.runtime`: connections, the ledger handle and metrics inside Airflow;
- :mod:`export_airflow.deploy`: the cluster policy and the before-fork preload.

The top level holds what Airflow or a deployment reaches by name: the plugins of the
``airflow.plugins`` entry points (``plugin``, ``ui_plugin``, ADR 0026); ``timetable`` and
``deadlines``, whose classes Airflow finds by qualname in every stored serialized DAG;
``alerts``, whose notifier stored deadline callbacks name; ``access``, run as
``python -m export_airflow.access sync`` by deployments; and re-export modules for paths that
files written into a deployment name (each says which and why). The pages never import DAG
building and DAG building never imports the pages; no two packages import each other
(``.importlinter``, tests/unit/test_layering.py).

An installed package (``make venv`` installs it editable from ``plugins/``; the wheel and the
image install it as is), so classes here are imported as ``export_airflow.<path>.<Class>``
everywhere (DAG files, the plugins, the scheduler), which keeps the qualnames of registered
timetables and deadline references identical.
"""

import sys as _sys

from structlog.contextvars import bound_contextvars as _bound_contextvars

from export_lib import settings as _settings
from export_lib.logfmt import install as _install_log_format


def _exports_option(option: str) -> str | None:
    """airflow.cfg's ``[exports] <option>``, which export_lib reads after EXPORT_<NAME> and
    AIRFLOW__EXPORTS__<NAME> (export_lib/settings.py). Only once Airflow is loaded (every
    Airflow process loads it before our plugins and DAGs): reading a setting never imports
    Airflow into a process that has not (its import masks secrets through the Task SDK's task
    runner, ~0.5 s; tests/dags/test_preload.py)."""
    if "airflow.configuration" not in _sys.modules:
        return None
    from airflow.sdk import conf

    return conf.get("exports", option, fallback=None)


_settings.use_airflow_config(_exports_option)

# EXPORT_LOG_FORMAT=json: our records' company/schedule/run/period become keys of Airflow's
# structured log records: Airflow's processor chain merges structlog's context variables into
# stdlib records too (ADR 0010).
_install_log_format(_settings.log_format(), bind=_bound_contextvars)
