"""Registers the export Airflow components (Airflow only accepts registered timetables)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from export_airflow.timetable import ExportTimetable


class ExportPlugin(AirflowPlugin):
    name = "export_plugin"
    timetables = [ExportTimetable]
