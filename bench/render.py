"""Benchmark the render engine against raw COPY (and, optionally, pandas) on real PostgreSQL.

Run from the repository root::

    python bench/render.py --rows 2000000 --skip-pandas

Starts a throwaway PostgreSQL (``tests.services.postgres``) unless ``--dsn`` is given, seeds
``--rows`` rows of ad metrics for company ``acme`` (plus 1 % of another tenant's rows that must
not be exported) with ``generate_series``, then measures each path in its own subprocess, so
peak RSS (``ru_maxrss``) belongs to that path alone:

* ``copy_raw``: ``COPY (<the same SELECT>) TO STDOUT (FORMAT csv, HEADER)`` via psycopg's
  ``cursor.copy()`` into a file, no processing: the database's own speed;
* ``csv`` / ``parquet``: :func:`export_lib.render.engine.render` into a file. ``csv`` writes
  exactly copy_raw's bytes (``neutralize_formulas`` off: raw COPY does not neutralise), so its
  ratio is the engine's own overhead, which the 0.95 x bar is about;
* ``csv_neutralized``: the product default (formula-like text cells get a leading
  ``'``), reported with its ratio so the feature's cost stays visible (no bar: it is a
  content change, measured at ~3 % of server time for one text column);
* ``pandas_naive``: ``pandas.read_sql`` + ``to_csv`` (``--skip-pandas`` leaves it out).

Every path runs ``--repeat`` times, interleaved (the order alternates); the median time, its
ratio to copy_raw's and the largest peak RSS are reported. Prints one JSON object on stdout;
its ``check`` member says whether the acceptance bars hold (CSV >= 0.95 x copy_raw,
Parquet >= 0.9 x, Parquet peak RSS <= 160 MB). With ``--check`` the exit status is 1 when one does not.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from results import Figure, add_record_flag, record  # noqa: E402 - bench/ is sys.path[0]

COLUMNS = ("id", "company_id", "event_time", "campaign_id", "ad_id", "impressions", "clicks",
           "conversions", "spend", "ctr", "ingested_at")
WINDOW = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC))
CUTOFF = datetime(2026, 3, 3, tzinfo=UTC)
PATHS = ("copy_raw", "csv", "csv_neutralized", "parquet", "pandas_naive")
# Acceptance bars: (path, result key, comparison, limit).
BARS = (("csv", "vs_copy_raw", ">=", 0.95), ("parquet", "vs_copy_raw", ">=", 0.9),
        ("parquet", "peak_rss_mb", "<=", 160.0))


def seed(dsn: str, rows: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS ad_metrics")
        conn.execute(
            "CREATE TABLE ad_metrics (id bigint, company_id text, event_time timestamptz, "
            "campaign_id text, ad_id bigint, impressions bigint, clicks integer, "
            "conversions integer, spend numeric(12,2), ctr double precision, "
            "ingested_at timestamptz)")
        # Every 100th row belongs to another tenant: the export must skip it.
        conn.execute(
            "INSERT INTO ad_metrics SELECT g, CASE WHEN g %% 100 = 0 THEN 'globex' ELSE 'acme' "
            "END, timestamptz '2026-03-01 00:00:00+00' + (g %% 86400) * interval '1 second' "
            "+ (g %% 1000) * interval '1 microsecond', 'cmp-' || (g %% 50), g %% 5000, "
            "(g * 7) %% 100000, (g * 3) %% 1000, g %% 17, ((g %% 100000) / 100.0)::numeric(12,2), "
            "(g %% 1000) / 7000.0, timestamptz '2026-03-02 01:00:00+00' + (g %% 3600) * "
            "interval '1 second' FROM generate_series(1, %s) g", (rows * 100 // 99,))
        conn.execute("CREATE INDEX ad_metrics_tenant_time ON ad_metrics (company_id, event_time)")
        conn.execute("VACUUM ANALYZE ad_metrics")


def spec():
    from export_lib.config.query import QuerySpec

    return QuerySpec(source="bench", table="ad_metrics", columns=COLUMNS,
                     timestamp_column="event_time", tenant_column="company_id",
                     ingested_column="ingested_at")


def raw_select(dsn: str):
    """The SELECT render issues, with plain columns (no float/bool formatting)."""
    from export_lib.source.sql import Bounds, build_postgres, total_order

    return build_postgres(spec(), Bounds("acme", *WINDOW, CUTOFF), order=total_order(spec()))


# Modules each path imports lazily: loaded before the clock starts, so the timings compare
# the work, not interpreter warm-up (pyarrow alone takes ~0.3 s to import).
WARM_UP = {
    "copy_raw": ["psycopg"],
    "csv": ["export_lib.render.engine", "export_lib.render.copy", "export_lib.render.csv_format"],
    "csv_neutralized": ["export_lib.render.engine", "export_lib.render.copy",
                        "export_lib.render.csv_format"],
    "parquet": ["export_lib.render.engine", "export_lib.render.copy",
                "export_lib.render.parquet_format", "pyarrow.csv"],
    "pandas_naive": ["pandas", "sqlalchemy", "psycopg"],
}


def copy_raw(dsn: str, out: Path) -> int:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn, out.open("wb") as sink:
        conn.execute("SET TimeZone = 'UTC'")
        query = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv, HEADER)").format(raw_select(dsn))
        with conn.cursor() as cursor:
            with cursor.copy(query) as copy:
                for data in copy:
                    sink.write(data)
            return cursor.rowcount


def render_to(path: str, dsn: str, out: Path) -> int:
    from export_lib.render.engine import RenderOptions, render
    from export_lib.source.connections import parse_connection
    from export_lib.source.database import open_source

    options = (RenderOptions(format="csv") if path == "csv_neutralized"  # the product default
               else RenderOptions(format=path, neutralize_formulas=False))
    with open_source(parse_connection("bench", dsn)) as source, out.open("wb") as sink:
        return render(source, spec(), company_id="acme", window_start=WINDOW[0],
                      window_end=WINDOW[1], cutoff=CUTOFF, options=options,
                      sink=sink, schedule_id="bench").rows


def pandas_naive(dsn: str, out: Path) -> int:
    import pandas as pd
    import psycopg
    import sqlalchemy

    engine = sqlalchemy.create_engine(dsn.replace("postgresql://", "postgresql+psycopg://"))
    with psycopg.connect(dsn) as conn:
        text = raw_select(dsn).as_string(conn)
    frame = pd.read_sql(sqlalchemy.text(text.replace(":", r"\:")), engine)
    frame.to_csv(out, index=False)
    engine.dispose()
    return len(frame)


def child(path: str, dsn: str, out: Path) -> dict:
    import importlib

    for module in WARM_UP[path]:
        importlib.import_module(module)
    start = time.perf_counter()
    if path == "copy_raw":
        rows = copy_raw(dsn, out)
    elif path == "pandas_naive":
        rows = pandas_naive(dsn, out)
    else:
        rows = render_to(path, dsn, out)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": round(seconds, 3), "peak_rss_mb": round(rss, 1), "rows": rows,
            "bytes": out.stat().st_size}


def measure(path: str, dsn: str, workdir: Path) -> dict:
    out = workdir / f"{path}.out"
    proc = subprocess.run(
        [sys.executable, __file__, "--child", path, "--dsn", dsn, "--out", str(out)],
        check=True, capture_output=True, text=True, cwd=ROOT)
    out.unlink(missing_ok=True)
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dsn", help="use this PostgreSQL instead of starting one")
    parser.add_argument("--skip-pandas", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless every acceptance bar holds")
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.dsn, args.out)))
        return
    server = None
    exit_code = 0
    dsn = args.dsn
    if dsn is None:
        from tests.services.postgres import start_postgres

        server = start_postgres()
        dsn = server.dsn
    try:
        t0 = time.perf_counter()
        seed(dsn, args.rows)
        print(f"seeded {args.rows} rows in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        paths = [p for p in PATHS if not (args.skip_pandas and p == "pandas_naive")]
        runs: dict[str, list[dict]] = {p: [] for p in paths}
        with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
            for repeat in range(args.repeat):
                # Alternate the order so a path is not always the one after another's cleanup.
                for path in paths if repeat % 2 == 0 else paths[::-1]:
                    runs[path].append(measure(path, dsn, Path(tmp)))
                    print(path, runs[path][-1], file=sys.stderr)
        results = summarize(runs, args.rows)
        check = check_bars(results)
        summary = {"rows": args.rows, "results": results, "check": check}
        print(json.dumps(summary, indent=2))
        if args.record:
            record("render", figures(results, args.rows), argv=sys.argv[1:] if argv is None else argv,
                   summary=summary)
        if args.check and not check["passed"]:
            failed = [c for c in check["bars"] if not c["passed"]]
            print(f"FAIL: {failed}", file=sys.stderr)
            exit_code = 1
    finally:
        if server is not None:
            from tests.services.postgres import stop_postgres

            stop_postgres(server)
    if exit_code:
        raise SystemExit(exit_code)


def figures(results: dict, rows: int) -> list[Figure]:
    """The table rows (bench/RESULTS.md): each path's rows/s against COPY's, Parquet's RSS."""
    raw = results["copy_raw"]["rows_per_s"]
    what = {"csv": "engine CSV render (the same bytes as COPY)",
            "csv_neutralized": "CSV with neutralize_formulas on (the default)",
            "parquet": "engine Parquet render", "pandas_naive": "pandas read_sql + to_csv"}
    what = {path: f"{text}, {rows:,} rows" for path, text in what.items()}
    bars = {(p, k): f"{op} {v:g}" for p, k, op, v in BARS}
    rows = [Figure(path, what[path], results[path]["rows_per_s"], "rows/s",
                   f"COPY TO STDOUT {raw:,} rows/s" + (
                       f"; bar {bars[path, 'vs_copy_raw']}×" if (path, "vs_copy_raw") in bars
                       else ""), results[path]["vs_copy_raw"])
            for path in results if path != "copy_raw"]
    if "parquet" in results:
        limit = dict(((p, k), v) for p, k, _, v in BARS)[("parquet", "peak_rss_mb")]
        rss = results["parquet"]["peak_rss_mb"]
        rows.append(Figure("parquet peak RSS", "largest resident memory of a Parquet render",
                           rss, "MB", f"bar {limit:g} MB", round(rss / limit, 3)))
    return rows


def summarize(runs: dict[str, list[dict]], rows: int) -> dict:
    results = {}
    for path, samples in runs.items():
        if any(s["rows"] != rows for s in samples):
            raise SystemExit(f"{path} exported {samples[-1]['rows']} rows, not {rows}")
        seconds = statistics.median(s["seconds"] for s in samples)
        results[path] = {
            "seconds": seconds,
            "rows_per_s": round(rows / seconds),
            "peak_rss_mb": max(s["peak_rss_mb"] for s in samples),
            "bytes": samples[-1]["bytes"],
            "runs": [s["seconds"] for s in samples],
        }
    raw = results["copy_raw"]["seconds"]
    for path in results:
        # The ratio of medians: > 1 means faster than copy_raw.
        results[path]["vs_copy_raw"] = round(raw / results[path]["seconds"], 3)
    return results


def check_bars(results: dict) -> dict:
    bars = []
    for path, key, op, limit in BARS:
        value = results[path][key]
        passed = value >= limit if op == ">=" else value <= limit
        bars.append({"path": path, "measure": key, "bar": f"{op} {limit}", "value": value,
                     "passed": passed})
    return {"passed": all(b["passed"] for b in bars), "bars": bars}


if __name__ == "__main__":
    main()
