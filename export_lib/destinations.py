"""Destination configs (issue 6 owns delivery; these are the config shapes).

Credentials never live in YAML: a destination names an Airflow-style connection id whose URI
comes from ``AIRFLOW_CONN_<ID>`` (or an Airflow connection at the Airflow edge).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Destination(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")


class LocalDestination(_Destination):
    """A directory (relative paths resolve under the exports root)."""

    type: Literal["local"] = "local"
    path: str


class S3Destination(_Destination):
    type: Literal["s3"] = "s3"
    conn_id: str = "aws_default"
    bucket: str
    prefix: str = ""


class GcsDestination(_Destination):
    type: Literal["gcs"] = "gcs"
    conn_id: str = "google_cloud_default"
    bucket: str
    prefix: str = ""


class SftpDestination(_Destination):
    type: Literal["sftp"] = "sftp"
    conn_id: str = "sftp_default"
    path: str


class WebhookDestination(_Destination):
    type: Literal["webhook"] = "webhook"
    conn_id: str
    endpoint: str = ""
    timeout_seconds: float = 10.0


class EmailDestination(_Destination):
    type: Literal["email"] = "email"
    conn_id: str = "smtp_default"
    to: tuple[str, ...] = Field(min_length=1)
    max_attachment_bytes: int = 10 * 1024 * 1024


Destination = Annotated[
    LocalDestination
    | S3Destination
    | GcsDestination
    | SftpDestination
    | WebhookDestination
    | EmailDestination,
    Field(discriminator="type"),
]
