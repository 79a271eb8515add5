"""The export plugin: the timetable and the deadline references, which Airflow only accepts
when a plugin registers them (the registered qualname must be the import path DAGs use:
``export_airflow.timetable.ExportTimetable``, ``export_airflow.deadlines.*``).

Registered by the ``airflow.plugins`` entry point of the installed distribution (setup.cfg),
never by a file in the plugins folder: Airflow loads both sources and refuses a second plugin of
the same name as an import error (ADR 0026).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from export_airflow.deadlines import AtRiskDeadline, OnTimeSlotDeadline
from export_airflow.timetable import ExportTimetable


class ExportPlugin(AirflowPlugin):
    name = "export_plugin"
    timetables = [ExportTimetable]
    deadline_references = [OnTimeSlotDeadline, AtRiskDeadline]
