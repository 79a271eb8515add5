"""Turn pydantic validation errors into ``file: field.path: message`` lines for humans.

``widget_exports[1].window.days`` rather than pydantic's ``('widget_exports', 1, 'window',
'days')``; discriminator tags (``destinations[0].sftp``) are dropped from the path; unknown
keys name the closest allowed key and list all of them; built-in messages show the bad value.
A value that does not match a field's pattern is told the rule in words with an example
(:mod:`export_lib.config.patterns`), never the regular expression; a missing field is told
an example to add (the field's ``examples``, else one by type). Config files and the manual
export trigger form (file ``manual export form``) go through the same formatter.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from export_lib.config.limits import cut_line, shown
from export_lib.config.patterns import RULES

_NO_VALUE_TYPES = {"missing", "extra_forbidden"}
# How a field is named in a message when its key does not say it on its own.
_NOUNS = {"conn_id": "connection id", "class": "notifier class", "company": "company id",
          "source": "source name", "sources": "source name", "destination_areas": "company id",
          "connections": "connection id", "columns": "column name", "order_by": "column name",
          "destinations": "destination id", "base_export": "export id",
          "channel": "channel id", "message_field": "keyword name", "bucket": "bucket name"}


def invalid(kind: str, message: str) -> PydanticCustomError:
    """A pydantic error carrying a finished human message (no template substitution)."""
    return PydanticCustomError(f"export_{kind}", message)


def _unwrap(tp: Any) -> list[Any]:
    """The concrete member types of ``tp`` (through Annotated, Optional and unions)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(tp) for m in _unwrap(arg) if m is not type(None)]
    return [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _tagged(members: list[Any], tag: str) -> Any:
    for member in members:
        if _is_model(member):
            type_field = member.model_fields.get("type")
            if type_field is not None and type_field.default == tag:
                return member
    return None


@dataclass
class _Place:
    """Where an error's ``loc`` points: the path as written, the allowed keys there, the field
    it is in, and the keys the user wrote (``keys[-1]``: the last one)."""

    path: str
    allowed: list[str] | None
    field: FieldInfo | None
    keys: list[str]
    step: Literal["field", "item", "key"] = "field"  # the field itself, a list item, a dict key


def _walk(root: type[BaseModel], loc: tuple[Any, ...]) -> _Place:
    """Render ``loc`` as a dotted path (``destinations[0].bucket``)."""
    place = _Place("", None, None, [])
    current: list[Any] = [root]
    for part in loc:
        models = [m for m in current if _is_model(m)]
        if part == "[key]":  # pydantic's marker: the dict key just walked was the bad value
            continue
        if isinstance(part, int):
            place.path += f"[{part}]"
            place.step = "item"
            current = [x for m in current if typing.get_origin(m) in (tuple, list)
                       and typing.get_args(m) for x in _unwrap(typing.get_args(m)[0])]
            continue
        mappings = [m for m in current if typing.get_origin(m) is dict]
        if mappings and not models:
            # A key the user chose (``sources: {demo_source: …}``): the message shows it when
            # the key itself is wrong, so the path names the mapping only.
            key_failed = loc[-1] == "[key]" and part == loc[-2]
            if key_failed:
                place.step = "key"
            else:
                place.path += f".{part}"
                place.step = "field"
            current = [x for m in mappings for x in _unwrap(typing.get_args(m)[1])]
            continue
        tagged = _tagged(current, part)
        if tagged is not None and not any(part in m.model_fields for m in models):
            current = [tagged]  # a discriminator tag, not a key the user wrote
            continue
        place.allowed = sorted(models[0].model_fields) if models else None
        place.path += f".{part}" if place.path else str(part)
        place.keys.append(str(part))
        place.step = "field"
        place.field = next((m.model_fields[part] for m in models if part in m.model_fields),
                           None)
        current = _unwrap(place.field.annotation) if place.field is not None else []
    place.path = place.path.lstrip(".") or "(file)"
    return place


def _noun(place: _Place) -> str:
    """What the bad value is, in words: ``company id``, ``destination id``, ``bucket name``."""
    name = place.keys[-1] if place.keys else "value"
    if name == "id" and len(place.keys) > 1:
        return f"{place.keys[-2].removesuffix('s').replace('_', ' ')} id"
    if name in _NOUNS:
        return _NOUNS[name]
    name = name.replace("_", " ")
    return name.removesuffix("s") if place.step == "item" else name


def _example(field: FieldInfo | None) -> Any:
    """An example value of ``field``: its first ``examples`` entry, else one by its type."""
    if field is None:
        return None
    if field.examples:
        return field.examples[0]
    return _example_of(field.annotation)


def _example_of(tp: Any, depth: int = 0) -> Any:
    members = _unwrap(tp)
    if not members or depth > 2:
        return None
    tp = members[0]
    origin = typing.get_origin(tp)
    if origin is Literal:
        return typing.get_args(tp)[0]
    if origin in (tuple, list) and typing.get_args(tp):
        item = _example_of(typing.get_args(tp)[0], depth + 1)
        return [item] if item is not None else []
    if _is_model(tp):
        required = {name: _example(f) if f.examples else _example_of(f.annotation, depth + 1)
                    for name, f in tp.model_fields.items() if f.is_required()}
        return {k: ("<text>" if v is None else v) for k, v in required.items()}
    simple = {bool: True, int: 1, float: 1.5, str: "<text>", timedelta: "2h",
              datetime: "2026-01-01T00:00:00Z", date: "2026-01-01"}
    return simple.get(tp)


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001`` anchors: an example repeats a shared value instead of aliasing it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _as_yaml(key: str, value: Any) -> str:
    """``key: value`` as one line of YAML (flow style), the way a config file writes it."""
    text = yaml.dump({key: value}, Dumper=_PlainDumper, default_flow_style=True,
                     sort_keys=False, width=10_000, allow_unicode=True).strip()
    return text[1:-1] if text.startswith("{") else text


def _pattern_message(error: dict[str, Any], place: _Place) -> str:
    rule = RULES.get(str(error.get("ctx", {}).get("pattern", "")))
    what = f"{shown(error.get('input'))} is not a valid {_noun(place)}"
    if rule is None:
        return what  # never the regular expression itself
    example = rule.example
    examples = place.field.examples if place.field is not None else None
    if place.step == "field" and examples and isinstance(examples[0], str):
        example = examples[0]
    return f"{what}: use {rule.allowed} (e.g. {example})"


def _message(error: dict[str, Any], place: _Place, key: str) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = place.allowed
        close = difflib.get_close_matches(key[:100], allowed or [], n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        keys = f"allowed keys: {', '.join(allowed)}" if allowed else "remove it"
        return f"unknown key {shown(key)}; {hint}{keys}"
    if kind == "missing":
        example = _example(place.field)
        if example is None or key.isdigit():
            return "required field is missing; add it"
        return f"required field is missing; add it, e.g. {_as_yaml(key, example)}"
    if kind == "string_pattern_mismatch":
        return _pattern_message(error, place)
    message = error["msg"].removeprefix("Value error, ")
    if kind.startswith("export_") or isinstance(error.get("input"), dict):
        return message  # a whole section's input says nothing the message does not
    return f"{message} (got {shown(error.get('input'))})"


def issues_from_validation(file: str, root: type[BaseModel], exc: ValidationError, *,
                           within: str = "") -> list[str]:
    """Every error of ``exc`` as a ``file: field.path: message`` line (duplicates dropped).

    ``within`` prefixes the field paths when ``root`` is a part of the file (``query``); an
    empty ``file`` leaves the ``file: `` out.
    """
    lines: list[str] = []
    errors = exc.errors()
    failing = [tuple(e["loc"]) for e in errors if e["type"] != "too_short"]
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "too_short" and any(f[:len(loc)] == loc and f != loc
                                                for f in failing):
            continue  # pydantic adds "too short" when an item failed; the item error says why
        place = _walk(root, loc)
        key = str(loc[-1]) if loc else ""
        path = place.path if not within else (
            f"{within}{'' if place.path.startswith('[') else '.'}{place.path}"
            if loc else within)
        prefix = f"{file}: " if file else ""
        line = cut_line(f"{prefix}{path}: {_message(error, place, key)}")
        if line not in lines:
            lines.append(line)
    return lines
