"""Config models: companies, widget and data exports, policies, and the flattened ``Schedule``.

Frozen pydantic v2 models with ``extra="forbid"``; loading, defaults and error reporting live
in :mod:`export_lib.config.loader`. Field names are the YAML keys (see ``dags/config/*.yaml``).

Just over 400 lines on purpose: the models are one schema (company file, defaults file and the
flattened ``Schedule`` reuse the same policy and export fields through inheritance), and
reading it in one place is what a reviewer of a config change needs.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)

from export_lib.config.destinations import DEFAULT_RETRY_WINDOW, Destination, area_location
from export_lib.config.durations import Duration
from export_lib.config.grants import ConnectionGrant
from export_lib.config.holiday_calendar import HolidayCalendar
from export_lib.config.limits import (
    MAX_AUTHORIZED,
    MAX_COMPANIES,
    MAX_DESTINATIONS,
    MAX_EXPORTS,
    MAX_RETENTION_DAYS,
    MAX_TEXT,
    StrictBool,
    StrictInt,
    shown,
)
from export_lib.config.messages import invalid
from export_lib.config.operational import (
    OPERATIONAL_KEYS,
    Catchup,
    TaskRetries,
    TaskTimeouts,
    check_poke_interval,
)
from export_lib.config.patterns import (
    CONN_ID,
    KEYWORD,
    NOTIFIER_CONN_ID,
    NOTIFIER_PATH,
    SLUG,
    SOURCE_NAME,
)
from export_lib.config.query import QuerySpec, check_identifier, check_not_system
from export_lib.config.risk import AtRisk
from export_lib.config.schema_policy import SchemaPolicy
from export_lib.config.timing import (
    DstFold,
    DstGap,
    ExportHour,
    FrozenModel,
    IntervalHours,
    Timing,
    WindowSpec,
    check_cron,
    check_timezone,
    timeline_of,
)

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")  # always fullmatch: '$' lets a '\n' through
# Ids that name manual exports (``<company>/manual-<tag>``) are not available to configs.
RESERVED_EXPORT_IDS = re.compile(r"manual(?:[-_].*)?")


def check_email(value: Any) -> Any:
    if not isinstance(value, str) or len(value) > 254 or not _EMAIL.fullmatch(value):
        raise invalid("email", f"expected an email address such as 'ops@example.com' "
                      f"(got {shown(value)})")
    return value.lower()


Email = Annotated[str, BeforeValidator(check_email)]
Slug = Annotated[str, Field(pattern=SLUG, max_length=64)]
TimezoneName = Annotated[str, BeforeValidator(check_timezone)]
CronExpression = Annotated[str, BeforeValidator(check_cron)]


class CompanyConfig(FrozenModel):
    """A company (tenant). ``authorized`` lists who may receive its data besides the owner;
    ``holidays`` the days its ``previous_business_day`` windows skip besides weekends."""

    id: Slug = Field(examples=["acme-corp"])
    name: str = Field(min_length=1, max_length=MAX_TEXT, examples=["Acme Corp"])
    timezone: TimezoneName = Field(examples=["Europe/Berlin"])
    owner: Email = Field(examples=["ops@acme.example"])
    authorized: tuple[Email, ...] = Field(default=(), max_length=MAX_AUTHORIZED)
    status: Literal["active", "paused"] = "active"
    holidays: HolidayCalendar | None = None

    def may_receive(self, identity: str) -> bool:
        """Whether ``identity`` (an email) may receive this company's data."""
        return identity.lower() in {self.owner, *self.authorized}


class LateData(FrozenModel):
    """What to do with rows that arrive after a window was exported; ``poke_interval``: how
    often ``wait_for_watermark`` looks (None: the deployment default, ADR 0015)."""

    policy: Literal["none", "wait_for_watermark", "restate"] = "none"
    grace: Duration = timedelta(0)
    poke_interval: Annotated[Duration | None, AfterValidator(check_poke_interval)] = None


class PolicyFields(FrozenModel):
    """Run policies, validated now and enforced by the run/ledger issues."""

    deadline: Duration = timedelta(hours=2)
    late_start: Literal["finish", "skip", "hold"] = "finish"
    recovery: Literal["each", "latest", "none"] = "each"
    late_data: LateData = LateData()
    retention_days: StrictInt = Field(default=30, ge=1, le=MAX_RETENTION_DAYS)
    legal_hold: StrictBool = False
    skip_empty: StrictBool = False
    # Operational settings (export_lib.config.operational, ADR 0015); None: deployment default.
    retries: TaskRetries | None = None
    timeouts: TaskTimeouts | None = None
    catchup: Catchup | None = None
    at_risk: AtRisk | None = None  # ADR 0020; None: the automatic risk point, alerting
    # ADR 0025: what a run does when the file's schema differs from the published contract.
    schema_policy: SchemaPolicy = "fail"

    @field_validator("deadline")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise invalid("duration", f"deadline must be positive (got {value})")
        return value

    @model_validator(mode="after")
    def _risk_before_deadline(self) -> Any:
        if self.at_risk is not None:
            self.at_risk.check_deadline(self.deadline)
        return self


POLICY_KEYS = tuple(PolicyFields.model_fields)


class CsvOptions(FrozenModel):
    """CSV output options. ``neutralize_formulas`` (on by default) prefixes ``'`` to text cells
    starting with ``=``, ``+``, ``-``, ``@``, a tab or a CR, so a spreadsheet opening the file
    shows them as text instead of running them as formulas (CSV injection)."""

    delimiter: str = ","
    timestamps: Literal["utc", "local"] = "utc"
    neutralize_formulas: StrictBool = True

    @field_validator("delimiter", mode="before")
    @classmethod
    def _known_delimiter(cls, value: Any) -> Any:
        if value not in CSV_DELIMITERS:
            raise invalid("delimiter", f"delimiter {shown(value)} is not one of ',' ';' '|' or "
                          "a tab (write \"\\t\" in double quotes); CSV readers agree on no other")
        return value


# What every CSV reader (and PostgreSQL's COPY) handles as a separator; a newline, a quote or
# a letter would make the file unreadable or ambiguous (issue 23).
CSV_DELIMITERS = (",", ";", "|", "\t")


class _ExportFields(PolicyFields):
    """What every export shares: output shape, destinations, DST policy, owner."""

    format: Literal["csv", "parquet"] = "csv"
    csv: CsvOptions = CsvOptions()
    destinations: tuple[Destination, ...] = Field(
        min_length=1, max_length=MAX_DESTINATIONS,
        examples=[[{"id": "acme-dir", "type": "local", "path": "outbox/acme/daily"}]])
    dst_gap: DstGap = "shift"
    dst_fold: DstFold = "first"
    effective_from: datetime | None = None
    owner: Email | None = None

    @field_validator("effective_from")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise invalid("effective_from", f"effective_from needs a UTC offset, e.g. "
                          f"'{value.isoformat()}Z' or '{value.isoformat()}+02:00'")
        if value is not None and not 2000 <= value.year <= 2100:
            raise invalid("effective_from", f"effective_from {value.isoformat()} is outside "
                          "the years 2000 to 2100; use the date the export really starts")
        return value

    @model_validator(mode="after")
    def _versions_in_order(self) -> Any:
        """``history`` (earlier versions, see ADR 0005): the current version starts at its
        ``effective_from``, each earlier one at its own; only the oldest may leave it out."""
        history = getattr(self, "history", ())
        if not history:
            return self
        if self.effective_from is None:
            raise invalid("effective_from", "an export with 'history' needs 'effective_from' "
                          "on its current version: the slot from which the edit applies")
        starts = [h.effective_from for h in history]
        if starts.count(None) > 1:
            raise invalid("history", "only the oldest version in 'history' may leave out "
                          "effective_from; give the others the slot they started at")
        known = sorted(s for s in starts if s is not None)
        if len(set(known)) != len(known) or (known and known[-1] >= self.effective_from):
            raise invalid("history", f"every version in 'history' needs an effective_from "
                          f"before the current one ({self.effective_from.isoformat()}), each a "
                          "different one")
        return self


def _not_reserved(value: str) -> str:
    if RESERVED_EXPORT_IDS.fullmatch(value):
        raise invalid("reserved", f"{value!r} is reserved for manual exports (ids 'manual' and "
                      "'manual-…'); choose another name")
    return value


ExportId = Annotated[Slug, AfterValidator(_not_reserved)]


class WidgetExportConfig(_ExportFields):
    """A widget export: fires at ``export_hour`` local time every ``interval_hours``."""

    id: ExportId = Field(examples=["daily-spend"])
    export_hour: ExportHour = Field(default=0, examples=[6])
    interval_hours: IntervalHours = 24
    timezone: TimezoneName | None = None
    """The zone of ``export_hour`` when it is not the company's: a version (``history``) keeps
    its old zone after the company moves (windows stay in the company's timezone)."""
    window: WindowSpec = WindowSpec()
    query: QuerySpec
    history: tuple[WidgetExportConfig, ...] = ()
    """Earlier versions, each in force from its own ``effective_from`` until the next one's
    (the loader merges every entry over the current version's keys; see ADR 0005)."""


class DataExportKindConfig(_ExportFields):
    """One of a channel's two data exports (``primary`` or ``secondary``), defaults merged."""

    cron: CronExpression = Field(examples=["0 6 * * *"])
    timezone: TimezoneName = "UTC"
    window: WindowSpec = Field(examples=[{"kind": "trailing_days", "days": 3}])
    history: tuple[DataExportKindConfig, ...] = ()


class DataExportConfig(FrozenModel):
    """A data export channel: a primary (long trailing window) and a secondary (3 days)."""

    channel: ExportId = Field(examples=["google-ads"])
    size: Literal["small", "medium", "large"] = "small"
    query: QuerySpec
    primary: DataExportKindConfig
    secondary: DataExportKindConfig


class CompanyFile(FrozenModel):
    """One ``dags/config/<company>.yaml``."""

    company: CompanyConfig
    widget_exports: tuple[WidgetExportConfig, ...] = Field(default=(), max_length=MAX_EXPORTS)
    data_exports: tuple[DataExportConfig, ...] = Field(default=(), max_length=MAX_EXPORTS)


class DataExportKindDefaults(_ExportFields):
    cron: CronExpression = Field(examples=["0 6 * * *"])
    timezone: TimezoneName = "UTC"
    window: WindowSpec = Field(examples=[{"kind": "trailing_days", "days": 3}])
    destinations: tuple[Destination, ...] = ()


class DataExportDefaults(FrozenModel):
    channel_column: str | None = None
    query: QuerySpec | None = None
    format: Literal["csv", "parquet"] = "csv"
    csv: CsvOptions = CsvOptions()
    destinations: tuple[Destination, ...] = ()
    primary: DataExportKindDefaults
    secondary: DataExportKindDefaults


class SourceTable(FrozenModel):
    """One table exports may read, and the column that holds the company id on each row."""

    tenant_column: str = Field(examples=["company_id"])
    table_schema: str | None = None

    @field_validator("tenant_column", "table_schema")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        return None if value is None else check_identifier(value)


class SourceConfig(FrozenModel):
    """The tables of one source connection that exports may read (the allowlist), and how many
    days of data the source keeps (manual exports cannot ask for older windows)."""

    tables: dict[str, SourceTable] = Field(
        min_length=1, max_length=MAX_EXPORTS,
        examples=[{"widget_metrics": {"tenant_column": "company_id"}}])
    retention_days: StrictInt = Field(default=365, ge=1, le=MAX_RETENTION_DAYS)

    @field_validator("tables")
    @classmethod
    def _plain_tables(cls, value: dict[str, SourceTable]) -> dict[str, SourceTable]:
        for name, table in value.items():
            check_identifier(name)
            check_not_system(name, table.table_schema)
        return value


class NotifierConfig(FrozenModel):
    """How alerts are sent: ``smtp`` (Airflow's ``SmtpNotifier`` on connection ``conn_id``) or
    the dotted path of another Airflow notifier class (Slack, ...), built with ``kwargs`` plus
    the alert text in the keyword ``message_field`` (e.g. ``text``)."""

    class_: str = Field(default="smtp", alias="class", pattern=NOTIFIER_PATH, max_length=200)
    conn_id: str = Field(default="smtp_default", pattern=NOTIFIER_CONN_ID, max_length=200)
    from_email: Email | None = None
    message_field: str = Field(default="text", pattern=KEYWORD, max_length=64)
    kwargs: dict[str, str | int | bool] = Field(default_factory=dict, max_length=20)


class AlertsConfig(FrozenModel):
    """``alerts:`` in defaults.yaml: who hears about a failed or exhausted export and a missed
    deadline (the exports team, and each schedule's owner unless ``notify_owner: false``)."""

    exports_team: tuple[Email, ...] = Field(default=(), max_length=MAX_AUTHORIZED)
    notify_owner: StrictBool = True
    notifier: NotifierConfig = NotifierConfig()


class DefaultsFile(FrozenModel):
    """``dags/config/defaults.yaml``: policies for every export, data-export defaults, the
    source tables exports may read (``sources``) and the mounted directories local
    destinations may use besides the exports root (``local_mounts``)."""

    sources: dict[Annotated[str, Field(pattern=SOURCE_NAME)], SourceConfig] = Field(
        min_length=1, max_length=MAX_DESTINATIONS,
        examples=[{"demo_source": {"tables": {"widget_metrics": {"tenant_column": "company_id"}}}}])
    local_mounts: tuple[str, ...] = Field(default=(), max_length=MAX_DESTINATIONS)
    # Per company, locations its object-store and SFTP destinations may use besides
    # <bucket or server>/<company id>/… (a customer's own bucket or server).
    destination_areas: dict[Annotated[str, Field(pattern=SLUG)],
                            Annotated[tuple[str, ...], Field(max_length=MAX_DESTINATIONS)]] = Field(
        default_factory=dict, max_length=MAX_COMPANIES)
    # Which Airflow connections company files may use, for what and by whom (config/grants.py).
    connections: dict[Annotated[str, Field(pattern=CONN_ID, max_length=200)],
                      ConnectionGrant] = Field(default_factory=dict, max_length=MAX_COMPANIES)
    policies: PolicyFields = PolicyFields()
    data_exports: DataExportDefaults
    alerts: AlertsConfig = AlertsConfig()

    @field_validator("local_mounts")
    @classmethod
    def _absolute(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for mount in value:
            if not mount.startswith("/") or ".." in mount.split("/") or mount.rstrip("/") == "":
                raise invalid("mount", f"local_mounts entry {shown(mount)} must be an absolute "
                              "directory such as '/mnt/exports' (not '/', no '..')")
        return value

    @field_validator("destination_areas")
    @classmethod
    def _areas_apart(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        owners: dict[tuple[str, ...], str] = {}
        for company, uris in sorted(value.items()):
            for i, uri in enumerate(uris):
                try:
                    loc = area_location(uri)
                except ValueError as exc:
                    raise invalid("area", f"entry {i} of {company!r}: {exc}") from None
                for other_loc, other in owners.items():
                    shorter = min(len(loc), len(other_loc))
                    if other != company and loc[:shorter] == other_loc[:shorter]:
                        raise invalid("area", f"entry {i} of {company!r}: {shown(uri)} "
                                      f"overlaps an area of "
                                      f"{other!r}; one location belongs to one company")
                owners[loc] = company
        return value


class Schedule(FrozenModel):
    """One schedulable export, flattened: a widget export or one data export kind of a channel.

    ``schedule_id`` is ``<company>/<export>`` (widget) or ``<company>/<channel>/<kind>`` (data);
    ``config_version`` is a stable sha256 of the normalised config (company fields included), so
    a run records exactly which configuration produced it (see :meth:`snapshot`).
    """

    schedule_id: str
    dag_id: str
    kind: Literal["widget", "primary", "secondary", "manual"]
    company: CompanyConfig
    export_id: str | None = None
    channel: str | None = None
    size: Literal["small", "medium", "large"] | None = None
    timing: Timing
    window: WindowSpec
    query: QuerySpec
    format: Literal["csv", "parquet"]
    csv: CsvOptions
    destinations: tuple[Destination, ...]
    policies: PolicyFields
    owner: str
    effective_from: datetime | None = None
    config_version: str = ""
    history: tuple[Schedule, ...] = ()
    """Earlier versions (no history of their own), oldest first; never captured by a run."""

    @property
    def deadline(self) -> timedelta:
        return self.policies.deadline

    @property
    def versions(self) -> tuple[Schedule, ...]:
        """Every version, oldest first (the current one last)."""
        return (*self.history, self)

    @property
    def first_effective(self) -> datetime | None:
        """The first instant any version applies from (None: the schedule has no start)."""
        return self.versions[0].effective_from

    @property
    def own_timing(self) -> Timing:
        """This version's own timing (the schedule's ``timing`` may be a timeline of every
        version's, ADR 0005 amended): what a run of this version records."""
        if not self.timing.earlier:
            return self.timing.plain
        return (self.timing.at(self.effective_from) if self.effective_from is not None
                else self.timing.segments[0][2])

    def with_timeline(self) -> Schedule:
        """This schedule and its earlier versions with the timeline of their timings."""
        timeline = timeline_of([(v.effective_from, v.timing) for v in self.versions])
        if timeline == self.timing:
            return self
        return self.model_copy(update={
            "timing": timeline,
            "history": tuple(v.model_copy(update={"timing": timeline}) for v in self.history)})

    def version_for(self, slot: datetime) -> Schedule | None:
        """The version in force for ``slot``: the newest whose ``effective_from`` is at or
        before it (None before the first version). Catch-up and backfill of an older slot get
        the version that was in force for it, not today's."""
        found = None
        for version in self.versions:
            if version.effective_from is None or version.effective_from <= slot:
                found = version
        return found.model_copy(update={"history": ()}) if found is not None else None

    @property
    def window_timezone(self) -> str:
        """Windows are computed in the company timezone (cron timings may use another)."""
        return self.company.timezone

    def content(self) -> dict[str, Any]:
        """The normalised config that defines this schedule's output (hashed by the version).

        ``company.status`` is left out: pausing a company is not a new configuration; so are
        the operational settings (ADR 0015), which say how hard Airflow tries, not what.
        """
        data = self.snapshot(operational=False)
        data.pop("config_version")
        data["company"].pop("status", None)
        # A destination's default retry window is left out, so configs written before the
        # field existed keep their version (and its value never moves a version by itself).
        default_window = TypeAdapter(timedelta).dump_python(DEFAULT_RETRY_WINDOW, mode="json")
        for destination in data["destinations"]:
            if destination.get("retry_window") == default_window:
                del destination["retry_window"]
        # The default schema policy is left out, so configs written before the field existed
        # keep their version (``fail`` written out means what leaving it out means).
        if data["policies"].get("schema_policy") == "fail":
            del data["policies"]["schema_policy"]
        return data

    def snapshot(self, *, operational: bool = True) -> dict[str, Any]:
        """JSON-able normalised config plus ``config_version``, captured on every run; the
        operational settings only where set (``operational=False``: never)."""
        data = self.model_dump(mode="json", exclude={"history"})
        if data["company"]["holidays"] is None:
            # Left out, so configs written before the calendar existed keep their version.
            del data["company"]["holidays"]
        data["timing"] = self.own_timing.model_dump(mode="json")
        policies, late_data = data["policies"], data["policies"]["late_data"]
        for key in OPERATIONAL_KEYS:
            if not operational or policies[key] is None:
                del policies[key]
        if not operational or late_data["poke_interval"] is None:
            del late_data["poke_interval"]
        for destination in data["destinations"]:
            if not operational or destination["retry"] is None:
                del destination["retry"]
        return data

    def with_version(self) -> Schedule:
        canonical = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        return self.model_copy(update={"config_version": digest})
