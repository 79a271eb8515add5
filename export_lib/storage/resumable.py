"""The render's bytes, written once: a GCS resumable upload session at the artifact's final name.

:class:`SessionWriter` is the raw file the render's sink writes into on GCS, the counterpart of
S3's :class:`~export_lib.storage.multipart.PartWriter`. The session is opened lazily, at the
first full chunk (or at the end for a small file), once the render has seen the file's schema
(``key_of``), with ``ifGenerationMatch=0`` and the attempt's id in the object's metadata. Every
full chunk (a multiple of 256 KiB, as GCS requires of all but the last request) is sent as
the render produces it, with an unknown total (``bytes a-b/*``). The render waits while a
chunk is sent: the writer holds the chunk being sent and its own buffer (a chunk and the
bytes of one write past it), whatever the file's size.
The session is never finalised here: what is left after the last full 256 KiB, the *tail*
(under 256 KiB), is recorded with the attempt in the ledger, and publication, in another
process, finalises the session with it (:func:`finalise`, ``bytes a-b/TOTAL``). Until then
no object exists under the name, so nothing partial is ever listed.

The session is named by a *pending session URI*,
``gs://bucket/<key>?session=<quoted session URL>&attempt=<attempt id>[&crc32c=<base64>]``:
what the attempt records as its staging URI (the CRC32C of the whole file is added when the
render ends), so publication finds and finalises the session and garbage collection cancels
it (``DELETE`` on the session URL). A session GCS was never told about expires after a week;
GCS lists no open sessions, so none can be found but through the ledger.
"""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from export_lib.errors import ArtifactValidationError, PublishError, StorageError
from export_lib.logfmt import get_logger

log = get_logger(__name__)

QUANTUM = 256 * 1024  # every request but the last carries a multiple of this
CHUNK_SIZE = 32 * QUANTUM  # 8 MiB a request
HEAD_BYTES = 64 * 1024  # the start of the file, kept for the CSV header check
RETRIED = {429, 500, 502, 503, 504}
GONE = {404, 410}


def pending_uri(bucket: str, key: str, session: str, attempt_id: str, crc32c: str = "") -> str:
    uri = (f"gs://{bucket}/{key}?session={quote(session, safe='')}"
           f"&attempt={quote(attempt_id, safe='')}")
    return uri + (f"&crc32c={quote(crc32c, safe='')}" if crc32c else "")


def parse_pending(uri: str) -> tuple[str, str, str, str] | None:
    """(key, session URL, attempt id, CRC32C) of a pending session URI; None for a plain
    object URI."""
    parts = urlsplit(uri)
    query = parse_qs(parts.query)
    if "session" not in query:
        return None
    return (parts.path.lstrip("/"), query["session"][0], query.get("attempt", [""])[0],
            query.get("crc32c", [""])[0])


class SessionWriter:
    """A write-only raw file whose full chunks go to one resumable session, never finalised.

    ``on_started(uri)`` is called once, right after the session is opened, with its pending
    session URI (the caller records it, so a killed render's session can be cancelled).
    After :meth:`finish`, :attr:`tail` holds the bytes publication sends and :attr:`uri`
    names the session with the file's CRC32C.
    """

    def __init__(self, open_session: Callable[[str, dict[str, str]], str], http: Any, bucket: str,
                 key_of: Callable[[], str], *, attempt_id: str,
                 on_started: Callable[[str], None], max_attempts: int,
                 chunk_size: int | None = None) -> None:
        import google_crc32c

        self._open_session, self._http, self._bucket = open_session, http, bucket
        self._key_of, self._attempt_id, self._on_started = key_of, attempt_id, on_started
        self._max_attempts = max_attempts
        self._chunk = chunk_size or CHUNK_SIZE
        if self._chunk % QUANTUM:
            raise ValueError(f"chunk size {self._chunk} is not a multiple of {QUANTUM}")
        self._buf = bytearray()
        self._crc = google_crc32c.Checksum()
        self.sent = 0
        self.key: str | None = None
        self.session: str | None = None
        self.head = b""
        self.tail: bytes | None = None
        self.crc32c = ""

    @property
    def uri(self) -> str | None:
        if self.key is None or self.session is None:
            return None
        return pending_uri(self._bucket, self.key, self.session, self._attempt_id, self.crc32c)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        if len(self.head) < HEAD_BYTES:
            self.head += bytes(view[:HEAD_BYTES - len(self.head)])
        self._buf += view
        while len(self._buf) >= self._chunk:
            self._send(self._chunk)
        return view.nbytes

    def flush(self) -> None:
        pass

    def finish(self) -> str:
        """Send the last full 256 KiB multiples; keep the rest as :attr:`tail`."""
        self._send(len(self._buf) - len(self._buf) % QUANTUM)
        self.tail = bytes(self._buf)
        self._buf.clear()
        self._crc.update(self.tail)
        self.crc32c = base64.b64encode(self._crc.digest()).decode()
        assert self.uri is not None
        return self.uri

    def abort(self) -> None:
        """Cancel the session: nothing of it is ever an object."""
        self._buf.clear()
        if self.session is not None:
            cancel(self._http, self.session)

    def _start(self) -> None:
        self.key = self._key_of()
        self.session = self._open_session(self.key, {"attempt": self._attempt_id})
        try:
            self._on_started(self.uri or "")
        except BaseException:
            cancel(self._http, self.session)
            self.session = None
            raise

    def _send(self, size: int) -> None:
        if self.session is None:
            self._start()
        if not size:
            return
        with memoryview(self._buf) as view:  # one copy out; the buffer then keeps the rest
            chunk = bytes(view[:size])
        del self._buf[:size]
        self._crc.update(chunk)  # each byte once, as it leaves: the chunks and the tail
        end, start = self.sent + size, self.sent
        for _ in range(self._max_attempts):
            status, persisted, _ = _put(
                self._http, self.session or "", chunk[start - self.sent:],
                f"bytes {start}-{end - 1}/*", start, self._max_attempts)
            # GCS may persist less than a request carried (it says how much): send the rest.
            if status != 308 or not start <= persisted <= end or persisted == end:
                break
            start = persisted
        if status != 308 or persisted != end:
            raise StorageError(f"the upload session of {self._where()} holds {persisted} bytes "
                               f"after a chunk that ends at {end} (HTTP {status}); the render "
                               "fails and a retry renders it again")
        self.sent = end

    def _where(self) -> str:
        return f"gs://{self._bucket}/{self.key}"


def _persisted(resp: Any) -> int:
    """The bytes a session holds, from a 308's ``Range: bytes=0-N`` (none: 0)."""
    rng = resp.headers.get("Range", "")
    return int(rng.rsplit("-", 1)[1]) + 1 if rng else 0


def _put(http: Any, session: str, body: bytes, content_range: str, offset: int,
         max_attempts: int, headers: dict[str, str] | None = None
         ) -> tuple[int, int, dict[str, Any]]:
    """PUT ``body`` (starting at ``offset`` of the file) to the session; on a transient
    failure ask the session what it holds and send the rest again (the resumable protocol).
    (status, bytes persisted, JSON body of a final answer)."""
    import requests

    last: Exception | str = ""
    request = (body, content_range, offset)
    for attempt in range(max_attempts):
        if attempt:
            # Exponential with jitter, as the SDKs' own retries: many renders refused together
            # by a SlowDown must not come back together.
            time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0) * random.uniform(0.5, 1.0))
            try:
                resumed = _resume(http, session, *request)
            except requests.RequestException as exc:
                last = exc
                continue
            if not isinstance(resumed[0], bytes):
                return resumed  # type: ignore[return-value]
            request = resumed  # type: ignore[assignment]
        try:
            resp = http.put(session, data=request[0], timeout=120,
                            headers={"Content-Range": request[1], **(headers or {})})
        except requests.RequestException as exc:
            last = exc
            continue
        if resp.status_code in RETRIED:
            last = f"HTTP {resp.status_code}"
            continue
        return _answer(resp)
    raise StorageError(f"the upload session failed {max_attempts} times from byte {offset}: "
                       f"{last}; a retry of the task goes on")


def _answer(resp: Any) -> tuple[int, int, dict[str, Any]]:
    if resp.status_code == 308:
        return 308, _persisted(resp), {}
    if resp.status_code in (200, 201):
        return resp.status_code, -1, resp.json()
    return resp.status_code, -1, {"error": resp.text[:300]}


def _resume(http: Any, session: str, body: bytes, content_range: str, offset: int
            ) -> tuple[Any, ...]:
    """After a failed request: what the session holds decides what is sent again, as
    (body, Content-Range, offset); or the session's final answer (status, persisted, body)."""
    state = http.put(session, headers={"Content-Range": "bytes */*"}, timeout=60)
    if state.status_code != 308:
        return _answer(state)
    done = _persisted(state) - offset
    if done < 0:
        raise StorageError(f"the upload session holds {_persisted(state)} bytes, fewer than "
                           f"the {offset} already sent; a retry renders it again")
    body, offset = body[done:], offset + done
    if not content_range.startswith("bytes */"):
        content_range = f"bytes {offset}-{content_range.split('-', 1)[1]}"
        if not body:  # a chunk (the total unknown) the session holds whole
            return 308, offset, {}
    return body, content_range, offset


def status(http: Any, session: str, max_attempts: int) -> tuple[int, int]:
    """(HTTP status, bytes the session holds): 308 while open, 200/201 once finalised,
    404/410 once cancelled or expired."""
    code, persisted, _ = _put(http, session, b"", "bytes */*", 0, max_attempts)
    return code, persisted


def finalise(http: Any, session: str, *, sent: int, tail: bytes, crc32c: str, uri: str,
             max_attempts: int) -> dict[str, Any]:
    """Send the tail and the total: the object appears whole, created only if absent (the
    session's ``ifGenerationMatch=0``), checked by GCS against the render's CRC32C. The new
    object's resource; PublishError when GCS refused it (412 or 400: the caller looks at
    what is under the name), ArtifactValidationError when the session is gone."""
    total = sent + len(tail)
    content_range = f"bytes {sent}-{total - 1}/{total}" if tail else f"bytes */{total}"
    headers = {"X-Goog-Hash": f"crc32c={crc32c}"} if crc32c else {}
    code, _, body = _put(http, session, tail, content_range, sent, max_attempts, headers)
    if code in (200, 201):
        return body
    if code in GONE:
        raise ArtifactValidationError(
            f"the upload session {uri} no longer exists (cancelled, or expired after a week); "
            "it is not published. A retry renders it again")
    if code in (400, 412):
        raise PublishError(f"GCS refused to finalise {uri} (HTTP {code}): {body}")
    raise StorageError(f"cannot finalise the upload session {uri}: HTTP {code} {body}")


def cancel(http: Any, session: str) -> bool:
    """Cancel a session (``DELETE``, GCS answers 499); False when it was already gone."""
    import requests

    try:
        resp = http.delete(session, timeout=60)
    except requests.RequestException as exc:
        raise StorageError(f"cannot cancel the upload session {session[:60]}…: {exc}; "
                           "garbage collection tries again (GCS drops it after a week)") from exc
    if resp.status_code in GONE:
        return False
    if resp.status_code not in (499, 200, 204):
        raise StorageError(f"cannot cancel the upload session {session[:60]}…: HTTP "
                           f"{resp.status_code}; garbage collection tries again")
    return True
