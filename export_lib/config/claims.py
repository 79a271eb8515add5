"""Destinations are never shared between companies, whichever way a config is loaded.

A full ``exportctl validate`` compares every company file with every other; a DAG loader, a task
or ``exportctl run`` loads one company. All of them must reach the same verdict, so a
one-company load compares its file with what every *other* file claims (the locations its
destinations write to, every ``history`` version included). Those claims come from an index
kept under the DAG index directory and keyed by location (:mod:`export_lib.config.claims_index`),
so a load reads only the files whose claims are nested with its own; without a usable index
(no ``AIRFLOW_HOME``) the other files are parsed.

Who gives way: the company the ledger saw first keeps the location and the other file is
refused (``first_seen`` is the ledger's earliest run of each company). When the ledger knows
neither company, or cannot be asked, **both** files are refused: guessing by name order would
sometimes refuse the real owner, whose customers already receive its files, in favour of a
newcomer. A file with errors of its own claims nothing (it loads nothing either).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from export_lib.config.isolation import ExportVersion, describe, location

Seniority = Callable[[Collection[str]], Mapping[str, datetime]]
"""Company ids → when the ledger first saw each (companies it never saw are left out)."""


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
    (is it at or above one of them?) and one ``startswith`` (is it below one?): linear in the
    claims given, which for a one-company load through the index are only the nested ones."""
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
