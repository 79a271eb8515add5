"""Config models: companies, widget and data exports, policies, and the flattened ``Schedule``.

Frozen pydantic v2 models with ``extra="forbid"``; loading, defaults and error reporting live
in :mod:`export_lib.config.loader`. Field names are the YAML keys (see ``dags/config/*.yaml``).

Over 400 lines on purpose: the models are one schema (company file, defaults file and the
flattened ``Schedule`` reuse the same policy and export fields through inheritance), and
reading it in one place is what a reviewer of a config change needs. Each field's
``description`` and ``examples`` are the text of the configuration reference and of the JSON
Schema editors use (``make docs``: docs/reference/config.md, company.schema.json), so a new
field is documented where it is declared.
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
    WithJsonSchema,
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
from export_lib.config.output_format import (
    COMPRESSION_HELP,
    FORMAT_HELP,
    Compression,
    FormatName,
    check_output,
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


Email = Annotated[str, BeforeValidator(check_email),
                  WithJsonSchema({"type": "string", "format": "email"})]
DST_GAP_HELP = ("A local export time that does not exist on a spring-forward day: shift runs at "
                "the first instant after the gap; skip does not run that day.")
DST_FOLD_HELP = ("A local export time that occurs twice on a fall-back day: first runs at the "
                 "first, second at the second, both at both (exporting each half).")
CRON_HELP = ("When it runs: five fields 'minute hour day month weekday' (e.g. '0 14 * * *') or "
             "one of @daily, @hourly, @weekly, @monthly, @yearly, @annually, @midnight.")
HISTORY_HELP = ("Earlier versions, each listing only what differed, in force from its own "
                "effective_from until the next one's (exportctl reschedule writes them).")
Slug = Annotated[str, Field(pattern=SLUG, max_length=64)]
TimezoneName = Annotated[str, BeforeValidator(check_timezone)]
CronExpression = Annotated[str, BeforeValidator(check_cron)]


class CompanyConfig(FrozenModel):
    """A company (tenant). ``authorized`` lists who may receive its data besides the owner;
    ``holidays`` the weekend and the days its ``previous_business_day`` windows skip."""

    id: Slug = Field(description="The company id: names its DAGs, schedules and files; the "
                     "file must be called <id>.yaml.", examples=["acme"])
    name: str = Field(min_length=1, max_length=MAX_TEXT, description="The company's display "
                      "name.", examples=["ACME Corp"])
    timezone: TimezoneName = Field(description="The company's IANA time zone: export hours and "
                                   "every window's day boundaries are in it.",
                                   examples=["Europe/Berlin"])
    owner: Email = Field(description="Who owns the company's exports: may receive its data and "
                         "hears about its failed exports and missed deadlines.",
                         examples=["data-team@acme.example"])
    authorized: tuple[Email, ...] = Field(
        default=(), max_length=MAX_AUTHORIZED, description="Further addresses that may receive "
        "the company's data (email destinations may send only to the owner and these).",
        examples=[["analytics@acme.example"]])
    status: Literal["active", "paused"] = Field(
        "active", description="active: its exports run; paused: its DAGs are paused and a run "
        "that starts anyway is skipped (pausing is not a new config version).")
    holidays: HolidayCalendar | None = Field(
        None, description="The business days of previous_business_day windows: with a country, "
        "its own weekend (Friday and Saturday for IL), its working weekend days and its "
        "holidays; left out, or dates alone: Saturday and Sunday are the weekend.",
        examples=[{"country": "NZ", "subdivision": "AUK"}])

    def may_receive(self, identity: str) -> bool:
        """Whether ``identity`` (an email) may receive this company's data."""
        return identity.lower() in {self.owner, *self.authorized}


class LateData(FrozenModel):
    """What to do with rows that arrive after a window was exported; ``poke_interval``: how
    often ``wait_for_watermark`` looks (None: the deployment default, ADR 0015)."""

    policy: Literal["none", "wait_for_watermark", "restate"] = Field(
        "none", description="none: export what is there at the slot; wait_for_watermark: wait "
        "(up to grace) until the source's watermark passes the window end; restate: export now "
        "and export the period again once late rows can no longer arrive (window end + grace).")
    grace: Duration = Field(timedelta(0), description="How long after a window's end late rows "
                            "may still arrive.", examples=["6h"])
    poke_interval: Annotated[Duration | None, AfterValidator(check_poke_interval)] = Field(
        None, description="How often wait_for_watermark looks at the watermark; left out: "
        "EXPORT_WATERMARK_POKE_SECONDS, else 5m. Cannot differ between versions.",
        examples=["5m"])


class PolicyFields(FrozenModel):
    """Run policies, validated now and enforced by the run/ledger issues."""

    deadline: Duration = Field(timedelta(hours=2), description="How long after its slot a "
                               "run must be delivered; later is late, not delivered by then is "
                               "a missed deadline (SLA).", examples=["4h"])
    late_start: Literal["finish", "skip", "hold"] = Field(
        "finish", description="A run that starts after its deadline: finish exports it and "
        "records it late; skip records it skipped; hold stops it until an operator runs "
        "exportctl release.")
    recovery: Literal["each", "latest", "none"] = Field(
        "each", description="Slots missed while nothing ran (an outage): each exports every "
        "one, oldest first; latest exports only the newest; none exports none (both record the "
        "others skipped).")
    late_data: LateData = Field(LateData(), description="What to do with rows that arrive "
                                "after their window was exported.",
                                examples=[{"policy": "restate", "grace": "6h"}])
    retention_days: StrictInt = Field(default=30, ge=1, le=MAX_RETENTION_DAYS,
                                      description="Days a published file is kept (once "
                                      "delivered) before retention deletes it.", examples=[90])
    legal_hold: StrictBool = Field(False, description="true: retention deletes none of the "
                                   "export's files.")
    skip_empty: StrictBool = Field(False, description="true: a period with no rows publishes "
                                   "and delivers no file (recorded as empty); false: a file with "
                                   "only the header.")
    # Operational settings (export_lib.config.operational, ADR 0015); None: deployment default.
    retries: TaskRetries | None = Field(None, description="Airflow retries of the export's "
                                        "tasks; left out: the deployment defaults.",
                                        examples=[{"count": 3, "delay": "5m"}])
    timeouts: TaskTimeouts | None = Field(None, description="Time limit of each task kind; left "
                                          "out: the deployment defaults.",
                                          examples=[{"render": "2h"}])
    catchup: Catchup | None = Field(None, description="How far back a run looks for missed "
                                    "slots and from how many it recovers them in batches; left "
                                    "out: the deployment defaults.",
                                    examples=[{"lookback": "72h"}])
    at_risk: AtRisk | None = Field(None, description="When an undelivered run counts as at "
                                   "risk of missing its deadline (an early warning, not a miss); "
                                   "left out: the automatic risk point, with an alert.",
                                   examples=[{"after": "50%"}])
    # ADR 0025: what a run does when the file's schema differs from the published contract.
    schema_policy: SchemaPolicy = Field(
        "fail", description="When a file's columns, types or nullability differ from the "
        "schema the export published: fail stops the run with the difference; warn publishes "
        "and alerts once; new_major publishes under the next major version of the file name.")

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

    delimiter: Annotated[str, WithJsonSchema({"enum": list(CSV_DELIMITERS)})] = Field(
        ",", description="The separator: ',' ';' '|' or a tab (write \"\\t\" in double quotes).",
        examples=[";"])
    timestamps: Literal["utc", "local"] = Field(
        "utc", description="utc: timestamps written in UTC with 'Z'; local: in the company's "
        "time zone with their offset (needs a column that has a time zone).")
    neutralize_formulas: StrictBool = Field(
        True, description="Prefix ' to text cells starting with = + - @, a tab or a CR, so a "
        "spreadsheet shows them as text instead of running them (CSV injection).")

    @field_validator("delimiter", mode="before")
    @classmethod
    def _known_delimiter(cls, value: Any) -> Any:
        if value not in CSV_DELIMITERS:
            raise invalid("delimiter", f"delimiter {shown(value)} is not one of ',' ';' '|' or "
                          "a tab (write \"\\t\" in double quotes); CSV readers agree on no other")
        return value


# What every CSV reader (and PostgreSQL's COPY) handles as a separator; a newline, a quote or
# a letter would make the file unreadable or ambiguous.
CSV_DELIMITERS = (",", ";", "|", "\t")


class _ExportFields(PolicyFields):
    """What every export shares: output shape, destinations, DST policy, owner."""

    format: FormatName = Field("csv", description=FORMAT_HELP)
    compression: Compression = Field("none", description=COMPRESSION_HELP, examples=["gzip"])
    csv: CsvOptions = Field(CsvOptions(), description="CSV options (format: csv only; "
                            "timestamps also applies to jsonl).",
                            examples=[{"delimiter": ";", "timestamps": "local"}])
    destinations: tuple[Destination, ...] = Field(
        min_length=1, max_length=MAX_DESTINATIONS, description="Where each published file "
        "goes; every destination is delivered and retried on its own.",
        examples=[[{"id": "acme-dir", "type": "local", "path": "outbox/acme/daily-spend"}]])
    dst_gap: DstGap = Field("shift", description=DST_GAP_HELP)
    dst_fold: DstFold = Field("first", description=DST_FOLD_HELP)
    effective_from: datetime | None = Field(
        None, description="The first slot this version applies to (a date and time with a UTC "
        "offset); needed with history. exportctl reschedule writes it.",
        examples=["2026-03-02T07:00:00+01:00"])
    owner: Email | None = Field(None, description="Who owns this export (alerts go to them); "
                                "left out: the company's owner.",
                                examples=["ads-team@acme.example"])

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
    def _output_fits(self) -> Any:
        return check_output(self)

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

    id: ExportId = Field(description="The export id, unique in the company: the schedule is "
                         "<company>/<id>, the DAG widget_export__<company>__<id>. 'manual' and "
                         "'manual-…' are reserved.", examples=["daily-spend"])
    export_hour: ExportHour = Field(0, description="The local hour (0-23, in timezone) of the "
                                    "first export of the day.", examples=[7],
                                    json_schema_extra={"minimum": 0, "maximum": 23})
    interval_hours: IntervalHours = Field(
        24, description="Hours between exports (1-24): 24 is daily; a divisor of 24 repeats "
        "round the clock, any other restarts at export_hour each day.", examples=[6],
        json_schema_extra={"minimum": 1, "maximum": 24})
    timezone: TimezoneName | None = Field(
        None, description="The zone of export_hour when it is not the company's (a version in "
        "history keeps its old zone after the company moves); windows stay in the company's.",
        examples=["UTC"])
    """The zone of ``export_hour`` when it is not the company's: a version (``history``) keeps
    its old zone after the company moves (windows stay in the company's timezone)."""
    window: WindowSpec = Field(WindowSpec(), description="Which period each slot exports.",
                               examples=[{"kind": "calendar_day"}])
    query: QuerySpec = Field(description="The rows the export reads.")
    history: tuple[WidgetExportConfig, ...] = Field(
        (), description=HISTORY_HELP,
        examples=[[{"export_hour": 6, "effective_from": "2026-01-05T06:00:00+01:00"}]])
    """Earlier versions, each in force from its own ``effective_from`` until the next one's
    (the loader merges every entry over the current version's keys; see ADR 0005)."""


class DataExportKindConfig(_ExportFields):
    """One of a channel's two data exports (``primary`` or ``secondary``), defaults merged."""

    cron: CronExpression = Field(description=CRON_HELP, examples=["0 14 * * *"])
    timezone: TimezoneName = Field("UTC", description="The IANA zone the cron is read in.",
                                   examples=["Europe/Berlin"])
    window: WindowSpec = Field(description="Which period each slot exports; a window without "
                               "kind refines the default's (e.g. {days: 90}).",
                               examples=[{"kind": "trailing_days", "days": 30}])
    history: tuple[DataExportKindConfig, ...] = Field(
        (), description=HISTORY_HELP,
        examples=[[{"cron": "0 12 * * *", "effective_from": "2026-01-05T12:00:00Z"}]])


class DataExportConfig(FrozenModel):
    """A data export channel: a primary (long trailing window) and a secondary (3 days)."""

    channel: ExportId = Field(description="The channel, unique in the company: schedules "
                              "<company>/<channel>/primary and …/secondary.",
                              examples=["google-ads"])
    size: Literal["small", "medium", "large"] = Field(
        "small", description="How big its renders are: a large one takes two slots of the "
        "render pool and runs on the deployment's large-render queue (and pod size on "
        "Kubernetes); small and medium take one slot.")
    query: QuerySpec = Field(description="The rows the channel reads; left out: defaults.yaml "
                             "data_exports.query with channel_column = <channel> added.")
    primary: DataExportKindConfig = Field(description="The primary export (defaults.yaml "
                                          "data_exports.primary under it).",
                                          examples=[{"window": {"days": 90}}])
    secondary: DataExportKindConfig = Field(description="The secondary export (defaults.yaml "
                                            "data_exports.secondary under it).",
                                            examples=[{"cron": "0 1 * * *"}])


class CompanyFile(FrozenModel):
    """One ``dags/config/<company>.yaml``."""

    company: CompanyConfig = Field(description="Who the company is.")
    widget_exports: tuple[WidgetExportConfig, ...] = Field(
        default=(), max_length=MAX_EXPORTS, description="Exports at a local hour, every "
        "interval_hours.")
    data_exports: tuple[DataExportConfig, ...] = Field(
        default=(), max_length=MAX_EXPORTS, description="Data export channels, each a primary "
        "and a secondary export on a cron.")


class DataExportKindDefaults(_ExportFields):
    """``data_exports.primary`` / ``.secondary`` of defaults.yaml: under every channel's."""

    cron: CronExpression = Field(description=CRON_HELP, examples=["0 14 * * *"])
    timezone: TimezoneName = Field("UTC", description="The IANA zone the cron is read in.",
                                   examples=["UTC"])
    window: WindowSpec = Field(description="Which period each slot exports.",
                               examples=[{"kind": "trailing_days", "days": 30}])
    destinations: tuple[Destination, ...] = Field(
        (), description="Destinations of every channel's export of this kind; {company} in a "
        "path is the company id.")


class DataExportDefaults(FrozenModel):
    """``data_exports:`` of defaults.yaml: what every company's data export channels start
    from."""

    channel_column: str | None = Field(
        None, description="The column the default query filters on: a channel without a query "
        "of its own reads the default query with <channel_column> = <channel> added.",
        examples=["channel"])
    query: QuerySpec | None = Field(None, description="The query of channels that have none.")
    format: FormatName = Field("csv", description=FORMAT_HELP)
    compression: Compression = Field("none", description=COMPRESSION_HELP)
    csv: CsvOptions = Field(CsvOptions(), description="CSV options (format: csv only; "
                            "timestamps also applies to jsonl).")
    destinations: tuple[Destination, ...] = Field(
        (), description="Destinations of every data export; {company} in a path is the "
        "company id, so no directory is shared.",
        examples=[[{"id": "exports-dir", "type": "local",
                    "path": "outbox/{company}/data_exports"}]])
    primary: DataExportKindDefaults = Field(description="Defaults of every primary export.")
    secondary: DataExportKindDefaults = Field(description="Defaults of every secondary export.")

    @model_validator(mode="after")
    def _output_fits(self) -> Any:
        return check_output(self)


class SourceTable(FrozenModel):
    """One table exports may read, and the column that holds the company id on each row."""

    tenant_column: str = Field(description="The column holding the company id; every query "
                               "is scoped to <tenant_column> = <company id>.",
                               examples=["company_id"])
    table_schema: str | None = Field(None, description="The PostgreSQL schema of the table; "
                                     "left out: the connection's search_path.",
                                     examples=["reporting"])

    @field_validator("tenant_column", "table_schema")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        return None if value is None else check_identifier(value)


class SourceConfig(FrozenModel):
    """The tables of one source connection that exports may read (the allowlist), and how many
    days of data the source keeps (manual exports cannot ask for older windows)."""

    tables: dict[str, SourceTable] = Field(
        min_length=1, max_length=MAX_EXPORTS, description="The tables exports may read, by "
        "name; a company file naming another table is refused.",
        examples=[{"widget_metrics": {"tenant_column": "company_id"}}])
    retention_days: StrictInt = Field(default=365, ge=1, le=MAX_RETENTION_DAYS,
                                      description="How many days of rows the source keeps: "
                                      "manual exports cannot ask for older windows.",
                                      examples=[400])

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

    class_: str = Field(default="smtp", alias="class", pattern=NOTIFIER_PATH, max_length=200,
                        description="smtp, or the dotted path of an Airflow notifier class.",
                        examples=["airflow.providers.slack.notifications.slack.SlackNotifier"])
    conn_id: str = Field(default="smtp_default", pattern=NOTIFIER_CONN_ID, max_length=200,
                         description="The Airflow connection of smtp.",
                         examples=["smtp_default"])
    from_email: Email | None = Field(None, description="The sender of smtp alerts; left out: "
                                     "the connection's.", examples=["exports@example.com"])
    message_field: str = Field(default="text", pattern=KEYWORD, max_length=64,
                               description="The keyword argument of the notifier class that "
                               "takes the alert text.", examples=["text"])
    kwargs: dict[str, str | int | bool] = Field(
        default_factory=dict, max_length=20, description="Further keyword arguments of the "
        "notifier class.", examples=[{"slack_conn_id": "slack_default", "channel": "#exports"}])


class AlertsConfig(FrozenModel):
    """``alerts:`` in defaults.yaml: who hears about a failed or exhausted export and a missed
    deadline (the exports team, and each schedule's owner unless ``notify_owner: false``)."""

    exports_team: tuple[Email, ...] = Field(
        default=(), max_length=MAX_AUTHORIZED, description="Addresses told about every "
        "company's failed exports and missed deadlines.",
        examples=[["exports-team@example.com"]])
    notify_owner: StrictBool = Field(True, description="Also tell each schedule's owner.")
    notifier: NotifierConfig = Field(NotifierConfig(), description="How alerts are sent.",
                                     examples=[{"class": "smtp", "conn_id": "smtp_default"}])


class DefaultsFile(FrozenModel):
    """``dags/config/defaults.yaml``: policies for every export, data-export defaults, the
    source tables exports may read (``sources``) and the mounted directories local
    destinations may use besides the exports root (``local_mounts``)."""

    sources: dict[Annotated[str, Field(pattern=SOURCE_NAME)], SourceConfig] = Field(
        min_length=1, max_length=MAX_DESTINATIONS, description="The source connections exports "
        "read, by connection id, each with the tables exports may read (the allowlist).",
        examples=[{"demo_source": {"tables": {"widget_metrics": {"tenant_column":
                                                                 "company_id"}}}}])
    local_mounts: tuple[str, ...] = Field(
        default=(), max_length=MAX_DESTINATIONS, description="Absolute directories (mounted "
        "shares) local destinations may write to besides the exports root, as "
        "<mount>/<company id>/….", examples=[["/mnt/exports"]])
    # Per company, locations its object-store and SFTP destinations may use besides
    # <bucket or server>/<company id>/… (a customer's own bucket or server).
    destination_areas: dict[Annotated[str, Field(pattern=SLUG)],
                            Annotated[tuple[str, ...], Field(max_length=MAX_DESTINATIONS)]] = Field(
        default_factory=dict, max_length=MAX_COMPANIES, description="Per company id, locations "
        "its S3, GCS and SFTP destinations may use besides <bucket or server>/<company id>/… "
        "(s3://bucket/prefix, gs://bucket/prefix, sftp://<connection id>/path); two companies' "
        "areas never overlap.", examples=[{"acme": ["s3://acme-drop"]}])
    # Which Airflow connections company files may use, for what and by whom (config/grants.py).
    connections: dict[Annotated[str, Field(pattern=CONN_ID, max_length=200)],
                      ConnectionGrant] = Field(
        default_factory=dict, max_length=MAX_COMPANIES, description="The Airflow connections "
        "company files may use, for what and by whom; anything not granted is refused.",
        examples=[{"acme_partner_sftp": {"use": ["sftp"], "companies": ["acme"]}}])
    policies: PolicyFields = Field(PolicyFields(), description="Run policies of every export; "
                                   "an export's own keys win (blocks merged key by key).",
                                   examples=[{"deadline": "2h", "retention_days": 30}])
    data_exports: DataExportDefaults = Field(description="What every data export channel "
                                             "starts from.")
    alerts: AlertsConfig = Field(AlertsConfig(), description="Who hears about failed exports "
                                 "and missed deadlines, and how.")

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
    format: str
    compression: Compression = "none"
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
        # No compression is left out, so configs written before the field existed keep theirs.
        if data.get("compression") == "none":
            del data["compression"]
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
        if policies.get("catchup") and policies["catchup"].get("batch_over") is None:
            # Left out, so snapshots stay as they were before the field existed.
            policies["catchup"].pop("batch_over", None)
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
