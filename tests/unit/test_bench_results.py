"""bench/RESULTS.md is what bench/results.py generates from the stored bench JSONs, and recording
a bench run replaces that bench's JSON and regenerates the table (nothing is run here)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bench.results import RESULTS_DIR, RESULTS_MD, Figure, load, machine_note, record, render


def test_results_md_is_generated_from_the_stored_jsons():
    entries = load()
    assert entries, "no bench/results/*.json: run a bench with --record"
    assert RESULTS_MD.read_text() == render(entries), (
        "bench/RESULTS.md differs from what bench/results.py generates from bench/results/: "
        "run `python bench/results.py` (or a bench with --record) and commit both")
    for path, entry in zip(sorted(RESULTS_DIR.glob("*.json")), entries, strict=True):
        assert path.stem == entry["bench"]
        assert entry["figures"] and entry["command"].startswith("python bench/")
        assert set(entry) == {"bench", "command", "measured_at", "machine", "figures",
                              "summary"}
        assert "/work/" not in json.dumps(entry["figures"]) + entry["command"]


def test_recording_replaces_the_bench_and_regenerates_the_table(tmp_path: Path):
    results = tmp_path / "results"
    when = datetime(2026, 12, 6, 5, tzinfo=UTC)
    record("render", [Figure("csv", "engine CSV render", 280_000, "rows/s",
                             "COPY TO STDOUT 275,000 rows/s", 1.018)],
           argv=["--rows", "200000"], summary={"rows": 200000}, results_dir=results, now=when)
    record("claims", [Figure("cold load", "first load", 1.5, "s")], argv=[],
           summary={}, results_dir=results, now=when)
    first = (tmp_path / "RESULTS.md").read_text()
    assert first == render(load(results))
    assert (f"| render | csv | engine CSV render | 280,000 rows/s | COPY TO STDOUT 275,000 "
            f"rows/s | 1.02× | {machine_note()} | 2026-12-06 |") in first
    assert first.index("| claims |") < first.index("| render |")
    assert "- render: `python bench/render.py --rows 200000`" in first
    record("render", [Figure("csv", "engine CSV render", 300_000, "rows/s")], argv=[],
           summary={}, results_dir=results, now=when)
    second = (tmp_path / "RESULTS.md").read_text()
    assert "280,000" not in second and "| 300,000 rows/s |  |  |" in second
    assert sorted(p.name for p in results.iterdir()) == ["claims.json", "render.json"]
