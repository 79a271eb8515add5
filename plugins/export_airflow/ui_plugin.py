"""The export pages plugin: the app of :mod:`export_airflow.pages` under /exports, shown in the
Airflow UI as Browse → Export obligations, Browse → Export runs and Browse → Export
companies, and as an "Export company" tab on each DAG's and DAG run's page.

Registered by the ``airflow.plugins`` entry point of the installed distribution (setup.cfg),
like ``export_airflow.plugin`` (ADR 0026). A module of its own so that importing the timetable's
plugin never imports FastAPI and the pages.

Airflow loads every plugin in every process that needs one (the scheduler, the dag-processor,
workers, task processes and CLI commands resolving the timetable), but reads ``fastapi_apps``
only in the api-server and in plugin listings (``airflow plugins``, ``/api/v2/plugins``). So
the pages are imported when that attribute is read: importing them with the plugin cost every
such process ~1.2 s of CPU (FastAPI, Airflow's api_fastapi app behind its auth dependencies,
the pages' read models; loading every plugin in a fresh process: 2.7 s of CPU before, 1.5 s
after, 5 Dec), a task process of the Kubernetes executor or `airflow tasks test` included.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class _Pages:
    """``fastapi_apps``, built on first read (a descriptor: the plugin stays a plain class)."""

    def __get__(self, plugin: object, owner: type | None = None) -> list[dict]:
        from export_airflow.pages.ui import app

        return [{"app": app, "url_prefix": "/exports", "name": "Export runs"}]


class ExportUiPlugin(AirflowPlugin):
    name = "export_ui"
    fastapi_apps = _Pages()
    external_views = [
        {"name": "Export obligations", "href": "/exports/obligations",
         "url_route": "export-obligations", "destination": "nav", "category": "browse"},
        {"name": "Export runs", "href": "/exports/", "url_route": "exports",
         "destination": "nav", "category": "browse"},
        {"name": "Export companies", "href": "/exports/companies", "url_route": "export-companies",
         "destination": "nav", "category": "browse"},
        # A tab on every DAG's and DAG run's page (Airflow fills in {DAG_ID}); a DAG that is not
        # an export DAG answers that it has no company.
        {"name": "Export company", "href": "/exports/companies/for-dag/{DAG_ID}",
         "url_route": "export-company", "destination": "dag"},
        {"name": "Export company", "href": "/exports/companies/for-dag/{DAG_ID}",
         "url_route": "export-company-run", "destination": "dag_run"},
    ]
