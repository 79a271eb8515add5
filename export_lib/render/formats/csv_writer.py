"""CSV: the server prints it on PostgreSQL (``COPY ... (FORMAT csv, HEADER)``); the generic path
prints the same bytes (conventions in :mod:`export_lib.render.csv_format`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo

from export_lib.formats.base import CopyPlan, OutputFormat
from export_lib.source.sql import ColumnExpr


class CsvFormat(OutputFormat):
    """RFC 4180 CSV with a header row, the configured delimiter and formula neutralisation."""

    name = "csv"
    extension = "csv"
    content_type = "text/csv"

    def copy_plan(self, job: Any) -> CopyPlan:
        from psycopg import sql

        statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv, HEADER, DELIMITER {})").format(
            job.select(self.copy_exprs(job)), sql.Literal(job.options.delimiter))
        return CopyPlan(statement, job.options.output_zone)

    @staticmethod
    def copy_exprs(job: Any) -> dict[str, ColumnExpr]:
        """The columns the server prints through an expression (the range scan's COPY,
        :mod:`export_lib.render.range_scan`, prints the same fields)."""
        exprs: dict[str, ColumnExpr] = {}
        # Floats go out as the server prints them (docs/adr/0004-float-text.md).
        for name, sql_type in job.types.items():
            if sql_type.kind == "bool":
                exprs[name] = "bool_text"
            elif job.neutralized(name):
                exprs[name] = "neutral_text"
        return exprs

    def write_rows(self, job: Any, fetch: Callable[[], Sequence[tuple[Any, ...]]],
                   out: BinaryIO) -> int:
        from export_lib.render.csv_format import field_formatter, header_line, row_encoder

        options = job.options
        zone = ZoneInfo(options.output_zone)
        single = len(job.columns) == 1
        encode = row_encoder(
            [field_formatter(job.types[c], zone=zone, delimiter=options.delimiter,
                             single_column=single, neutralize_formulas=job.neutralized(c))
             for c in job.columns],
            options.delimiter,
        )
        out.write(header_line(job.columns, options.delimiter))
        rows = 0
        while batch := fetch():
            out.write(encode(batch))
            rows += len(batch)
        return rows
