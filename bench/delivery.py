"""Delivery throughput and memory: one artifact to local, S3 (moto), GCS (emulator) and SFTP.

Starts the same real servers the tests use, delivers one artifact of ``--mib`` MiB to each
destination, and prints JSON: seconds, MiB/s and the peak Python heap (tracemalloc) per
destination. The heap peak staying far below the artifact size shows the transports stream.

    PYTHONPATH=$PWD python bench/delivery.py --mib 32
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from results import Figure, add_record_flag, record  # bench/ is sys.path[0]

from export_lib.config.destinations import (
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
)
from export_lib.delivery import DeliverableArtifact, deliver, delivery_metadata
from tests.services.gcs import start_gcs, stop_gcs
from tests.services.s3 import start_s3, stop_s3
from tests.services.sftp import start_sftp, stop_sftp

NOW = datetime(2026, 3, 29, 6, 0, tzinfo=UTC)


def _artifact(work: Path, mib: int) -> DeliverableArtifact:
    path = work / "acme_daily-spend_2026-03-28_v1.csv"
    digest = hashlib.sha256()
    block = b"2026-03-28,acme,campaign-0001,12.50\n" * 29127  # ~1 MiB of CSV lines
    with path.open("wb") as handle:
        for _ in range(mib):
            handle.write(block)
            digest.update(block)
    size = path.stat().st_size
    return DeliverableArtifact(
        local_path=path, name=path.name, version=1, sha256=digest.hexdigest(), bytes=size,
        rows=29127 * mib, format="csv", uri=f"file://{path}",
        window_start=datetime(2026, 3, 28, tzinfo=UTC),
        window_end=datetime(2026, 3, 29, tzinfo=UTC),
    )


def _measure(engine: sa.Engine, destination: object, artifact: DeliverableArtifact,
             work: Path) -> dict[str, float]:
    tracemalloc.start()
    started = time.perf_counter()
    deliver(engine, destination, artifact, run_key="bench/run", period_label="2026-03-28",
            owner="bench", authorized={"bench"}, retry_until=NOW + timedelta(days=5), now=NOW,
            exports_root=work / "exports")
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    mib = artifact.bytes / 1024 / 1024
    return {"seconds": round(seconds, 3), "mib_per_s": round(mib / seconds, 1),
            "peak_heap_mib": round(peak / 1024 / 1024, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32)
    add_record_flag(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-delivery-"))
    artifact = _artifact(work, args.mib)
    engine = sa.create_engine(f"sqlite:///{work / 'ledger.db'}")
    delivery_metadata.create_all(engine)
    s3, gcs, sftp = start_s3(), start_gcs(), start_sftp()
    try:
        s3.client().create_bucket(Bucket="bench-bucket")
        gcs.client().create_bucket("bench-bucket")
        os.environ["AIRFLOW_CONN_BENCH_S3"] = s3.connection_uri()
        os.environ["AIRFLOW_CONN_BENCH_GCS"] = gcs.connection_uri()
        os.environ["AIRFLOW_CONN_BENCH_SFTP"] = sftp.connection_uri()
        destinations = {
            "local": LocalDestination(id="local", path="bench"),
            "s3": S3Destination(id="s3", conn_id="bench_s3", bucket="bench-bucket"),
            "gcs": GcsDestination(id="gcs", conn_id="bench_gcs", bucket="bench-bucket"),
            "sftp": SftpDestination(id="sftp", conn_id="bench_sftp", path="/bench"),
        }
        results = {name: _measure(engine, dest, artifact, work)
                   for name, dest in destinations.items()}
    finally:
        stop_s3(s3)
        stop_gcs(gcs)
        stop_sftp(sftp)
    summary = {"artifact_mib": round(artifact.bytes / 1024 / 1024, 1), "results": results}
    json.dump(summary, sys.stdout, indent=2)
    print()
    if args.record:
        record("delivery", figures(summary), argv=sys.argv[1:], summary=summary)


def figures(summary: dict) -> list[Figure]:
    """The table rows (bench/RESULTS.md): each destination's MiB/s against the local copy's,
    and the largest Python heap against the artifact's size (streaming keeps it far below)."""
    mib, results = summary["artifact_mib"], summary["results"]
    local = results["local"]["mib_per_s"]
    rows = [Figure(f"{name} delivery", f"deliver one {mib:g} MiB artifact to {name}",
                   result["mib_per_s"], "MiB/s", f"local copy {local:g} MiB/s",
                   round(result["mib_per_s"] / local, 3))
            for name, result in results.items() if name != "local"]
    name, peak = max(((n, r["peak_heap_mib"]) for n, r in results.items()), key=lambda p: p[1])
    rows.append(Figure("delivery peak heap", f"largest Python heap of a delivery ({name})",
                       peak, "MiB", f"artifact {mib:g} MiB", round(peak / mib, 3)))
    return rows


if __name__ == "__main__":
    main()
