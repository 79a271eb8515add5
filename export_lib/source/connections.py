"""Connections from the environment, the way Airflow itself spells them.

A connection id ``demo_source`` is read from ``AIRFLOW_CONN_DEMO_SOURCE`` as a URI
(``postgresql://user:pw@host:5432/db``, ``sqlite:////abs/path.db``, ``s3://?endpoint_url=...``)
or as Airflow's JSON form (``{"conn_type": ..., "host": ..., "extra": {...}}``). Only the
environment is read, in the CLI and in Airflow tasks alike: connections created in the Airflow
UI or kept in a secrets backend are not consulted here (set them as ``AIRFLOW_CONN_*`` for now).

With nothing set, the embedded defaults of ``make run`` apply (see :func:`embedded_defaults`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from export_lib.errors import ConfigError


@dataclass(frozen=True)
class Connection:
    """A resolved connection. ``extra`` holds query-string / JSON extras as strings."""

    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def masked_uri(self) -> str:
        """The URI with the password replaced by ``***``: safe for logs and error messages."""
        auth = ""
        if self.login:
            auth = quote(self.login, safe="") + (":***" if self.password else "") + "@"
        host = self.host or ""
        port = f":{self.port}" if self.port else ""
        path = f"/{self.schema}" if self.schema else ""
        return f"{self.conn_type}://{auth}{host}{port}{path}"


def project_root() -> Path:
    """The working directory the embedded defaults are relative to (``EXPORT_HOME`` wins)."""
    return Path(os.environ.get("EXPORT_HOME", os.getcwd())).resolve()


def embedded_defaults() -> dict[str, str]:
    """Connection URIs used when the environment names none (the ``make run`` demo)."""
    home = Path(os.environ.get("AIRFLOW_HOME", project_root() / ".airflow")).resolve()
    return {"demo_source": f"sqlite:///{home / 'demo_source.db'}"}


def parse_connection(conn_id: str, value: str) -> Connection:
    """Parse Airflow's URI or JSON connection form. Raises ConfigError naming the variable."""
    var = env_var_name(conn_id)
    value = value.strip()
    if value.startswith("{"):
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{var}: not valid JSON ({exc.msg}); use a URI or Airflow's JSON form") from exc
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra else {}
        return Connection(
            conn_id=conn_id,
            conn_type=data.get("conn_type", ""),
            host=data.get("host"),
            port=int(data["port"]) if data.get("port") else None,
            login=data.get("login"),
            password=data.get("password"),
            schema=data.get("schema"),
            extra=dict(extra),
        )
    parts = urlsplit(value)
    if not parts.scheme:
        raise ConfigError(f"{var}: {value!r} is not a connection URI; expected e.g. postgresql://user:pw@host:5432/db")
    conn_type = parts.scheme.replace("-", "_")
    schema = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
    if conn_type == "sqlite":
        # sqlite:////abs/file.db keeps its absolute path; sqlite:///rel.db stays relative.
        schema = unquote(parts.path)[1:] if parts.path.startswith("//") else schema
    return Connection(
        conn_id=conn_id,
        conn_type=conn_type,
        host=unquote(parts.hostname) if parts.hostname else None,
        port=parts.port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=schema or None,
        extra=dict(parse_qsl(parts.query)),
    )


def env_var_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def get_connection(conn_id: str, environ: dict[str, str] | None = None) -> Connection:
    """Resolve ``conn_id`` from ``AIRFLOW_CONN_<ID>``, else the embedded defaults."""
    env = os.environ if environ is None else environ
    value = env.get(env_var_name(conn_id))
    if value is None:
        value = embedded_defaults().get(conn_id)
    if value is None:
        raise ConfigError(
            f"connection {conn_id!r} is not defined: set {env_var_name(conn_id)} to its URI "
            "(e.g. postgresql://user:pw@host:5432/db) or create the Airflow connection"
        )
    return parse_connection(conn_id, value)
