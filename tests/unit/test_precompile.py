"""``scripts/precompile.py``: what ``make venv`` compiles ahead, and the list it reads."""

from __future__ import annotations

import importlib.util
import sys
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("precompile", REPO / "scripts" / "precompile.py")
precompile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(precompile)


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site-packages"
    for name in ("pkg/__init__.py", "pkg/mod.py", "pkg/sub/deep.py", "other/x.py", "top.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("VALUE = 1\n")
    (root / "pkg" / "broken.py").write_text("def (:\n")  # a file that does not compile
    return root


@pytest.mark.parametrize("workers", [1, 2])
def test_the_listed_directories_files_are_compiled_and_nothing_below_them(site, workers):
    total, ok, missing = precompile.compile_listed(site, ["pkg", ".", "gone/away"], workers)
    # pkg's three files (broken.py among them: counted, not compiled) and top.py
    assert (total, ok, missing) == (4, 3, ["gone/away"])
    compiled = {p.relative_to(site).as_posix() for p in site.rglob("*.py")
                if Path(cache_from_source(str(p))).is_file()}
    assert compiled == {"pkg/__init__.py", "pkg/mod.py", "top.py"}  # not sub/, other/, broken


def test_record_lists_every_directory_holding_compiled_modules_and_reads_back(site, tmp_path):
    precompile.compile_listed(site, ["pkg", "other", "pkg/sub"], 1)
    listing = tmp_path / "precompile.txt"
    assert precompile.record(site, listing) == 3
    assert listing.read_text().startswith("# Site-packages directories")
    assert precompile.listed(listing) == ["other", "pkg", "pkg/sub"]


def test_every_listed_directory_is_installed_in_this_venv():
    """A lock change that drops or renames a package leaves the list naming what is not there:
    compiled ahead no more, so re-record it (the fix is in the message)."""
    root = precompile.site_packages()
    assert root.is_relative_to(sys.prefix)  # this venv's, not the base interpreter's
    _, missing = precompile.files_of(root, precompile.listed())
    assert missing == [], (f"{len(missing)} directories of scripts/precompile.txt are not "
                           f"installed (first: {missing[:3]}): run make test-fast on a fresh "
                           f"venv, then .venv/bin/python scripts/precompile.py --record")
    assert len(precompile.listed()) > 500  # Airflow's, ours and the tests' imports
