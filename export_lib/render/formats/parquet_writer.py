"""Parquet: on PostgreSQL pyarrow's streaming CSV reader parses the raw COPY output; the generic
path builds Arrow batches from the fetched rows. Both write identical files in row groups of
bounded size (type mapping and row groups: :mod:`export_lib.render.parquet_format`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from export_lib.errors import RenderError
from export_lib.formats.base import CopyPlan, OutputFormat
from export_lib.source.sql import ColumnExpr


class ParquetFormat(OutputFormat):
    """Apache Parquet (format 2.6) with the column codec ``parquet_compression`` (snappy)."""

    name = "parquet"
    extension = "parquet"
    content_type = "application/vnd.apache.parquet"
    compressible = False  # its column chunks are compressed already

    def copy_plan(self, job: Any) -> CopyPlan:
        from psycopg import sql

        exprs: dict[str, ColumnExpr] = {
            c: "numeric_38_9" for c, t in job.types.items()
            if t.kind == "decimal" and not t.precision}
        statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(job.select(exprs))
        return CopyPlan(statement, "UTC")  # instants are parsed, the zone is in the schema

    def write_copy(self, job: Any, copy: Any, out: BinaryIO) -> int:
        import pyarrow as pa
        import pyarrow.csv as pcsv

        from export_lib.render.copy import CopyStream
        from export_lib.render.parquet_format import csv_read_options

        writer = _writer(job, out)
        try:
            stream = CopyStream(copy)
            if not stream.empty():
                for batch in pcsv.open_csv(stream, *csv_read_options(writer.schema)):
                    writer.add(batch)
        except pa.ArrowInvalid as exc:
            raise RenderError(f"a value of {job.spec.table} does not fit the Parquet schema: "
                              f"{exc}; declare the column's precision in the source or cast it "
                              "in a view") from exc
        finally:
            writer.close()
        if copy.rows != writer.rows:
            raise RenderError(f"COPY reported {copy.rows} rows but {writer.rows} were written; "
                              "the artifact is incomplete and must not be published")
        return writer.rows

    def write_rows(self, job: Any, fetch: Callable[[], Sequence[tuple[Any, ...]]],
                   out: BinaryIO) -> int:
        from export_lib.render.parquet_format import batches_from_rows

        writer = _writer(job, out)
        try:
            for batch in batches_from_rows(fetch, writer.schema, job.column_types):
                writer.add(batch)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise RenderError(f"a value of {job.spec.table} does not fit the Parquet schema "
                              f"{writer.schema}: {exc}") from exc
        finally:
            writer.close()
        return writer.rows


def _writer(job: Any, out: BinaryIO) -> Any:
    from export_lib.render.parquet_format import RowGroupWriter, arrow_schema

    options = job.options
    schema = arrow_schema(job.columns, job.types, options.output_zone)
    return RowGroupWriter(out, schema, group_bytes=options.row_group_bytes,
                          max_rows=options.row_group_rows,
                          compression=options.parquet_compression)
