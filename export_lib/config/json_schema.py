"""The JSON Schemas an editor checks config files against while they are typed (VS Code's YAML
extension reads ``# yaml-language-server: $schema=…`` on a file's first line).

Both are the pydantic models' own schemas (``model_json_schema``: every field's type, default,
description and example, ``additionalProperties: false`` wherever the model forbids extra keys),
adjusted to what a person *writes*, which is less than what the loader validates:

* a company file is validated after ``defaults.yaml`` is layered under it
  (:func:`export_lib.config.loader._with_defaults`), so a data export channel may leave out its
  ``query``, ``primary`` and ``secondary``, and a primary or secondary every key defaults.yaml
  gives (``cron``, ``window``, ``destinations``);
* a ``history`` entry lists only what differed in an earlier version, so none of its keys is
  required, and it may not hold ``id`` or ``history`` (they name the export);
* a destination must say its ``type`` (pydantic picks the model by it).

Checks the schema cannot express (a timezone that exists, a cron croniter accepts, a table
listed in defaults.yaml, …) stay with ``exportctl validate``. The files are written by
``scripts/docs_reference.py`` (``make docs``) and shipped in the wheel beside this module; a
test regenerates them and fails when they are stale.
"""

from __future__ import annotations

import copy
from typing import Any

from export_lib.config.durations import DURATION_PATTERN, short
from export_lib.config.loader import _SHARED_OUTPUT_KEYS
from export_lib.config.models import CompanyFile, DefaultsFile
from export_lib.config.query import IDENTIFIER

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
COMPANY_SCHEMA_FILE = "company.schema.json"
DEFAULTS_SCHEMA_FILE = "defaults.schema.json"
# Versions of these hold only what differed (export_lib.config.versions.with_history).
_VERSIONED = {"WidgetExportConfig": "WidgetExportVersion",
              "DataExportKindConfig": "DataExportKindVersion"}
_FIXED_ACROSS_VERSIONS = ("id", "history")


def company_schema() -> dict[str, Any]:
    """The schema of a ``<company>.yaml`` as written (defaults.yaml fills in the rest)."""
    schema = _base(CompanyFile, "Company config file",
                   "One dags/config/<company id>.yaml: the company, its widget exports and its "
                   "data export channels. Keys defaults.yaml gives may be left out.")
    defs = schema["$defs"]
    channel = defs["DataExportConfig"]
    channel["required"] = ["channel"]
    # format, csv and destinations of a channel apply to both its exports (the loader moves them)
    shared = {key: {**copy.deepcopy(defs["DataExportKindConfig"]["properties"][key]),
                    "description": f"The {key} of both exports of the channel (each may set "
                                   "its own)."} for key in _SHARED_OUTPUT_KEYS}
    props = list(channel["properties"].items())
    at = [key for key, _ in props].index("primary")
    channel["properties"] = dict(props[:at] + list(shared.items()) + props[at:])
    defs["DataExportKindConfig"].pop("required", None)
    for name, version in _VERSIONED.items():
        entry = copy.deepcopy(defs[name])
        entry.pop("required", None)
        for key in _FIXED_ACROSS_VERSIONS:
            entry["properties"].pop(key, None)
        entry["title"] = version
        entry["description"] = ("An earlier version of the export: only the keys that differed, "
                                "and its effective_from (left out only on the oldest).")
        defs[version] = entry
        defs[name]["properties"]["history"]["items"] = {"$ref": f"#/$defs/{version}"}
    return _finish(schema)


def defaults_schema() -> dict[str, Any]:
    """The schema of ``dags/config/defaults.yaml``."""
    return _finish(_base(DefaultsFile, "Config defaults file",
                         "dags/config/defaults.yaml: the source allowlist, connection grants, "
                         "policies, data export defaults and alerts every company file "
                         "inherits."))


def _base(model: Any, title: str, description: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    return {"$schema": SCHEMA_DIALECT, **schema, "title": title, "description": description}


# Names checked by a validator (export_lib.config.query.check_identifier), not a pydantic
# pattern: the same rule for an editor. model → its fields that hold a column or table name.
IDENTIFIER_PATTERN = f"^{IDENTIFIER.pattern}$"
_IDENTIFIERS = {"QuerySpec": ("table", "table_schema", "columns", "timestamp_column",
                              "tenant_column", "ingested_column", "order_by"),
                "Filter": ("column",), "SourceTable": ("tenant_column", "table_schema")}


def _identifiers(name: str, definition: dict[str, Any]) -> None:
    for field in _IDENTIFIERS.get(name, ()):
        prop = definition["properties"][field]
        target = prop.get("items", prop)
        target.setdefault("pattern", IDENTIFIER_PATTERN)
    if name == "SourceConfig":
        tables = definition["properties"]["tables"]
        tables["propertyNames"] = {"pattern": IDENTIFIER_PATTERN}


def _finish(schema: dict[str, Any]) -> dict[str, Any]:
    for name, definition in schema.get("$defs", {}).items():
        _identifiers(name, definition)
        definition["description"] = _plain(definition.get("description", ""))
        props = definition.get("properties", {})
        kind = props.get("type")
        if kind is not None and "const" in kind:  # a destination: pydantic needs its type
            definition["required"] = sorted({*definition.get("required", ()), "type"},
                                            key=list(props).index)
        for prop in props.values():
            _tidy(prop)
    for prop in schema.get("properties", {}).values():
        _tidy(prop)
    return schema


def _tidy(prop: dict[str, Any]) -> None:
    _short_duration_default(prop)
    if "patternProperties" in prop:  # a name the pattern refuses is an error, as pydantic's
        prop.setdefault("additionalProperties", False)


def _short_duration_default(prop: dict[str, Any]) -> None:
    """A duration's default as the config writes it (``2h``), not pydantic's ``PT2H``."""
    if prop.get("pattern") == DURATION_PATTERN and isinstance(prop.get("default"), str):
        from datetime import timedelta

        from pydantic import TypeAdapter

        prop["default"] = short(TypeAdapter(timedelta).validate_python(prop["default"]))


def _plain(docstring: str) -> str:
    """A class docstring as one paragraph of plain text (no reST double backquotes)."""
    return " ".join(docstring.replace("``", "'").split())


# The reference's block anchors where the model's name would read badly (the rest: kebab case of
# the name without "Config"; destinations as destination-<type>).
ANCHORS = {"CompanyFile": "company-file", "DefaultsFile": "defaults-file", "QuerySpec": "query",
           "WindowSpec": "window", "CsvOptions": "csv", "HolidayCalendar": "holidays",
           "DataExportKindConfig": "data-export-kind", "PolicyFields": "policies",
           "DataExportDefaults": "defaults-data-exports",
           "DataExportKindDefaults": "defaults-data-export-kind"}
REFERENCE_PAGE = "docs/reference/config.md"


def anchor_of(model: str) -> str:
    """The anchor of a model's block in the configuration reference (``QuerySpec`` → ``query``)."""
    if model in ANCHORS:
        return ANCHORS[model]
    name = model.removesuffix("Config")
    if name.endswith("Destination"):
        return "destination-" + name.removesuffix("Destination").lower()
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def reference_link(model: str, field: str | None = None) -> str:
    """Where the reference documents a model's field, for an error message to point at:
    ``reference_link("QuerySpec", "order_by")`` → ``docs/reference/config.md#query-order_by``.
    A policy field (``deadline``, …) is documented once, under ``policies``."""
    from export_lib.config.models import POLICY_KEYS

    block = "policies" if field in POLICY_KEYS else anchor_of(model)
    return f"{REFERENCE_PAGE}#{block}-{field}" if field else f"{REFERENCE_PAGE}#{block}"


def is_duration(prop: dict[str, Any]) -> bool:
    """Whether a property schema is a config duration."""
    return prop.get("pattern") == DURATION_PATTERN


__all__ = ["COMPANY_SCHEMA_FILE", "DEFAULTS_SCHEMA_FILE", "anchor_of", "company_schema",
           "defaults_schema", "is_duration", "reference_link"]
