"""One source read for many periods (ADR 0038): a range scan split at period boundaries.

A batch (ADR 0032) renders many consecutive periods of one export. Where each period's render
would be a ``COPY`` whose rows are the file's (CSV passes the server's bytes through, JSON Lines
deletes its field delimiters), :class:`RangeScan` runs one
``COPY`` over the periods' union instead (:func:`export_lib.source.sql.build_postgres_periods`):
every period's own rows, under its own cutoff, each row led by its period's number, sorted by
that number and then by the period's own total order. :class:`PeriodSplitter` routes the rows
to the periods: the server sends one CopyData message per row, so a row needs no CSV parsing
to be found (an embedded newline or quote is inside its message); the client strips the
number and its delimiter. Each period's file gets the header its own COPY prints (CSV), then
its rows in its own order: the same bytes, so the same sha256, as a render of that period
alone.

Streaming as the single-period path: at most one piece of ~:data:`CHUNK` bytes (whole rows)
is held between the socket and a period's sink, and the sink hashes and writes it on its
thread. Each period is written by :meth:`RangeScan.render_period`, called by that period's
own render (its attempt, lease and budget place are the caller's), in period order.

Failure: a source error while a period's rows are read fails that period (the error is
raised in its render, as its own COPY's would be) and marks the scan ``broken``; the caller
reads the remaining periods one by one (and so it does once the scan has run for half the
source's ``statement_timeout``: one statement serves all the periods, and the timeout must
not fail one of them). An error before the first row (the server sorts the
whole range before it sends one: a row that cannot be read fails here) is raised by
:meth:`RangeScan.__enter__`, before any period's render has begun.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

from export_lib.config.query import QuerySpec
from export_lib.errors import RenderError
from export_lib.formats import compressed
from export_lib.formats.registry import format_label
from export_lib.logfmt import get_logger
from export_lib.render.engine import RenderResult, _set_zone, prepare_job
from export_lib.render.job import RenderOptions
from export_lib.render.sink import HashingSink
from export_lib.source.database import Source
from export_lib.source.export_schema import ExportSchema
from export_lib.source.sql import PERIOD_COLUMN, Bounds, build_postgres_periods

__all__ = ["CHUNK", "SPLITTABLE", "PeriodSplitter", "RangeScan", "Window"]

log = get_logger(__name__)

CHUNK = 1 << 20
# The formats whose COPY output is the file, row for row (after JSON Lines' rewrite of each
# row): a scan's rows can be handed to each period's file as they come.
SPLITTABLE = ("csv", "jsonl")
_NEWLINE = 10


@dataclass(frozen=True)
class Window:
    """One period of the scan: its half-open window and its source cutoff (UTC-aware)."""

    start: datetime
    end: datetime
    cutoff: datetime | None


class PeriodSplitter:
    """Routes a range scan's COPY rows (``<number><delimiter><record>\\n``, one per message,
    numbers ascending) to ``(number, bytes, rows)`` pieces of whole records, the number
    stripped; a piece holds one period's rows only and at most ``chunk`` bytes (or one row,
    when a single row is longer). ``max_held``: the most bytes it held at once."""

    def __init__(self, messages: Iterable[Any], delimiter: str, periods: int,
                 chunk: int = CHUNK) -> None:
        self._messages = messages
        self._delimiter = delimiter.encode()
        self._periods = periods
        self._chunk = chunk
        self.max_held = 0

    def __iter__(self) -> Iterator[tuple[int, bytes, int]]:
        buf = bytearray()
        rows = number = cut = 0
        prefix = b""
        for message in self._messages:
            if not (cut and message[:cut] == prefix):
                found = self._number(message)
                if found <= number:
                    raise RenderError(f"the range scan's period {found} came after period "
                                      f"{number}; its rows must come in period order")
                if buf:
                    yield number, bytes(buf), rows
                    buf.clear()
                    rows = 0
                number = found
                prefix = str(number).encode() + self._delimiter
                cut = len(prefix)
            if message[-1] != _NEWLINE:
                raise RenderError("a COPY message of the range scan is not one whole CSV row; "
                                  "the server must send one row per message")
            if buf and len(buf) + len(message) - cut > self._chunk:
                yield number, bytes(buf), rows
                buf.clear()
                rows = 0
            buf += message[cut:]
            rows += 1
            self.max_held = max(self.max_held, len(buf))
        if buf:
            yield number, bytes(buf), rows

    def _number(self, message: Any) -> int:
        head = bytes(message[:24])
        end = head.find(self._delimiter)
        if end < 1 or not head[:end].isdigit() or not 1 <= int(head[:end]) <= self._periods:
            raise RenderError(f"a range scan row does not start with a period number from 1 "
                              f"to {self._periods}: {head[:end if end > 0 else 24]!r}")
        return int(head[:end])


class RangeScan:
    """One COPY over ``windows`` (consecutive, contiguous, each with its cutoff) of one
    company's CSV or JSON Lines export. Use as a context manager (entering runs the checks of
    a render and starts the COPY, up to its first row); then :meth:`render_period` for each period in
    order (one may be passed over: its rows are dropped). ``broken`` is set when the source
    failed mid-way; the periods not yet written must then be read on their own."""

    def __init__(self, source: Source, spec: QuerySpec, *, company_id: str,
                 windows: list[Window], options: RenderOptions, schedule_id: str = "",
                 chunk: int = CHUNK) -> None:
        if options.format not in SPLITTABLE or source.dialect != "postgresql":
            raise RenderError(f"a range scan reads CSV or JSON Lines from PostgreSQL, not "
                              f"{options.format} from {source.dialect}")
        for before, after in zip(windows, windows[1:], strict=False):
            if before.end != after.start or (before.cutoff is None) != (after.cutoff is None):
                raise RenderError(
                    f"a range scan reads contiguous windows with a cutoff on all or none: "
                    f"[{before.start.isoformat()}, {before.end.isoformat()}) then "
                    f"[{after.start.isoformat()}, {after.end.isoformat()}) do not qualify")
        self._source = source
        self._spec = spec
        self._company = company_id
        self.windows = windows
        self._options = options
        self._schedule = schedule_id
        self._chunk = chunk
        self.broken: BaseException | None = None
        self.served: set[int] = set()  # the periods written whole
        self.schema: ExportSchema | None = None
        self.splitter: PeriodSplitter | None = None
        self._copy: Any = None
        self._pieces: Iterator[tuple[int, bytes, int]] = iter(())
        self._next: tuple[int, bytes, int] | None = None  # read, not yet handed to its period
        self._ended = False
        self._header = b""
        self._stop_at: float | None = None
        self._rewrite: Callable[[bytes], bytes] | None = None

    def __enter__(self) -> RangeScan:
        from psycopg import sql

        from export_lib.formats import get_format
        from export_lib.render.copy import CopyOut
        from export_lib.render.csv_format import header_line

        first, last = self.windows[0], self.windows[-1]
        job, self.schema = prepare_job(
            self._source, self._spec, company_id=self._company, window_start=first.start,
            window_end=last.end, cutoff=first.cutoff, options=self._options,
            schedule_id=self._schedule)
        naive = job.bounds.naive_columns
        fmt: Any = get_format(self._options.format)
        csv = self._options.format == "csv"
        select = build_postgres_periods(
            self._spec, [Bounds(self._company, w.start, w.end, w.cutoff, naive)
                         for w in self.windows], fmt.copy_exprs(job) if csv else None,
            job.order)
        if csv:
            # No HEADER: each period's file gets its own (as its own COPY prints it).
            statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv, DELIMITER {})").format(
                select, sql.Literal(self._options.delimiter))
            self._header = header_line(self._spec.columns, self._options.delimiter)
            delimiter = self._options.delimiter
        else:  # JSON Lines: its fields after the number, its client-side rewrite of each piece
            statement = fmt.copy_statement(job, select, sql.Identifier(PERIOD_COLUMN))
            self._rewrite = fmt.rewrite(job)
            delimiter = "\x1f"
        with self._guarded():
            (timeout_ms,) = self._source.connection.execute(
                "SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'"
            ).fetchone()
            # One statement for all the periods: past half the source's statement_timeout
            # the caller reads the rest one by one rather than have the timeout fail a period.
            self._stop_at = (time.monotonic() + timeout_ms / 2000) if timeout_ms else None
            _set_zone(self._source, self._options.output_zone, self._company)
            self._copy = CopyOut(self._source.connection, statement).__enter__()
            self.splitter = PeriodSplitter(self._copy.messages(), delimiter,
                                           len(self.windows), self._chunk)
            self._pieces = iter(self.splitter)
            try:
                self._read()  # the server sorts the whole range before its first row
            except BaseException:
                self._abandon()
                raise
        return self

    @property
    def late(self) -> bool:
        """Has the scan run for half the source's ``statement_timeout``?"""
        return self._stop_at is not None and time.monotonic() >= self._stop_at

    def __exit__(self, *exc: object) -> None:
        if self._ended and self.broken is None:
            self._source.connection.rollback()
            return
        self._abandon()

    def _abandon(self) -> None:
        """Stop the server's query and close the connection (the caller's open_source owns it:
        closing it again there is harmless)."""
        copy, self._copy = self._copy, None
        if copy is not None:
            stop = RenderError("the range scan was left before its end")
            copy.__exit__(RenderError, stop, None)

    def _guarded(self) -> Any:
        return self._source.guarded(f"reading {self._spec.table} for company "
                                    f"{self._company!r} (one read for {len(self.windows)} "
                                    "periods)")

    def _read(self) -> None:
        try:
            self._next = next(self._pieces)
        except StopIteration:
            self._next, self._ended = None, True

    def _period_pieces(self, number: int) -> Iterator[tuple[bytes, int]]:
        """Period ``number``'s pieces; earlier periods' left-overs (a period whose render
        stopped early) are dropped."""
        while self._next is not None and self._next[0] <= number:
            found, data, rows = self._next
            if found == number:
                yield data, rows
            try:
                with self._guarded():
                    self._read()
            except BaseException as exc:
                self.broken = exc
                raise

    def render_period(self, index: int, sink: BinaryIO,
                      check_schema: Callable[[ExportSchema], None] | None = None
                      ) -> RenderResult:
        """Write period ``index`` (0-based) of :attr:`windows` to ``sink``, as
        :func:`export_lib.render.engine.render` writes it alone."""
        if self.broken is not None:
            raise RenderError(f"the range scan failed before this period ({self.broken}); "
                              "read it on its own")
        if check_schema is not None:
            check_schema(self.schema)
        rows = 0
        with HashingSink(sink) as hashed:
            out = compressed(hashed, self._options.compression)
            try:
                out.write(self._header)
                for data, count in self._period_pieces(index + 1):
                    out.write(self._rewrite(data) if self._rewrite else data)
                    rows += count
            except BaseException:
                if out is not hashed:
                    out.abort()
                raise
            if out is not hashed:
                out.close()
        self.served.add(index)
        window = self.windows[index]
        result = RenderResult(
            rows=rows, bytes=hashed.bytes, sha256=hashed.sha256, columns=self._spec.columns,
            format=format_label(self._options.format, self._options.compression),
            reproducible=self._spec.ingested_column is not None, engine="postgres_copy",
            export_schema=self.schema)
        log.info("company=%s schedule=%s period=[%s, %s): rendered %s rows, %s bytes of %s "
                 "(range scan, period %d of %d), sha256 %s", self._company, self._schedule,
                 window.start.isoformat(), window.end.isoformat(), rows, result.bytes,
                 result.format, index + 1, len(self.windows), result.sha256,
                 extra={"company": self._company, "schedule": self._schedule or None})
        return result
