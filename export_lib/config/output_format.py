"""The ``format`` and ``compression`` fields of an export: a format name checked against the
installed output formats (:mod:`export_lib.formats`), and the pair checked together."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, WithJsonSchema

from export_lib.config.messages import invalid
from export_lib.errors import ConfigError
from export_lib.formats import check_pair, get_format

FORMAT_HELP = ("The file format: csv, jsonl (JSON Lines) or parquet, or the name of an installed "
               "output format plugin.")
COMPRESSION_HELP = ("Compress the whole file: none, gzip (.gz) or zstd (.zst); csv and jsonl "
                    "only (a parquet file compresses its own columns).")


def _known_format(value: str) -> str:
    try:
        get_format(value)
    except ConfigError as exc:  # unknown, or a plugin that cannot be loaded
        raise invalid("format", str(exc)) from None
    return value


# What an entry point name of a format looks like (the registry checks the name itself).
FORMAT_NAME_PATTERN = "^[a-z][a-z0-9_]*$"
FormatName = Annotated[str, AfterValidator(_known_format), WithJsonSchema({
    "type": "string", "pattern": FORMAT_NAME_PATTERN,
    "examples": ["jsonl", "parquet", "csv"]})]
Compression = Literal["none", "gzip", "zstd"]


def check_output(model: Any) -> Any:
    """A model validator's body: ``compression`` must fit ``format`` (none for parquet)."""
    if problem := check_pair(model.format, model.compression):
        raise invalid("compression", problem)
    return model
