"""Tenant isolation checks that need more than one model: the source allowlist, local paths,
confusable export names and destinations shared between companies (issue 12).

The SQL layer scopes every query to ``tenant_column = company id``; these checks make sure the
config cannot point that predicate at the wrong thing (``tenant_column: widget_id``, a table in
``pg_catalog``) and that no company's files land where another company's recipients look:

* a query reads only a table listed under ``sources:`` in ``defaults.yaml``, with the tenant
  column listed there (the allowlist is the platform's, not the company file's);
* a local destination stays in the company's own area: ``outbox/<company>/…`` under the exports
  root, or ``<mount>/<company>/…`` under a directory listed in ``local_mounts``;
* within a company, two exports whose names differ only by separators (``google-ads-primary``
  vs channel ``google-ads`` / ``primary``) are refused: their files would read alike;
* across companies, no two companies write to the same (or a nested) local directory, bucket
  prefix or SFTP path; the later file in name order gets the error, naming the other.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from export_lib.config.destinations import (
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
)
from export_lib.config.limits import shown

if TYPE_CHECKING:
    from export_lib.config.destinations import Destination
    from export_lib.config.models import CompanyFile, Schedule, SourceConfig
    from export_lib.config.query import QuerySpec

COMPANY_PLACEHOLDER = "{company}"


def source_issues(query: QuerySpec, sources: Mapping[str, SourceConfig], where: str
                  ) -> list[str]:
    """``where: field: message`` lines for a query outside the ``sources`` allowlist."""
    source = sources.get(query.source)
    if source is None:
        return [f"{where}.source: source {shown(query.source)} is not listed under 'sources' in "
                f"defaults.yaml (listed: {', '.join(sorted(sources)) or 'none'}); add it there "
                "with its tables and tenant columns"]
    table = source.tables.get(query.table)
    if table is None:
        return [f"{where}.table: table {shown(query.table)} is not listed for source "
                f"{query.source!r} in defaults.yaml (listed: {', '.join(sorted(source.tables))}); "
                "exports read only allowlisted tables"]
    issues = []
    if (query.table_schema or None) != table.table_schema:
        issues.append(f"{where}.table_schema: {shown(query.table_schema)} is not the schema "
                      f"defaults.yaml lists for {query.table!r} ({table.table_schema!r})")
    if query.tenant_column != table.tenant_column:
        issues.append(f"{where}.tenant_column: {shown(query.tenant_column)} is not the tenant "
                      f"column of {query.table!r}; defaults.yaml 'sources' says "
                      f"{table.tenant_column!r} (the column holding the company id)")
    return issues


def local_path_issue(path: str, company: str, mounts: Iterable[str]) -> str | None:
    """Why a local destination ``path`` is outside ``company``'s area, or None."""
    norm = posixpath.normpath(path.replace("\\", "/"))
    if not norm.startswith("/"):
        parts = norm.split("/")
        if parts[:2] == ["outbox", company] and COMPANY_PLACEHOLDER not in norm:
            return None
        return (f"path {shown(path)} is outside the company's area; use a path under "
                f"'outbox/{company}/' (relative to the exports root)")
    for mount in mounts:
        base = posixpath.normpath(mount)
        rest = posixpath.relpath(norm, base) if _under(norm, base) else None
        if rest is not None and rest.split("/")[0] == company:
            return None
    listed = ", ".join(mounts) or "none"
    return (f"path {shown(path)} is an absolute path outside the exports root; use "
            f"'outbox/{company}/…', or '<mount>/{company}/…' under a directory listed in "
            f"'local_mounts' in defaults.yaml (listed: {listed})")


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def with_company(destinations: Iterable[dict[str, Any]], company: str) -> list[dict[str, Any]]:
    """Default destinations (from ``defaults.yaml``) with ``{company}`` filled in, so a default
    directory is every company's own one and never shared."""
    out = []
    for dest in destinations:
        dest = dict(dest)
        for key in ("path", "prefix"):
            if isinstance(dest.get(key), str):
                dest[key] = dest[key].replace(COMPANY_PLACEHOLDER, company)
        out.append(dest)
    return out


def location(dest: Destination) -> tuple[str, ...] | None:
    """Where a destination writes, as comparable path components (None: it writes no path)."""
    if isinstance(dest, LocalDestination):
        return ("local", *posixpath.normpath(dest.path).strip("/").split("/"))
    if isinstance(dest, (S3Destination, GcsDestination)):
        prefix = [p for p in dest.prefix.split("/") if p]
        return (dest.type, dest.bucket, *prefix)
    if isinstance(dest, SftpDestination):
        return ("sftp", dest.conn_id, *posixpath.normpath(dest.path).strip("/").split("/"))
    return None


def describe(loc: tuple[str, ...]) -> str:
    kind, *rest = loc
    return f"{kind} {'/'.join(rest)}"


def confusable_issues(file: str, exports: Iterable[tuple[str, str]]) -> list[str]:
    """Exports of one company (``(field, name)``, e.g. ``("data_exports[0]",
    "google-ads/primary")``) whose names differ only by ``-``/``_``/``/`` separators."""
    seen: dict[str, str] = {}
    issues = []
    for field, export in exports:
        plain = export.replace("/", "-").replace("_", "-")
        other = seen.setdefault(plain, export)
        if other != export:
            issues.append(f"{file}: {field}: export {export!r} reads like {other!r} (the "
                          "names differ only by separators, so their files would be told apart "
                          "by '__' alone); rename one")
    return issues


def shared_destination_issues(files: Mapping[str, tuple[Any, ...]]) -> dict[str, list[str]]:
    """Per file, the destinations it shares with an earlier company file (name order)."""
    owners: list[tuple[tuple[str, ...], str, str]] = []  # (location, company, file)
    issues: dict[str, list[str]] = {}
    for file in sorted(files):
        mine: list[tuple[tuple[str, ...], str]] = []
        for schedule in files[file]:
            for index, dest in enumerate(schedule.destinations):
                loc = location(dest)
                if loc is None:
                    continue
                for other_loc, other_company, other_file in owners:
                    if other_company != schedule.company.id and _nested(loc, other_loc):
                        issues.setdefault(file, []).append(
                            f"{file}: {_field(schedule)}.destinations[{index}]: "
                            f"{describe(loc)} is also written by company {other_company!r} "
                            f"({other_file}); destinations are never shared between companies, "
                            "give this company its own directory or prefix")
                mine.append((loc, schedule.company.id))
        owners.extend((loc, company, file) for loc, company in mine)
    return {file: list(dict.fromkeys(lines)) for file, lines in issues.items()}


def _nested(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _field(schedule: Schedule) -> str:
    """The config field a schedule came from, for messages (``widget_exports[id=x]``)."""
    if schedule.kind == "widget":
        return f"widget_exports[id={schedule.export_id}]"
    return f"data_exports[channel={schedule.channel}].{schedule.kind}"


def company_issues(file: str, parsed: CompanyFile, sources: Mapping[str, SourceConfig],
                   mounts: Iterable[str]) -> list[str]:
    """Allowlist, local-path and confusable-name problems of one validated company file."""
    company = parsed.company.id
    issues: list[str] = []
    exports: list[tuple[str, str]] = []
    targets: list[tuple[str, Any]] = []  # (field of the destinations list, destinations)
    for i, widget in enumerate(parsed.widget_exports):
        issues += source_issues(widget.query, sources, f"{file}: widget_exports[{i}].query")
        exports.append((f"widget_exports[{i}].id", widget.id))
        targets.append((f"widget_exports[{i}].destinations", widget.destinations))
    for i, channel in enumerate(parsed.data_exports):
        issues += source_issues(channel.query, sources, f"{file}: data_exports[{i}].query")
        for kind in ("primary", "secondary"):
            exports.append((f"data_exports[{i}].channel", f"{channel.channel}/{kind}"))
            targets.append((f"data_exports[{i}].{kind}.destinations",
                            getattr(channel, kind).destinations))
    mounts = tuple(mounts)
    for field, destinations in targets:
        for j, dest in enumerate(destinations):
            problem = (local_path_issue(dest.path, company, mounts)
                       if isinstance(dest, LocalDestination) else None)
            if problem:
                issues.append(f"{file}: {field}[{j}].path: {problem}")
    issues += confusable_issues(file, exports)
    return list(dict.fromkeys(issues))
