"""Where an attempt's bytes go, and the check before they are published (ADR 0031).

A store that can write an artifact straight to its final name (``open_direct``: on S3 a
multipart upload that publication completes, on GCS a resumable upload session that
publication finalises with the tail the attempt records) gets the name the publication will
give it:
version = the run's newest + 1 (the claim fenced off every other attempt, so no other
version can appear before this attempt publishes) and the schema major the contract would
publish the file's schema under (:func:`export_lib.ledger.contracts.planned_major`). Should
publication decide another name after all (a schema change of the schedule published in
between), the upload is aborted and the period rendered again; nothing wrong is ever visible.
Other stores write a staging object that publication moves (a rename on the local disk).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO

from export_lib.checksums import sha256_stream
from export_lib.errors import ArtifactValidationError
from export_lib.formats import file_extension
from export_lib.formats.compression import decompressed_reader
from export_lib.logfmt import get_logger
from export_lib.periods.names import artifact_key, period_label
from export_lib.pipeline.schema_contract import schema_policy_of

if TYPE_CHECKING:
    from export_lib.config.models import Schedule
    from export_lib.ledger import Ledger
    from export_lib.ledger.records import AttemptRecord, RunRecord
    from export_lib.source.export_schema import ExportSchema
    from export_lib.storage.stores import ArtifactStore

log = get_logger(__name__)

class ArtifactTarget:
    """One attempt's output: :meth:`open` it as the render's sink, pass :attr:`check_schema`
    to the render (it also notes the file's schema for the name), read :attr:`uri` after."""

    def __init__(self, ledger: Ledger, store: ArtifactStore, run: RunRecord,
                 attempt: AttemptRecord, schedule: Schedule,
                 check: Callable[[ExportSchema], None] | None) -> None:
        self._ledger, self._store, self._run = ledger, store, run
        self._attempt, self._schedule, self._check = attempt, schedule, check
        self._observed: ExportSchema | None = None
        self._writer: Any = None
        self.uri = attempt.staging_uri

    @property
    def direct(self) -> bool:
        return hasattr(self._store, "open_direct")

    def check_schema(self, observed: ExportSchema) -> None:
        self._observed = observed
        if self._check is not None:
            self._check(observed)

    @contextmanager
    def open(self) -> Iterator[BinaryIO]:
        if not self.direct:
            with self._store.open_staging(self.uri) as sink:
                yield sink
            return
        with self._store.open_direct(  # type: ignore[attr-defined]
                self._final_key, attempt_id=self._attempt.attempt_id,
                on_started=self._started) as writer:
            self._writer = writer
            yield writer
        self.uri = writer.uri or self.uri  # a GCS session's now names the file's CRC32C

    def recorded(self) -> dict[str, Any]:
        """What the ledger records of the staged bytes besides their size and sha256: where
        they are, and a GCS session's tail (the bytes publication sends to finalise it)."""
        return {"staging_uri": self.uri, "tail": getattr(self._writer, "tail", None)}

    def check_head(self) -> None:
        """A direct upload cannot be read before it is published: its CSV header is checked
        from the first bytes the render wrote (a staged object is checked when published)."""
        if self._writer is None or self._schedule.format != "csv":
            return
        # A compressed file's first bytes decompress to its first line (a gzip or zstd stream
        # is read from its start; the header sits in its first block).
        _check_header(decompressed_reader(self._schedule.compression,
                                          io.BytesIO(self._writer.head)), self.uri,
                      list(self._schedule.query.columns), self._schedule.csv.delimiter)

    def discard(self) -> None:
        """After a failed render: abort its pending upload, or delete its staging object (a
        store's error can leave one whole, its answer lost). Best effort: the attempt records
        the URI, so garbage collection removes what is left."""
        if self._writer is not None and self.uri == self._attempt.staging_uri:
            return  # the upload was never created: nothing to abort
        try:
            self._store.delete(self.uri)
        except Exception:  # noqa: BLE001 - the failure being raised is the one to report
            log.warning("could not remove %s; garbage collection does", self.uri)

    def _started(self, uri: str) -> None:
        self._ledger.restage(self._run.run_key, self._attempt.attempt_id, uri)
        self.uri = uri

    def _final_key(self) -> str:
        run, schedule = self._run, self._schedule
        latest = self._ledger.latest_artifact(run.run_key)
        version = (latest.version if latest else 0) + 1
        major = None
        policy = schema_policy_of(schedule)
        if policy is not None and self._observed is not None:
            from export_lib.ledger.contracts import planned_major

            major = planned_major(self._ledger.engine, run, self._observed, policy)
        return artifact_key(run.company, run.schedule_id,
                            period_label(run.window_start, run.window_end, run.timezone),
                            run.slot, version,
                            file_extension(schedule.format, schedule.compression), major=major)


def validate_staged(store: ArtifactStore, uri: str, *, sha256: str, nbytes: int, fmt: str,
                    columns: list[str] | None, delimiter: str = ",",
                    compression: str = "none", tail: bytes | None = None) -> None:
    """The staged bytes are what the render wrote. A pending upload is checked by the store
    (S3: its parts' sizes, S3 checked each part's CRC32; GCS: what the session holds and
    ``tail``, and GCS checks the CRC32C when it is finalised); a staging object is read and
    hashed."""
    verify = getattr(store, "verify_staged", None)
    if verify is not None and verify(uri, nbytes, *(() if tail is None else (tail,))):
        return
    with store.read(uri) as fh:
        actual_sha, actual_bytes = sha256_stream(fh)
    if (actual_sha, actual_bytes) != (sha256, nbytes):
        raise ArtifactValidationError(
            f"staged object {uri} does not match what was rendered: sha256 {actual_sha[:16]}… "
            f"({actual_bytes} bytes) instead of {sha256[:16]}… ({nbytes} bytes); it was changed "
            "or truncated after rendering, so it is not published. A retry renders it again."
        )
    if fmt == "csv" and columns:
        with store.read(uri) as fh:
            _check_header(decompressed_reader(compression, fh), uri, columns, delimiter)


def _check_header(fh: BinaryIO, uri: str, columns: list[str], delimiter: str) -> None:
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    header = next(csv.reader(text, delimiter=delimiter), [])
    if header != columns:
        raise ArtifactValidationError(
            f"staged CSV {uri} has header {header}, expected the configured columns {columns}"
        )
