"""Connections belong to companies.

An Airflow connection carries credentials: another tenant's SFTP login, their webhook with its
signing secret, an internal service's token. A company file may therefore use a connection only
when ``defaults.yaml`` (the platform's file, not the company's) grants it::

    connections:
      acme_partner_sftp: {use: [sftp], companies: [acme]}
      smtp_default: {use: [email], companies: all}

``use`` says for what (``source`` or a destination type), ``companies`` for whom. A source listed
under ``sources:`` is granted to every company for ``source`` unless ``connections`` lists it
(then that entry rules): the source allowlist already is the platform's, and every query is
scoped to the company's rows. Checked when a file loads (every version of every export) and
again at run time: a render re-checks its captured source, a delivery its destination's
connection, against ``defaults.yaml`` as it is then — a revoked grant stops runs registered
before the change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from export_lib.config.destinations import Destination, LocalDestination
from export_lib.config.limits import MAX_AUTHORIZED, shown
from export_lib.config.messages import invalid
from export_lib.config.patterns import SLUG
from export_lib.config.timing import FrozenModel

Use = Literal["source", "s3", "gcs", "sftp", "webhook", "email"]


class ConnectionGrant(FrozenModel):
    """One ``connections:`` entry: what the connection may be used for, and by whom."""

    use: tuple[Use, ...] = Field(min_length=1, max_length=6, description="What the "
                                 "connection may be used for: source, or a destination type.",
                                 examples=[["sftp"]])
    companies: Literal["all"] | tuple[str, ...] = Field(
        description="all, or the ids of the companies that may use it.",
        examples=[["acme"]], json_schema_extra={"anyOf": [
            {"const": "all"}, {"type": "array", "items": {"type": "string",
                                                          "pattern": SLUG}}]})

    @field_validator("companies", mode="before")
    @classmethod
    def _all_or_ids(cls, value: object) -> object:
        if value == "all":
            return value
        ids = value if isinstance(value, list | tuple) else None
        if (not ids or len(ids) > MAX_AUTHORIZED
                or not all(isinstance(i, str) and re.fullmatch(SLUG, i) for i in ids)):
            raise invalid("companies", f"give 'all' or a list of company ids such as [acme] "
                          f"(got {shown(str(value))})")
        return tuple(ids)

    def allows(self, company: str) -> bool:
        return self.companies == "all" or company in self.companies


def connection_issue(conn_id: str, use: str, company: str,
                     grants: Mapping[str, ConnectionGrant], sources: Iterable[str]) -> str | None:
    """Why ``company`` may not use connection ``conn_id`` for ``use`` (None: it may)."""
    grant = grants.get(conn_id)
    if grant is None:
        if use == "source" and conn_id in set(sources):
            return None
        return (f"connection {conn_id!r} is not granted in defaults.yaml; a company file uses "
                f"only the connections 'connections:' there grants it (e.g. {conn_id}: {{use: "
                f"[{use}], companies: [{company}]}} if the connection is {company!r}'s)")
    if use not in grant.use:
        return (f"connection {conn_id!r} is granted for {', '.join(grant.use)} in defaults.yaml, "
                f"not for {use}")
    if not grant.allows(company):
        return (f"connection {conn_id!r} belongs to {', '.join(map(repr, grant.companies))} "
                f"(defaults.yaml 'connections'), not to {company!r}")
    return None


def destination_connection(dest: Destination) -> tuple[str, str] | None:
    """(connection id, use) of a destination; None for a local one (no connection)."""
    if isinstance(dest, LocalDestination):
        return None
    return dest.conn_id, dest.type


@dataclass(frozen=True)
class Allowlist:
    """What ``defaults.yaml`` allows today: the tables exports read (``sources``) and who may
    use which connection (``connections``) — re-checked when a registered run renders or
    delivers, so a withdrawal stops runs registered before it."""

    sources: Mapping[str, Any]  # name -> models.SourceConfig (models imports this module)
    connections: Mapping[str, ConnectionGrant]

    def connection_issue(self, conn_id: str, use: str, company: str) -> str | None:
        return connection_issue(conn_id, use, company, self.connections, self.sources)
