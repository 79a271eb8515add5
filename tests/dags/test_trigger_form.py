"""The manual export's trigger form (issue 24 item 5): date-time pickers for the window and
enums from the company's config, validated by Airflow against the *serialized* DAG when a run is
created (the REST API's and the form's path: ``create_dagrun`` → ``params.validate()``), so a
bad request is refused before any run exists. What the schema cannot say (order, span,
retention, the base export's own columns) resolve_window refuses (tests/unit/hostile)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

GOOD = {"company": "acme", "base_export": "acme/daily-spend", "reason": "quarterly audit",
        "window_start": "2026-03-27T00:00:00+01:00", "window_end": "2026-03-28T00:00:00+01:00",
        "columns": ["company_id", "value"], "format": "csv", "destinations": ["acme-dir"]}


@pytest.fixture(scope="module")
def serialized_manual_dag():
    from airflow.serialization.serialized_objects import DagSerialization
    from export_airflow.building.dag_factory import company_dags

    # As the dag-processor builds it (the whole company: the form's enums come from its
    # config), not as a worker does for one task (only_dag: open fields, re-checked by the task).
    dag = next(d for d in company_dags(REPO / "dags" / "config", "acme")
               if d.dag_id == "manual_export__acme")
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _validate(dag, conf):
    dag.params.deep_merge(conf).validate()


def test_the_window_fields_are_date_time_pickers_without_a_default(serialized_manual_dag):
    params = serialized_manual_dag.params
    for name in ("window_start", "window_end"):
        assert params.get_param(name).schema["format"] == "date-time"
        assert params.get_param(name).resolve() is None  # nothing pre-filled: the user picks
    assert params.get_param("base_export").schema["enum"] == [
        "acme/daily-spend", "acme/google-ads/primary", "acme/google-ads/secondary",
        "acme/hourly-clicks"]
    assert "value" in params.get_param("columns").schema["items"]["enum"]


def test_a_good_request_passes(serialized_manual_dag):
    _validate(serialized_manual_dag, GOOD)


@pytest.mark.parametrize(("change", "refused"), [
    ({"window_start": "yesterday"}, r"'yesterday' is not a 'date-time'"),
    ({"window_end": "2026-03-28T00:00:00"}, r"is not a 'date-time'"),  # no offset
    ({"window_start": None}, r"None is not of type 'string'"),
    ({"base_export": "dentsu-happiness/daily"}, r"is not one of \['acme/daily-spend'"),
    ({"columns": ["company_id", "password"]}, r"'password' is not one of"),
    ({"destinations": ["someone-elses-bucket"]}, r"'someone-elses-bucket' is not one of"),
    ({"reason": "x"}, r"'x' is too short"),
    ({"format": "xlsx"}, r"'xlsx' is not one of \['csv', 'jsonl', 'parquet'\]"),
])
def test_a_bad_request_is_refused_before_a_run_exists(serialized_manual_dag, change, refused):
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=refused):
        _validate(serialized_manual_dag, {**GOOD, **change})


def test_a_request_without_the_window_is_refused(serialized_manual_dag):
    from airflow.exceptions import ParamValidationError

    conf = {k: v for k, v in GOOD.items() if k != "window_end"}
    with pytest.raises(ParamValidationError, match=r"No value passed"):
        _validate(serialized_manual_dag, conf)
