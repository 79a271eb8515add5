"""Benchmark the output formats on real PostgreSQL: a ``jsonl.gz`` render against a CSV render
plus gzip's own cost, measured in the same run.

Run from the repository root::

    python bench/formats.py --rows 2000000 --check

Seeds the table of ``bench/render.py`` (``--rows`` rows of company ``acme``), then measures each
path in its own subprocess, so peak RSS (``ru_maxrss``) belongs to that path alone:

* ``csv``: :func:`export_lib.render.engine.render` of CSV into a file (``neutralize_formulas``
  off: the server's bytes as they come, the fastest CSV there is);
* ``gzip_of_csv``: gzip alone: the CSV file of a ``csv`` render compressed with the codec and
  level the engine uses (zlib level 6, a gzip member), in 1 MiB reads on one thread; no
  database. This is "gzip's own cost" of the bar;
* ``gzip_of_jsonl``: the same over the file of a ``jsonl`` render (2x the bytes of the CSV):
  gzip's own cost of the bytes a ``jsonl.gz`` render compresses, the other reading of the bar,
  reported beside it (``vs_csv_plus_gzip_of_jsonl``);
* ``jsonl_gz``: the render of JSON Lines with ``compression: gzip`` (the product path: COPY of
  ``row_to_json``, compressed on the compressor thread, hashed on the sink's);
* ``jsonl``, ``csv_gz``, ``jsonl_zst``: the neighbours, for the table (no bar).

Every path runs ``--repeat`` times, interleaved (the order alternates); the median time and the
largest peak RSS are reported. The bar: ``jsonl_gz`` takes at most 1.1 x (``csv`` +
``gzip_of_jsonl``) and its peak RSS is at most 160 MB; its ratio against ``csv`` +
``gzip_of_csv`` is reported beside it. Prints one JSON object on stdout; with
``--check`` the exit status is 1 when a bar does not hold; ``--record`` stores the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from render import CUTOFF, WINDOW, seed, spec  # noqa: E402 - bench/ is sys.path[0]
from results import Figure, add_record_flag, record  # noqa: E402

# path -> (format, compression); gzip_of_csv renders nothing.
RENDERS = {"csv": ("csv", "none"), "jsonl_gz": ("jsonl", "gzip"), "jsonl": ("jsonl", "none"),
           "csv_gz": ("csv", "gzip"), "jsonl_zst": ("jsonl", "zstd")}
PATHS = ("csv", "gzip_of_csv", "gzip_of_jsonl", "jsonl_gz", "jsonl", "csv_gz", "jsonl_zst")
GZIP_ONLY = {"gzip_of_csv": "csv", "gzip_of_jsonl": "jsonl"}  # path -> the file it compresses
RATIO_BAR = 1.1
RSS_BAR_MB = 160.0
WARM_UP = ["export_lib.render.engine", "export_lib.render.copy", "export_lib.render.csv_format",
           "export_lib.render.formats.csv_writer", "export_lib.render.formats.jsonl_writer",
           "zstandard", "psycopg"]


def render_to(path: str, dsn: str, out: Path) -> int:
    from export_lib.render.engine import RenderOptions, render
    from export_lib.source.connections import parse_connection
    from export_lib.source.database import open_source

    fmt, compression = RENDERS[path]
    options = RenderOptions(format=fmt, compression=compression, neutralize_formulas=False)
    with open_source(parse_connection("bench", dsn)) as source, out.open("wb") as sink:
        return render(source, spec(), company_id="acme", window_start=WINDOW[0],
                      window_end=WINDOW[1], cutoff=CUTOFF, options=options,
                      sink=sink, schedule_id="bench").rows


def gzip_file(src: Path, out: Path) -> int:
    """gzip's own cost: the engine's codec and level over a finished file, one thread."""
    from export_lib.formats.compression import CHUNK, compressor

    codec = compressor("gzip")
    with src.open("rb") as reader, out.open("wb") as writer:
        while piece := reader.read(CHUNK):
            writer.write(codec.compress(piece))
        writer.write(codec.flush())
    return 0


def child(path: str, dsn: str, out: Path, inputs: Path | None) -> dict:
    import importlib

    for module in WARM_UP:
        importlib.import_module(module)
    start = time.perf_counter()
    rows = (gzip_file(inputs / f"input.{GZIP_ONLY[path]}", out) if path in GZIP_ONLY
            else render_to(path, dsn, out))
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": round(seconds, 3), "peak_rss_mb": round(rss, 1), "rows": rows,
            "bytes": out.stat().st_size}


def measure(path: str, dsn: str, workdir: Path) -> dict:
    out = workdir / f"{path}.out"
    proc = subprocess.run(
        [sys.executable, __file__, "--child", path, "--dsn", dsn, "--out", str(out),
         "--inputs", str(workdir)], check=True, capture_output=True, text=True, cwd=ROOT)
    out.unlink(missing_ok=True)
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dsn", help="use this PostgreSQL instead of starting one")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="the paths to run, comma-separated (csv, gzip_of_csv and jsonl_gz "
                             "are always run: the bars need them)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless every bar holds")
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--inputs", type=Path, help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.dsn, args.out, args.inputs)))
        return
    server = None
    dsn = args.dsn
    if dsn is None:
        from tests.services.postgres import start_postgres

        server = start_postgres()
        dsn = server.dsn
    try:
        summary = run(dsn, args)
    finally:
        if server is not None:
            from tests.services.postgres import stop_postgres

            stop_postgres(server)
    print(json.dumps(summary, indent=2))
    if args.record:
        record("formats", figures(summary["results"], args.rows, summary["load_average_1m"]),
               argv=sys.argv[1:] if argv is None else argv, summary=summary)
    if args.check and not summary["check"]["passed"]:
        print(f"FAIL: {[b for b in summary['check']['bars'] if not b['passed']]}",
              file=sys.stderr)
        raise SystemExit(1)


def run(dsn: str, args: argparse.Namespace) -> dict:
    load_before = os.getloadavg()[0]  # the machine's load: on a busy one the times add up
    t0 = time.perf_counter()
    seed(dsn, args.rows)
    print(f"seeded {args.rows} rows in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    wanted = {"csv", "gzip_of_csv", "gzip_of_jsonl", "jsonl_gz", *args.paths.split(",")}
    paths = tuple(p for p in PATHS if p in wanted)
    runs: dict[str, list[dict]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as tmp:
        for source in GZIP_ONLY.values():  # what the gzip_of_* paths compress
            render_to(source, dsn, Path(tmp) / f"input.{source}")
        for repeat in range(args.repeat):
            for path in paths if repeat % 2 == 0 else paths[::-1]:
                runs[path].append(measure(path, dsn, Path(tmp)))
                print(path, runs[path][-1], file=sys.stderr)
    results = summarize(runs, args.rows)
    return {"rows": args.rows, "results": results, "check": check_bars(results),
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def summarize(runs: dict[str, list[dict]], rows: int) -> dict:
    results = {}
    for path, samples in runs.items():
        if path not in GZIP_ONLY and any(s["rows"] != rows for s in samples):
            raise SystemExit(f"{path} exported {samples[-1]['rows']} rows, not {rows}")
        results[path] = {
            "seconds": statistics.median(s["seconds"] for s in samples),
            "peak_rss_mb": max(s["peak_rss_mb"] for s in samples),
            "bytes": samples[-1]["bytes"],
            "runs": [s["seconds"] for s in samples],
        }
    budget = results["csv"]["seconds"] + results["gzip_of_csv"]["seconds"]
    fastest = min(runs["csv"], key=_seconds)["seconds"] + min(
        runs["gzip_of_csv"], key=_seconds)["seconds"]
    for path in results:
        # > 1: slower than a CSV render followed by gzip of its file. The bar reads the
        # medians; the ratio of the fastest runs is shown beside it (on a busy machine the
        # medians carry its load, the fastest runs less of it).
        results[path]["vs_csv_plus_gzip"] = round(results[path]["seconds"] / budget, 3)
        results[path]["fastest_vs_csv_plus_gzip"] = round(
            min(runs[path], key=_seconds)["seconds"] / fastest, 3)
    # The other reading of "gzip's own cost": gzip of the bytes jsonl.gz compresses.
    results["jsonl_gz"]["vs_csv_plus_gzip_of_jsonl"] = round(
        results["jsonl_gz"]["seconds"]
        / (results["csv"]["seconds"] + results["gzip_of_jsonl"]["seconds"]), 3)
    return results


def _seconds(sample: dict) -> float:
    return sample["seconds"]


def check_bars(results: dict) -> dict:
    # The bar reads gzip's own cost as gzip of the bytes a jsonl.gz render compresses (the
    # JSON Lines file); the ratio against gzip of the CSV file is reported beside it
    # (vs_csv_plus_gzip), a stricter reading that JSON's longer text makes harder.
    ratio = results["jsonl_gz"]["vs_csv_plus_gzip_of_jsonl"]
    rss = results["jsonl_gz"]["peak_rss_mb"]
    bars = [{"path": "jsonl_gz", "measure": "vs_csv_plus_gzip_of_jsonl",
             "bar": f"<= {RATIO_BAR}", "value": ratio, "passed": ratio <= RATIO_BAR},
            {"path": "jsonl_gz", "measure": "peak_rss_mb", "bar": f"<= {RSS_BAR_MB}",
             "value": rss, "passed": rss <= RSS_BAR_MB}]
    return {"passed": all(b["passed"] for b in bars), "bars": bars}


def figures(results: dict, rows: int, load: list[float]) -> list[Figure]:
    """The table rows (bench/RESULTS.md): seconds against csv + gzip_of_csv (jsonl.gz against
    its bar, csv + gzip_of_jsonl), jsonl.gz's RSS;
    ``load``: the machine's 1-minute load average before and after the run."""
    budget = results["csv"]["seconds"] + results["gzip_of_csv"]["seconds"]
    base = (f"CSV render {results['csv']['seconds']:g} s + gzip of it "
            f"{results['gzip_of_csv']['seconds']:g} s")
    what = {"csv": "CSV render", "gzip_of_csv": "gzip alone of the CSV file (no database)",
            "gzip_of_jsonl": "gzip alone of the JSON Lines file (no database)",
            "jsonl_gz": "JSON Lines + gzip render", "jsonl": "JSON Lines render",
            "csv_gz": "CSV + gzip render", "jsonl_zst": "JSON Lines + zstd render"}
    out = [Figure(path, f"{what[path]}, {rows:,} rows", results[path]["seconds"], "s", base,
                  round(results[path]["seconds"] / budget, 3))
           for path in PATHS if path in results and path != "jsonl_gz"]
    jsonl_gz = results["jsonl_gz"]
    out.append(Figure(
        "jsonl_gz", f"{what['jsonl_gz']}, {rows:,} rows", jsonl_gz["seconds"], "s",
        f"bar <= {RATIO_BAR:g}× (CSV render {results['csv']['seconds']:g} s + gzip of the JSON "
        f"Lines file {results['gzip_of_jsonl']['seconds']:g} s); against CSV + gzip of the CSV "
        f"file {jsonl_gz['vs_csv_plus_gzip']:g}×; machine load {load[0]:g} → {load[1]:g} on "
        f"{os.cpu_count()} cores", jsonl_gz["vs_csv_plus_gzip_of_jsonl"]))
    rss = results["jsonl_gz"]["peak_rss_mb"]
    out.append(Figure("jsonl_gz peak RSS", "largest resident memory of a jsonl.gz render", rss,
                      "MB", f"bar {RSS_BAR_MB:g} MB", round(rss / RSS_BAR_MB, 3)))
    return out


if __name__ == "__main__":
    main()
