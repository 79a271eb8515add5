"""The split of the DAG files over bundles (export_lib/config/bundles.py): stable, every file in
exactly one part, shared DAG files in part 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_lib.config.bundles import bundle_name, bundle_part, part_files

REPO = Path(__file__).resolve().parents[2]


def test_a_company_goes_to_the_part_its_id_hashes_to_the_same_everywhere():
    # Fixed values (sha256("acme") starts 822b33ad87c1): a change of the rule, which would move
    # companies between dag-processors on upgrade, fails here.
    assert [bundle_part("company_acme.py", n) for n in (1, 2, 3, 4)] == [1, 2, 3, 2]
    assert [bundle_part("company_dentsu-happiness.py", n) for n in (2, 3)] == [1, 3]
    assert bundle_part("company_acme.py", 2) == bundle_part("/elsewhere/company_acme.py", 2)


def test_the_files_that_are_not_company_loaders_are_in_part_1():
    assert {bundle_part(n, 3) for n in ("config_check.py", "export_retention.py",
                                        "demo_feed.py")} == {1}


def test_every_dag_file_is_in_exactly_one_part():
    dags = REPO / "dags"
    parts = [part_files(dags, n, 2) for n in (1, 2)]
    assert sorted(p for part in parts for p in part) == sorted(dags.glob("*.py"))
    assert set(parts[0]).isdisjoint(parts[1])
    assert bundle_name(2) == "dags-2"


def test_a_hundred_companies_split_about_evenly():
    counts = [0, 0]
    for n in range(100):
        counts[bundle_part(f"company_c{n:03d}.py", 2) - 1] += 1
    assert 35 <= counts[0] <= 65, counts


@pytest.mark.parametrize(("part", "parts", "message"), [
    (0, 2, r"part=0 is not one of the 2 DAG bundles \(1\.\.2\)"),
    (3, 2, r"part=3 is not one of the 2 DAG bundles \(1\.\.2\)"),
])
def test_a_part_outside_the_bundles_is_refused(part, parts, message):
    with pytest.raises(ValueError, match=message):
        part_files(REPO / "dags", part, parts)


def test_zero_parts_is_refused():
    with pytest.raises(ValueError, match=r"parts=0: the number of DAG bundles must be at least 1"):
        bundle_part("company_acme.py", 0)
