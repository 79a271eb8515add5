"""The export pages plugin: ``export_airflow.ui`` (and ``obligations_ui``) under /exports, shown
in the Airflow UI as Browse → Export obligations and Browse → Export runs.

Registered by the ``airflow.plugins`` entry point of the installed distribution (setup.cfg),
like ``export_airflow.plugin`` (ADR 0026). A module of its own so that importing the timetable's
plugin never imports FastAPI and the pages.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from export_airflow.ui import app


class ExportUiPlugin(AirflowPlugin):
    name = "export_ui"
    fastapi_apps = [{"app": app, "url_prefix": "/exports", "name": "Export runs"}]
    external_views = [
        {"name": "Export obligations", "href": "/exports/obligations",
         "url_route": "export-obligations", "destination": "nav", "category": "browse"},
        {"name": "Export runs", "href": "/exports/", "url_route": "exports",
         "destination": "nav", "category": "browse"},
    ]
