"""Reading config YAML safely: duplicate keys, size, alias and depth limits.

A config file is parsed by every DAG loader and by ``exportctl validate``; a hostile or broken
file must cost milliseconds and kilobytes, and say what is wrong in one short line. The
composed node graph is measured (aliases counted every time they are used) *before* anything
is constructed, so a 1 KB alias bomb fails at once instead of expanding to gigabytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from export_lib.config.limits import (
    MAX_FILE_BYTES,
    MAX_YAML_ALIASES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    cut_line,
    shown,
)


class _NoDuplicateKeys:
    """Reject duplicate mapping keys (YAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[attr-defined]
            if not isinstance(key, str):
                # ``? [a, b]`` (unhashable: a TypeError deep in PyYAML or in our set) and
                # ``1:``/``on:`` (an int, a bool) are never config keys: one line, here.
                mark = key_node.start_mark
                text = shown(key, 40) if isinstance(key_node, yaml.ScalarNode) else (
                    _node_text(key_node)[:40])  # a collection key is not built yet
                raise yaml.constructor.ConstructorError(
                    None, None, f"the mapping key {text} is a {type(key).__name__}, not a "
                    "name; keys are plain names such as 'company' (quote it if it is meant as "
                    "one)", mark)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {mark.line + 1}); keep only one",
                    mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


def _node_text(node: yaml.Node, budget: int = 40) -> str:
    """A short flow-style rendering of a composed node (for messages only)."""
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value[:budget])
    if budget <= 0:
        return "…"
    if isinstance(node, yaml.SequenceNode):
        return "[" + ", ".join(_node_text(n, budget // 2) for n in node.value[:5]) + "]"
    pairs = (f"{_node_text(k, budget // 2)}: {_node_text(v, budget // 2)}"
             for k, v in node.value[:5])
    return "{" + ", ".join(pairs) + "}"


class _Bounded:
    """Refuse documents that expand too far: the composed node graph is measured (aliases
    counted as often as they are used) before anything is constructed, so a 1 KB alias bomb
    fails in milliseconds instead of building gigabytes of error text."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()  # type: ignore[attr-defined]
        if node is None:
            return None
        _check_size(node)
        return self.construct_document(node)  # type: ignore[attr-defined]


class _TooLarge(yaml.YAMLError):
    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_size(root: yaml.Node) -> None:
    """Expanded node count, depth and alias uses of a composed document, iteratively (a deep
    document must not hit the recursion limit) and memoised per node (linear time)."""
    sizes: dict[int, int] = {}
    depth: dict[int, int] = {}
    uses: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            sizes[key] = 1 + sum(sizes[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if sizes[key] > MAX_YAML_NODES or depth[key] > MAX_YAML_DEPTH:
                raise _TooLarge(
                    f"the document expands to more than {MAX_YAML_NODES} values or nests deeper "
                    f"than {MAX_YAML_DEPTH} levels (an alias bomb?); write it out plainly",
                    node.start_mark)
            continue
        if key in sizes:
            uses[key] = uses.get(key, 0) + 1
            if sum(uses.values()) > MAX_YAML_ALIASES:
                raise _TooLarge(f"more than {MAX_YAML_ALIASES} alias uses (*name); write the "
                                "values out plainly", node.start_mark)
            continue
        if key in on_path:
            raise _TooLarge("a recursive alias; write the value out plainly", node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node))


def _checked_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    """A YAML date or time that does not exist (``2026-02-30``) is a YAML error with its line,
    not the ``ValueError`` PyYAML raises from deep inside the constructor (a traceback)."""
    try:
        return yaml.constructor.SafeConstructor.construct_yaml_timestamp(loader, node)
    except (ValueError, OverflowError) as exc:
        raise yaml.constructor.ConstructorError(
            None, None, f"{node.value[:40]!r} is not a real date or time ({exc}); write an "
            "existing one, e.g. 2026-12-29", node.start_mark) from None


class _StrictLoader(_Bounded, _NoDuplicateKeys, yaml.SafeLoader):
    """``yaml.safe_load`` that rejects duplicate keys (pure Python: the reference messages)."""


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _checked_timestamp)


# libyaml's C scanner/parser is ~10x faster than the pure-Python one and DAG parsing reads
# every company file, so valid files go through it when PyYAML has it; a file it rejects is
# re-read by the pure-Python loader, whose error messages are the ones users and tests know.
_FastLoader = (type("_FastStrictLoader", (_Bounded, _NoDuplicateKeys, yaml.CSafeLoader), {})
               if getattr(yaml, "__with_libyaml__", False) else _StrictLoader)
_FastLoader.add_constructor("tag:yaml.org,2002:timestamp", _checked_timestamp)


def read_yaml(path: Path, root: Path | None = None) -> tuple[dict[str, Any] | None, list[str]]:
    """Parse one YAML file into a mapping, or return ``file: position: message`` issues.
    ``root``: the config directory the file must stay in (:func:`read_config_bytes`)."""
    raw, issues = read_config_bytes(path, root or path.parent)
    if raw is None:
        return None, issues
    return parse_yaml(path, raw)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def file_issue(path: Path, root: Path) -> str | None:
    """Why ``path`` may not be read as a config file of ``root``, or None.

    A config file is a regular file. A symbolic link is followed only when it stays inside
    the config directory (a Kubernetes ConfigMap mounts its files so); a broken link, a link
    leading out of the directory and a FIFO, socket, device or directory are one error each,
    and nothing of the target is opened or shown (not even where a link points)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return f"{path}: (file): missing; it was removed while the directory was read"
    except OSError as exc:
        return f"{path}: (file): cannot be read ({exc.strerror}); check its permissions"
    if stat.S_ISLNK(info.st_mode):
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # RuntimeError: a loop, before Python 3.13
            if isinstance(exc, OSError) and exc.errno not in (errno.ENOENT, errno.ELOOP):
                return f"{path}: (file): a symbolic link that cannot be followed ({exc.strerror})"
            return (f"{path}: (file): a symbolic link whose target does not exist (or loops); "
                    "remove the link or restore the file it names")
        if not target.is_relative_to(root.resolve()):
            return (f"{path}: (file): a symbolic link to a file outside {root}; nothing of it "
                    "was read. Copy the file into the config directory instead of linking it")
        info = target.stat()
    if not stat.S_ISREG(info.st_mode):
        return (f"{path}: (file): {_kind(info.st_mode)}, not a regular file; nothing was read. "
                "A config file is a plain <company id>.yaml file; move this one elsewhere")
    return None


def read_config_bytes(path: Path, root: Path) -> tuple[bytes | None, list[str]]:
    """The first ``MAX_FILE_BYTES + 1`` bytes of a config file of ``root``, or its one issue.

    Checked before opening (:func:`file_issue`) and again on the open descriptor (a file
    swapped for a FIFO meanwhile must not block the loader: ``O_NONBLOCK``)."""
    issue = file_issue(path, root)
    if issue:
        return None, [issue]
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path.resolve(), flags | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        return None, [f"{path}: (file): cannot be opened ({exc.strerror}); check the file "
                      "and its permissions"]
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return None, [f"{path}: (file): {_kind(mode)}, not a regular file; nothing was read"]
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_FILE_BYTES + 1), []
    finally:
        os.close(fd)


def parse_yaml(path: Path, raw: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    """:func:`read_yaml` on bytes already read (``path`` only names the file in messages)."""
    if len(raw) > MAX_FILE_BYTES:
        return None, [f"{path}: (file): larger than {MAX_FILE_BYTES // 1024} KiB; a config file "
                      "is a few KB, split it or remove what does not belong"]
    try:
        text = raw.decode("utf-8")
        try:
            data = yaml.load(text, Loader=_FastLoader)  # noqa: S506
        except _TooLarge:
            raise
        except yaml.YAMLError as exc:
            if "nesting depth" in str(getattr(exc, "problem", "")):
                # libyaml's own depth limit: the pure-Python composer would recurse for seconds
                # before hitting Python's recursion limit on the same input.
                raise _TooLarge(f"nests deeper than {MAX_YAML_DEPTH} levels; write it out "
                                "plainly", getattr(exc, "problem_mark", None)) from None
            data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506
    except UnicodeDecodeError:
        return None, [f"{path}: (file): not a text file; config files are UTF-8 YAML"]
    except RecursionError:
        return None, [f"{path}: (file): not valid YAML: nests deeper than {MAX_YAML_DEPTH} "
                      "levels; write it out plainly"]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else "(file)"
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [cut_line(f"{path}: {where}: not valid YAML: {problem}")]
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        return None, [f"{path}: (file): the file is {kind}; expected a mapping with a "
                      "'company' section"]
    return data, []
