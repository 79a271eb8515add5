"""Editing a company file the way a person would (``exportctl reschedule --apply``): comments,
order and quoting kept (ruamel.yaml round trip), the directory validated with the edit before
the file is replaced, so a rejected edit leaves the file untouched.

A timing edit from an explicit slot (ADR 0005 as amended) writes three
things into the export's mapping: the new timing keys, ``effective_from`` (the first slot of
the new timing), and a ``history`` entry holding the old timing keys (from the export's old
``effective_from``, if it had one). Existing history entries list only what differed from the
current version, so each one that did not state a changed key gets the old value written in:
its merged timing stays what it was.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from export_lib.errors import ConfigError


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 110
    yaml.indent(mapping=2, sequence=4, offset=2)  # the layout of dags/config/*.yaml
    return yaml


def _export_node(data: Any, kind: str, ident: str, data_kind: str | None) -> Any:
    section, key = ("widget_exports", "id") if kind == "widget" else ("data_exports", "channel")
    from ruamel.yaml.comments import CommentedMap

    for entry in data.get(section) or []:
        if isinstance(entry, dict) and entry.get(key) == ident:
            if data_kind is None:
                return entry
            if not isinstance(entry.get(data_kind), dict):
                entry[data_kind] = CommentedMap()  # every key came from defaults.yaml
            return entry[data_kind]
    raise ConfigError(f"no {section} entry with {key} {ident!r} in the file")


def timing_edit_text(text: str, *, kind: str, ident: str, data_kind: str | None,
                     new: dict[str, Any], old: dict[str, Any],
                     effective_from: datetime) -> str:
    """``text`` with the export's timing moved to ``new`` from ``effective_from``; ``old``
    holds the old value of every changed key (as the version in force had it)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    def scalar(value: Any) -> Any:  # a cron ("0 14 * * *") reads best quoted
        return DoubleQuotedScalarString(value) if isinstance(value, str) and " " in value \
            else value

    new = {k: scalar(v) for k, v in new.items()}
    old = {k: scalar(v) for k, v in old.items()}
    yaml = _yaml()
    data = yaml.load(text)
    node = _export_node(data, kind, ident, data_kind)
    previous_start = node.get("effective_from")
    history = node.get("history")
    if history is None:
        history = CommentedSeq()
    for entry in history:
        for key, value in old.items():
            if isinstance(entry, dict) and key not in entry:
                entry[key] = value
    entry = CommentedMap(old)
    if previous_start is not None:
        entry["effective_from"] = previous_start
    entry.fa.set_flow_style()
    history.append(entry)
    stamp = effective_from.strftime("%Y-%m-%dT%H:%M:%SZ")
    for key, value in new.items():
        node[key] = value
        node.ca.items.pop(key, None)  # its old comment described the old value
        node.yaml_add_eol_comment(f"was {old[key]} before {stamp} (exportctl reschedule)", key)
    # Next to the timing keys (not after the mapping's trailing blank line or comment).
    keys = list(node.keys())
    anchor = max((keys.index(k) for k in (*new, "export_hour", "interval_hours", "cron",
                                           "timezone", "dst_gap", "dst_fold") if k in keys),
                 default=len(keys) - 1)
    if "effective_from" in node:
        node["effective_from"] = stamp
    else:
        node.insert(anchor + 1, "effective_from", stamp)
        anchor += 1
    if "history" not in node:
        node.insert(anchor + 1, "history", history)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def validate_edit(config_dir: Path, path: Path, text: str) -> None:
    """Raise ``ConfigError`` with the file's errors unless ``config_dir`` validates with
    ``path`` replaced by ``text`` (checked on a copy: nothing is written)."""
    from export_lib.config.loader import load_catalog

    with tempfile.TemporaryDirectory() as tmp:
        trial = Path(tmp) / "config"
        shutil.copytree(config_dir, trial)
        (trial / path.name).write_text(text)
        errors = load_catalog(trial).errors.get(str(trial / path.name), ())
    if errors:
        lines = [line.replace(str(trial), str(config_dir)) for line in errors]
        raise ConfigError(f"the edit of {path} does not validate; nothing written:\n"
                          + "\n".join(lines), issues=lines)


def write_validated(config_dir: Path, path: Path, text: str) -> None:
    """Replace ``path`` (in ``config_dir``) by ``text`` if the directory validates with it;
    else raise ``ConfigError`` with the file's errors and leave it untouched."""
    validate_edit(config_dir, path, text)
    staged = path.with_name(f".{path.name}.reschedule")
    staged.write_text(text)
    staged.replace(path)
