"""The export pages in the Airflow UI (the FastAPI app of ``export_airflow.ui_plugin``): Browse →
Export obligations (``obligations_ui``, what it shows in ``obligations_html``), the company view
(``company_ui``, ``company_html``, changes in ``company_actions``, runs triggered through
``company_trigger``), who may see and change what (``ui_access``), all mounted by ``ui``. Their
HTML is the Jinja2 templates in ``templates/``, rendered with autoescaping by ``render``.

Imported by the API server only: never imports DAG building (:mod:`export_airflow.building`,
:mod:`export_airflow.tasks`, the timetable, the deadline references), and they never import it
(tests/unit/test_layering.py, ``.importlinter``).
"""
