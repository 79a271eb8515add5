"""The config catalog: ``dags/config/*.yaml`` → validated, flattened :class:`Schedule` objects.

:func:`load_catalog` never raises for a bad company file: every problem of the directory is
collected as ``file: field.path: message`` lines in ``catalog.errors`` (so one broken company
never hides the others, and ``exportctl validate`` prints everything at once). A broken
``defaults.yaml`` is an error for every company, because every company inherits from it.

About 450 lines in one module on purpose: reading the files, layering the defaults and
flattening into schedules all report into the one error list above, in file order; split, the
same collector and its ``file: field.path`` formatting would cross module boundaries.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from export_lib.config.claims import FileClaims, Seniority, shared_destination_issues
from export_lib.config.claims_index import directory_claims
from export_lib.config.grants import Allowlist, ConnectionGrant
from export_lib.config.isolation import company_issues, export_versions, source_issues, with_company
from export_lib.config.limits import shown
from export_lib.config.messages import issues_from_validation
from export_lib.config.models import (
    POLICY_KEYS,
    SLUG,
    AlertsConfig,
    CompanyConfig,
    CompanyFile,
    DataExportConfig,
    DefaultsFile,
    PolicyFields,
    Schedule,
    WidgetExportConfig,
)
from export_lib.config.recipients import recipient_issues
from export_lib.config.text import text_issues
from export_lib.config.timing import Timing
from export_lib.config.versions import future_version_issues, history_issues, with_history
from export_lib.config.yaml_io import parse_yaml, read_config_bytes, read_yaml
from export_lib.errors import ConfigError
from export_lib.logfmt import get_logger

if TYPE_CHECKING:
    from export_lib.config.models import DataExportKindConfig, SourceConfig

log = get_logger(__name__)

DEFAULTS_FILE = "defaults.yaml"
_SHARED_OUTPUT_KEYS = ("format", "compression", "csv", "destinations")


@dataclass(frozen=True)
class Catalog:
    """Every schedule of a config directory plus every problem found in it."""

    config_dir: Path
    schedules: tuple[Schedule, ...]
    companies: Mapping[str, CompanyConfig]
    errors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sources: Mapping[str, SourceConfig] = field(default_factory=dict)  # defaults.yaml ``sources``
    connections: Mapping[str, ConnectionGrant] = field(default_factory=dict)  # ``connections``
    alerts: AlertsConfig = AlertsConfig()  # defaults.yaml ``alerts``

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def error_lines(self) -> list[str]:
        return [line for path in sorted(self.errors) for line in self.errors[path]]

    def raise_for_errors(self) -> None:
        """Raise one :class:`ConfigError` carrying every issue (for an Airflow import error)."""
        if self.errors:
            lines = self.error_lines
            raise ConfigError(f"{len(lines)} config error(s) in {self.config_dir}:\n"
                              + "\n".join(lines), issues=lines)

    def schedule(self, schedule_id: str) -> Schedule:
        """The schedule with this id; ``ConfigError`` naming close ids if it is unknown."""
        for candidate in self.schedules:
            if candidate.schedule_id == schedule_id:
                return candidate
        known = [s.schedule_id for s in self.schedules]
        close = difflib.get_close_matches(schedule_id, known, n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(map(repr, close))}?" if close else (
            f"known schedules: {', '.join(known) or 'none'}")
        raise ConfigError(f"unknown schedule {schedule_id!r} in {self.config_dir}; {hint}")

    def retention_days(self, source: str) -> int:
        """How many days of data ``source`` keeps (``sources:`` in defaults.yaml)."""
        listed = self.sources.get(source)
        if listed is None:
            raise ConfigError(f"source {source!r} is not listed under 'sources' in "
                              f"{self.config_dir / DEFAULTS_FILE}")
        return listed.retention_days

    def for_company(self, company_id: str) -> tuple[Schedule, ...]:
        return tuple(s for s in self.schedules if s.company.id == company_id)


def load_catalog(config_dir: str | Path, only: str | None = None, *,
                 now: datetime | None = None, seniority: Seniority | None = None) -> Catalog:
    """Load ``defaults.yaml`` and every ``<company>.yaml`` of ``config_dir``.

    ``only`` restricts loading to one company's file (a DAG loader or worker parses just the
    company it needs; a missing file is then an error naming it). It is still compared with
    what every other file's destinations claim (:mod:`export_lib.config.claims`), so it gets
    the verdict a full load would give it.

    ``now`` (default: the clock) bounds how far ahead a current version with ``history`` may
    start (:data:`export_lib.config.versions.MAX_CURRENT_LEAD`). ``seniority`` says when the
    ledger first saw each company, to tell which of two companies sharing a destination is the
    newcomer (without it, both are refused); ``export_lib.pipeline.catalog.open_catalog``
    passes the ledger's.

    :raises ConfigError: only if ``config_dir`` is not a directory.
    """
    now = now or datetime.now(UTC)  # the loader is an edge: the bound's only clock read
    root = Path(config_dir)
    if not root.is_dir():
        raise ConfigError(f"{root}: config directory not found; pass the directory holding "
                          f"{DEFAULTS_FILE} and one <company>.yaml per company")
    errors: dict[str, list[str]] = {}
    if only is not None and not re.fullmatch(SLUG, only):
        errors[str(root)] = [f"{root}: (file): {shown(only)} is not a company id (lower-case "
                             "letters, digits, '-' and '_'); no file was read"]
        return _catalog(root, {}, errors, None)
    defaults = _load_defaults(root / DEFAULTS_FILE, errors)
    paths = _listed(root, only, errors)
    loaded: dict[str, tuple[CompanyConfig, tuple[Schedule, ...]]] = {}
    claims: dict[str, FileClaims] = {}
    for path in _company_paths(paths, errors):
        if defaults is None:
            errors[str(path)] = [f"{path}: (file): not loaded because {root / DEFAULTS_FILE} "
                                 "is invalid; fix it first"]
            continue
        parsed, found, issues = _load_company(path, defaults, now)
        if issues:
            errors[str(path)] = issues
        elif parsed is not None:
            loaded[str(path)] = (parsed.company, tuple(found))
            claims[str(path)] = FileClaims.of(str(path), parsed.company.id,
                                              export_versions(parsed))
    if only is not None and defaults is not None and claims:
        claims = _every_claim(root, defaults, now, claims)
    shared = shared_destination_issues(claims, seniority, report=list(loaded))
    for path, lines in shared.items():
        errors.setdefault(path, []).extend(lines)
    for path in errors:
        loaded.pop(path, None)
        # A company file names its company (not its schedules: they did not load);
        # defaults.yaml is every company's.
        name = Path(path).name
        log.warning("config file %s has %d error(s); its schedules are not loaded",
                    path, len(errors[path]),
                    extra={"company": None if name == DEFAULTS_FILE else Path(path).stem})
    return _catalog(root, loaded, errors, defaults)


def _every_claim(root: Path, defaults: DefaultsFile, now: datetime,
                 own: dict[str, FileClaims]) -> dict[str, FileClaims]:
    """``own`` (the one loaded file's claims) and those of every other company file nested with
    them, from the claims index (parsing only the files changed since it was written)."""
    def read(path: Path) -> FileClaims | None:
        parsed, _, issues = _load_company(path, defaults, now)
        if issues or parsed is None:
            return None
        return FileClaims.of(str(path), parsed.company.id, export_versions(parsed))

    return directory_claims(root, own, read)


def _listed(root: Path, only: str | None, errors: dict[str, list[str]]) -> list[Path]:
    if only is None:
        return sorted(p for p in root.iterdir() if not p.name.startswith("."))
    # Look the file up instead of listing the directory: every loader of a DagBag does this,
    # and listing N files N times made parsing quadratic in the company count.
    paths = [p for p in (root / f"{only}.yaml", root / f"{only}.yml") if os.path.lexists(p)]
    if not paths:
        errors[str(root / f"{only}.yaml")] = [
            f"{root / f'{only}.yaml'}: (file): no config file for company {only!r}; create "
            f"it or delete the DAG loader that asks for it"]
    return paths


def _catalog(root: Path, loaded: Mapping[str, tuple[CompanyConfig, tuple[Schedule, ...]]],
             errors: Mapping[str, list[str]], defaults: DefaultsFile | None) -> Catalog:
    companies = {company.id: company for company, _ in loaded.values()}
    schedules = [s for _, found in loaded.values() for s in found]
    return Catalog(
        config_dir=root,
        schedules=tuple(sorted(schedules, key=lambda s: s.schedule_id)),
        companies=MappingProxyType(dict(sorted(companies.items()))),
        errors=MappingProxyType({k: tuple(v) for k, v in sorted(errors.items())}),
        sources=MappingProxyType(dict(defaults.sources) if defaults else {}),
        connections=MappingProxyType(dict(defaults.connections) if defaults else {}),
        alerts=defaults.alerts if defaults else AlertsConfig(),
    )


def _company_paths(paths: list[Path], errors: dict[str, list[str]]) -> list[Path]:
    """The company files among ``paths``; other files and a second file for the same company
    (``acme.yaml`` + ``acme.yml``: which one wins?) are errors."""
    found: dict[str, list[Path]] = {}
    for path in paths:
        if path.name == DEFAULTS_FILE or (path.is_dir()
                                          and path.suffix not in (".yaml", ".yml")):
            continue  # a sub-directory; one named *.yaml is refused as a file below
        if path.suffix not in (".yaml", ".yml"):
            errors[str(path)] = [f"{path}: (file): not a YAML config file; config files are "
                                 "named <company id>.yaml (move other files elsewhere)"]
            continue
        found.setdefault(path.stem, []).append(path)
    out = []
    for stem, same in found.items():
        if len(same) == 1:
            out.extend(same)
            continue
        for path in same:
            others = ", ".join(p.name for p in same if p != path)
            errors[str(path)] = [f"{path}: (file): company {stem!r} has more than one config "
                                 f"file (also {others}); keep exactly one"]
    return out


def allowlist(config_dir: str | Path) -> Allowlist:
    """:class:`Allowlist` of ``config_dir``'s ``defaults.yaml``.
    :raises ConfigError: the file is missing or invalid."""
    errors: dict[str, list[str]] = {}
    defaults = _load_defaults(Path(config_dir) / DEFAULTS_FILE, errors)
    if defaults is None:
        raise ConfigError("; ".join(line for lines in errors.values() for line in lines))
    return Allowlist(MappingProxyType(dict(defaults.sources)),
                     MappingProxyType(dict(defaults.connections)))


def _load_defaults(path: Path, errors: dict[str, list[str]]) -> DefaultsFile | None:
    if not os.path.lexists(path):
        errors[str(path)] = [f"{path}: (file): missing; every config directory needs "
                             f"{DEFAULTS_FILE} (see dags/config/{DEFAULTS_FILE})"]
        return None
    raw, issues = read_config_bytes(path, path.parent)
    if raw is None:
        errors[str(path)] = issues
        return None
    defaults, issues = _parse_defaults(str(path), raw)
    if issues:
        errors[str(path)] = list(issues)
    return defaults


@functools.lru_cache(maxsize=8)
def _parse_defaults(path: str, raw: bytes) -> tuple[DefaultsFile | None, tuple[str, ...]]:
    """Parse and validate ``defaults.yaml`` once per process *per content*.

    Every company loader of a DagBag reads the same defaults; keyed by the file's bytes (read
    fresh each time, not by mtime), an edited file is never served stale. The model is frozen,
    so sharing one instance is safe.
    """
    data, issues = parse_yaml(Path(path), raw)
    if data is None:
        return None, tuple(issues)
    issues = text_issues(path, data)
    if issues:
        return None, tuple(issues)
    try:
        defaults = DefaultsFile.model_validate(data)
    except ValidationError as exc:
        return None, tuple(issues_from_validation(path, DefaultsFile, exc))
    query = defaults.data_exports.query
    issues = source_issues(query, defaults.sources, f"{path}: data_exports.query") if query else []
    return (None, tuple(issues)) if issues else (defaults, ())


def _load_company(path: Path, defaults: DefaultsFile, now: datetime
                  ) -> tuple[CompanyFile | None, list[Schedule], list[str]]:
    data, issues = read_yaml(path)
    if data is None:
        return None, [], issues
    issues = text_issues(str(path), data)
    if issues:  # control characters: nothing else of the file is worth reading
        return None, [], issues
    issues = _identity_issues(path, data) + history_issues(path, data)
    try:
        parsed = CompanyFile.model_validate(_with_defaults(data, defaults))
    except ValidationError as exc:
        return None, [], issues_from_validation(str(path), CompanyFile, exc) + issues
    versions = export_versions(parsed)
    issues += company_issues(str(path), parsed, defaults, versions)
    issues += recipient_issues(path, parsed, versions) + future_version_issues(path, parsed, now)
    if issues:
        return None, [], issues
    return parsed, build_schedules(parsed), []


def _with_defaults(data: dict[str, Any], defaults: DefaultsFile) -> dict[str, Any]:
    """The company data with defaults filled in (user keys win; paths stay the user's)."""
    policies = defaults.policies.model_dump()
    merged = dict(data)
    widgets = data.get("widget_exports")
    if isinstance(widgets, list):
        merged["widget_exports"] = [with_history(w, lambda v: _layer(policies, v))
                                    if isinstance(w, dict) else w for w in widgets]
    channels = data.get("data_exports")
    company = data.get("company")
    company_id = company.get("id") if isinstance(company, dict) else None
    if isinstance(channels, list):
        merged["data_exports"] = [
            _data_export_with_defaults(c, defaults, policies, str(company_id))
            if isinstance(c, dict) else c for c in channels]
    return merged


# Policy blocks merged key by key: ``grace`` alone keeps the default ``late_data.policy``,
# ``retries: {count: 3}`` keeps the default ``delay``.
_MERGED_BLOCKS = ("late_data", "retries", "timeouts", "catchup", "at_risk")


def _layer(base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``own`` over ``base``; the :data:`_MERGED_BLOCKS` are merged key by key."""
    layered = {**base, **own}
    for block in _MERGED_BLOCKS:
        if isinstance(base.get(block), dict) and isinstance(own.get(block), dict):
            layered[block] = {**base[block], **own[block]}
    return layered


def _data_export_with_defaults(entry: dict[str, Any], defaults: DefaultsFile,
                               policies: dict[str, Any], company: str) -> dict[str, Any]:
    """Layers, lowest first: policies, data_exports, data_exports.<kind>, channel, <kind>.

    A ``window`` with a ``kind`` replaces the default window; one with only ``days`` refines it.
    Default destinations get ``{company}`` filled in (never one directory for everyone).
    """
    base = defaults.data_exports
    shared = base.model_dump(include=set(_SHARED_OUTPUT_KEYS), exclude_unset=True)
    if "destinations" in shared:
        shared["destinations"] = with_company(shared["destinations"], company)
    shared.update({k: entry[k] for k in _SHARED_OUTPUT_KEYS if k in entry})
    result = {k: v for k, v in entry.items() if k not in _SHARED_OUTPUT_KEYS}
    if "query" not in entry and base.query is not None:
        query = base.query.model_dump()
        if base.channel_column and "channel" in entry:
            query["filters"] = [*query["filters"], {"column": base.channel_column, "op": "=",
                                                    "value": entry["channel"]}]
        result["query"] = query
    for kind in ("primary", "secondary"):
        kind_defaults = getattr(base, kind).model_dump(exclude_unset=True)
        if "destinations" in kind_defaults:
            kind_defaults["destinations"] = with_company(kind_defaults["destinations"], company)
        own = entry.get(kind, {})
        if not isinstance(own, dict):
            result[kind] = own
            continue
        def layered(version: dict[str, Any], kind_defaults=kind_defaults) -> dict[str, Any]:
            out = _layer({**policies, **shared, **kind_defaults}, version)
            window = version.get("window")
            if isinstance(window, dict) and "kind" not in window:
                out["window"] = {**kind_defaults["window"], **window}
            return out

        result[kind] = with_history(own, layered)
    return result


def _identity_issues(path: Path, data: dict[str, Any]) -> list[str]:
    """File stem = company id; export ids and channels unique within the company.

    Checked on the raw data so these errors show up even next to validation errors.
    """
    issues: list[str] = []
    company = data.get("company")
    company_id = company.get("id") if isinstance(company, dict) else None
    if isinstance(company_id, str) and path.stem != company_id:
        issues.append(f"{path}: company.id: {company_id!r} does not match the file name "
                      f"{path.name!r}; rename the file to {company_id}{path.suffix} or set "
                      f"company.id: {path.stem}")
    for section, key in (("widget_exports", "id"), ("data_exports", "channel")):
        entries = data.get(section)
        first_seen: dict[str, int] = {}
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            ident = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(ident, str):
                continue
            if ident in first_seen:
                issues.append(f"{path}: {section}[{index}].{key}: duplicate schedule id "
                              f"'{company_id or path.stem}/{ident}' (also "
                              f"{section}[{first_seen[ident]}]); give each export a unique "
                              f"{key}")
            first_seen.setdefault(ident, index)
    return issues


def build_schedules(parsed: CompanyFile) -> list[Schedule]:
    """Flatten a validated company file into schedules (one per widget export / data kind)."""
    company = parsed.company
    out = [_widget_schedule(company, w) for w in parsed.widget_exports]
    for channel in parsed.data_exports:
        out.extend(_data_schedule(company, channel, kind) for kind in ("primary", "secondary"))
    return out


def _policies(export: PolicyFields) -> PolicyFields:
    return PolicyFields(**{key: getattr(export, key) for key in POLICY_KEYS})


def _widget_schedule(company: CompanyConfig, widget: WidgetExportConfig) -> Schedule:
    history = tuple(sorted((_widget_schedule(company, h) for h in widget.history),
                           key=_start_of))
    timing = Timing(timezone=widget.timezone or company.timezone, export_hour=widget.export_hour,
                    interval_hours=widget.interval_hours, dst_gap=widget.dst_gap,
                    dst_fold=widget.dst_fold)
    return Schedule(
        schedule_id=f"{company.id}/{widget.id}", dag_id=f"widget_export__{company.id}__{widget.id}",
        kind="widget", company=company, export_id=widget.id, timing=timing, window=widget.window,
        query=widget.query, format=widget.format, compression=widget.compression,
        csv=widget.csv,
        destinations=widget.destinations, policies=_policies(widget),
        owner=widget.owner or company.owner, effective_from=widget.effective_from,
    ).with_version().model_copy(update={"history": history}).with_timeline()


def _start_of(version: Schedule) -> datetime:
    return version.effective_from or datetime.min.replace(tzinfo=UTC)


def _data_schedule(company: CompanyConfig, channel: DataExportConfig, kind: str,
                   spec: DataExportKindConfig | None = None) -> Schedule:
    spec = spec or getattr(channel, kind)
    history = tuple(sorted((_data_schedule(company, channel, kind, h) for h in spec.history),
                           key=_start_of))
    timing = Timing(timezone=spec.timezone, cron=spec.cron, dst_gap=spec.dst_gap,
                    dst_fold=spec.dst_fold)
    return Schedule(
        schedule_id=f"{company.id}/{channel.channel}/{kind}",
        dag_id=f"data_export__{company.id}__{channel.channel}__{kind}",
        kind=kind, company=company, channel=channel.channel, size=channel.size, timing=timing,
        window=spec.window, query=channel.query, format=spec.format,
        compression=spec.compression, csv=spec.csv,
        destinations=spec.destinations, policies=_policies(spec),
        owner=spec.owner or company.owner, effective_from=spec.effective_from,
    ).with_version().model_copy(update={"history": history}).with_timeline()
