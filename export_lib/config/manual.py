"""Manual (one-off) exports: a temporary config built from a configured export.

Seed 000's manual path creates "a temporary (non-persisted) config from temp_config_params".
Here the trigger form's values are validated into a :class:`ManualRequest`; the temporary
schedule is derived from a configured export (its query, tenant scoping and destinations), is
captured on the run like any other config, and is never written back as a schedule.
Destinations can only be narrowed to configured ones — never an arbitrary host.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from export_lib.errors import ConfigError
from export_lib.ledger.records import RunRegistration

MAX_WINDOW = timedelta(days=400)


class ManualRequest(BaseModel):
    """The trigger form of the ``manual_export`` DAG."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    company: str = Field(min_length=1)
    base_export: str = Field(min_length=1)
    window_start: datetime
    window_end: datetime
    columns: tuple[str, ...] = ()
    format: Literal["csv", "parquet"] | None = None
    destinations: tuple[str, ...] = ()
    reason: str = Field(min_length=3)
    regenerate: bool = False

    @field_validator("window_start", "window_end")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_request(params: dict[str, Any]) -> ManualRequest:
    """Validate trigger params; every problem in one ConfigError naming the field."""
    data = {k: v for k, v in params.items() if k in ManualRequest.model_fields and v not in (None, "")}
    try:
        request = ManualRequest.model_validate(data)
    except ValidationError as exc:
        issues = [f"manual_export: {'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
                  for e in exc.errors()]
        raise ConfigError("; ".join(issues), issues=issues) from exc
    if request.window_end <= request.window_start:
        raise ConfigError(
            f"manual_export: window_end {request.window_end.isoformat()} is not after window_start "
            f"{request.window_start.isoformat()}; the window is half-open [start, end)")
    if request.window_end - request.window_start > MAX_WINDOW:
        raise ConfigError(f"manual_export: the window spans more than {MAX_WINDOW.days} days; "
                          "split it into several manual exports")
    return request


def manual_schedule(catalog: Any, request: ManualRequest, *, run_id: str):
    """The temporary schedule of one manual export, derived from ``request.base_export``."""
    from export_lib.config.destinations import select_destinations

    if request.company not in catalog.companies:
        known = ", ".join(sorted(catalog.companies)) or "none"
        raise ConfigError(f"manual_export: company: unknown company {request.company!r}; "
                          f"known companies: {known}")
    base = catalog.schedule(request.base_export)
    if base.company.id != request.company:
        raise ConfigError(f"manual_export: base_export: {request.base_export!r} belongs to company "
                          f"{base.company.id!r}, not {request.company!r}")
    destinations = select_destinations(base.destinations, request.destinations or None)
    tag = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    query = base.query.model_copy(update={"columns": request.columns}) if request.columns \
        else base.query
    temp = base.model_copy(update={
        "schedule_id": f"{request.company}/manual-{tag}",
        "dag_id": f"manual_export__{request.company}",
        "kind": "manual", "query": query, "format": request.format or base.format,
        "destinations": destinations,
    })
    return temp.with_version()


def manual_registration(schedule: Any, request: ManualRequest, *, run_id: str, slot: datetime,
                        now: datetime) -> RunRegistration:
    """Registration of a manual run: its window is the requested one, not a slot's. (The reason
    and requester go on the run's event log; the snapshot stays a valid Schedule.)"""
    return RunRegistration(
        run_key=f"{schedule.schedule_id.replace('/manual-', '/manual/')}",
        company=schedule.company.id, schedule_id=schedule.schedule_id, slot=slot,
        window_start=request.window_start.astimezone(UTC),
        window_end=request.window_end.astimezone(UTC), timezone=schedule.company.timezone,
        window_kind="manual", config_version=schedule.config_version, config_snapshot=schedule.snapshot(),
        owner=schedule.owner, trigger="manual", source_cutoff=now, deadline=None,
    )
