"""Tenant isolation checks that need more than one model: the source allowlist, local paths,
confusable export names and destinations shared between companies.

The SQL layer scopes every query to ``tenant_column = company id``; these checks make sure the
config cannot point that predicate at the wrong thing (``tenant_column: widget_id``, a table in
``pg_catalog``) and that no company's files land where another company's recipients look:

* a query reads only a table listed under ``sources:`` in ``defaults.yaml``, with the tenant
  column listed there (the allowlist is the platform's, not the company file's);
* a local destination stays in the company's own area: ``outbox/<company>/…`` under the exports
  root, or ``<mount>/<company>/…`` under a directory listed in ``local_mounts``;
* within a company, two exports whose names differ only by separators (``google-ads-primary``
  vs channel ``google-ads`` / ``primary``) are refused: their files would read alike;
* an object-store or SFTP destination writes under ``<bucket or server>/<company>/…``, or into
  a location listed for the company under ``destination_areas`` in ``defaults.yaml``;
* across companies, no two companies write to the same (or a nested) location: see
  :mod:`export_lib.config.claims` (the newcomer is refused, on every kind of load).

Every check applies to every version of an export (``history`` entries too): a
version in force today is what runs, whatever the current version says.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from export_lib.config.destinations import (
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
    area_location,
)
from export_lib.config.grants import connection_issue, destination_connection
from export_lib.config.limits import shown

if TYPE_CHECKING:
    from export_lib.config.destinations import Destination
    from export_lib.config.models import CompanyFile, DefaultsFile, SourceConfig
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


@dataclass(frozen=True)
class ExportVersion:
    """One version of one export as the file has it, for the checks every version passes."""

    schedule_id: str
    field: str
    """By position: ``widget_exports[0]``, ``data_exports[1].primary.history[0]``."""
    label: str
    """By name: ``widget_exports[id=daily]``, ``data_exports[channel=x].primary.history[0]``."""
    query: QuerySpec | None
    """A widget version's own query; None for a data export (its channel's query)."""
    destinations: tuple[Destination, ...]

    @property
    def history_part(self) -> str:
        """``history[0].`` for an earlier version, else empty (for schedule-relative fields)."""
        _, found, rest = self.field.partition(".history[")
        return f"history[{rest}." if found else ""


def export_versions(parsed: CompanyFile) -> list[ExportVersion]:
    """Every version of every export of a validated file, current first, then its history in
    file order."""
    company = parsed.company.id
    out: list[ExportVersion] = []
    for i, widget in enumerate(parsed.widget_exports):
        sid, label = f"{company}/{widget.id}", f"widget_exports[id={widget.id}]"
        for suffix, version in _with_history(widget):
            out.append(ExportVersion(sid, f"widget_exports[{i}]{suffix}", label + suffix,
                                     version.query, version.destinations))
    for i, channel in enumerate(parsed.data_exports):
        for kind in ("primary", "secondary"):
            sid = f"{company}/{channel.channel}/{kind}"
            label = f"data_exports[channel={channel.channel}].{kind}"
            for suffix, version in _with_history(getattr(channel, kind)):
                out.append(ExportVersion(sid, f"data_exports[{i}].{kind}{suffix}",
                                         label + suffix, None, version.destinations))
    return out


def _with_history(export: Any) -> list[tuple[str, Any]]:
    return [("", export), *((f".history[{k}]", h) for k, h in enumerate(export.history))]


def area_issue(dest: Destination, company: str, areas: Mapping[str, list[tuple[str, ...]]]
               ) -> tuple[str, str] | None:
    """(field, why) when an object-store or SFTP destination writes outside ``company``'s
    area: its first prefix (path) segment must be the company id, or the location must lie in
    one of the company's ``destination_areas`` (a customer's own bucket or server); and it
    never reaches into another company's area (``areas``: every company's, from defaults)."""
    loc = location(dest)
    if loc is None or isinstance(dest, LocalDestination):
        return None
    if isinstance(dest, SftpDestination):
        field, uri = "path", f"sftp://{dest.conn_id}"
        what = f"path {shown(dest.path)} on connection {dest.conn_id!r}"
    else:
        field = "prefix"
        uri = f"{'s3' if dest.type == 's3' else 'gs'}://{dest.bucket}"
        what = f"prefix {shown(dest.prefix)} in bucket {dest.bucket!r}"
    for other, theirs in sorted(areas.items()):
        hit = next((a for a in theirs if _nested(loc, a)), None)
        if other != company and hit is not None:
            return field, (f"{what} reaches into company {other!r}'s area {describe(hit)} "
                           "('destination_areas' in defaults.yaml); write under this company's "
                           "own prefix or area")
    if loc[2:3] == (company,) or any(loc[:len(a)] == a for a in areas.get(company, ())):
        return None
    return field, (f"{what} is outside the company's area; start it with '{company}/', or "
                   f"list \"{uri}/{'/'.join(loc[2:])}\" for {company!r} under "
                   "'destination_areas' in defaults.yaml")


def _nested(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def company_issues(file: str, parsed: CompanyFile, defaults: DefaultsFile,
                   versions: list[ExportVersion]) -> list[str]:
    """Allowlist, area and confusable-name problems of one validated company file
    (``versions``: its :func:`export_versions`, computed once per load)."""
    company = parsed.company.id
    sources = defaults.sources
    issues: list[str] = []
    exports: list[tuple[str, str]] = []
    queries: list[tuple[str, QuerySpec]] = []
    for i, widget in enumerate(parsed.widget_exports):
        queries += [(f"{file}: {v.field}.query", v.query) for v in versions
                    if v.field.startswith(f"widget_exports[{i}]") and v.query is not None]
        exports.append((f"widget_exports[{i}].id", widget.id))
    for i, channel in enumerate(parsed.data_exports):
        queries.append((f"{file}: data_exports[{i}].query", channel.query))
        exports.extend((f"data_exports[{i}].channel", f"{channel.channel}/{kind}")
                       for kind in ("primary", "secondary"))
    for where, query in queries:
        issues += source_issues(query, sources, where)
        refused = connection_issue(query.source, "source", company, defaults.connections,
                                   sources)
        if refused and query.source in sources:  # an unlisted source has its own error
            issues.append(f"{where}.source: {refused}")
    issues += _destination_issues(file, company, defaults, versions)
    issues += confusable_issues(file, exports)
    return list(dict.fromkeys(issues))


def _destination_issues(file: str, company: str, defaults: DefaultsFile,
                        versions: list[ExportVersion]) -> list[str]:
    """Each destination of each version: inside the company's area, on a granted connection."""
    issues: list[str] = []
    mounts = tuple(defaults.local_mounts)
    areas = {owner: [area_location(uri) for uri in uris]
             for owner, uris in defaults.destination_areas.items()}
    for version in versions:
        for j, dest in enumerate(version.destinations):
            where = f"{file}: {version.field}.destinations[{j}]"
            if isinstance(dest, LocalDestination):
                problem = local_path_issue(dest.path, company, mounts)
                if problem:
                    issues.append(f"{where}.path: {problem}")
            elif (outside := area_issue(dest, company, areas)) is not None:
                issues.append(f"{where}.{outside[0]}: {outside[1]}")
            used = destination_connection(dest)
            refused = used and connection_issue(*used, company, defaults.connections,
                                                defaults.sources)
            if refused:
                issues.append(f"{where}.conn_id: {refused}")
    return issues
