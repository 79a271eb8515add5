"""Probe: can the GCS server the tests start carry a render-to-final-key resumable upload?

A render would open a resumable session at the artifact's final name (``ifGenerationMatch=0``),
send every full 256 KiB of the file with an unknown total (``bytes a-b/*``), and leave the
session's URI in the ledger; publication, in another process, finalises it (``bytes a-b/TOTAL``
with the tail, or ``bytes */TOTAL``); a failed render cancels it (``DELETE`` the session
URI); the render's CRC32C, sent with the last request (``X-Goog-Hash``), is checked by the
server against the whole object.
This script starts the tests' server (``tests/services/gcs.py``: Google's storage-testbench),
makes each of those requests with plain HTTP, prints what came back, and exits 1 if any
capability that design needs is missing (gcp-storage-emulator, the server used before, lacked
the cancel and the precondition at finalisation).

Run: ``.venv/bin/python scripts/probe_gcs_resumable.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.services.gcs import PROJECT, start_gcs, stop_gcs  # noqa: E402

QUANTUM = 256 * 1024  # non-final chunks of a resumable upload are multiples of this
BUCKET = "probe"


def _show(label: str, resp: requests.Response) -> requests.Response:
    body = resp.text[:100].replace("\n", " ")
    print(f"  {label}: {resp.request.method} -> {resp.status_code} "
          f"Range={resp.headers.get('Range')!r} body={body!r}")
    return resp


class Probe:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.render = requests.Session()  # the render's process
        self.publish = requests.Session()  # the publish task's process, another client
        self.results: dict[str, bool] = {}

    def check(self, name: str, ok: bool) -> None:
        self.results[name] = ok
        print(f"{'OK  ' if ok else 'FAIL'} {name}")

    def open_session(self, name: str) -> str:
        resp = _show(f"create session {name} ifGenerationMatch=0", self.render.post(
            f"{self.endpoint}/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable"
            f"&name={name}&ifGenerationMatch=0",
            json={"name": name, "metadata": {"attempt": "a1"}},
            headers={"X-Upload-Content-Type": "text/csv"}))
        return resp.headers["Location"]

    def send_quantum(self, uri: str, data: bytes) -> requests.Response:
        return _show(f"chunk bytes 0-{QUANTUM - 1}/*", self.render.put(
            uri, data=data[:QUANTUM], headers={"Content-Range": f"bytes 0-{QUANTUM - 1}/*"}))

    def listed(self) -> list[str]:
        items = self.render.get(f"{self.endpoint}/storage/v1/b/{BUCKET}/o").json()
        return [item["name"] for item in items.get("items", [])]

    def run(self) -> None:
        _show("create bucket", self.render.post(
            f"{self.endpoint}/storage/v1/b?project={PROJECT}", json={"name": BUCKET}))
        data = bytes(range(256)) * (QUANTUM // 256) + b"tail of the file\n"
        total = len(data)

        print("1. unknown total, resumed by another client, finalised with the tail")
        uri = self.open_session("one.csv")
        first = self.send_quantum(uri, data)
        self.check("chunk with unknown total answers 308", first.status_code == 308)
        self.check("no object listed while the session is open", self.listed() == [])
        status = _show("status bytes */* (other client)", self.publish.put(
            uri, headers={"Content-Range": "bytes */*"}))
        self.check("another client resumes the session by its URI",
                   status.status_code == 308
                   and status.headers.get("Range") == f"bytes=0-{QUANTUM - 1}")
        final = _show(f"finalise bytes {QUANTUM}-{total - 1}/{total}", self.publish.put(
            uri, data=data[QUANTUM:],
            headers={"Content-Range": f"bytes {QUANTUM}-{total - 1}/{total}"}))
        self.check("finalising with the tail creates the object",
                   final.status_code in (200, 201) and final.json().get("size") == str(total))
        again = _show("the same finalisation again (response lost)", self.publish.put(
            uri, data=data[QUANTUM:],
            headers={"Content-Range": f"bytes {QUANTUM}-{total - 1}/{total}"}))
        self.check("a repeated finalisation answers 200/201 with the object (real GCS)",
                   again.status_code in (200, 201))

        print("2. everything sent, finalised with bytes */TOTAL")
        uri = self.open_session("two.csv")
        self.send_quantum(uri, data)
        final = _show(f"finalise bytes */{QUANTUM}", self.publish.put(
            uri, headers={"Content-Range": f"bytes */{QUANTUM}"}))
        self.check("bytes */TOTAL with an empty body finalises",
                   final.status_code in (200, 201) and final.json().get("size") == str(QUANTUM))

        print("3. cancel")
        uri = self.open_session("three.csv")
        self.send_quantum(uri, data)
        cancel = _show("DELETE session URI", self.publish.delete(uri))
        after = _show("status bytes */* after DELETE", self.publish.put(
            uri, headers={"Content-Range": "bytes */*"}))
        self.check("DELETE cancels the session (499, then 404/410)",
                   cancel.status_code == 499 and after.status_code in (404, 410))

        print("4. ifGenerationMatch=0 at finalisation over another run's object")
        _show("put four.csv (another run's)", self.render.post(
            f"{self.endpoint}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=four.csv",
            data=b"another run's bytes\n"))
        uri = self.open_session("four.csv")
        self.send_quantum(uri, data)
        final = _show(f"finalise bytes */{QUANTUM}", self.publish.put(
            uri, headers={"Content-Range": f"bytes */{QUANTUM}"}))
        kept = self.render.get(f"{self.endpoint}/storage/v1/b/{BUCKET}/o/four.csv").json()
        self.check("the precondition refuses it (412) and the other object stays",
                   final.status_code == 412 and kept.get("size") == "20")

        print("5. a CRC32C that is not the object's, sent at finalisation")
        uri = self.open_session("five.csv")
        self.send_quantum(uri, data)
        final = _show(f"finalise bytes */{QUANTUM} X-Goog-Hash crc32c=AAAAAA==", self.publish.put(
            uri, headers={"Content-Range": f"bytes */{QUANTUM}",
                          "X-Goog-Hash": "crc32c=AAAAAA=="}))
        # GCS answers 400; the testbench 412 (its mismatch error): either refuses the object.
        self.check("a wrong X-Goog-Hash is refused (400/412) and no object appears",
                   final.status_code in (400, 412) and "five.csv" not in self.listed())


def main() -> int:
    server = start_gcs()
    try:
        probe = Probe(server.endpoint)
        probe.run()
    finally:
        stop_gcs(server)
    missing = [name for name, ok in probe.results.items() if not ok]
    print(f"{len(probe.results) - len(missing)} capabilities present, {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
