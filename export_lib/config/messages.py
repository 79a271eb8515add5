"""Turn pydantic validation errors into ``file: field.path: message`` lines for humans.

``widget_exports[1].window.days`` rather than pydantic's ``('widget_exports', 1, 'window',
'days')``; discriminator tags (``destinations[0].sftp``) are dropped from the path; unknown
keys name the closest allowed key and list all of them; built-in messages show the bad value.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from export_lib.config.limits import cut_line, shown

_NO_VALUE_TYPES = {"missing", "extra_forbidden"}


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


def _walk(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, list[str] | None]:
    """Render ``loc`` as a dotted path; also return the allowed keys at the last step."""
    path = ""
    current: list[Any] = [root]
    allowed: list[str] | None = None
    for part in loc:
        models = [m for m in current if _is_model(m)]
        if isinstance(part, int):
            path += f"[{part}]"
            current = [typing.get_args(m)[0] for m in current
                       if typing.get_origin(m) in (tuple, list) and typing.get_args(m)]
            current = [x for m in current for x in _unwrap(m)]
            continue
        tagged = _tagged(current, part)
        if tagged is not None and not any(part in m.model_fields for m in models):
            current = [tagged]  # a discriminator tag, not a key the user wrote
            continue
        allowed = sorted(models[0].model_fields) if models else None
        path += f".{part}" if path else str(part)
        field = next((m.model_fields[part] for m in models if part in m.model_fields), None)
        current = _unwrap(field.annotation) if field is not None else []
    return path or "(file)", allowed


def _message(error: dict[str, Any], allowed: list[str] | None, key: str) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(key[:100], allowed or [], n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        keys = f"allowed keys: {', '.join(allowed)}" if allowed else "remove it"
        return f"unknown key {shown(key)}; {hint}{keys}"
    if kind == "missing":
        return "required field is missing; add it"
    message = error["msg"].removeprefix("Value error, ")
    if kind.startswith("export_") or isinstance(error.get("input"), dict):
        return message  # a whole section's input says nothing the message does not
    return f"{message} (got {shown(error.get('input'))})"


def issues_from_validation(file: str, root: type[BaseModel], exc: ValidationError) -> list[str]:
    """Every error of ``exc`` as a ``file: field.path: message`` line (duplicates dropped)."""
    lines: list[str] = []
    errors = exc.errors()
    failing = [tuple(e["loc"]) for e in errors if e["type"] != "too_short"]
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "too_short" and any(f[:len(loc)] == loc and f != loc
                                                for f in failing):
            continue  # pydantic adds "too short" when an item failed; the item error says why
        path, allowed = _walk(root, loc)
        key = str(loc[-1]) if loc else ""
        line = cut_line(f"{file}: {path}: {_message(error, allowed, key)}")
        if line not in lines:
            lines.append(line)
    return lines
