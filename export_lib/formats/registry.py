"""Output formats by name: the built-in ones, then those installed packages register under the
``export_lib.formats`` entry point group. Both are loaded lazily, only when a name is used.

A plugin package declares, in its ``setup.cfg`` (or ``pyproject.toml``)::

    [options.entry_points]
    export_lib.formats =
        xlsx = acme_formats.xlsx:XlsxFormat

and once it is installed, ``format: xlsx`` works in every company file. A built-in name cannot
be taken over by a plugin (the built-in wins), so installing a package never changes the bytes
of an existing export. Installed entry points are looked up only for a name that is not built
in, and a lookup that finds nothing is not remembered (a package installed meanwhile is seen).
"""

from __future__ import annotations

import importlib
from importlib import metadata

from export_lib.errors import ConfigError, UnknownFormatError
from export_lib.formats.base import OutputFormat
from export_lib.formats.compression import CODECS, suffix

ENTRY_POINT_GROUP = "export_lib.formats"
# Referenced, not imported: the implementations live in the render layer, and importing one
# (pyarrow for Parquet) is deferred until a render uses it. setup.cfg declares the same names
# under ENTRY_POINT_GROUP (tests/unit/render/test_formats.py checks they agree).
BUILTIN: dict[str, str] = {
    "csv": "export_lib.render.formats.csv_writer:CsvFormat",
    "jsonl": "export_lib.render.formats.jsonl_writer:JsonLinesFormat",
    "parquet": "export_lib.render.formats.parquet_writer:ParquetFormat",
}
_loaded: dict[str, OutputFormat] = {}
# The ledger's format column holds 20 characters: the name and ".zst".
MAX_NAME = 16


def get_format(name: str) -> OutputFormat:
    """The format called ``name``; UnknownFormatError naming the installed ones when none is."""
    if (found := _loaded.get(name)) is not None:
        return found
    if name in BUILTIN:
        module, _, attr = BUILTIN[name].partition(":")
        cls = getattr(importlib.import_module(module), attr)
        origin = "built in"
    else:
        entry = _entry_points().get(name)
        if entry is None:
            raise UnknownFormatError(name, installed_formats())
        origin = f"entry point {entry.value!r} of {_package(entry)}"
        try:
            cls = entry.load()
        except Exception as exc:
            raise ConfigError(f"output format {name!r} ({origin}) cannot be loaded: {exc}; "
                              "reinstall that package or remove the format from the config"
                              ) from exc
    _loaded[name] = instance = _checked(name, cls, origin)
    return instance


def installed_formats() -> list[str]:
    """Every usable format name, built-in first, then the installed plugins' (sorted)."""
    plugins = sorted(n for n in _entry_points() if n not in BUILTIN)
    return [*sorted(BUILTIN), *plugins]


def check_pair(fmt: str, compression: str) -> str | None:
    """Why ``compression`` cannot wrap ``fmt`` (a message naming the fix), or None."""
    if compression == "none" or get_format(fmt).compressible:
        return None
    can = [n for n in BUILTIN if n != fmt and get_format(n).compressible]
    return (f"compression {compression!r} cannot wrap format {fmt!r}: a {fmt} file compresses "
            f"its own content, so compressing it again gains nothing; remove 'compression' "
            f"(or set it to none), or choose format {' or '.join(map(repr, can))}")


def file_extension(fmt: str, compression: str = "none") -> str:
    """The file name's extension, without the leading dot: ``csv``, ``jsonl.zst``, ..."""
    return get_format(fmt).extension + suffix(compression)


def media_type(fmt: str, compression: str = "none") -> str:
    """The file's media type: the codec's when compressed, else the format's."""
    return CODECS[compression][1] if compression in CODECS else get_format(fmt).content_type


def format_label(fmt: str, compression: str = "none") -> str:
    """What the ledger and the manifest call the file's format: ``csv``, ``csv.gz``, ..."""
    return fmt + suffix(compression)


def parse_label(label: str) -> tuple[str, str]:
    """``(format, compression)`` of a :func:`format_label`."""
    for codec, (ending, _) in CODECS.items():
        if label.endswith("." + ending):
            return label[: -len(ending) - 1], codec
    return label, "none"


def _entry_points() -> dict[str, metadata.EntryPoint]:
    # Later duplicates lose: the first distribution on sys.path wins, as for imports.
    found: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry)
    return found


def _package(entry: metadata.EntryPoint) -> str:
    dist = entry.dist
    return f"package {dist.name} {dist.version}" if dist is not None else "an unknown package"


def _checked(name: str, cls: object, origin: str) -> OutputFormat:
    if not (isinstance(cls, type) and issubclass(cls, OutputFormat)):
        raise ConfigError(f"output format {name!r} ({origin}) is {cls!r}, not a subclass of "
                          "export_lib.formats.OutputFormat; fix the entry point to name the "
                          "format class")
    instance = cls()
    for attr in ("name", "extension", "content_type"):
        if not isinstance(getattr(instance, attr, None), str) or not getattr(instance, attr):
            raise ConfigError(f"output format {name!r} ({origin}) has no {attr}; set the "
                              f"class attribute {attr} to a non-empty string")
    if len(name) > MAX_NAME:
        raise ConfigError(f"output format {name!r} ({origin}) has a name of {len(name)} "
                          f"characters; the ledger records at most {MAX_NAME} (with .zst): "
                          "register it under a shorter name")
    if instance.name != name:
        raise ConfigError(f"output format {name!r} ({origin}) calls itself "
                          f"{instance.name!r}; register it under that name, or rename it")
    return instance
