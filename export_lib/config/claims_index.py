"""The claims index: what every company file of a config directory claims, keyed by location.

A one-company load compares its file with what every *other* file claims
(:mod:`export_lib.config.claims`). Parsing them all on every load is quadratic (N loaders ×
N files), and so was decoding an index with one entry per file (format 2, JSON: 0.13 s per
load at 4,000 files, 0.9 s at 20,000; ``bench/claims.py``). This one is a SQLite file with a
row per claim, indexed by location, so a load reads only the claims nested with its own: for
each own location every ancestor-or-self (``loc IN (...)``) and everything below it
(``loc >= 'x/' AND loc < 'x0'``: ``0`` is the character after ``/``), then those few files'
claims whole.

What it must still see, as before: another file edited, added, renamed or removed, by any
process, at the next load. So every company file is ``stat``-ed on every load (mtime, size,
inode; ~3.5 µs a file on the 2-core test machine: 14 ms at 4,000 files, 78 ms at 20,000, the
part that still grows with N) and the keys are compared with the index through one digest of
the sorted (name, key) list; only when it differs are the stored keys read and the changed
files parsed. ``defaults.yaml`` changing (its defaults fill every company's destinations)
empties the index. A listed file that cannot be ``stat``-ed, or whose name is not UTF-8, is
parsed on every load, never indexed.

Concurrency (the dag-processor's parse children, workers, ``exportctl`` at once): a load
reads in one transaction (one snapshot); parsing runs outside any transaction and a write is
one short ``BEGIN IMMEDIATE`` transaction. SQLite's default rollback journal, not WAL: a read
holds a shared lock for a fraction of a millisecond and a writer waits for it (and readers for
a writer) up to a busy timeout; WAL cost every load ~0.4 ms more (each process opens and closes
the file, and the last one out checkpoints and removes ``-wal``/``-shm``), and a read-only
index directory can still be read. The digest is written only by a writer that saw no other
write since its snapshot (``gen``), so it always describes the rows; a writer that lost that
race writes its rows without a digest and the next load compares row by row. A lost race, a
busy or read-only index only cost a parse. An index SQLite calls corrupt is deleted and built
again; without one (no ``AIRFLOW_HOME``, an index that cannot be created or opened) every
other file is parsed.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from itertools import chain
from pathlib import Path
from typing import NamedTuple

from export_lib import settings
from export_lib.config.claims import FileClaims
from export_lib.logfmt import get_logger

log = get_logger(__name__)

INDEX_FORMAT = 3  # in the file name too: another format's index is another file
DEFAULTS_NAME = "defaults.yaml"  # its change (size, mtime, inode) empties the index
BUSY_TIMEOUT_S = 10.0  # locks are held for milliseconds; waiting beats parsing every file

Key = tuple[int, int, int]
"""What must stay the same for a file's indexed claims to hold: mtime_ns, size, inode."""

SCHEMA = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v ANY) STRICT;
CREATE TABLE IF NOT EXISTS files (name TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL, ino INTEGER NOT NULL, company TEXT) STRICT;
CREATE TABLE IF NOT EXISTS claims (loc TEXT NOT NULL, name TEXT NOT NULL,
    label TEXT NOT NULL) STRICT;
CREATE INDEX IF NOT EXISTS claims_loc ON claims (loc);
CREATE INDEX IF NOT EXISTS claims_name ON claims (name);
COMMIT;
"""


class Listing(NamedTuple):
    """A config directory's company files as this load sees them."""

    keys: dict[str, Key]
    """Name → key, sorted by name. Not listed: two files of one company (``x.yaml`` and
    ``x.yml``: errors of both in a full load, so neither claims anything)."""
    unreadable: tuple[str, ...]
    """Listed, but ``stat`` failed or the name is not UTF-8: parsed on every load, never
    indexed (such a file usually claims nothing)."""
    defaults: str | None
    digest: bytes


def directory_claims(root: Path, own: Mapping[str, FileClaims],
                     read: Callable[[Path], FileClaims | None]) -> dict[str, FileClaims]:
    """``own`` (by path, parsed by the caller) and the claims of every other company file of
    ``root`` that may overlap one of them; ``read`` parses a file the index cannot answer for.
    Through the index only the overlapping files are returned; without one, every file."""
    listing = list_company_files(root)
    mine = {Path(path).name: claims for path, claims in own.items()}
    index = claims_index(root)
    if index is not None:
        found = _through_index(index, root, listing, mine, read)
        if found is not None:
            return {**found, **own}
    found = {}
    for name in (*listing.keys, *listing.unreadable):
        claims = None if name in mine else read(Path(root, name))
        if claims is not None:
            found[os.path.join(root, name)] = claims
    return {**found, **own}


def claims_index(config_dir: Path) -> Path | None:
    """Where the claims of ``config_dir``'s files are kept: beside the DAG index (the
    dag-processor's own writable home; the config directory may be mounted read-only)."""
    base = settings.dag_index_base()
    if base is None:
        return None
    folder = hashlib.sha256(str(config_dir.resolve()).encode()).hexdigest()[:16]
    return base / "claims" / f"{folder}.v{INDEX_FORMAT}.sqlite"


def list_company_files(root: Path) -> Listing:
    """The company files of ``root``, each ``stat``-ed once: this runs on every DAG loader's
    parse, and the stats are most of its cost (no Path objects, no second pass). A directory or
    other non-file named *.yaml claims nothing (``read`` finds it unreadable)."""
    keys: dict[str, Key] = {}
    unreadable, yml = [], []
    with os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            if (not name.endswith((".yaml", ".yml")) or name.startswith(".")
                    or name == DEFAULTS_NAME):
                continue
            if name.endswith(".yml"):
                yml.append(name)
            try:
                # A name that is not UTF-8 (no company id is) cannot be an index key.
                st = entry.stat() if name.isascii() or _utf8(name) else None
            except OSError:
                st = None
            if st is None:
                unreadable.append(name)
            else:
                keys[name] = (st.st_mtime_ns, st.st_size, st.st_ino)
    twice = {name[:-4] for name in yml if f"{name[:-4]}.yaml" in keys
             or f"{name[:-4]}.yaml" in unreadable}
    if twice:  # x.yaml and x.yml: a full load refuses both, so neither claims anything
        keys = {name: key for name, key in keys.items() if name.rsplit(".", 1)[0] not in twice}
        unreadable = [name for name in unreadable if name.rsplit(".", 1)[0] not in twice]
    keys = dict(sorted(keys.items()))
    digest = hashlib.blake2b("\0".join(keys).encode(), digest_size=16)
    digest.update(array("q", chain.from_iterable(keys.values())).tobytes())
    return Listing(keys, tuple(sorted(unreadable)), _defaults_key(root), digest.digest())


def _utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:  # undecodable bytes, kept as surrogates by os.scandir
        return False
    return True


def _defaults_key(root: Path) -> str | None:
    try:
        st = os.stat(os.path.join(root, DEFAULTS_NAME))
    except OSError:
        return None
    return f"{st.st_mtime_ns},{st.st_size},{st.st_ino}"


def _through_index(index: Path, root: Path, listing: Listing, mine: Mapping[str, FileClaims],
                   read: Callable[[Path], FileClaims | None]) -> dict[str, FileClaims] | None:
    """Every other file's claims that may overlap ``mine``'s, or None: no usable index."""
    for attempt in (1, 2):
        try:
            index.parent.mkdir(parents=True, exist_ok=True)
            with closing(_connect(index)) as db:
                return _answer(db, root, listing, mine, read)
        except sqlite3.DatabaseError as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code
            if attempt == 2 or code not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                return None  # busy, read-only, cannot open: parse this time
            log.warning("claims index %s is unreadable (%s); building it again", index, exc)
            _remove(index)
        except OSError:
            return None
    return None


def _connect(index: Path) -> sqlite3.Connection:
    # Autocommit: transactions are begun explicitly, reads included (one snapshot).
    db = sqlite3.connect(index, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'meta'").fetchone()[0] == 0:
            db.executescript(SCHEMA)  # two processes may both get here: IF NOT EXISTS
    except BaseException:
        db.close()
        raise
    return db


def _remove(index: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with suppress(OSError):
            os.unlink(f"{index}{suffix}")


def _answer(db: sqlite3.Connection, root: Path, listing: Listing,
            mine: Mapping[str, FileClaims], read: Callable[[Path], FileClaims | None]
            ) -> dict[str, FileClaims]:
    with _transaction(db, "BEGIN"):  # one snapshot for the checks and the lookups
        meta = dict(db.execute("SELECT k, v FROM meta"))
        valid = meta.get("format") == INDEX_FORMAT and meta.get("defaults") == listing.defaults
        if not valid:
            stale, removed = list(listing.keys), []
        elif meta.get("digest") == listing.digest:
            stale, removed = [], []  # every row is as the files are now
        else:
            stored = {name: (m, s, i) for name, m, s, i in
                      db.execute("SELECT name, mtime_ns, size, ino FROM files")}
            stale = [name for name, key in listing.keys.items() if stored.get(name) != key]
            removed = [name for name in stored if name not in listing.keys]
        found = _nested_with(db, root, mine.values(), {*stale, *removed, *mine}) if valid else {}
        # The caller's own parse is the truth about its files: rewritten when the row differs
        # (e.g. its validity changed with the clock while the file did not).
        own_stored = {name: _stored(db, name) for name in mine if valid and name not in stale}
    # Parsed outside any transaction: a full rebuild parses every file.
    fresh = {name: read(Path(root, name)) for name in (*stale, *listing.unreadable)
             if name not in mine}
    rows = {name: claims for name, claims in fresh.items() if name in listing.keys}
    rows.update({name: claims for name, claims in mine.items() if name in listing.keys
                 and own_stored.get(name) != _row(claims)})
    if rows or removed or not valid:
        _write(db, listing, meta.get("gen", 0), rows, removed, reset=not valid)
    found.update({os.path.join(root, name): claims for name, claims in fresh.items()
                  if claims is not None})
    return found


@contextmanager
def _transaction(db: sqlite3.Connection, begin: str) -> Iterator[None]:
    """``begin`` … COMMIT; on an error ROLLBACK (its own failure ignored) and the error raised."""
    db.execute(begin)
    try:
        yield
    except BaseException:
        with suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _nested_with(db: sqlite3.Connection, root: Path, own: Iterable[FileClaims],
                 skip: set[str]) -> dict[str, FileClaims]:
    """The indexed files (but ``skip``) with a claim at, above or below one of ``own``'s."""
    names: set[str] = set()
    for loc in sorted({loc for claims in own for _, loc in claims.claims}):
        parts = loc.split("/")
        above = ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
        query = (f"SELECT name FROM claims WHERE loc IN ({', '.join('?' * len(above))}) "
                 "OR (loc >= ? AND loc < ?)")
        names.update(name for (name,) in db.execute(query, (*above, f"{loc}/", f"{loc}0")))
    found = {}
    for name in sorted(names - skip):
        company, claims = _stored(db, name)
        if company is not None:
            path = os.path.join(root, name)
            found[path] = FileClaims(path, company, claims)
    return found


def _stored(db: sqlite3.Connection, name: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    row = db.execute("SELECT company FROM files WHERE name = ?", (name,)).fetchone()
    claims = db.execute("SELECT label, loc FROM claims WHERE name = ? ORDER BY rowid", (name,))
    return (row[0] if row else None), tuple(claims)


def _row(claims: FileClaims | None) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    return (claims.company, claims.claims) if claims is not None else (None, ())


def _write(db: sqlite3.Connection, listing: Listing, seen_gen: int,
           rows: Mapping[str, FileClaims | None], removed: Iterable[str], *, reset: bool) -> None:
    """Store ``rows`` (None: a file with errors, claiming nothing) and forget ``removed``; the
    digest only when the rows are then exactly ``listing`` (no other write since the read)."""
    try:
        with _transaction(db, "BEGIN IMMEDIATE"):
            gen = db.execute("SELECT v FROM meta WHERE k = 'gen'").fetchone()
            gen = gen[0] if gen else 0
            if reset:
                db.execute("DELETE FROM files")
                db.execute("DELETE FROM claims")
            else:
                gone = [(name,) for name in (*removed, *rows)]
                db.executemany("DELETE FROM files WHERE name = ?", gone)
                db.executemany("DELETE FROM claims WHERE name = ?", gone)
            db.executemany("INSERT INTO files VALUES (?, ?, ?, ?, ?)",
                           [(name, *listing.keys[name], _row(claims)[0])
                            for name, claims in rows.items()])
            db.executemany("INSERT INTO claims VALUES (?, ?, ?)",
                           [(loc, name, label) for name, claims in rows.items()
                            for label, loc in _row(claims)[1]])
            whole = reset or gen == seen_gen
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
                ("format", INDEX_FORMAT), ("defaults", listing.defaults), ("gen", gen + 1),
                ("digest", listing.digest if whole else None)])
    except sqlite3.OperationalError:
        pass  # busy or read-only: this load's answer stands, the next one parses again
