"""GCS clients from a connection's extras, as the Google provider names them (the provider is
not installed: it requires ray, google-ads and Vertex AI). Credentials are built, never used:
nothing here reaches Google."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from export_lib.errors import ConfigError
from export_lib.source.connections import Connection
from export_lib.storage.clients import gcs_client


def _service_account() -> dict[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {"type": "service_account", "project_id": "acme-exports", "private_key_id": "1",
            "private_key": pem, "client_email": "exporter@acme-exports.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}


def _conn(**extra: object) -> Connection:
    return Connection(conn_id="gcs_test", conn_type="google_cloud_platform", extra=extra)


def test_a_keyfile_dict_with_an_impersonation_chain_impersonates_its_last_account():
    client = gcs_client(_conn(
        keyfile_dict=json.dumps(_service_account()),
        extra__google_cloud_platform__impersonation_chain=(
            "hop@acme-exports.iam.gserviceaccount.com, "
            "writer@acme-exports.iam.gserviceaccount.com")))
    credentials = client._credentials
    assert type(credentials).__name__ == "Credentials"
    assert type(credentials).__module__ == "google.auth.impersonated_credentials"
    assert credentials.service_account_email == "writer@acme-exports.iam.gserviceaccount.com"
    assert credentials._delegates == ["hop@acme-exports.iam.gserviceaccount.com"]
    assert credentials._source_credentials.service_account_email == (
        "exporter@acme-exports.iam.gserviceaccount.com")
    assert client.project == "acme-exports"  # the key file's project, none in the extras


def test_is_anonymous_needs_no_credentials_at_all():
    client = gcs_client(_conn(is_anonymous="true", project="open-data"))
    assert type(client._credentials).__name__ == "AnonymousCredentials"
    assert client.project == "open-data"


def test_an_impersonation_chain_naming_no_account_is_refused_naming_the_extra():
    with pytest.raises(ConfigError, match=r"connection 'gcs_test': extra impersonation_chain "
                                          r"' , ' names no service account; set it to"):
        gcs_client(_conn(keyfile_dict=_service_account(), impersonation_chain=" , "))
