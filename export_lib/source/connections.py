"""Connections: the library's value object, and the resolver seam that produces it.

Every export_lib function that opens a source, an artifact store or a destination takes a
``resolver``: a callable ``conn_id -> Connection`` (:data:`ConnectionResolver`). The default,
:func:`env_resolver`, reads ``AIRFLOW_CONN_<ID>`` the way Airflow itself spells it: a URI
(``postgresql://user:pw@host:5432/db``, ``sqlite:////abs/path.db``, ``aws://?endpoint_url=...``)
or Airflow's JSON form (``{"conn_type": ..., "host": ..., "extra": {...}}``); with nothing set,
the embedded defaults of ``make run`` apply (see :func:`embedded_defaults`). That is all
``exportctl`` needs. The Airflow edge passes its own resolver (``export_airflow.runtime.connections``),
which asks Airflow: connections made in the UI or with ``airflow connections add``, secrets
backends and ``AIRFLOW_CONN_*`` alike.

A resolver may also hand over ready-made clients in :attr:`Connection.clients` (e.g. built by
Airflow's provider hooks, with the credential chain, session and retry settings users already
configured there); export_lib uses such a client when present and otherwise builds its own from
the connection's fields.

A Connection never shows its password, extras or clients in ``repr`` (extras hold tokens and
keys); log :meth:`Connection.masked_uri` instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from export_lib import settings
from export_lib.errors import ConfigError
from export_lib.masking import mask_uri, scrub

# Extras that configure, rather than authenticate (shown by name in repr, never by value).
_SECRET_HINTS = ("token", "secret", "password", "passwd", "key", "credential", "auth", "sig")


@dataclass(frozen=True, repr=False)
class Connection:
    """A resolved connection. ``extra`` holds query-string / JSON extras (strings from a URI;
    JSON values from Airflow's JSON form or an Airflow connection).

    ``clients`` maps a client kind to a factory the resolver offers, called with keyword
    defaults that the factory applies where the connection sets nothing itself:

    * ``"postgres"``: ``(**libpq_defaults) -> psycopg.Connection`` (psycopg 3, not yet in a
      transaction);
    * ``"s3"``: ``(connect_timeout=, read_timeout=, max_attempts=) -> boto3 S3 client``;
    * ``"gcs"``: ``() -> google.cloud.storage.Client``.

    ``repr`` shows neither the password, the path nor any ``extra`` value (only extra names).
    """

    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    clients: Mapping[str, Callable[..., Any]] = field(default_factory=dict, repr=False,
                                                      compare=False)

    def __repr__(self) -> str:
        return (f"Connection(conn_id={self.conn_id!r}, location={self.masked_uri()!r}, "
                f"login={self.login!r}, password={'***' if self.password else None!r}, "
                f"extra_keys={sorted(self.extra)!r})")

    def masked_uri(self) -> str:
        """Scheme, host and port only (:func:`export_lib.masking.mask_uri`): safe anywhere."""
        if self.conn_type in ("sqlite", "file") and not self.host:
            return mask_uri(f"{self.conn_type}:///{self.schema or ''}")
        scheme, host = self.conn_type, self.host or ""
        if "://" in host:  # HttpHook's host may carry its own scheme and base path
            scheme, host = host.split("://", 1)
            host = host.split("/", 1)[0].rsplit("@", 1)[-1]
        elif self.conn_type == "http" and self.schema in ("http", "https"):
            scheme = self.schema  # HttpHook: schema is the scheme
        host = quote(host, safe=".-:[]")
        shown = mask_uri(f"{scheme}://{host}{f':{self.port}' if self.port else ''}")
        endpoint = self.extra.get("endpoint_url") or self.extra.get("endpoint")
        if not self.host and isinstance(endpoint, str) and endpoint:
            shown += f" (endpoint {mask_uri(endpoint)})"
        return shown

    def secret_values(self) -> list[str]:
        """Every value of this connection that must never be shown: the password, secret-looking
        extras, and (for http connections) the path, which often carries a webhook's secret."""
        values = [self.password or ""]
        values += [str(v) for k, v in self.extra.items()
                   if any(hint in k.lower() for hint in _SECRET_HINTS) and v is not None]
        if self.conn_type in ("http", "https") and self.schema not in (None, "", "http", "https"):
            values += [self.schema, quote(self.schema, safe="/")]
        if self.host and "://" in self.host:  # HttpHook's https://host/base: the base path
            parts = urlsplit(self.host)
            base = parts.path.strip("/")
            values += [base, quote(base, safe="/")] if base else []
            values += [parts.password or ""]
        return [v for v in values if v]

    def scrub(self, text: object) -> str:
        """``text`` with this connection's secret values replaced by ``***``."""
        return scrub(str(text), self.secret_values())


def project_root() -> Path:
    """The working directory the embedded defaults are relative to (``EXPORT_HOME`` wins)."""
    return settings.export_home()


def embedded_defaults() -> dict[str, str]:
    """Connection URIs used when the environment names none (the ``make run`` demo)."""
    home = (settings.airflow_home() or project_root() / ".airflow").resolve()
    return {"demo_source": f"sqlite:///{home / 'demo_source.db'}"}


def parse_connection(conn_id: str, value: str) -> Connection:
    """Parse Airflow's URI or JSON connection form. Raises ConfigError naming the variable.

    A value that cannot be parsed is never quoted in the error, not even in part: it is a
    credential store, and a URI without its scheme (``user:pw@host``) is all password to a
    reader. The message gives its length and what is wrong with its shape instead."""
    value = value.strip()
    try:
        return _parse(conn_id, value)
    except ConfigError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise _unusable(conn_id, value, _shape(exc)) from None


def _unusable(conn_id: str, value: str, what: str) -> ConfigError:
    var = env_var_name(conn_id)
    return ConfigError(f"connection {conn_id!r} ({var}): the value ({len(value)} characters, not "
                       f"shown) is {what}; write "
                       "a URI such as postgresql://user:pw@host:5432/db or Airflow's JSON form "
                       '{"conn_type": ..., "host": ...}')


def _shape(exc: BaseException) -> str:
    """What is wrong, without any part of the value (exception texts quote it)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
    text = str(exc)
    if "Port" in text or "port" in text:
        return "a connection whose port is not a number from 1 to 65535"
    if "IPv6" in text:
        return "a URI with a malformed IPv6 host"
    return f"not a connection URI or JSON object ({type(exc).__name__})"


def _parse(conn_id: str, value: str) -> Connection:
    if value.startswith("{"):
        data = json.loads(value)
        if not isinstance(data, dict):
            raise _unusable(conn_id, value, "JSON but not an object")
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra else {}
        if not isinstance(extra, dict):
            raise _unusable(conn_id, value, "JSON whose 'extra' is not an object")
        text = {k: data.get(k) for k in ("conn_type", "host", "login", "password", "schema")}
        if any(v is not None and not isinstance(v, str) for v in text.values()):
            raise _unusable(conn_id, value, "JSON whose conn_type/host/login/password/schema are "
                            "not all text")
        return Connection(
            conn_id=conn_id,
            conn_type=text["conn_type"] or "",
            host=text["host"],
            port=_port(data.get("port")),
            login=text["login"],
            password=text["password"],
            schema=text["schema"],
            extra=dict(extra),
        )
    parts = urlsplit(value)
    if not parts.scheme or f"{parts.scheme}://" not in value:
        # ``user:pw@host`` parses as scheme ``user``: every connection URI has ``scheme://``.
        raise _unusable(conn_id, value, "not a connection URI (no scheme://)")
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


def _port(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ValueError("port is not a number") from None
    if isinstance(value, bool) or not 0 < port <= 65535:
        raise ValueError("port out of range")
    return port


def env_var_name(conn_id: str) -> str:
    return settings.connection_var(conn_id)


def get_connection(conn_id: str, environ: Mapping[str, str] | None = None) -> Connection:
    """Resolve ``conn_id`` from ``AIRFLOW_CONN_<ID>``, else the embedded defaults."""
    value = settings.connection_uri(conn_id, environ)
    if value is None:
        value = embedded_defaults().get(conn_id)
    if value is None:
        raise ConfigError(
            f"connection {conn_id!r} is not defined: set {env_var_name(conn_id)} to its URI "
            "(e.g. postgresql://user:pw@host:5432/db), or in Airflow create it with "
            f"'airflow connections add {conn_id} --conn-uri ...' (or in the UI)"
        )
    return parse_connection(conn_id, value)


ConnectionResolver = Callable[[str], Connection]
"""``conn_id -> Connection``; raises ConfigError for an unknown id (retryable ExportError when
the store behind it is unreachable)."""


def env_resolver(conn_id: str) -> Connection:
    """The default resolver: ``AIRFLOW_CONN_<ID>`` of this process, else the embedded defaults."""
    return get_connection(conn_id)


def resolve(conn_id: str, resolver: ConnectionResolver | None = None) -> Connection:
    """``conn_id`` through ``resolver`` (the environment when None)."""
    return (resolver or env_resolver)(conn_id)
