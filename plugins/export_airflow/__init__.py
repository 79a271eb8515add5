"""The Airflow edge of the export library: operators, sensors, the export timetable, the DAG
factory, deadline references, the retry and cluster policies, and the status page.

An installed package (``make venv`` installs it editable from ``plugins/``; the wheel and the
image install it as is), so classes here are imported as ``export_airflow.<module>.<Class>``
everywhere (DAG files, the plugins, the scheduler), which keeps the qualnames of registered
timetables and deadline references identical. Its plugins (``plugin``, ``ui_plugin``) are
registered by the distribution's ``airflow.plugins`` entry points only (ADR 0026).
"""

from structlog.contextvars import bound_contextvars as _bound_contextvars

from export_lib import settings as _settings
from export_lib.logfmt import install as _install_log_format

# EXPORT_LOG_FORMAT=json: our records' company/schedule/run/period become keys of Airflow's
# structured log records: Airflow's processor chain merges structlog's context variables into
# stdlib records too (ADR 0010).
_install_log_format(_settings.log_format(), bind=_bound_contextvars)
