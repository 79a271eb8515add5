#!/usr/bin/env python3
"""Write the generated reference pages and JSON Schemas from the code (``make docs``).

* ``docs/reference/config.md`` and ``export_lib/config/{company,defaults}.schema.json`` from the
  pydantic models (:mod:`export_lib.config.json_schema`; descriptions and examples live in the
  models' ``Field(description=…, examples=…)``);
* ``docs/reference/environment.md`` from :data:`export_lib.settings.VARIABLES`;
* ``docs/reference/cli.md`` from ``exportctl``'s argparse parser;
* ``docs/reference/metrics-and-logs.md`` from :mod:`export_lib.metrics`,
  :mod:`export_lib.views.prometheus` and :mod:`export_lib.logfmt`.

Deterministic: the same code gives the same bytes (no dates, no machine paths), so
``tests/unit/test_docs_reference.py`` regenerates into a temporary directory and compares.
``python scripts/docs_reference.py [OUT_DIR]`` writes under OUT_DIR (default: the repository).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # export_lib, when run as a script
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from export_lib.config.durations import DURATION_PATTERN  # noqa: E402
from export_lib.config.json_schema import (  # noqa: E402
    COMPANY_SCHEMA_FILE,
    DEFAULTS_SCHEMA_FILE,
    IDENTIFIER_PATTERN,
    anchor_of,
    company_schema,
    defaults_schema,
)
from export_lib.config.models import POLICY_KEYS  # noqa: E402
from export_lib.config.output_format import FORMAT_NAME_PATTERN  # noqa: E402
from export_lib.config.patterns import RULES  # noqa: E402
from export_lib.config.risk import AFTER_PATTERN  # noqa: E402


def _sibling(name: str) -> Any:
    """A module of scripts/ by its file (scripts/ is not put on sys.path: a test importing this
    file must not make ``ports`` or ``supervise`` importable by their bare names)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_pages = _sibling("reference_pages")
GENERATED, _md = _pages.GENERATED, _pages._md
cli_page, environment_page, metrics_page = (_pages.cli_page, _pages.environment_page,
                                            _pages.metrics_page)
SCHEMA_DIR = "export_lib/config"
# Every pattern a model checks, in words (a test fails on a pattern missing here).
PATTERN_WORDS = {
    # the models' patterns, in the words their error messages use (export_lib.config.patterns)
    **{regex: f"{rule.allowed} (e.g. {rule.example})" for regex, rule in RULES.items()},
    # patterns checked by validators rather than Field(pattern=...), shown in the schema
    IDENTIFIER_PATTERN: "a plain name: letters, digits and '_', not starting with a digit, at "
                        "most 63 characters (expose other names through a view)",
    DURATION_PATTERN: "a duration: 45s, 10m, 2h, 1h30m, 2d (days, hours, minutes, seconds in "
                      "that order) or ISO 8601 such as PT2H; at most 366 days",
    AFTER_PATTERN: "a share of the deadline such as 50% (1% to 99%), or a duration shorter "
                   "than the deadline such as 45m",
    FORMAT_NAME_PATTERN: "csv, jsonl, parquet, or the name an installed output format plugin "
                         "registers (lower case letters, digits, '_')",
}
FORMAT_WORDS = {"date-time": "date and time", "date": "date", "email": "email address"}
_VERSIONS = ("WidgetExportVersion", "DataExportKindVersion")
_WITH_POLICIES = ("WidgetExportConfig", "DataExportKindConfig", "DataExportKindDefaults")
_TITLES: dict[str, str] = {}  # block → its first YAML path (filled by _walk)
# block → the description of the field that first holds it (the user's words; a model's
# docstring is written for developers): filled by _walk
_BLOCK_TEXT: dict[str, str] = {}


# --- config.md ------------------------------------------------------------------------------

def _ref(prop: dict[str, Any]) -> str | None:
    return prop["$ref"].rsplit("/", 1)[1] if "$ref" in prop else None


def _non_null(prop: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The property without its ``null`` alternative, and whether it had one."""
    options = prop.get("anyOf")
    if options and any(o.get("type") == "null" for o in options):
        rest = [o for o in options if o.get("type") != "null"]
        merged = {k: v for k, v in prop.items() if k != "anyOf"}
        return ({**rest[0], **merged} if len(rest) == 1 else {**merged, "anyOf": rest}), True
    return prop, False


def _children(prop: dict[str, Any]) -> list[tuple[str, str]]:
    """(def name, path suffix) of the blocks a property holds."""
    prop, _ = _non_null(prop)
    if _ref(prop):
        return [(_ref(prop), "")]
    if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
        return [(d, "[]" + s) for d, s in _children(prop["items"])]
    for inner in (prop.get("additionalProperties"), *prop.get("patternProperties", {}).values()):
        if isinstance(inner, dict):
            return [(d, ".<name>" + s) for d, s in _children(inner)]
    return [(_ref(o), "") for o in prop.get("oneOf", ()) if _ref(o)]


def _type(prop: dict[str, Any]) -> str:
    prop, _ = _non_null(prop)
    if _ref(prop):
        return f"mapping ([{_TITLES.get(_ref(prop), _ref(prop))}](#{anchor_of(_ref(prop))}))"
    if prop.get("pattern") == DURATION_PATTERN:
        return "duration"
    if "oneOf" in prop:
        kinds = ", ".join(f"[{anchor_of(_ref(o)).removeprefix('destination-')}]"
                          f"(#{anchor_of(_ref(o))})" for o in prop["oneOf"])
        return f"destination ({kinds})"
    if "anyOf" in prop:
        return " or ".join(_type(o) for o in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return "list of " + _type(prop.get("items", {}))
    if kind == "object":
        values = prop.get("additionalProperties")
        if not isinstance(values, dict):
            values = next(iter(prop.get("patternProperties", {}).values()), {})
        return "mapping of names to " + _type(values)
    if "const" in prop and kind is None:
        return f"`{prop['const']}`"
    if "format" in prop:
        return FORMAT_WORDS[prop["format"]]
    return {"string": "text", "integer": "whole number", "number": "number",
            "boolean": "true/false"}.get(kind, "text" if "enum" in prop else "any value")


def _range(prop: dict[str, Any]) -> list[str]:
    """Numeric bounds in words (a duration's 0..0 is its "0 as a number", not a range)."""
    if prop.get("pattern") == DURATION_PATTERN:
        return []
    low, high = prop.get("minimum"), prop.get("maximum")
    if "exclusiveMinimum" in prop:
        return [f"above {prop['exclusiveMinimum']}"
                + (f", at most {high}" if high is not None else "")]
    if low is None and high is None:
        return []
    return [f"from {low} to {high}" if low is not None and high is not None
            else f"at least {low}" if low is not None else f"at most {high}"]


def _sizes(prop: dict[str, Any]) -> list[str]:
    words = []
    if prop.get("maxLength"):
        words.append(f"at most {prop['maxLength']} characters")
    if prop.get("minLength") == 1 and not prop.get("pattern"):
        words.append("not empty")
    low, high = prop.get("minItems") or prop.get("minProperties"), (
        prop.get("maxItems") or prop.get("maxProperties"))
    if low or high:
        words.append(f"{low} to {high} entries" if low and high else
                     f"at least {low} entries" if low else f"at most {high} entries")
    return words


def _allowed(prop: dict[str, Any]) -> list[str]:
    prop, _ = _non_null(prop)
    words: list[str] = []
    if "enum" in prop:
        words.append("one of " + ", ".join(f"`{_scalar(v)}`" for v in prop["enum"]))
    if "const" in prop and prop.get("type") is not None:
        words.append(f"`{prop['const']}`")
    if "pattern" in prop:
        if prop["pattern"] not in PATTERN_WORDS:
            raise KeyError(f"pattern {prop['pattern']!r} has no words in PATTERN_WORDS")
        words.append(PATTERN_WORDS[prop["pattern"]])
    words += _range(prop) + _sizes(prop)
    names = next(iter(prop.get("patternProperties", {})), None)
    if names is not None:
        words.append("names: " + PATTERN_WORDS[names])
    for key, what in (("items", "each"), ("propertyNames", "names")):
        inner = prop.get(key)
        if isinstance(inner, dict) and not _children(inner) and _allowed(inner):
            words.append(f"{what}: " + "; ".join(_allowed(inner)))
    for option in prop.get("anyOf", ()):
        words.extend(w for w in _allowed(option) if w not in words)
    return words


def _scalar(value: Any) -> str:
    return "\\t" if value == "\t" else str(value).lower() if isinstance(value, bool) else str(value)


def _example(name: str, prop: dict[str, Any], required: bool) -> str:
    base, _ = _non_null(prop)
    default = prop.get("default")
    if prop.get("examples"):
        value = prop["examples"][0]
    elif "enum" in base:
        value = next((v for v in base["enum"] if v != default), base["enum"][0])
    elif base.get("type") == "boolean":
        value = not default
    elif "const" in base:
        value = base["const"]
    elif default not in (None, [], {}, ""):
        value = default
    else:
        raise ValueError(f"field {name!r} has no example: add examples=[...] to its Field")
    text = yaml.safe_dump({name: value}, default_flow_style=True, width=10_000, sort_keys=False,
                          allow_unicode=True).strip()
    return text[1:-1]


def _default(prop: dict[str, Any], required: bool, name: str) -> str:
    if required:
        return "**required**"
    if "default" not in prop:  # required by the model, left out here: defaults.yaml gives it
        return "default: from `defaults.yaml`"
    value = prop["default"]
    if value is None:
        return "default: not set"
    if value in ([], {}):
        return "default: empty"
    if isinstance(value, dict) and _children(prop):
        return "default: the default of each of its fields"
    return "default: `" + (json.dumps(value, sort_keys=True) if isinstance(value, dict | list)
                           else _scalar(value)) + "`"


def _field(block: str, name: str, prop: dict[str, Any], required: bool) -> list[str]:
    if not prop.get("description"):
        raise ValueError(f"{block}.{name} has no description: add Field(description=...)")
    facts = [_type(prop), _default(prop, required, name), *map(_md, _allowed(prop))]
    children = _children(prop)
    if prop.get("examples") or not children:
        example = f"Example: `{_example(name, prop, required)}`"
    else:
        example = "Example: see " + ", ".join(f"[{_TITLES.get(c, c)}](#{anchor_of(c)})"
                                             for c, _ in children[:1]) + "."
    return [f'<a id="{block}-{name}"></a>', f"#### `{name}`", "",
            " · ".join(facts), "", _md(prop["description"]), "", example, ""]


def _block(defs: dict[str, Any], name: str, paths: list[str], skip: set[str]) -> list[str]:
    definition = defs[name]
    anchor = anchor_of(name)
    where = ", ".join(f"`{p}`" for p in paths[:6]) + (" …" if len(paths) > 6 else "")
    out = [f'<a id="{anchor}"></a>', f"### {_TITLES[name]}", "",
           f"Where: {where}", ""] if paths else [f'<a id="{anchor}"></a>', ""]
    # A destination type, or a block under two keys (primary / secondary): the model's own words
    own = "const" in definition.get("properties", {}).get("type", {}) or " / " in _TITLES[name]
    text = definition.get("description") if own else _BLOCK_TEXT.get(name) or definition.get(
        "description")
    if text:
        out += [_md(text), ""]
    if name in _VERSIONS:
        return out + ["Any key of the export except `id` and `history`, with its own "
                      "`effective_from`; see the export's fields above.", ""]
    if name in _WITH_POLICIES:
        links = ", ".join(f"[`{k}`](#policies-{k})" for k in POLICY_KEYS)
        out += [f"Also every [policy](#policies), for this export alone: {links}.", ""]
    required = set(definition.get("required", ()))
    for field, prop in definition.get("properties", {}).items():
        if field not in skip:
            out += _field(anchor, field, prop, field in required)
    return out


def _last_key(path: str) -> str:
    """``widget_exports[].query`` → ``query``; ``sources.<name>`` stays whole."""
    parts = path.split(".")
    return ".".join(parts[-2:] if parts[-1].startswith("<") else parts[-1:])


def _walk(schema: dict[str, Any], root: str, done: set[str]) -> list[tuple[str, list[str]]]:
    """Blocks reachable from the root, depth first in field order (a block right after the
    block that first holds it), with the YAML paths of each."""
    defs = schema["$defs"]
    order: list[str] = []
    paths: dict[str, list[str]] = {}

    def visit(name: str, at: str, depth: int) -> None:
        node = defs[name]
        for field, prop in node.get("properties", {}).items():
            for child, suffix in _children(prop):
                path = f"{at}.{field}{suffix}".lstrip(".")
                new = child not in paths
                paths.setdefault(child, [])
                if new and prop.get("description"):
                    _BLOCK_TEXT.setdefault(child, prop["description"])
                if path not in paths[child] and depth < 8:
                    paths[child].append(path)
                if new:
                    order.append(child)
                    visit(child, path, depth + 1)

    order.append(root)
    paths[root] = []
    visit(root, "", 0)
    for name, found in paths.items():
        kind = defs[name].get("properties", {}).get("type", {}).get("const")
        shorts = list(dict.fromkeys(_last_key(path) for path in found))
        title = (" / ".join(f"`{s}`" for s in shorts[:3]) if found else "Top level") + (
            f" with `type: {kind}`" if kind else "")
        _TITLES.setdefault(name, title)
    return [(n, paths[n]) for n in order if n not in done]


def config_page(company: dict[str, Any], defaults: dict[str, Any]) -> str:
    out = ["# Configuration reference", "", GENERATED, "",
           "A config directory (`dags/config/`) holds `defaults.yaml` and one "
           "`<company id>.yaml` per company. Each field below has its type, its default "
           "(**required** where it has none), the values it accepts, what it does and an "
           "example. `exportctl validate dags/config` checks a directory; the checks no schema "
           "can express (a time zone that exists, a table listed in `defaults.yaml`, a "
           "connection granted to the company) are made there.", "",
           "Editors: the first line of each shipped config, "
           f"`# yaml-language-server: $schema=…/{SCHEMA_DIR}/{COMPANY_SCHEMA_FILE}` "
           f"(`{DEFAULTS_SCHEMA_FILE}` for `defaults.yaml`), gives completion and errors while "
           "typing in VS Code with the YAML extension.", ""]
    company["$defs"]["CompanyFile"] = company
    defaults["$defs"]["DefaultsFile"] = defaults
    policies = {"title": "Policies", "description": "Run policies: under `policies:` in "
                "defaults.yaml for every export, and on each export for itself (an export's "
                "keys win; late_data, retries, timeouts, catchup and at_risk are merged key by "
                "key).", "properties": {k: company["$defs"]["WidgetExportConfig"]["properties"][k]
                                        for k in POLICY_KEYS}}
    company["$defs"]["PolicyFields"] = policies
    done: set[str] = set()
    _TITLES.clear()
    _BLOCK_TEXT.clear()
    _TITLES["PolicyFields"] = "Policies"
    for title, schema, root in (("Company file", company, "CompanyFile"),
                                ("defaults.yaml", defaults, "DefaultsFile")):
        blocks = _walk(schema, root, done)
        if root == "CompanyFile":
            at = [n for n, _ in blocks].index("WidgetExportConfig") + 1
            blocks.insert(at, ("PolicyFields", ["widget_exports[]", "data_exports[].primary",
                                                "data_exports[].secondary", "policies"]))
        out += [f"## {title}", "", *[f"- [{_TITLES[n]}]"
                                     f"(#{anchor_of(n)})" for n, _ in blocks if n != root], ""]
        for name, paths in blocks:
            skip = set(POLICY_KEYS) if name in _WITH_POLICIES else set()
            out += _block(schema["$defs"], name, paths, skip)
            done.add(name)
    del company["$defs"]["CompanyFile"], defaults["$defs"]["DefaultsFile"]
    del company["$defs"]["PolicyFields"]
    return "\n".join(out).rstrip() + "\n"


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def pages() -> dict[str, str]:
    """Every generated file: repository-relative path → text."""
    company, defaults = company_schema(), defaults_schema()
    return {
        f"{SCHEMA_DIR}/{COMPANY_SCHEMA_FILE}": schema_text(company),
        f"{SCHEMA_DIR}/{DEFAULTS_SCHEMA_FILE}": schema_text(defaults),
        "docs/reference/config.md": config_page(company, defaults),
        "docs/reference/environment.md": environment_page(),
        "docs/reference/cli.md": cli_page(),
        "docs/reference/metrics-and-logs.md": metrics_page(),
    }


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or [str(REPO)])[0])
    for path, text in pages().items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
