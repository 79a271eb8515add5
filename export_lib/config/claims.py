"""Destinations are never shared between companies, whichever way a config is loaded (issue 23).

A full ``exportctl validate`` compares every company file with every other; a DAG loader, a task
or ``exportctl run`` loads one company. All of them must reach the same verdict, so a
one-company load compares its file with what every *other* file claims (the locations its
destinations write to, every ``history`` version included). Those claims come from an index
kept under the DAG index directory, one entry per file, refreshed only for a file whose size,
mtime or inode changed: parsing every company file on every loader's parse would be quadratic
(4,000 loaders × 4,000 files). Without a writable index (no ``AIRFLOW_HOME``) the other files
are parsed.

Who gives way: the company the ledger saw first keeps the location and the other file is
refused (``first_seen`` is the ledger's earliest run of each company). When the ledger knows
neither company, or cannot be asked, **both** files are refused: guessing by name order would
sometimes refuse the real owner, whose customers already receive its files, in favour of a
newcomer. A file with errors of its own claims nothing (it loads nothing either).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from export_lib import settings
from export_lib.config.isolation import ExportVersion, describe, location

Seniority = Callable[[Collection[str]], Mapping[str, datetime]]
"""Company ids → when the ledger first saw each (companies it never saw are left out)."""

INDEX_FORMAT = 2
DEFAULTS_NAME = "defaults.yaml"  # its change (size, mtime, inode) empties the index


class FileClaims(NamedTuple):
    """The locations one valid company file writes to, each with the field that names it."""

    file: str
    company: str
    claims: tuple[tuple[str, str], ...]
    """(label, location): the location's components joined by ``/`` (none contains one), so
    "nested" is a string prefix and the index stores plain strings."""

    @classmethod
    def of(cls, file: str, company: str, versions: Iterable[ExportVersion]) -> FileClaims:
        found = []
        for version in versions:
            for index, dest in enumerate(version.destinations):
                loc = location(dest)
                if loc is not None:
                    found.append((f"{version.label}.destinations[{index}]", "/".join(loc)))
        return cls(file, company, tuple(found))


def shared_destination_issues(files: Mapping[str, FileClaims], seniority: Seniority | None,
                              report: Collection[str] | None = None) -> dict[str, list[str]]:
    """Per file, one line for each location it shares with another company's file and loses.

    ``report``: only these files' lines are wanted (a one-company load); the others are still
    compared with them. ``seniority`` is asked once, for the companies of the overlaps found.
    """
    pairs = _overlaps(files, report)
    if not pairs:
        return {}
    companies = {files[f].company for pair in pairs for f in (pair[0], pair[2])}
    seen = dict(seniority(companies)) if seniority is not None else {}
    issues: dict[str, list[str]] = {}
    for file, label, other_file, loc in pairs:
        mine, theirs = files[file].company, files[other_file].company
        line = _verdict(mine, theirs, seen.get(mine), seen.get(theirs))
        if line is not None:
            issues.setdefault(file, []).append(
                f"{file}: {label}: {describe(tuple(loc.split('/')))} is also written by "
                f"company {theirs!r} "
                f"({other_file}); destinations are never shared between companies, {line}")
    return {file: list(dict.fromkeys(lines)) for file, lines in issues.items()}


def _overlaps(files: Mapping[str, FileClaims], report: Collection[str] | None
              ) -> list[tuple[str, str, str, str]]:
    """(file, label, other file, location) for every claim of a ``report`` file nested with
    another company's. Every other claim is tested against the reported ones with a set lookup
    (is it at or above one of them?) and one ``startswith`` (is it below one?), so a
    one-company load over 4,000 files costs milliseconds."""
    reported = sorted(f for f in (report if report is not None else files) if f in files)
    at_or_above: dict[str, set[str]] = {}  # every ancestor-or-self of a reported claim
    exact: dict[str, set[str]] = {}
    for file in reported:
        for _, loc in files[file].claims:
            exact.setdefault(loc, set()).add(file)
            for prefix in _prefixes(loc):
                at_or_above.setdefault(prefix, set()).add(file)
    below = tuple(loc + "/" for loc in exact)
    hits: dict[str, set[str]] = {}  # reported file -> other files it overlaps
    for other, claims in files.items():
        for _, loc in claims.claims:
            found = at_or_above.get(loc, set())
            if loc.startswith(below):  # under a reported claim: which one(s)?
                found = found.union(*(exact.get(p, ()) for p in _prefixes(loc)[:-1]))
            for file in found:
                if files[file].company != claims.company:
                    hits.setdefault(file, set()).add(other)
    return [(file, label, other, loc) for file in reported for label, loc in files[file].claims
            for other in sorted(hits.get(file, ()))
            if any(_nested(loc, theirs) for _, theirs in files[other].claims)]


def _prefixes(loc: str) -> list[str]:
    parts = loc.split("/")
    return ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _verdict(mine: str, theirs: str, mine_seen: datetime | None, theirs_seen: datetime | None
             ) -> str | None:
    """Why this company gives way (the rest of its error line), or None when it keeps it."""
    fix = "give this company its own directory or prefix"
    if mine_seen is not None and theirs_seen is not None and mine_seen != theirs_seen:
        if mine_seen < theirs_seen:
            return None
        return (f"and {theirs!r} has exported since {theirs_seen:%Y-%m-%d %H:%M} UTC, before "
                f"{mine!r} ({mine_seen:%Y-%m-%d %H:%M} UTC): {fix}")
    if mine_seen is not None and theirs_seen is None:
        return None
    if theirs_seen is not None:
        return (f"and {theirs!r} has exported since {theirs_seen:%Y-%m-%d %H:%M} UTC while "
                f"{mine!r} has no run in the ledger: {fix}")
    return (f"and the ledger has no run of either company, so both files are refused until "
            f"one gives way: {fix}")


# -- the index of other files' claims ------------------------------------------------------
def file_key(path: str) -> list[int] | None:
    """What must stay the same for a file's cached claims to hold (None: unreadable)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def directory_claims(root: Path, own: Mapping[str, FileClaims],
                     read: Callable[[Path], FileClaims | None]) -> dict[str, FileClaims]:
    """Every company file's claims in ``root``: ``own`` (by path) as given, the others through
    the index (``read`` parses a file the index does not know as it is now)."""
    # Names only (no Path objects, no is_dir): this runs on every DAG loader's parse. A
    # directory or other non-file named *.yaml claims nothing (``read`` finds it unreadable);
    # a company with two files claims nothing either (both are errors in a full load).
    with os.scandir(root) as entries:
        names = [e.name for e in entries if e.name.endswith((".yaml", ".yml"))
                 and not e.name.startswith(".") and e.name != DEFAULTS_NAME]
    stems = Counter(name.rsplit(".", 1)[0] for name in names)
    names = sorted(name for name in names if stems[name.rsplit(".", 1)[0]] == 1)
    known = {Path(path).name: found for path, found in own.items()}
    return indexed_claims(root, names, claims_index(root), read, known)


def claims_index(config_dir: Path) -> Path | None:
    """Where the claims of ``config_dir``'s files are kept: beside the DAG index (the
    dag-processor's own writable home; the config directory may be mounted read-only)."""
    base = settings.dag_index_base()
    if base is None:
        return None
    folder = str(config_dir.resolve())
    return base / "claims" / f"{hashlib.sha256(folder.encode()).hexdigest()[:16]}.json"


def indexed_claims(root: Path, names: Iterable[str], index: Path | None,
                   read: Callable[[Path], FileClaims | None],
                   known: Mapping[str, FileClaims | None]) -> dict[str, FileClaims]:
    """The claims of every company file ``names`` of ``root``: ``known`` ones (by name) as
    given (parsed by the caller; None: it has errors), the others from ``index`` where the file
    is unchanged, else by ``read`` (which parses it). Rewrites the index when anything changed
    (atomically; a lost race only costs another parse)."""
    base = str(root)
    defaults_key = file_key(os.path.join(base, DEFAULTS_NAME))
    cached = _read_index(index, defaults_key)
    current: dict[str, dict] = {}
    out: dict[str, FileClaims] = {}
    for name in names:
        path = os.path.join(base, name)
        key = file_key(path)
        entry = cached.get(name)
        if name in known or key is None or entry is None or entry.get("key") != key:
            claims = known[name] if name in known else read(Path(path))
            entry = {"key": key, "company": claims.company if claims else None,
                     "claims": [list(claim) for claim in claims.claims] if claims else []}
        current[name] = entry
        if entry["company"] is not None:
            out[path] = FileClaims(path, entry["company"],
                                   tuple((label, loc) for label, loc in entry["claims"]))
    if index is not None and current != cached:
        _write_index(index, defaults_key, current)
    return out


def _read_index(index: Path | None, defaults_key: list[int] | None) -> dict[str, dict]:
    if index is None:
        return {}
    try:
        data = json.loads(index.read_text())
    except (OSError, ValueError):
        return {}
    if (not isinstance(data, dict) or data.get("format") != INDEX_FORMAT
            or data.get("defaults") != defaults_key or not isinstance(data.get("files"), dict)):
        return {}  # defaults.yaml changed: every company's defaults-filled claims may have
    return {name: entry for name, entry in data["files"].items() if _well_formed(entry)}


def _well_formed(entry: object) -> bool:
    """An index entry as :func:`indexed_claims` writes it (anything else is parsed afresh)."""
    return (isinstance(entry, dict) and {"key", "company", "claims"} <= entry.keys()
            and isinstance(entry["company"], str | None) and isinstance(entry["claims"], list)
            and all(isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)
                    for c in entry["claims"]))


def _write_index(index: Path, defaults_key: list[int] | None, files: dict[str, dict]) -> None:
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_name(f"{index.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": INDEX_FORMAT, "defaults": defaults_key,
                                   "files": files}, sort_keys=True))
        os.replace(tmp, index)
    except OSError:
        pass  # an unwritable index only means the next load parses the files again
