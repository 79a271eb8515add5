"""The claims index (``export_lib.config.claims_index``): a one-company load reads only the files
whose claims are nested with its own, and still sees every other file's edit, rename, removal
or addition, a ``defaults.yaml`` change, a corrupt or unusable index, and a writer that lost a
race.

The files here hold their claims as JSON and ``Reader`` parses them (the loader passes its own
parser the same way), so each test can say exactly which files were parsed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from export_lib.config.claims import FileClaims, shared_destination_issues
from export_lib.config.claims_index import INDEX_FORMAT, claims_index, directory_claims
from tests.support.claims_index import indexed, meta

OWN = "local/srv/oldco/newco/in"
NESTED = {  # company file -> its claims; each nested with OWN: above, the same, below
    "oldco": ["local/srv/oldco"],
    "same": ["s3/bucket/x", OWN],
    "deep": [f"{OWN}/deeper/still"],
}
APART = {  # string prefixes of OWN's, or sharing one, but not nested with it
    "sibling": [f"{OWN}-x", f"{OWN}0", f"{OWN}n", "local/srv/oldco/newco/i"],
    **{f"co{n:02d}": [f"local/srv/co{n:02d}"] for n in range(20)},
}


class Reader:
    """Parses a company file of this test (JSON) and records which files it parsed."""

    def __init__(self) -> None:
        self.parsed: list[str] = []

    def __call__(self, path: Path) -> FileClaims | None:
        self.parsed.append(path.name)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # unreadable or broken: a file with errors claims nothing
        return FileClaims(str(path), data["company"],
                          tuple((f"d[{i}]", loc) for i, loc in enumerate(data["claims"])))

    def take(self) -> list[str]:
        parsed, self.parsed = sorted(self.parsed), []
        return parsed


def _write(root: Path, name: str, company: str, claims: list[str]) -> Path:
    path = root / name
    path.write_text(json.dumps({"company": company, "claims": claims}))
    return path


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(tmp_path / "index"))
    config = tmp_path / "config"
    config.mkdir()
    (config / "defaults.yaml").write_text("sources: {}\n")
    _write(config, "newco.yaml", "newco", [OWN, "s3/bucket/newco"])
    for company, claims in {**NESTED, **APART}.items():
        _write(config, f"{company}.yaml", company, claims)
    return config


def _load(root: Path, read: Reader) -> dict[str, FileClaims]:
    """What the loader does for ``only="newco"``: its own file parsed, the others' claims."""
    own = FileClaims(str(root / "newco.yaml"), "newco", (("d[0]", OWN), ("d[1]", "s3/bucket/newco")))
    return directory_claims(root, {own.file: own}, read)


def _warmed(root: Path) -> Reader:
    """A reader after a first load (every other file parsed and indexed)."""
    read = Reader()
    _load(root, read)
    read.take()
    return read


def _files(found: dict[str, FileClaims]) -> list[str]:
    return sorted(Path(path).name for path in found)


def _index(root: Path) -> Path:
    index = claims_index(root)
    assert index is not None and index.name.endswith(f".v{INDEX_FORMAT}.sqlite")
    return index


def test_a_warm_load_reads_only_the_nested_files_and_parses_nothing(root: Path):
    read = Reader()
    everything = _load(root, read)  # no index yet: every other file parsed and indexed
    assert read.take() == sorted(f"{c}.yaml" for c in {**NESTED, **APART})
    assert len(everything) == 1 + len(NESTED) + len(APART)
    gen = meta(_index(root))["gen"]

    warm = _load(root, read)
    assert read.take() == []
    assert _files(warm) == ["deep.yaml", "newco.yaml", "oldco.yaml", "same.yaml"]
    assert warm == {path: claims for path, claims in everything.items()
                    if Path(path).name in ("newco.yaml", "deep.yaml", "oldco.yaml", "same.yaml")}
    assert meta(_index(root))["gen"] == gen  # nothing changed, nothing written
    own = [str(root / "newco.yaml")]
    lines = shared_destination_issues(warm, None, report=own)
    assert lines == shared_destination_issues(everything, None, report=own)
    assert [line.split(": ", 2)[1] for line in lines[own[0]]] == ["d[0]", "d[0]", "d[0]"]


def test_edits_renames_removals_and_additions_are_seen_and_only_they_are_parsed(root: Path):
    read = _warmed(root)

    _write(root, "co03.yaml", "co03", ["local/srv/oldco/newco"])  # edited in place: above
    assert "co03.yaml" in _files(_load(root, read)) and read.take() == ["co03.yaml"]

    # Replaced by a file of the same size and mtime: only the inode tells.
    sibling = root / "sibling.yaml"
    before = sibling.stat()
    text = json.dumps({"company": "sibling", "claims": [f"{OWN}/x"]})
    (root / "tmp").write_text(text.ljust(before.st_size))
    os.utime(root / "tmp", ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(root / "tmp", sibling)
    after = sibling.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ino != before.st_ino
    assert "sibling.yaml" in _files(_load(root, read)) and read.take() == ["sibling.yaml"]

    os.rename(root / "oldco.yaml", root / ".oldco.yaml")  # hidden files are not company files
    assert "oldco.yaml" not in _files(_load(root, read)) and read.take() == []
    assert "oldco.yaml" not in indexed(_index(root))
    os.rename(root / ".oldco.yaml", root / "oldco.yaml")  # back, with its old key
    assert "oldco.yaml" in _files(_load(root, read)) and read.take() == ["oldco.yaml"]

    (root / "deep.yaml").unlink()
    assert "deep.yaml" not in _files(_load(root, read)) and read.take() == []

    _write(root, "late.yaml", "late", ["local/srv"])
    assert _files(_load(root, read)) == ["co03.yaml", "late.yaml", "newco.yaml", "oldco.yaml",
                                         "same.yaml", "sibling.yaml"]
    assert read.take() == ["late.yaml"]

    (root / "late.yaml").write_text("{broken")  # a file with errors claims nothing
    assert "late.yaml" not in _files(_load(root, read)) and read.take() == ["late.yaml"]
    assert "late.yaml" not in indexed(_index(root))
    assert _files(_load(root, read)) == ["co03.yaml", "newco.yaml", "oldco.yaml", "same.yaml",
                                         "sibling.yaml"]
    assert read.take() == []


def test_a_company_with_two_files_claims_nothing(root: Path, monkeypatch: pytest.MonkeyPatch):
    read = _warmed(root)
    _write(root, "twin.yaml", "twin", [OWN])
    _write(root, "twin.yml", "twin", [OWN])
    assert "twin.yaml" not in _files(_load(root, read)) and read.take() == []
    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(root / "defaults.yaml" / "no-index"))
    found = _load(root, read)  # no index: every other file parsed, but not the twins
    assert len(found) == 1 + len(NESTED) + len(APART)
    assert "twin.yaml" not in read.take()


def test_a_corrupt_index_is_built_again(root: Path):
    read = _warmed(root)
    index = _index(root)
    index.write_bytes(b"this is no SQLite database" * 200)
    assert len(_load(root, read)) == 1 + len(NESTED) + len(APART)  # rebuilt: every file parsed
    assert len(read.take()) == len(NESTED) + len(APART)
    assert meta(index)["format"] == INDEX_FORMAT and len(indexed(index)) == 1 + len(NESTED) + len(
        APART)
    assert _files(_load(root, read)) == ["deep.yaml", "newco.yaml", "oldco.yaml", "same.yaml"]
    assert read.take() == []


def test_a_defaults_change_empties_the_index(root: Path):
    read = _warmed(root)
    index = _index(root)
    with closing(sqlite3.connect(index)) as db, db:  # trusted while nothing changes
        db.execute("UPDATE claims SET loc = 'planted' WHERE name = 'oldco.yaml'")
    assert "oldco.yaml" not in _files(_load(root, read)) and read.take() == []

    (root / "defaults.yaml").write_text("sources: {}\nlocal_mounts: []\n")
    assert "oldco.yaml" in _files(_load(root, read))
    assert read.take() == sorted(f"{c}.yaml" for c in {**NESTED, **APART})
    assert indexed(index)["oldco.yaml"] == [("d[0]", "local/srv/oldco")]


@pytest.mark.parametrize("where", ["under-a-file", "index-is-a-directory", "no-airflow-home"])
def test_without_a_usable_index_every_other_file_is_parsed(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str):
    if where == "under-a-file":
        monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(root / "defaults.yaml" / "index"))
    elif where == "index-is-a-directory":
        _index(root).mkdir(parents=True)
    else:
        monkeypatch.delenv("EXPORT_DAG_INDEX_DIR")
        monkeypatch.delenv("AIRFLOW_HOME", raising=False)
        assert claims_index(root) is None
    read = Reader()
    for _ in range(2):
        assert len(_load(root, read)) == 1 + len(NESTED) + len(APART)
        assert read.take() == sorted(f"{c}.yaml" for c in {**NESTED, **APART})


@pytest.mark.parametrize("kind", ["dangling-symlink", "name-not-utf8"])
def test_a_file_that_cannot_be_indexed_is_parsed_on_every_load(root: Path, kind: str):
    read = _warmed(root)
    if kind == "dangling-symlink":
        odd = root / "ghost.yaml"
        odd.symlink_to(root / "nowhere.yaml")
    else:
        odd = root / os.fsdecode(b"\xff.yaml")
        _write(root, odd.name, "odd", [f"{OWN}/x"])
    for _ in range(2):
        found = _load(root, read)
        assert read.take() == [odd.name]
        assert (odd.name in _files(found)) is (kind == "name-not-utf8")
    assert odd.name not in indexed(_index(root))
    assert _files(_load(root, read)) == sorted(
        ["deep.yaml", "newco.yaml", "oldco.yaml", "same.yaml"]
        + ([odd.name] if kind == "name-not-utf8" else []))


def test_a_writer_that_lost_a_race_leaves_no_digest_so_the_next_load_compares_each_row(
        root: Path):
    """Another load writes between this load's read and its write: a digest written now would
    describe rows this load did not write. Here that other load indexed ``co01.yaml`` while it claimed a place
    above newco's; the file then got its old text back with its old key (same size, inode,
    mtime). Trusting the digest would keep the overlap that no longer exists."""
    co01 = root / "co01.yaml"
    # An hour old: a rewrite now gets another mtime (within one clock tick it would not, and
    # no stat-based check could tell the two texts apart).
    hour_ago = co01.stat().st_mtime_ns - 3600 * 10**9
    os.utime(co01, ns=(hour_ago, hour_ago))
    plain = _warmed(root)
    old_text, old = co01.read_text(), co01.stat()

    def racing(path: Path) -> FileClaims | None:
        if path.name == "co02.yaml":  # while this load parses co02, another load runs
            co01.write_text(json.dumps({"company": "co01", "claims": ["local"]}).ljust(len(old_text)))
            assert "co01.yaml" in _files(_load(root, Reader()))
            co01.write_text(old_text)
            os.utime(co01, ns=(old.st_atime_ns, old.st_mtime_ns))
        return plain(path)

    _write(root, "co02.yaml", "co02", ["local/srv/co02/x"])
    _load(root, racing)
    assert plain.take() == ["co02.yaml"]
    assert meta(_index(root))["digest"] is None
    found = _load(root, plain)
    assert plain.take() == ["co01.yaml"]  # its row's key is not the file's: parsed again
    assert found[str(co01)].claims == (("d[0]", "local/srv/co01"),)
    own = str(root / "newco.yaml")
    assert {line.split("(")[1].split(")")[0] for line in
            shared_destination_issues(found, None, report=[own])[own]} == {
        str(root / name) for name in ("deep.yaml", "oldco.yaml", "same.yaml")}
    assert meta(_index(root))["digest"] is not None  # compared row by row, then whole again
