"""Registers the export Airflow components: Airflow only accepts registered timetables and
deadline references (qualnames must match, hence the imports from export_airflow.*)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from export_airflow.deadlines import AtRiskDeadline, OnTimeSlotDeadline
from export_airflow.timetable import ExportTimetable


class ExportPlugin(AirflowPlugin):
    name = "export_plugin"
    timetables = [ExportTimetable]
    deadline_references = [OnTimeSlotDeadline, AtRiskDeadline]
