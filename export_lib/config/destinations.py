"""Destination configs: where a published artifact goes (the delivery stage builds on them).

Credentials never live in YAML: a destination names an Airflow-style connection id whose URI
comes from ``AIRFLOW_CONN_<ID>`` (or an Airflow connection at the Airflow edge). The URI form
each destination type expects is documented in its transport module under
``export_lib.delivery.transports``.

Paths and prefixes are validated here, at config load, so a typo like ``../other-customer``
fails before any run instead of writing outside the customer's area:

* ``..`` segments are rejected everywhere (a prefix must not escape itself);
* object-store prefixes are relative (``reports/daily``, no leading ``/``);
* a webhook ``endpoint`` is a path on the connection's host, never a URL of its own, so a
  config cannot send data to a host the connection does not name.

Destinations come only from configuration: :func:`select_destinations` narrows the configured
list to requested ids and refuses ids that are not configured (trigger parameters can choose,
never invent).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema, field_validator

from export_lib.config.durations import DURATION_JSON, parse_duration, short
from export_lib.config.limits import MAX_AUTHORIZED, MAX_TEXT, StrictFloat, StrictInt, shown
from export_lib.config.messages import invalid
from export_lib.config.operational import DeliveryRetry
from export_lib.config.patterns import CONN_ID, DESTINATION_ID, GCS_BUCKET, S3_BUCKET
from export_lib.errors import ConfigError

_EMAIL = re.compile(r"[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+")  # fullmatch: '$' lets a '\n' in


def _segments(value: str) -> list[str]:
    return value.replace("\\", "/").split("/")


def _reject_escape(field: str, value: str) -> str:
    """Refuse ``..`` segments: the path would leave the area the config names."""
    if ".." in _segments(value):
        raise ValueError(
            f"{field} {value!r} escapes its base with a '..' segment; "
            f"use a {field} inside the destination (e.g. 'reports/daily')"
        )
    if "\x00" in value:
        raise ValueError(f"{field} {value!r} contains a NUL byte; remove it")
    return value


def _relative(field: str, value: str) -> str:
    _reject_escape(field, value)
    if value.startswith(("/", "\\")):
        fixed = value.lstrip("/\\")
        raise ValueError(
            f"{field} {value!r} is absolute; object keys are relative to the bucket, "
            f"write it without the leading '/' (e.g. {fixed!r})"
        )
    if "//" in value.strip("/"):
        raise ValueError(f"{field} {value!r} has an empty segment ('//'); remove the extra '/'")
    return value


# How long a delivery keeps retrying (required: 5 days), counted from the run's slot (or its
# registration, for a run registered after its deadline: catch-up, backfill; ADR 0005). Bounded
# so a typo neither gives up at once nor keeps a failing delivery unresolved for months.
DEFAULT_RETRY_WINDOW = timedelta(days=5)
MIN_RETRY_WINDOW = timedelta(minutes=1)
MAX_RETRY_WINDOW = timedelta(days=30)
# Fields that say how hard to try, not where the artifact goes: a run may deliver with a newer
# value (they are not part of a delivery's identity, see delivery.engine).
POLICY_FIELDS = frozenset({"retry_window", "retry"})
TYPE_HELP = "The destination type: local, s3, gcs, sftp, webhook or email."
CONN_HELP = ("The Airflow connection holding the credentials; defaults.yaml connections must "
             "grant it to the company.")
PREFIX_HELP = "The key prefix inside the bucket: relative (no leading '/'), no '..'."


class _Destination(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=DESTINATION_ID, max_length=48,
                    description="The destination id, unique in the export (deliveries and "
                    "manual exports name it).", examples=["acme-dir"])
    retry_window: Annotated[timedelta, WithJsonSchema(DURATION_JSON)] = Field(
        DEFAULT_RETRY_WINDOW, description="How long a failed delivery keeps being retried, "
        "from the run's slot (1m to 30d).", examples=["2d"])
    # The pacing of the retries inside that window (ADR 0015); None: the deployment default.
    retry: DeliveryRetry | None = Field(None, description="The pacing of the retries inside "
                                        "retry_window; left out: the deployment defaults.",
                                        examples=[{"base": "10m", "cap": "6h"}])

    @field_validator("retry_window", mode="before")
    @classmethod
    def _window_duration(cls, value: Any) -> Any:
        return parse_duration(value)

    @field_validator("retry_window")
    @classmethod
    def _window_bounds(cls, value: timedelta) -> timedelta:
        if not MIN_RETRY_WINDOW <= value <= MAX_RETRY_WINDOW:
            raise invalid("retry_window", f"retry_window {short(value)} is out of bounds; give a "
                          "duration between 1m and 30d (e.g. '5d', the default)")
        return value

    def identity(self) -> dict[str, Any]:
        """Where and how the artifact goes: the config without the retry policy fields."""
        return self.model_dump(mode="json", exclude=set(POLICY_FIELDS))


class LocalDestination(_Destination):
    """A directory. Relative paths resolve under the exports root (``EXPORT_HOME/exports``);
    absolute paths (a mounted share) are allowed, ``..`` segments are not."""

    type: Literal["local"] = Field("local", description=TYPE_HELP)
    path: str = Field(min_length=1, max_length=MAX_TEXT, description="The directory: relative "
                      "to the exports root, or absolute under a local_mounts entry; no '..'.",
                      examples=["outbox/acme/daily-spend"])

    @field_validator("path")
    @classmethod
    def _path_stays_inside(cls, value: str) -> str:
        return _reject_escape("path", value)


class S3Destination(_Destination):
    """An S3 (or S3-compatible) bucket and key prefix."""

    type: Literal["s3"] = Field("s3", description=TYPE_HELP)
    conn_id: str = Field(default="aws_default", pattern=CONN_ID, description=CONN_HELP,
                         examples=["aws_default"])
    bucket: str = Field(pattern=S3_BUCKET,
                        description="The bucket name.", examples=["exports-bucket"])
    prefix: str = Field(default="", max_length=MAX_TEXT, description=PREFIX_HELP,
                        examples=["reports/daily"])

    @field_validator("prefix")
    @classmethod
    def _prefix_is_relative(cls, value: str) -> str:
        return _relative("prefix", value)


class GcsDestination(_Destination):
    """A Google Cloud Storage bucket and object prefix."""

    type: Literal["gcs"] = Field("gcs", description=TYPE_HELP)
    conn_id: str = Field(default="google_cloud_default", pattern=CONN_ID, description=CONN_HELP,
                         examples=["google_cloud_default"])
    bucket: str = Field(pattern=GCS_BUCKET,
                        description="The bucket name.", examples=["exports-bucket"])
    prefix: str = Field(default="", max_length=MAX_TEXT, description=PREFIX_HELP,
                        examples=["reports/daily"])

    @field_validator("prefix")
    @classmethod
    def _prefix_is_relative(cls, value: str) -> str:
        return _relative("prefix", value)


class SftpDestination(_Destination):
    """A directory on an SFTP server (absolute, or relative to the login directory)."""

    type: Literal["sftp"] = Field("sftp", description=TYPE_HELP)
    conn_id: str = Field(default="sftp_default", pattern=CONN_ID, description=CONN_HELP,
                         examples=["sftp_default"])
    path: str = Field(min_length=1, max_length=MAX_TEXT, description="The directory on the "
                      "server: absolute, or relative to the login directory; no '..'.",
                      examples=["upload/acme"])

    @field_validator("path")
    @classmethod
    def _path_stays_inside(cls, value: str) -> str:
        return _reject_escape("path", value)


class WebhookDestination(_Destination):
    """An HTTP(S) endpoint; the host comes from the connection, ``endpoint`` is a path on it."""

    type: Literal["webhook"] = Field("webhook", description=TYPE_HELP)
    conn_id: str = Field(pattern=CONN_ID, description="The Airflow connection naming the host "
                         "(and its credentials).", examples=["acme_webhook"])
    endpoint: str = Field(default="", max_length=MAX_TEXT, description="The path on the "
                          "connection's host (never a URL of its own).",
                          examples=["/hooks/exports"])
    timeout_seconds: StrictFloat = Field(default=10.0, gt=0, le=300, description="Seconds one "
                                         "request may take.", examples=[30])

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_path(cls, value: str) -> str:
        if "://" in value or value.startswith("//"):
            raise ValueError(
                f"endpoint {value!r} is a URL; the host comes from the connection, so write "
                "only the path (e.g. '/hooks/exports') and put the host in the connection"
            )
        return _reject_escape("endpoint", value)


class EmailDestination(_Destination):
    """Mail through an SMTP relay; the artifact is attached up to ``max_attachment_bytes``."""

    type: Literal["email"] = Field("email", description=TYPE_HELP)
    conn_id: str = Field(default="smtp_default", pattern=CONN_ID, description=CONN_HELP,
                         examples=["smtp_default"])
    to: tuple[str, ...] = Field(min_length=1, max_length=MAX_AUTHORIZED, description="The "
                                "recipients: the company's owner or authorized addresses.",
                                examples=[["analytics@acme.example"]])
    # Above it the message links the file (pre-signed) instead; 25 MiB is what common relays
    # accept at all, and the attachment is read into memory.
    max_attachment_bytes: StrictInt = Field(
        default=10 * 1024 * 1024, ge=0, le=25 * 1024 * 1024, description="Files up to this "
        "size are attached; a larger file is linked instead.", examples=[5242880])

    @field_validator("to")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [address for address in value if not _EMAIL.fullmatch(address)]
        if bad:
            raise ValueError(
                f"to has invalid address(es) {bad!r}; write plain addresses like 'ops@example.com'"
            )
        return value


Destination = Annotated[
    LocalDestination
    | S3Destination
    | GcsDestination
    | SftpDestination
    | WebhookDestination
    | EmailDestination,
    Field(discriminator="type"),
]


def parse_destination(text: str) -> Destination:
    """A destination from its stored JSON (a delivery record's ``destination_config``); fields
    added since it was stored take their defaults."""
    return _ADAPTER.validate_json(text)


def select_destinations(
    configured: Sequence[Destination], requested_ids: Collection[str] | None
) -> tuple[Destination, ...]:
    """The configured destinations named by ``requested_ids`` (all of them when None).

    Trigger parameters may narrow delivery to some configured destinations; an id that is not
    configured raises :class:`ConfigError` rather than being treated as a new target.
    """
    ids = [destination.id for destination in configured]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(
            f"destination ids must be unique; {duplicates!r} appear more than once: rename one"
        )
    if requested_ids is None:
        return tuple(configured)
    unknown = sorted(set(requested_ids) - set(ids))
    if unknown:
        raise ConfigError(
            f"destination(s) {unknown!r} are not configured for this schedule; "
            f"configured: {sorted(ids)!r}. Add them to the schedule's config, not the trigger"
        )
    wanted = set(requested_ids)
    return tuple(destination for destination in configured if destination.id in wanted)


_ADAPTER: TypeAdapter[Destination] = TypeAdapter(Destination)


AREA_SCHEMES = {"s3": "s3", "gs": "gcs", "gcs": "gcs", "sftp": "sftp"}


def area_location(uri: str) -> tuple[str, ...]:
    """``s3://bucket/prefix``, ``gs://bucket/prefix`` or ``sftp://<conn id>/path`` as the
    comparable components :func:`location` gives a destination. :raises ValueError: the fix."""
    scheme, sep, rest = uri.partition("://")
    parts = [p for p in rest.split("/") if p]
    if not sep or scheme not in AREA_SCHEMES or not parts or ".." in parts or "." in parts:
        raise ValueError(f"{shown(uri)} is not an area; give s3://<bucket>[/<prefix>], "
                         "gs://<bucket>[/<prefix>] or sftp://<connection id>[/<path>]")
    return (AREA_SCHEMES[scheme], *parts)
