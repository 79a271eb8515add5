"""Names that outlive a deploy keep resolving now that export_airflow is laid out in packages.

An upgraded deployment still holds, written before the upgrade:

- serialized DAGs (Airflow keeps every DAG version) naming the timetable and the deadline
  references by qualname, which Airflow looks up among the classes our plugin registers
  (``find_registered_custom_*`` in airflow/serialization/helpers.py): those classes stay defined
  at ``export_airflow.timetable`` and ``export_airflow.deadlines``;
- deadline alerts naming their async callback by dotted path, imported by the triggerer;
- files written into the deployment: ``$AIRFLOW_HOME/config/airflow_local_settings.py`` (a copy
  of deploy/airflow_local_settings.py), the company loaders ``exportctl loaders`` wrote, and the
  DAG files copied from ``dags/``. Their imports are the re-export modules at the old paths.
"""

from __future__ import annotations

import importlib

import pytest

STORED_TIMETABLE = "export_airflow.timetable.ExportTimetable"
STORED_REFERENCES = ("export_airflow.deadlines.OnTimeSlotDeadline",
                     "export_airflow.deadlines.AtRiskDeadline")
STORED_CALLBACK = "export_airflow.alerts.ExportAlertNotifier"


def test_stored_timetable_and_deadline_references_resolve_through_the_plugin():
    from airflow.serialization.helpers import (
        find_registered_custom_deadline_reference,
        find_registered_custom_timetable,
    )
    from export_airflow.deadlines import AtRiskDeadline, OnTimeSlotDeadline
    from export_airflow.timetable import ExportTimetable

    assert find_registered_custom_timetable(STORED_TIMETABLE) is ExportTimetable
    assert [find_registered_custom_deadline_reference(name) for name in STORED_REFERENCES] == [
        OnTimeSlotDeadline, AtRiskDeadline]


def test_every_export_airflow_name_a_serialized_dag_holds_resolves():
    import re

    from airflow._shared.module_loading import import_string
    from airflow.serialization.serialized_objects import DagSerialization
    from export_airflow.alerts import ExportAlertNotifier
    from export_airflow.building.dag_factory import company_dags

    from tests.conftest import REPO

    dag = next(d for d in company_dags(REPO / "dags" / "config", "acme")
               if d.dag_id == "widget_export__acme__daily-spend")
    blob = str(DagSerialization.to_dict(dag))
    names = set(re.findall(r"export_airflow(?:\.\w+)+", blob))
    assert {STORED_TIMETABLE, *STORED_REFERENCES, STORED_CALLBACK} <= names
    for name in sorted(names):  # task modules are modules; the rest are classes
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            assert import_string(name) is not None, name
    assert import_string(STORED_CALLBACK) is ExportAlertNotifier


@pytest.mark.parametrize(("statement", "new_path"), [
    # airflow_local_settings.py as deploy/ wrote it before the packages
    ("from export_airflow.cluster_policy import task_instance_mutation_hook, task_policy",
     "export_airflow.deploy.cluster_policy"),
    ("from export_airflow.preload import install", "export_airflow.deploy.preload"),
    # every company loader (export_lib.config.dag_loaders.LOADER_TEMPLATE)
    ("from export_airflow.dag_factory import register_company_dags",
     "export_airflow.building.dag_factory"),
    # DAG files copied from dags/
    ("from export_airflow.retention import build_retention_dag", "export_airflow.building.retention"),
    ("from export_airflow.gap_audit import build_gap_audit_dag", "export_airflow.building.gap_audit"),
    ("from export_airflow.assets import consumer_dag, schedule_asset",
     "export_airflow.tasks.assets"),
])
def test_files_written_into_a_deployment_still_import(statement, new_path):
    namespace: dict[str, object] = {}
    exec(statement, namespace)  # noqa: S102 - the line as it stands in those files
    names = statement.split(" import ")[1].split(", ")
    new = importlib.import_module(new_path)
    assert {n: namespace[n] for n in names} == {n: getattr(new, n) for n in names}


def test_the_loader_template_imports_through_the_kept_path():
    from export_lib.config.dag_loaders import LOADER_TEMPLATE

    assert "from export_airflow.dag_factory import register_company_dags" in LOADER_TEMPLATE
