"""The package's provider metadata: Airflow's ``apache_airflow_provider`` entry point calls
:func:`get_provider_info` (setup.cfg), so ``airflow providers list`` lists the package, its
notifier is known to Airflow, and its settings are an ``[exports]`` section of Airflow's
configuration: ``airflow config list --section exports`` shows them, and each can be set as
``[exports] <name>`` in airflow.cfg or ``AIRFLOW__EXPORTS__<NAME>`` (beside the
``EXPORT_<NAME>`` variable, which wins; export_lib/settings.py reads the three).

Light on purpose: every Airflow process that lists providers calls it, so it imports only
export_lib's settings table (no Airflow, no DAG building).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from export_lib import settings

PACKAGE = "airflow-scheduled-exports"
NOTIFIERS = ["export_airflow.alerts.ExportAlertNotifier"]
# No option is declared "sensitive" (which would allow AIRFLOW__EXPORTS__UI_SECRET_CMD): at
# import, Airflow masks every sensitive option's value, and masking even an unset one imports the
# Task SDK's task runner (models, SQLAlchemy dialects) into every Airflow process, the CLI
# included (tests/dags/test_preload.py saw it). EXPORT_UI_SECRET is never logged by us either way.


def _type(allowed: str) -> str:
    """The option's type, from the values the setting accepts (``VARIABLES[].allowed``)."""
    if allowed.startswith("a whole number"):
        return "integer"
    if allowed.startswith("a number"):
        return "float"
    if allowed.startswith("true or false"):
        return "boolean"
    return "string"


def _literal(default: str, kind: str) -> str | None:
    """The default when it is a value of the option's type (``11``, ``false``), else None (a
    description such as "the working directory": the code's default applies)."""
    if kind == "boolean":
        return default if default in ("true", "false") else None
    if kind in ("integer", "float"):
        try:
            float(default)
        except ValueError:
            return None
        return default
    return None


def _options() -> dict[str, dict[str, Any]]:
    options = {}
    for variable in settings.VARIABLES:
        names = [variable.name]
        if variable.name.startswith(settings.TIMEOUT_ENV_PREFIX):  # one option per task kind
            names = [settings.TIMEOUT_ENV_PREFIX + kind.upper() for kind in settings.TASK_TIMEOUTS]
        for name in names:
            option = settings.exports_option(name)
            if option is None:
                continue
            kind = _type(variable.allowed)
            default = _literal(variable.default, kind)
            options[option] = {
                "description": f"{variable.meaning} Accepts {variable.allowed}. Default: "
                               f"{variable.default}. Also the variable {name}, which wins.",
                "version_added": None,
                "type": kind,
                # None: Airflow supplies no value, export_lib's own default applies (one source)
                "default": None,
                "example": default,
            }
    return options


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE,
        "name": "Scheduled exports",
        "description": "Scheduled, exactly-once data exports on Apache Airflow: the export "
                       "DAGs' timetable, operators, pages, alerts and cluster policy.",
        "versions": [metadata.version(PACKAGE)],
        "notifications": list(NOTIFIERS),
        "config": {
            "exports": {
                "description": "Deployment settings of the scheduled exports (each also an "
                               "EXPORT_<NAME> variable, which wins).",
                "options": _options(),
            },
        },
    }
