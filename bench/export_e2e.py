"""One export end to end against its physical limit: PostgreSQL → artifact store (S3) → S3.

Run from the repository root::

    python bench/export_e2e.py --rows 2000000 --record

Starts a throwaway PostgreSQL (``tests.services.postgres``) unless ``--dsn`` is given and
moto's S3 server (``tests.services.s3``), seeds ``--rows`` rows of ad metrics for company
``acme`` (``bench/render.py``'s table, one UTC day), then measures, each in its own
subprocess (so peak RSS belongs to that path alone), interleaved ``--repeat`` times:

* ``baseline``: ``COPY (<the export's SELECT>) TO STDOUT (FORMAT csv, HEADER)`` into a file,
  its sha256 (read back), and one upload of that file to the destination bucket (boto3's
  managed transfer): the least any export of these rows can do;
* ``export``: the library's calls the Airflow operators make, one after the other —
  ``register_run``, ``render_run`` (artifacts in ``s3://artifacts/exports``),
  ``publish_run`` and ``deliver_run`` to an S3 destination on the same server — with a
  SQLite ledger. The artifact store and the destination share the connection, so delivery
  is a server-side copy.

After each export the destination object is read back and its sha256 compared with the
manifest's (outside the clock). Prints one JSON object: median seconds of each path, the
ratio export / baseline, the largest peak RSS of the export; ``check`` says whether the bars
hold (ratio <= 1.3, peak RSS <= 300 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from results import Figure, add_record_flag, record  # noqa: E402 - bench/ is sys.path[0]

SLOT = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)  # acme/daily-spend at 07:00 UTC: 2026-03-01
WINDOW = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC))
NOW = SLOT + timedelta(minutes=5)
BARS = (("ratio", "<=", 1.3), ("peak_rss_mb", "<=", 300.0))
SCHEDULE = "acme/daily-spend"


def write_config(config: Path) -> None:
    """acme's shipped config, its daily export reading the bench table (UTC days) and
    delivering to the destination bucket; the table and the connections allowed."""
    import shutil

    import yaml
    from render import COLUMNS

    shutil.copytree(ROOT / "dags" / "config", config)
    company = yaml.safe_load((config / "acme.yaml").read_text())
    company["company"]["timezone"] = "UTC"
    company["data_exports"] = []
    daily = next(s for s in company["widget_exports"] if s["id"] == "daily-spend")
    daily["query"] = {"source": "bench_pg", "table": "ad_metrics", "columns": list(COLUMNS),
                      "timestamp_column": "event_time", "tenant_column": "company_id",
                      "ingested_column": "ingested_at"}
    daily["csv"] = {"delimiter": ","}
    daily["destinations"] = [{"id": "dest", "type": "s3", "conn_id": "bench_s3",
                              "bucket": "dest", "prefix": "acme"}]
    company["widget_exports"] = [daily]
    (config / "acme.yaml").write_text(yaml.safe_dump(company, sort_keys=False))
    for other in ("dentsu-happiness.yaml", "kiwi-outdoors.yaml"):
        (config / other).unlink()
    defaults = yaml.safe_load((config / "defaults.yaml").read_text())
    defaults["sources"]["bench_pg"] = {"tables": {"ad_metrics": {"tenant_column": "company_id"}}}
    defaults.setdefault("connections", {})["bench_s3"] = {"use": ["s3"], "companies": "all"}
    (config / "defaults.yaml").write_text(yaml.safe_dump(defaults, sort_keys=False))


def baseline(dsn: str, work: Path) -> dict:
    import boto3
    import psycopg
    from psycopg import sql
    from render import spec

    from export_lib.source.sql import Bounds, build_postgres, total_order

    query = build_postgres(spec(), Bounds("acme", *WINDOW, None), order=total_order(spec()))
    client = boto3.session.Session().client("s3", endpoint_url=os.environ["BENCH_S3_ENDPOINT"],
                                            region_name="us-east-1")
    out = work / "baseline.csv"
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn, out.open("wb") as sink:
        conn.execute("SET TimeZone = 'UTC'")
        with conn.cursor() as cursor, cursor.copy(
                sql.SQL("COPY ({}) TO STDOUT (FORMAT csv, HEADER)").format(query)) as copy:
            for data in copy:
                sink.write(data)
    copied = time.perf_counter()
    digest = hashlib.sha256()
    with out.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    hashed = time.perf_counter()
    client.upload_file(str(out), "dest", f"baseline/{digest.hexdigest()}.csv")
    done = time.perf_counter()
    return {"seconds": done - started, "copy_s": copied - started, "sha256_s": hashed - copied,
            "upload_s": done - hashed, "bytes": out.stat().st_size}


def export(work: Path) -> dict:
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import deliver_run, publish_run, register_run, render_run
    from export_lib.storage.stores import open_store

    ledger = open_ledger(f"sqlite:///{work / 'ledger.db'}")
    ledger.upgrade()
    schedule = load_catalog(work / "config", only="acme").schedule(SCHEDULE)
    started = time.perf_counter()
    store = open_store()
    key = register_run(ledger, schedule, SLOT, now=NOW).run_key
    rendered = render_run(ledger, store, key, now=NOW)
    r_done = time.perf_counter()
    published = publish_run(ledger, store, key, rendered["attempt_id"], now=NOW)
    p_done = time.perf_counter()
    delivered = deliver_run(ledger, key, "dest", now=NOW, config_dir=str(work / "config"))
    done = time.perf_counter()
    assert delivered["state"] == "acknowledged", delivered
    return {"seconds": done - started, "render_s": r_done - started,
            "publish_s": p_done - r_done, "deliver_s": done - p_done,
            "rows": rendered["rows"], "bytes": published["bytes"],
            "sha256": published["sha256"], "receipt": delivered.get("receipt")}


def child(path: str, dsn: str, work: Path) -> dict:
    result = baseline(dsn, work) if path == "baseline" else export(work)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def measure(path: str, dsn: str, work: Path, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", path, "--dsn", dsn, "--work", str(work)],
        check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def verify(client, sha256: str) -> None:
    """The delivered object's bytes hash to the manifest's sha256 (read back, off the clock)."""
    listed = client.list_objects_v2(Bucket="dest", Prefix="acme/").get("Contents", [])
    (obj,) = [o for o in listed if o["Key"].endswith(".csv")]
    digest = hashlib.sha256()
    body = client.get_object(Bucket="dest", Key=obj["Key"])["Body"]
    while chunk := body.read(1 << 20):
        digest.update(chunk)
    assert digest.hexdigest() == sha256, (obj["Key"], digest.hexdigest(), sha256)


def reset_buckets(client) -> None:
    for bucket in ("artifacts", "dest"):
        for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])


def run(dsn: str, rows: int, repeat: int) -> dict:
    from render import seed

    from tests.services.s3 import start_s3, stop_s3

    seed(dsn, rows)
    s3 = start_s3()
    runs: dict[str, list[dict]] = {"baseline": [], "export": []}
    try:
        client = s3.client()
        for bucket in ("artifacts", "dest"):
            client.create_bucket(Bucket=bucket)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "plugins"))),
               "AIRFLOW_CONN_BENCH_S3": s3.connection_uri(),
               "AIRFLOW_CONN_BENCH_PG": dsn,
               "EXPORT_ARTIFACT_ROOT": "s3://artifacts/exports",
               "EXPORT_ARTIFACT_CONN": "bench_s3", "BENCH_S3_ENDPOINT": s3.endpoint,
               "AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
        for i in range(repeat):
            order = ("baseline", "export") if i % 2 == 0 else ("export", "baseline")
            for path in order:
                with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
                    work = Path(tmp)
                    write_config(work / "config")
                    reset_buckets(client)
                    result = measure(path, dsn, work, env)
                    if path == "export":
                        verify(client, result["sha256"])
                    runs[path].append(result)
                    print(f"{path}: {result['seconds']:.2f} s", file=sys.stderr)
    finally:
        stop_s3(s3)
    return summarize(runs, rows)


def summarize(runs: dict[str, list[dict]], rows: int) -> dict:
    base = statistics.median(r["seconds"] for r in runs["baseline"])
    exp = statistics.median(r["seconds"] for r in runs["export"])
    summary = {
        "rows": rows, "bytes": runs["export"][0]["bytes"],
        "baseline_s": round(base, 2), "export_s": round(exp, 2),
        "ratio": round(exp / base, 3),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["export"]), 1),
        "baseline_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["baseline"]), 1),
        "runs": {p: [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                     for r in rs] for p, rs in runs.items()},
    }
    summary["check"] = {f"{name} {op} {limit}": (summary[name] <= limit)
                        for name, op, limit in BARS}
    return summary


def figures(summary: dict) -> list[Figure]:
    """The table rows (bench/RESULTS.md): the export's time against the baseline's, and
    the export's peak RSS against its bar."""
    rows = f"{summary['rows']:,} rows"
    return [
        Figure("export_e2e.ratio", f"CSV export of {rows}, PostgreSQL → S3 store → S3 "
               "(render, publish, deliver)", summary["export_s"], "s",
               f"COPY to a file + sha256 + one upload: {summary['baseline_s']} s",
               summary["ratio"]),
        Figure("export_e2e.peak_rss", f"peak RSS of that export ({rows})",
               summary["peak_rss_mb"], "MB", "bar: 300 MB",
               round(summary["peak_rss_mb"] / 300.0, 3)),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dsn", help="use this PostgreSQL instead of starting one")
    parser.add_argument("--child", choices=("baseline", "export"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a bar does not hold")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.dsn, args.work)))
        return
    server = None
    dsn = args.dsn
    if dsn is None:
        from tests.services.postgres import start_postgres

        server = start_postgres()
        dsn = server.dsn
    try:
        summary = run(dsn, args.rows, args.repeat)
    finally:
        if server is not None:
            from tests.services.postgres import stop_postgres

            stop_postgres(server)
    json.dump(summary, sys.stdout, indent=2)
    print()
    if args.record:
        record("export_e2e", figures(summary), argv=sys.argv[1:] if argv is None else argv,
               summary=summary)
    if args.check and not all(summary["check"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
