"""The generated reference (``scripts/docs_reference.py``, ``make docs``) is what the code says:
the pages and JSON Schemas regenerate byte-identical, the schemas accept every shipped config
the loader accepts and refuse, as an editor would while a person types, what the loader
refuses (a misspelt key, a value outside an enum)."""

from __future__ import annotations

import ast
import configparser
import copy
import fnmatch
import importlib.util
import json
import re
import shutil
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from export_lib import settings
from export_lib.config.edits import timing_edit_text
from export_lib.config.loader import load_catalog
from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("docs_reference",
                                               REPO / "scripts" / "docs_reference.py")
docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs)

CONFIG = REPO / "dags" / "config"
MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)\n")


def test_the_generated_pages_and_schemas_are_current(tmp_path: Path):
    assert docs.main([str(tmp_path)]) == 0
    generated = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                       if p.is_file())
    assert generated == sorted(docs.pages())
    stale = [path for path in generated
             if not (REPO / path).is_file()
             or (REPO / path).read_bytes() != (tmp_path / path).read_bytes()]
    assert not stale, (f"{', '.join(stale)} differ from what the code generates: run "
                       "`make docs` and commit the result")


def test_the_generator_refuses_a_field_without_description_or_a_pattern_without_words():
    with pytest.raises(ValueError, match=r"blk\.x has no description: add "
                                         r"Field\(description=\.\.\.\)"):
        docs._field("blk", "x", {"type": "string", "examples": ["a"]}, False)
    with pytest.raises(KeyError, match=r"pattern '\^\[xyz\]\+\$' has no words"):
        docs._field("blk", "x", {"type": "string", "pattern": "^[xyz]+$",
                                 "description": "d", "examples": ["x"]}, False)
    with pytest.raises(ValueError, match=r"field 'x' has no example: add examples="):
        docs._field("blk", "x", {"type": "string", "description": "d"}, True)


def test_the_config_page_has_an_anchor_for_the_fields_only_code_documented():
    page = (REPO / "docs" / "reference" / "config.md").read_text()
    for anchor in ("policies-skip_empty", "query-ingested_column", "query-order_by",
                   "query-table_schema", "source-table-table_schema",
                   "defaults-data-exports-channel_column", "widget-export-dst_gap",
                   "widget-export-dst_fold", "data-export-kind-dst_gap", "window-kind",
                   "filter-op", "policies-schema_policy", "policies-at_risk", "csv-timestamps",
                   "destination-sftp-path", "holidays-country", "company-holidays"):
        assert f'<a id="{anchor}"></a>' in page, anchor
    kinds = page[page.index('<a id="window-kind"></a>'):page.index('<a id="window-days"></a>')]
    for kind in ("calendar_day", "trailing_days", "previous_business_day", "trailing_hours",
                 "interval"):
        assert f"`{kind}`" in kinds and f"{kind} " in kinds  # listed, and said what it does
    ops = page[page.index('<a id="filter-op"></a>'):page.index('<a id="filter-value"></a>')]
    assert "one of `=`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `not_in`, `is_null`, " \
           "`is_not_null`" in ops.replace("&lt;", "<").replace("&gt;", ">")


def test_reference_link_names_an_anchor_the_page_has():
    from export_lib.config.json_schema import reference_link

    page = (REPO / "docs" / "reference" / "config.md").read_text()
    for model, field in (("QuerySpec", "order_by"), ("WidgetExportConfig", "deadline"),
                         ("WidgetExportConfig", "export_hour"), ("SftpDestination", "path"),
                         ("DataExportDefaults", "channel_column"), ("CompanyConfig", None)):
        link = reference_link(model, field)
        assert link.startswith("docs/reference/config.md#")
        assert f'<a id="{link.split("#")[1]}"></a>' in page, link
    assert reference_link("WidgetExportConfig", "deadline").endswith("#policies-deadline")


def _as_json(value: Any) -> Any:
    """The YAML as an editor's schema check sees it: dates and timestamps are strings."""
    if isinstance(value, dict):
        return {key: _as_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z") if value.tzinfo else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def _schema_of(path: Path) -> dict[str, Any]:
    """The schema a config file's first line names (relative to the file, as VS Code reads it)."""
    found = MODELINE.match(path.read_text())
    assert found, f"{path} does not start with '# yaml-language-server: $schema=…'"
    return json.loads((path.parent / found.group(1)).read_text())


def _errors(schema: dict[str, Any], data: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(_as_json(data)))


SHIPPED = sorted(CONFIG.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_config_names_its_schema_on_line_one_and_validates(path: Path):
    schema = _schema_of(path)
    jsonschema.Draft202012Validator.check_schema(schema)
    expected = ("defaults.schema.json" if path.name == "defaults.yaml" else
                "company.schema.json")
    assert MODELINE.match(path.read_text()).group(1) == f"../../export_lib/config/{expected}"
    assert _errors(schema, yaml.safe_load(path.read_text())) == []


def test_the_loader_reads_the_shipped_configs_with_their_schema_line():
    assert load_catalog(CONFIG).errors == {}


def _acme() -> dict[str, Any]:
    return yaml.safe_load((CONFIG / "acme.yaml").read_text())


def _loader_errors(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    config = tmp_path / "config"
    shutil.copytree(CONFIG, config)
    (config / "acme.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return list(load_catalog(config, now=datetime(2026, 12, 1, tzinfo=UTC)).errors.get(
        str(config / "acme.yaml"), ()))


def test_the_company_schema_refuses_a_misspelt_key_as_the_loader_does(tmp_path: Path):
    schema = _schema_of(CONFIG / "acme.yaml")
    data = _acme()
    widget = data["widget_exports"][0]
    widget["export_hours"] = widget.pop("export_hour")
    assert _errors(schema, data) == [
        "widget_exports/0: Additional properties are not allowed ('export_hours' was "
        "unexpected)"]
    assert any("export_hours" in line for line in _loader_errors(tmp_path, data))
    nested = _acme()
    nested["company"]["timezon"] = nested["company"].pop("timezone")
    assert _errors(schema, nested) == [
        "company: 'timezone' is a required property",
        "company: Additional properties are not allowed ('timezon' was unexpected)"]
    channel = _acme()
    channel["data_exports"][0]["primary"]["windw"] = {"days": 90}
    assert _errors(schema, channel) == [
        "data_exports/0/primary: Additional properties are not allowed ('windw' was "
        "unexpected)"]


def test_the_company_schema_refuses_a_wrong_enum_value_as_the_loader_does(tmp_path: Path):
    schema = _schema_of(CONFIG / "acme.yaml")
    data = _acme()
    data["widget_exports"][0]["late_start"] = "finsh"
    assert _errors(schema, data) == [
        "widget_exports/0/late_start: 'finsh' is not one of ['finish', 'skip', 'hold']"]
    assert any("late_start" in line for line in _loader_errors(tmp_path, data))
    window = _acme()
    window["widget_exports"][1]["window"] = {"kind": "calendar_days"}
    assert _errors(schema, window) == [
        "widget_exports/1/window/kind: 'calendar_days' is not one of ['calendar_day', "
        "'trailing_days', 'previous_business_day', 'trailing_hours', 'interval']"]
    destination = _acme()
    destination["widget_exports"][0]["destinations"][0]["type"] = "ftp"
    assert len(_errors(schema, destination)) == 1
    assert _errors(schema, destination)[0].startswith("widget_exports/0/destinations/0: ")


def test_the_schemas_refuse_a_bad_duration_a_history_id_and_a_misspelt_defaults_key():
    schema = _schema_of(CONFIG / "acme.yaml")
    data = _acme()
    data["widget_exports"][0]["deadline"] = "2 hours"
    data["widget_exports"][0]["history"] = [{"id": "old", "export_hour": 6}]
    assert _errors(schema, data) == [
        "widget_exports/0/deadline: '2 hours' does not match " + repr(
            schema["$defs"]["WidgetExportConfig"]["properties"]["deadline"]["pattern"]),
        "widget_exports/0/history/0: Additional properties are not allowed ('id' was "
        "unexpected)"]
    defaults = yaml.safe_load((CONFIG / "defaults.yaml").read_text())
    defaults_schema = _schema_of(CONFIG / "defaults.yaml")
    wrong = copy.deepcopy(defaults)
    wrong["policies"]["retention_day"] = 30
    wrong["sources"]["Demo-Source"] = wrong["sources"]["demo_source"]
    assert _errors(defaults_schema, wrong) == [
        "policies: Additional properties are not allowed ('retention_day' was unexpected)",
        "sources: 'Demo-Source' does not match any of the regexes: '^[a-z][a-z0-9_]{0,62}$'"]


def test_the_schemas_ship_in_the_wheel():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    globs = [g.strip() for g in cfg["options.package_data"]["export_lib"].split(",")]
    for name in ("company.schema.json", "defaults.schema.json"):
        assert any(fnmatch.fnmatch(f"config/{name}", g) for g in globs), name
        assert (REPO / "export_lib" / "config" / name).is_file()


def test_a_reschedule_edit_keeps_the_schema_line():
    original = (CONFIG / "acme.yaml").read_text()
    edited = timing_edit_text(original, kind="widget", ident="daily-spend", data_kind=None,
                              new={"export_hour": 9}, old={"export_hour": 7},
                              effective_from=datetime(2026, 12, 3, 8, tzinfo=UTC))
    assert edited != original
    assert edited.splitlines()[0] == original.splitlines()[0] == (
        "# yaml-language-server: $schema=../../export_lib/config/company.schema.json")


def _names_read_in_settings() -> set[str]:
    """Every variable name settings.py spells (a constant, a default of ``_read``, a prefix)."""
    tree = ast.parse((REPO / "export_lib" / "settings.py").read_text())
    prefixes = {"EXPORT_TIMEOUT_": "EXPORT_TIMEOUT_<KIND>", "AIRFLOW_CONN_": "AIRFLOW_CONN_<ID>"}
    # the prefixes of the Airflow form of every EXPORT_ variable (the page's header says so)
    forms = {settings.EXPORTS_PREFIX, settings.AIRFLOW_ENV_PREFIX}
    return {prefixes.get(node.value, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"(EXPORT|AIRFLOW)_[A-Z0-9_]*", node.value)
            and node.value not in forms}


def test_every_variable_settings_reads_is_declared_once_in_its_table():
    declared = [variable.name for variable in settings.VARIABLES]
    assert len(declared) == len(set(declared))
    assert set(declared) == _names_read_in_settings()
    assert all(v.meaning and v.default and v.allowed for v in settings.VARIABLES)
    page = (REPO / "docs" / "reference" / "environment.md").read_text()
    assert all(f"`{name}`" in page for name in declared)
