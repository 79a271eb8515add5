"""Output formats in the config and the registry (export_lib.formats, ADR 0033): ``format`` and
``compression`` validated with the file, field and fix named, compression part of
``config_version`` only when set, the built-in names the same in the code and in setup.cfg's
entry points, and the streamed compressor's bytes what gzip and zstd read back."""

from __future__ import annotations

import configparser
import gzip
import io
from pathlib import Path

import pytest
import zstandard

from export_lib.config.loader import load_catalog
from export_lib.formats import BUILTIN, ENTRY_POINT_GROUP, file_extension, media_type
from export_lib.formats.compression import CompressingWriter
from tests.support.one_company import company_yaml, config_dir_with_defaults

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def config_dir(tmp_path: Path) -> Path:
    return config_dir_with_defaults(tmp_path)


def _catalog(config_dir: Path, extra: str = ""):
    (config_dir / "t.yaml").write_text(company_yaml(extra))
    return load_catalog(config_dir)


def test_compression_left_out_or_none_keeps_the_config_version(config_dir):
    plain = _catalog(config_dir).schedule("t/daily")
    explicit = _catalog(config_dir, "    compression: none\n").schedule("t/daily")
    gzipped = _catalog(config_dir, "    compression: gzip\n").schedule("t/daily")
    assert (plain.format, plain.compression, gzipped.compression) == ("csv", "none", "gzip")
    assert explicit.config_version == plain.config_version != gzipped.config_version
    assert "compression" not in plain.content()


@pytest.mark.parametrize(("extra", "label"), [
    ("    format: jsonl\n    compression: zstd\n", "jsonl.zst"),
    ("    format: csv\n    compression: gzip\n", "csv.gz"),
    ("    format: parquet\n", "parquet"),
])
def test_each_built_in_pair_is_accepted(config_dir, extra, label):
    schedule = _catalog(config_dir, extra).schedule("t/daily")
    assert file_extension(schedule.format, schedule.compression) == label


def test_parquet_with_gzip_is_refused_with_the_fix(config_dir):
    path = config_dir / "t.yaml"
    errors = _catalog(config_dir, "    format: parquet\n    compression: gzip\n").errors[str(path)]
    assert errors == (
        f"{path}: widget_exports[0]: compression 'gzip' cannot wrap format 'parquet': a parquet "
        "file compresses its own content, so compressing it again gains nothing; remove "
        "'compression' (or set it to none), or choose format 'csv' or 'jsonl'",)


def test_an_unknown_format_is_named_with_the_installed_ones(config_dir):
    path = config_dir / "t.yaml"
    errors = _catalog(config_dir, "    format: xlsx\n").errors[str(path)]
    assert errors == (
        f"{path}: widget_exports[0].format: unknown output format 'xlsx'; the installed "
        "formats are csv, jsonl, parquet. Use one of them, or install the package that "
        "registers 'xlsx' under the export_lib.formats entry point group",)


def test_an_unknown_compression_lists_the_choices(config_dir):
    path = config_dir / "t.yaml"
    (message,) = _catalog(config_dir, "    compression: bzip2\n").errors[str(path)]
    assert message.startswith(f"{path}: widget_exports[0].compression: ")
    assert "'none', 'gzip' or 'zstd'" in message


def test_setup_cfg_registers_the_built_in_formats_under_the_entry_point_group():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    declared = dict(
        line.split(" = ") for line in
        parser["options.entry_points"][ENTRY_POINT_GROUP].strip().splitlines())
    assert declared == BUILTIN


def test_media_types_name_the_codec_when_compressed():
    assert [media_type("csv"), media_type("jsonl"), media_type("parquet"),
            media_type("csv", "gzip"), media_type("jsonl", "zstd")] == [
        "text/csv", "application/jsonl", "application/vnd.apache.parquet", "application/gzip",
        "application/zstd"]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_the_streamed_compressor_writes_what_the_codec_reads_back(codec):
    out = io.BytesIO()
    pieces = [bytes([i % 251]) * (i * 997) for i in range(100)]  # ~5 MB in uneven writes
    with CompressingWriter(out, codec, chunk=1 << 16, depth=2) as writer:
        for piece in pieces:
            writer.write(piece)
    data = out.getvalue()
    plain = (gzip.decompress(data) if codec == "gzip" else
             zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read())
    assert plain == b"".join(pieces)


class _Full(io.RawIOBase):
    def write(self, data):
        raise OSError(28, "No space left on device")


def test_a_sink_error_reaches_the_writer_and_nothing_hangs():
    writer = CompressingWriter(_Full(), "gzip", chunk=1 << 10, depth=1)
    with pytest.raises(OSError, match="No space left on device"):
        for _ in range(10_000):
            writer.write(bytes(range(256)) * 64)
        writer.close()
    writer.abort()
    assert writer.closed
