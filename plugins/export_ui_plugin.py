"""Registers the export pages (plugins/export_airflow/ui.py, obligations_ui.py) under /exports,
shown in the Airflow UI as Browse → Export obligations and Browse → Export runs."""

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
