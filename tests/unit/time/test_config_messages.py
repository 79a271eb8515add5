"""Config errors in words: a pattern is told as its rule with an example (never the regular
expression), a missing field as an example to add, and the manual export form's errors as
``manual export form: field: message`` lines from the same formatter."""

from __future__ import annotations

import re
import shutil
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from export_lib.config.loader import load_catalog
from export_lib.config.manual import ManualRequest, parse_request
from export_lib.config.messages import issues_from_validation
from export_lib.config.models import CompanyFile, DefaultsFile
from export_lib.config.patterns import RULES
from export_lib.errors import ConfigError

SHIPPED = Path(__file__).resolve().parents[3] / "dags" / "config"

COMPANY = """\
company: {id: %(id)s, name: Test, timezone: Europe/Berlin, owner: o@x.example}
widget_exports:
  - id: %(export)s
    export_hour: 7
    query: {table: widget_metrics, columns: [a], timestamp_column: a, tenant_column: company_id}
    destinations: [%(destination)s]
"""
LOCAL = "{id: d, type: local, path: outbox/t}"


def _patterns(tp: typing.Any, seen: set[type]) -> list[str]:
    """Every ``pattern`` constraint reachable from ``tp`` (models, containers, Annotated)."""
    found = []
    for meta in getattr(tp, "__metadata__", ()):  # Annotated[str, Field(pattern=…)]
        found += [str(m.pattern) for m in getattr(meta, "metadata", [meta])
                  if getattr(m, "pattern", None)]
    for arg in typing.get_args(tp):
        found += _patterns(arg, seen)
    if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in seen:
        seen.add(tp)
        for field in tp.model_fields.values():
            found += [str(m.pattern) for m in field.metadata if getattr(m, "pattern", None)]
            found += _patterns(field.annotation, seen)
    return found


@pytest.mark.parametrize("root", [CompanyFile, DefaultsFile, ManualRequest])
def test_every_pattern_a_user_can_break_has_its_rule_in_words(root):
    found = set(_patterns(root, set()))
    assert len(found) >= 4  # the walk reaches the patterns at all
    assert found <= set(RULES), f"patterns without words: {sorted(found - set(RULES))}"


def _load(tmp_path: Path, **fields: str) -> list[str]:
    shutil.copy(SHIPPED / "defaults.yaml", tmp_path / "defaults.yaml")
    values = {"id": "t", "export": "daily", "destination": LOCAL, **fields}
    (tmp_path / "t.yaml").write_text(COMPANY % values)
    return list(load_catalog(tmp_path).errors[str(tmp_path / "t.yaml")])


@pytest.mark.parametrize(("fields", "message"), [
    pytest.param({"id": "Acme"},
                 "company.id: 'Acme' is not a valid company id: use lower-case letters, digits, "
                 "and single '-' or '_' between them (e.g. acme)", id="company-id"),
    pytest.param({"export": "Daily_"},
                 "widget_exports[0].id: 'Daily_' is not a valid widget export id: use lower-case "
                 "letters, digits, and single '-' or '_' between them (e.g. daily-spend)",
                 id="export-id"),
    pytest.param({"destination": "{id: Bad!, type: local, path: outbox/t}"},
                 "widget_exports[0].destinations[0].id: 'Bad!' is not a valid destination id: "
                 "use lower-case letters, digits, '-' or '_', starting with a letter or digit "
                 "(e.g. acme-dir)", id="destination-id"),
    pytest.param({"destination": "{id: d, type: s3, bucket: My_Bucket}"},
                 "widget_exports[0].destinations[0].bucket: 'My_Bucket' is not a valid bucket "
                 "name: use 3 to 63 lower-case letters, digits, '.' or '-', starting and ending "
                 "with a letter or digit, as S3 requires (e.g. exports-bucket)", id="s3-bucket"),
    pytest.param({"destination": "{id: d, type: sftp, conn_id: '-x', path: t}"},
                 "widget_exports[0].destinations[0].conn_id: '-x' is not a valid connection id: "
                 "use letters, digits, '_', '.' or '-', starting with a letter, digit or '_' "
                 "(e.g. sftp_default)", id="conn-id"),
    pytest.param({"destination": "{id: d, type: local}"},
                 "widget_exports[0].destinations[0].path: required field is missing; add it, "
                 "e.g. path: outbox/acme/daily-spend", id="missing-path"),
])
def test_a_company_file_error_says_the_rule_and_an_example(tmp_path, fields, message):
    line = _load(tmp_path, **fields)[0]  # a bad company.id also fails the file-name check
    assert line == f"{tmp_path / 't.yaml'}: {message}"
    assert "pattern" not in line and "^" not in line


def test_a_missing_section_names_an_example_built_from_its_required_fields(tmp_path):
    shutil.copy(SHIPPED / "defaults.yaml", tmp_path / "defaults.yaml")
    (tmp_path / "t.yaml").write_text(
        "company: {id: t, name: Test, timezone: Europe/Berlin}\n"
        "widget_exports:\n  - {id: daily, destinations: [{id: d, type: local, path: o/t}]}\n")
    path = tmp_path / "t.yaml"
    assert load_catalog(tmp_path).errors[str(path)] == (
        f"{path}: company.owner: required field is missing; add it, e.g. owner: "
        "data-team@acme.example",
        f"{path}: widget_exports[0].query: required field is missing; add it, e.g. query: "
        "{table: widget_metrics, columns: [company_id, event_time, value], timestamp_column: "
        "event_time, tenant_column: company_id}")


def test_a_bad_source_name_in_defaults_is_said_in_words(tmp_path):
    text = (SHIPPED / "defaults.yaml").read_text()
    assert "\n  demo_source:\n" in text
    (tmp_path / "defaults.yaml").write_text(text.replace("\n  demo_source:\n",
                                                         "\n  Demo-Source:\n", 1))
    errors = load_catalog(tmp_path).errors[str(tmp_path / "defaults.yaml")]
    assert errors[0] == (
        f"{tmp_path / 'defaults.yaml'}: sources: 'Demo-Source' is not a valid source name: use "
        "a lower-case letter, then lower-case letters, digits or '_' (at most 63 characters) "
        "(e.g. demo_source)")


VALID = {"company": "acme", "base_export": "acme/daily-spend", "reason": "audit request 42",
         "window_start": "2026-03-27T00:00:00+01:00", "window_end": "2026-03-28T00:00:00+01:00"}


def test_manual_form_errors_use_the_config_formatter_with_list_items_in_brackets():
    params = {**VALID, "destinations": ["ok-dir", "../x"], "columns": ["value", "a b"],
              "reason": "x\ny"}
    with pytest.raises(ConfigError) as raised:
        parse_request(params)
    assert raised.value.issues == [
        "manual export form: columns[1]: 'a b' is not a valid column name: use letters, digits "
        "and '_', not starting with a digit (at most 63 characters) (e.g. event_time)",
        "manual export form: destinations[1]: '../x' is not a valid destination id: use "
        "lower-case letters, digits, '-' or '_', starting with a letter or digit "
        "(e.g. acme-dir)",
        "manual export form: reason: contains a control character (U+000A at position 2); "
        "write the reason as one line of printable characters (got 'x\\ny')"]
    assert str(raised.value) == "; ".join(raised.value.issues)


def test_a_manual_form_missing_its_window_names_an_example():
    params = {k: v for k, v in VALID.items() if k != "window_start"}
    with pytest.raises(ConfigError, match=re.escape(
            "manual export form: window_start: required field is missing; add it, e.g. "
            "window_start: '2026-03-01T00:00:00+01:00'")):
        parse_request(params)


def _models(tp: typing.Any, seen: dict[str, type[BaseModel]]) -> dict[str, type[BaseModel]]:
    """Every model reachable from ``tp``, by name."""
    for arg in typing.get_args(tp):
        _models(arg, seen)
    if isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__name__ not in seen:
        seen[tp.__name__] = tp
        for field in tp.model_fields.values():
            _models(field.annotation, seen)
    return seen


MODELS = {name: model for root in (CompanyFile, DefaultsFile, ManualRequest)
          for name, model in _models(root, {}).items()}


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
def test_every_required_field_names_an_example_value(model):
    """Each model given nothing: every missing field's line shows a value to write (the
    field's ``examples``, or one built from its type), never a placeholder."""
    try:
        model.model_validate({})
    except ValidationError as exc:
        lines = issues_from_validation("f.yaml", model, exc)
    else:
        return  # nothing required
    missing = [line for line in lines if "required field is missing" in line]
    assert missing == [line for line in missing
                       if re.search(r": required field is missing; add it, e\.g\. \w+: \S", line)
                       and "<text>" not in line], missing
