"""Manual (one-off) exports: a temporary config built from a configured export.

A manual export runs on "a temporary (non-persisted) config", as the old system's manual path did.
Here the trigger form's values are validated into a :class:`ManualRequest`; the temporary
schedule is derived from a configured export (its query, tenant scoping and destinations), is
captured on the run like any other config, and is never written back as a schedule.
Destinations can only be narrowed to configured ones — never an arbitrary host.

Every field is checked against its pattern and bounds before any file is read (``company``
names the config file to read, so ``../etc`` must never reach the filesystem); what needs the
configuration is checked right after: ``columns`` must be a subset of the base export's
configured columns (a trigger can only narrow what the config exports), and the window must lie
within the source's ``retention_days`` (``sources:`` in ``defaults.yaml``) and not in the
future.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from export_lib.config.limits import MAX_COLUMNS, MAX_DESTINATIONS, MAX_REASON, StrictBool, shown
from export_lib.config.messages import issues_from_validation
from export_lib.config.output_format import FormatName
from export_lib.config.patterns import COLUMN_NAME, DESTINATION_ID, SCHEDULE_ID, SLUG
from export_lib.config.text import control_char
from export_lib.errors import ConfigError
from export_lib.formats import check_pair

if TYPE_CHECKING:
    from export_lib.config.loader import Catalog
    from export_lib.config.models import Schedule

MAX_WINDOW = timedelta(days=400)
# The "file" of the trigger form's error lines (``manual export form: destinations[0]: …``).
FORM = "manual export form"
Column = Annotated[str, Field(pattern=COLUMN_NAME)]
DestinationId = Annotated[str, Field(pattern=DESTINATION_ID, max_length=48)]


class ManualRequest(BaseModel):
    """The trigger form of the ``manual_export`` DAG."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    company: str = Field(pattern=SLUG, max_length=64, examples=["acme"])
    base_export: str = Field(pattern=SCHEDULE_ID, max_length=140, examples=["acme/daily-spend"])
    window_start: datetime = Field(examples=["2026-03-01T00:00:00+01:00"])
    window_end: datetime = Field(examples=["2026-03-08T00:00:00+01:00"])
    columns: tuple[Column, ...] = Field(default=(), max_length=MAX_COLUMNS)
    format: FormatName | None = None
    destinations: tuple[DestinationId, ...] = Field(default=(), max_length=MAX_DESTINATIONS)
    reason: str = Field(min_length=3, max_length=MAX_REASON, examples=["customer asked for March again"])
    regenerate: StrictBool = False

    @field_validator("reason")
    @classmethod
    def _one_line(cls, value: str) -> str:
        found = control_char(value)
        if found:
            raise ValueError(f"contains a control character ({found}); write the reason as "
                             "one line of printable characters")
        return value

    @field_validator("window_start", "window_end")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_request(params: dict[str, Any]) -> ManualRequest:
    """Validate trigger params; every problem in one ConfigError naming the field."""
    data = {k: v for k, v in params.items() if k in ManualRequest.model_fields and v not in (None, "")}
    unknown = sorted(str(k)[:40] for k in params if k not in ManualRequest.model_fields)
    try:
        request = ManualRequest.model_validate(data)
    except ValidationError as exc:
        issues = issues_from_validation(FORM, ManualRequest, exc)
        raise ConfigError("; ".join(issues), issues=issues) from None
    if unknown:
        raise ConfigError(f"{FORM}: {unknown[0]}: unknown field; allowed fields: "
                          f"{', '.join(ManualRequest.model_fields)}")
    if request.window_end <= request.window_start:
        raise ConfigError(
            f"{FORM}: window_end: {request.window_end.isoformat()} is not after window_start "
            f"{request.window_start.isoformat()}; the window is half-open [start, end)")
    if request.window_end - request.window_start > MAX_WINDOW:
        raise ConfigError(f"{FORM}: window_start: the window spans more than {MAX_WINDOW.days} days; "
                          "split it into several manual exports")
    return request


def check_window(request: ManualRequest, *, retention_days: int, now: datetime) -> None:
    """The window must be over (not in the future) and within the source's retention."""
    if request.window_end > now:
        raise ConfigError(f"{FORM}: window_end: {request.window_end.isoformat()} is in the "
                          f"future (now {now.isoformat(timespec='seconds')}); export a period "
                          "that is over")
    oldest = now - timedelta(days=retention_days)
    if request.window_start < oldest:
        raise ConfigError(f"{FORM}: window_start: {request.window_start.isoformat()} is "
                          f"older than the source keeps data ({retention_days} days, so not "
                          f"before {oldest.isoformat(timespec='seconds')}); pick a later start")


def check_columns(request: ManualRequest, configured: tuple[str, ...]) -> None:
    """Requested columns may only narrow the base export's configured columns."""
    extra = [c for c in request.columns if c not in configured]
    if extra:
        raise ConfigError(f"{FORM}: columns: {shown(extra)} are not columns of the base "
                          f"export (configured: {', '.join(configured)}); a manual export can "
                          "only leave columns out")


def manual_tag(run_id: str) -> str:
    """The manual export's id within its company, from its Airflow run id (deterministic: a
    retry or a clear of the same run is the same export)."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:10]


def manual_run_key(company: str, run_id: str) -> str:
    """The ledger run key of the manual export Airflow runs as ``run_id``."""
    return f"{company}/manual/{manual_tag(run_id)}"


def manual_schedule(catalog: Catalog, request: ManualRequest, *, run_id: str,
                    now: datetime | None = None) -> Schedule:
    """The temporary schedule of one manual export, derived from ``request.base_export``.

    :param now: the current time (aware); the window must end before it.
    """
    from export_lib.config.destinations import select_destinations

    if request.company not in catalog.companies:
        known = ", ".join(sorted(catalog.companies)) or "none"
        raise ConfigError(f"{FORM}: company: unknown company {request.company!r}; "
                          f"known companies: {known}")
    base = catalog.schedule(request.base_export)
    if base.company.id != request.company:
        raise ConfigError(f"{FORM}: base_export: {request.base_export!r} belongs to company "
                          f"{base.company.id!r}, not {request.company!r}")
    destinations = select_destinations(base.destinations, request.destinations or None)
    check_columns(request, base.query.columns)
    check_window(request, retention_days=catalog.retention_days(base.query.source),
                 now=now or datetime.now(UTC))
    tag = manual_tag(run_id)
    # Re-validated, never model_copy(update=...): a copy would skip the QuerySpec validators.
    query = type(base.query).model_validate({**base.query.model_dump(),
                                             "columns": request.columns}) \
        if request.columns else base.query
    fmt = request.format or base.format
    # The base export's compression, unless the format asked for cannot take it (parquet).
    compression = base.compression if check_pair(fmt, base.compression) is None else "none"
    temp = type(base).model_validate({
        **base.model_dump(), "schedule_id": f"{request.company}/manual-{tag}",
        "dag_id": f"manual_export__{request.company}", "kind": "manual", "query": query,
        "format": fmt, "compression": compression, "destinations": destinations,
    })
    return temp.with_version()
