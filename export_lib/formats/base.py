"""The interface of an output format: how the rows of one export become the bytes of one file.

A format is a class with four class attributes and up to three methods:

* ``name`` (what a company file's ``format:`` says), ``extension`` (the file name's, without
  the dot), ``content_type`` (the media type of the uncompressed file) and ``compressible``
  (whether ``compression: gzip|zstd`` may wrap it: False for a format that compresses inside
  the file, like Parquet);
* :meth:`OutputFormat.write_rows` (required): the generic path, fed DB-API row batches
  (``fetch()`` returns up to ~10,000 tuples in the export's column order, ``[]`` at the end);
  any source, SQLite included;
* :meth:`OutputFormat.copy_plan` / :meth:`OutputFormat.write_copy` (optional): the PostgreSQL
  fast path, a ``COPY ... TO STDOUT`` whose output the format passes on (or parses).

Every method writes to ``out``, a binary file that hashes (sha256 of the delivered bytes),
counts and, with ``compression`` set, compresses what it is given on threads of its own: a
format only writes. It MUST stream: hold at most a batch (or a bounded group, like Parquet's
row groups) in memory, never the whole export. The same rows MUST give the same bytes, on
every retry and on both paths (a changed sha256 publishes a new version).

``job`` is the render's :class:`export_lib.render.job.RenderJob` (the columns, their source
types, the options, ``job.select(...)`` the tenant-scoped SELECT); ``copy`` is a
:class:`export_lib.render.copy.CopyOut`. They are typed ``Any`` here because this module sits
below the render layer (the config checks format names against it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, ClassVar, NamedTuple


class CopyPlan(NamedTuple):
    """A format's PostgreSQL fast path: the whole ``COPY (...) TO STDOUT (...)`` statement (a
    ``psycopg.sql.Composable``) and the session TimeZone it runs under (timestamps print in
    it)."""

    statement: Any
    zone: str


class OutputFormat(ABC):
    """One file format. Subclass it, set the class attributes, implement :meth:`write_rows`;
    register it under the ``export_lib.formats`` entry point group
    (docs/how-to/add-an-output-format.md)."""

    name: ClassVar[str]
    extension: ClassVar[str]
    content_type: ClassVar[str]
    compressible: ClassVar[bool] = True

    def copy_plan(self, job: Any) -> CopyPlan | None:
        """The COPY this format reads on PostgreSQL, or None to use :meth:`write_rows` there
        too (a server-side cursor; slower, as fast as the format's own encoding)."""
        return None

    def write_copy(self, job: Any, copy: Any, out: BinaryIO) -> int:
        """Write the COPY's output; return the number of rows. The default passes the bytes
        through unchanged (CSV, JSON Lines): the server already printed the file."""
        for chunk in copy.chunks():
            out.write(chunk)
        return copy.rows or 0

    @abstractmethod
    def write_rows(self, job: Any, fetch: Callable[[], Sequence[tuple[Any, ...]]],
                   out: BinaryIO) -> int:
        """Write every batch ``fetch()`` returns until it returns an empty one; return the
        number of rows written."""
