"""Output formats: the interface every file format implements, the registry that finds them by
name (built-in and installed plugins), and the streamed compression around them (ADR 0033).

This package sits below ``config`` so a company file's ``format`` and ``compression`` can be
checked against what is installed; the built-in implementations live in the render layer
(:mod:`export_lib.render.formats`) and are loaded by reference, only when a name is used.
"""

from export_lib.formats.base import CopyPlan, OutputFormat
from export_lib.formats.compression import CODECS, Compression, compressed, suffix
from export_lib.formats.registry import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    check_pair,
    file_extension,
    get_format,
    installed_formats,
    media_type,
)

__all__ = [
    "BUILTIN", "CODECS", "ENTRY_POINT_GROUP", "Compression", "CopyPlan", "OutputFormat",
    "check_pair", "compressed", "file_extension", "get_format", "installed_formats",
    "media_type", "suffix",
]
