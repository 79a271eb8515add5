"""Benchmark the claims check: one company's load while N company files exist.

Run from the repository root (``PYTHONPATH`` picks the checkout whose ``export_lib`` is timed)::

    PYTHONPATH=. .venv/bin/python bench/claims.py --companies 300 2222 4000 --json

For each N: a temporary config directory with the shipped ``defaults.yaml`` and N company
files as ``bench/parse.py`` generates them (every company writes two local directories of its
own), and a claims index under a temporary ``EXPORT_DAG_INDEX_DIR``. Figures, in this process:

* ``cold_seconds``: the first one-company load, which builds the index (parses every file).
* ``load_ms``: ``load_catalog(config, only=<company>)`` with the index warm, for ``--loads``
  companies spread over the directory; minimum and median. This is what every DAG loader's
  parse, every task and ``exportctl run`` pays.
* ``alone_ms``: the same load with the company alone in its directory (the floor: parsing
  the company's own file).
* ``after_edit_ms``: the first load after another company's file was rewritten (that file is
  parsed again and its index entry replaced), median over a few edits.
* ``stat_ms``: listing the directory and ``stat``-ing every company file (what any check that
  sees another process's edit must do), minimum.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from parse import CHANNEL_YAML, CHANNELS, COMPANY_YAML, SHIPPED_DAGS, TIMEZONES
from results import Figure, add_record_flag, record

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def write_companies(config: Path, ids: list[str]) -> None:
    config.mkdir(parents=True, exist_ok=True)
    (config / "defaults.yaml").write_bytes((SHIPPED_DAGS / "config" / "defaults.yaml").read_bytes())
    channels = "".join(CHANNEL_YAML.format(channel=c) for c in CHANNELS)
    for n, cid in enumerate(ids):
        (config / f"{cid}.yaml").write_text(COMPANY_YAML.format(
            cid=cid, n=n, tz=TIMEZONES[n % len(TIMEZONES)], hour=n % 24, channels=channels),
            encoding="utf-8")


def timed_load(config: Path, company: str) -> float:
    from export_lib.config.loader import load_catalog

    started = time.perf_counter()
    catalog = load_catalog(config, only=company, now=NOW)
    elapsed = time.perf_counter() - started
    if not catalog.ok or company not in catalog.companies:
        raise SystemExit(f"{company}: load failed: {catalog.error_lines[:3]}")
    return elapsed


def stat_every_file(config: Path) -> float:
    started = time.perf_counter()
    with os.scandir(config) as entries:
        names = [e.name for e in entries if e.name.endswith((".yaml", ".yml"))]
    for name in names:
        os.stat(os.path.join(config, name))
    return time.perf_counter() - started


def measure(companies: int, loads: int) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="bench-claims-") as tmp:
        root = Path(tmp)
        os.environ["EXPORT_DAG_INDEX_DIR"] = str(root / "index")
        ids = [f"co{n:05d}" for n in range(companies)]
        write_companies(root / "config", ids)
        write_companies(root / "alone", [ids[companies // 2]])
        cold = timed_load(root / "config", ids[0])
        picked = [ids[(k * 7919) % companies] for k in range(loads)]  # spread, not in order
        warm = [timed_load(root / "config", cid) for cid in picked]
        alone = [timed_load(root / "alone", ids[companies // 2]) for _ in range(loads)]
        edited = []
        for k in range(min(5, companies - 1)):
            path = root / "config" / f"{ids[k + 1]}.yaml"
            path.write_text(path.read_text() + f"# edit {k}\n")
            edited.append(timed_load(root / "config", ids[-1 - k]))
        stats = [stat_every_file(root / "config") for _ in range(loads)]
        index_bytes = sum(p.stat().st_size for p in (root / "index").rglob("*") if p.is_file())
    return {"companies": companies, "cold_seconds": round(cold, 2),
            "load_ms_min": round(min(warm) * 1000, 2),
            "load_ms_median": round(statistics.median(warm) * 1000, 2),
            "alone_ms_median": round(statistics.median(alone) * 1000, 2),
            "after_edit_ms_median": round(statistics.median(edited) * 1000, 2),
            "stat_ms_min": round(min(stats) * 1000, 2), "index_bytes": index_bytes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--companies", type=int, nargs="+", default=[300, 2222, 4000])
    parser.add_argument("--loads", type=int, default=40, help="warm loads timed per N (40)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    import export_lib

    print(f"timing {export_lib.__file__}", file=sys.stderr)
    results = []
    for companies in args.companies:
        results.append(measure(companies, args.loads))
        print(json.dumps(results[-1]), file=sys.stderr)
    if args.json:
        print(json.dumps({"export_lib": export_lib.__file__, "results": results}))
    if args.record:
        record("claims", figures(results), argv=sys.argv[1:] if argv is None else argv,
               summary={"results": results})
    return 0


def figures(results: list[dict]) -> list[Figure]:
    """The table rows (bench/RESULTS.md): per directory size, one company's warm load
    against the same company alone in its directory (the floor), and the cold first load."""
    rows = []
    for r in results:
        n = r["companies"]
        rows.append(Figure(f"load, {n:,} companies", f"one company's config load with "
                           f"{n:,} company files (warm index, median)", r["load_ms_median"],
                           "ms", f"company alone {r['alone_ms_median']:g} ms",
                           round(r["load_ms_median"] / r["alone_ms_median"], 3)))
        rows.append(Figure(f"cold load, {n:,} companies", "first load: builds the claims "
                           "index (parses every file)", r["cold_seconds"], "s"))
    return rows


if __name__ == "__main__":
    sys.exit(main())
