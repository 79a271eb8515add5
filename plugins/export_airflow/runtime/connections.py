"""Connections the Airflow way: the resolver the operators hand to export_lib.

:func:`airflow_resolver` looks a connection id up through the Task SDK
(``BaseHook.get_connection``), which covers connections made in the UI or with
``airflow connections add``, secrets backends and ``AIRFLOW_CONN_*``, in Airflow's own order.
An id Airflow does not know falls back to export_lib's environment resolver (the embedded
``make run`` defaults and its error message naming both ways to define it).

Where a provider hook gives what users already configure there, the resolved connection offers
the hook's client (``Connection.clients``):

* PostgreSQL: ``PostgresHook.get_conn()``, a psycopg 3 connection when the installed provider
  runs on psycopg 3 (it does beside SQLAlchemy 2; rendering needs it for COPY). IAM tokens and
  every libpq extra of the connection apply; otherwise export_lib connects from the fields.
* S3: ``S3Hook``'s boto3 session and client (role assumption, profiles, ``config_kwargs``;
  the connection's retry/timeout settings win over export_lib's defaults).
* GCS: ``GCSHook.get_conn()`` (key file, keyfile dict, ADC, impersonation). A connection with
  an ``endpoint`` extra (an emulator) is built by export_lib, which honours it.
* SFTP (conn type ``sftp`` or ``ssh``): ``SFTPHook.get_conn()``, the paramiko SFTP session the
  SFTP provider opens, so host key checking, key file, private key and passphrase, timeouts,
  ciphers and proxy command are read the Airflow way; export_lib keeps the upload protocol.

SMTP and webhook destinations use export_lib's own transports (the failure classification and
idempotency keys they need), fed with the fields resolved here; they read the SMTP/HTTP
providers' extras (``from_email``, ``disable_tls``, an ``https`` schema, ...). Resolution
happens in ``execute()`` only, never at parse time. Nothing here logs a password or extra: the
value objects hide them from ``repr`` (Airflow's own ``Connection`` repr shows the password, so
it never leaves this module).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from export_lib.errors import ConfigError, ConnectionLookupError
from export_lib.source.connections import Connection, ConnectionResolver, get_connection

# What our S3 clients add to botocore's user agent (the S3Hook's own says Airflow, the provider
# and the calling operator; a connection's config_kwargs.user_agent_extra replaces it).
USER_AGENT = "Caller/airflow-scheduled-exports"


def airflow_resolver() -> ConnectionResolver:
    """A resolver for one task: each id is looked up once, then reused."""
    return functools.cache(resolve_through_airflow)


def resolve_through_airflow(conn_id: str) -> Connection:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException, AirflowSecretsBackendAccessDenied

    try:
        found = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return get_connection(conn_id)  # embedded defaults, or a ConfigError naming the fix
    except AirflowSecretsBackendAccessDenied as exc:  # a retry gets the same answer
        raise ConfigError(
            f"connection {conn_id!r}: the secrets backend denied access ({exc}); grant the "
            "workers read access to it, then clear the task") from None
    except Exception as exc:  # noqa: BLE001 - API server / secrets backend unreachable
        raise ConnectionLookupError(
            f"connection {conn_id!r} could not be looked up in Airflow "
            f"({type(exc).__name__}); the task will retry") from None
    return from_airflow(found)


def from_airflow(found: Any) -> Connection:
    """export_lib's value object for an Airflow connection, with the hook clients it offers.

    A URI without ``scheme://`` (``reader:pw@db:5432/x`` in ``AIRFLOW_CONN_*``) is read by
    Airflow as type ``reader`` with no host and the rest of the password in ``schema``; that
    shape is refused here with a message showing none of it (issue 23)."""
    if (not found.host and "@" in (found.schema or "")
            and found.conn_type not in ("sqlite", "file")):  # their schema is a path
        raise ConfigError(
            f"connection {found.conn_id!r}: Airflow read it without a host and with an '@' in "
            "its schema, i.e. a URI without scheme:// (the value is not shown); write it as "
            "scheme://user:pw@host:port/db")
    conn_type = (found.conn_type or "").replace("-", "_")
    extra = dict(found.extra_dejson)  # registers the values with Airflow's log masker
    clients: dict[str, Any] = {}
    if conn_type in ("postgres", "postgresql") and _hook_speaks_psycopg3():
        clients["postgres"] = functools.partial(_postgres_client, found)
    elif conn_type == "aws":
        clients["s3"] = functools.partial(_s3_client, found.conn_id)
    elif conn_type == "google_cloud_platform" and not _gcp_extra(extra, "endpoint"):
        clients["gcs"] = functools.partial(_gcs_client, found.conn_id)
    elif conn_type in ("sftp", "ssh"):
        clients["sftp"] = functools.partial(_sftp_client, found.conn_id, "conn_timeout" in extra)
    return Connection(
        conn_id=found.conn_id, conn_type=conn_type, host=found.host or None,
        port=int(found.port) if found.port else None, login=found.login or None,
        password=found.password or None, schema=found.schema or None, extra=extra,
        clients=clients,
    )


def _gcp_extra(extra: dict[str, Any], name: str) -> Any:
    return extra.get(name) or extra.get(f"extra__google_cloud_platform__{name}")


def _hook_speaks_psycopg3() -> bool:
    from export_airflow.airflow_compat import postgres_hook_uses_psycopg3

    return postgres_hook_uses_psycopg3()


def _postgres_client(found: Any, **libpq_defaults: Any) -> Any:
    """``PostgresHook.get_conn()`` with export_lib's libpq defaults where the connection's
    extras set none."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook
    from airflow.sdk import Connection as AirflowConnection

    from export_lib.source.session import EXPORT_EXTRAS

    # export_lib's own extras (statement_timeout) are no libpq options: the hook would pass
    # them to psycopg.connect, which rejects them; export_lib applies them per session.
    extra = {**libpq_defaults, **{k: v for k, v in found.extra_dejson.items()
                                  if k not in EXPORT_EXTRAS}}
    copy = AirflowConnection(
        conn_id=found.conn_id, conn_type=found.conn_type, host=found.host,
        schema=found.schema, login=found.login, password=found.password, port=found.port,
        extra=json.dumps(extra))
    return PostgresHook(postgres_conn_id=found.conn_id, connection=copy).get_conn()


def _s3_client(conn_id: str, *, connect_timeout: float, read_timeout: float,
               max_attempts: int) -> Any:
    """A client of the S3Hook's session (the connection's credential chain, role, region and
    endpoint); the connection's ``config_kwargs`` override export_lib's defaults.

    Not ``hook.get_client_type()``: it names its caller in the user agent by
    ``inspect.stack()``, which resolves the source file of every frame against every loaded
    module: ~0.3 s of CPU per client in a task process, half of what an export task cost
    (bench/cluster.py, cProfile in the task processes, 4 Dec)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.config import Config

    from export_lib.storage.clients import share_loader

    hook = S3Hook(aws_conn_id=conn_id)
    ours = Config(connect_timeout=connect_timeout, read_timeout=read_timeout,
                  retries={"max_attempts": max_attempts, "mode": "standard"},
                  user_agent_extra=USER_AGENT)
    theirs = hook.conn_config.botocore_config
    session = hook.get_session()
    share_loader(session)
    return session.client("s3", endpoint_url=hook.conn_config.get_service_endpoint_url("s3"),
                          config=ours.merge(theirs) if theirs else ours, verify=hook.verify)


def _gcs_client(conn_id: str) -> Any:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    return GCSHook(gcp_conn_id=conn_id).get_conn()


# Without a conn_timeout extra the SSH hook would wait on a silent host for as long as the
# kernel does; this is what export_lib's own SFTP session allows.
SFTP_CONNECT_TIMEOUT = 15


def _sftp_client(conn_id: str, has_timeout: bool) -> Any:
    """``SFTPHook(conn_id).get_conn()``: a paramiko ``SFTPClient``. One connection attempt
    (the hook's default is three, seconds apart): a failed delivery is retried by the task,
    and a refused host key must fail at once. The hook refusing the connection's settings
    (both ``key_file`` and ``private_key``, ``no_host_key_check`` with a ``host_key``, an
    unsupported key type) is a DeliveryError naming the connection."""
    from airflow.providers.sftp.hooks.sftp import SFTPHook
    from airflow.sdk.exceptions import AirflowException

    from export_lib.errors import DeliveryError

    timeout = {} if has_timeout else {"conn_timeout": SFTP_CONNECT_TIMEOUT}
    try:
        hook = SFTPHook(ssh_conn_id=conn_id, conn_retry_attempts=1, **timeout)
    except (ValueError, TypeError, AirflowException) as exc:
        raise DeliveryError(
            f"connection {conn_id!r}: the SFTP provider refuses its settings ({exc}); fix the "
            "connection's extras (see docs/reference/connections.md, SFTP)") from None
    return hook.get_conn()
