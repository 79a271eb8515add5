"""S3 and GCS clients built from connections — one builder each, shared by the artifact stores
(``storage_cloud``) and the delivery transports, so both honour the same connection fields.

* S3: ``aws://KEY:SECRET@/?endpoint_url=…&region_name=…`` (extras ``aws_access_key_id``,
  ``aws_secret_access_key``, ``aws_session_token`` also accepted).
* GCS: ``google-cloud-platform://?project=p`` with ``key_path`` or ``keyfile_dict`` for a
  service account (else Application Default Credentials), ``impersonation_chain`` (a service
  account, or a comma-separated chain whose last is impersonated), ``is_anonymous``, or
  ``endpoint`` for an emulator (anonymous credentials): the Google provider's connection
  extras, read here with google-auth, so the product needs no Google provider (it requires
  ~100 packages: ray, google-ads, Vertex AI). Airflow's
  ``extra__google_cloud_platform__<name>`` spellings are accepted too.

A connection whose resolver offers a ready-made client (``conn.clients["s3"]``, from Airflow's
S3Hook) gets that client instead: its credential chain, session and retry settings are the
ones the user configured there.

Every S3 client in a process reads botocore's data (the S3 model, endpoints, partitions: ~60 ms
of CPU of JSON) through one shared loader (:func:`share_loader`): a new boto3 session has a
loader of its own and would read them again, and each export task opens a session or two.
``export_airflow.deploy.preload`` fills the loader before the worker forks its tasks (:func:`warm_s3`).

**Retries** (``EXPORT_OBJECT_STORE_MAX_ATTEMPTS``, 5): S3 and GCS answer 503 SlowDown, 500 or
429 under load, and connections get reset. Each request is tried that many times with
exponential backoff and full jitter, by the SDKs themselves: botocore's ``standard`` mode
(every S3 call, the multipart parts and completions included), and for GCS a
``google.api_core`` retry (:func:`gcs_retry`) passed to every call, conditional writes
(``if_generation_match``) included: a create-only write is safe to repeat, its repeat after a
lost answer is refused 412 and the caller finds its own object. Past that the task fails and
Airflow's retry takes over, fenced by the ledger as any retry.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from export_lib.errors import ConfigError
from export_lib.source.connections import Connection


def s3_client(conn: Connection, *, connect_timeout: float = 10, read_timeout: float = 120,
              max_attempts: int | None = None, signature_version: str | None = None) -> Any:
    if max_attempts is None:
        from export_lib import settings

        max_attempts = settings.object_store_max_attempts()
    if "s3" in conn.clients:  # the resolver's client (its own signing config applies)
        return conn.clients["s3"](connect_timeout=connect_timeout, read_timeout=read_timeout,
                                  max_attempts=max_attempts)
    import boto3
    from botocore.config import Config

    extra = conn.extra
    session = boto3.session.Session()
    share_loader(session)
    return session.client(
        "s3",
        endpoint_url=extra.get("endpoint_url") or None,
        region_name=extra.get("region_name") or None,
        aws_access_key_id=conn.login or extra.get("aws_access_key_id") or None,
        aws_secret_access_key=conn.password or extra.get("aws_secret_access_key") or None,
        aws_session_token=extra.get("aws_session_token") or None,
        config=Config(connect_timeout=connect_timeout, read_timeout=read_timeout,
                      retries={"max_attempts": max_attempts, "mode": "standard"},
                      signature_version=signature_version),
    )


_loader: Any = None
_loader_lock = threading.Lock()


def share_loader(session: Any) -> None:
    """Have ``session`` (boto3's, or botocore's) read botocore's data through this process's
    one loader (the data path it honours, ``AWS_DATA_PATH``, is the process's). A session
    without botocore's component registry (another boto3) keeps its own."""
    global _loader
    core = getattr(session, "_session", session)
    if not hasattr(core, "register_component"):
        return
    with _loader_lock:
        if _loader is None:
            import botocore.session

            _loader = botocore.session.Session().get_component("data_loader")
        core.register_component("data_loader", _loader)


def warm_s3() -> None:
    """Load what an S3 client reads into the shared loader (no request, no credentials
    looked up): called before a worker forks, so its tasks find it loaded."""
    import boto3

    session = boto3.session.Session(aws_access_key_id="preload", aws_secret_access_key="preload",
                                    region_name="us-east-1")
    share_loader(session)
    session.client("s3")


GCS_BACKOFF = (0.5, 8.0)  # the first backoff and the cap (doubling, jittered by api_core)


def gcs_retry(max_attempts: int | None = None) -> Any:
    """google-cloud-storage's own retry (its predicate: 429, 500, 502, 503, 504, reset and
    refused connections) bounded like S3's: its deadline is the sum of ``max_attempts - 1``
    backoffs (0.5 s doubling, capped at 8 s), so about that many tries; 1: no retry."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    if max_attempts is None:
        from export_lib import settings

        max_attempts = settings.object_store_max_attempts()
    if max_attempts <= 1:
        return None
    first, cap = GCS_BACKOFF
    deadline = sum(min(first * 2 ** n, cap) for n in range(max_attempts - 1))
    return DEFAULT_RETRY.with_delay(initial=first, maximum=cap, multiplier=2.0
                                    ).with_timeout(deadline + first)


def gcs_extra(conn: Connection, name: str) -> Any:
    return conn.extra.get(name) or conn.extra.get(f"extra__google_cloud_platform__{name}")


def gcs_client(conn: Connection) -> Any:
    if "gcs" in conn.clients:
        return conn.clients["gcs"]()
    from google.cloud import storage

    project = gcs_extra(conn, "project") or None
    endpoint = gcs_extra(conn, "endpoint")
    if endpoint or _true(gcs_extra(conn, "is_anonymous")):
        from google.auth.credentials import AnonymousCredentials

        options = {"api_endpoint": endpoint} if endpoint else None
        return storage.Client(project=project or ("emulator" if endpoint else "anonymous"),
                              credentials=AnonymousCredentials(),
                              client_options=options)
    key_path, keyfile = gcs_extra(conn, "key_path"), gcs_extra(conn, "keyfile_dict")
    credentials = None
    if key_path or keyfile:
        from google.oauth2 import service_account

        info = json.loads(keyfile) if isinstance(keyfile, str) else keyfile
        credentials = (service_account.Credentials.from_service_account_file(key_path)
                       if key_path else service_account.Credentials.from_service_account_info(info))
        project = project or credentials.project_id
    chain = gcs_extra(conn, "impersonation_chain")
    if chain:
        credentials = _impersonated(conn, credentials, chain)
    return storage.Client(project=project, credentials=credentials)


def _true(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _impersonated(conn: Connection, source: Any, chain: Any) -> Any:
    """The last account of ``chain`` (a list, or a comma-separated string, as the Google
    provider reads it) impersonated through the others, from ``source`` (None: ADC)."""
    import google.auth
    from google.auth import impersonated_credentials

    accounts = [a.strip() for a in (chain.split(",") if isinstance(chain, str) else chain)
                if a.strip()]
    if not accounts:
        raise ConfigError(f"connection {conn.conn_id!r}: extra impersonation_chain {chain!r} "
                          "names no service account; set it to an account e-mail (or a "
                          "comma-separated chain) or remove it")
    scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    if source is None:
        source, _ = google.auth.default(scopes=scopes)
    return impersonated_credentials.Credentials(
        source_credentials=source, target_principal=accounts[-1], delegates=accounts[:-1],
        target_scopes=scopes)
