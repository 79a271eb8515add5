"""SFTP deliveries inside Airflow open their session through the SFTP provider's ``SFTPHook``, so
the connection's extras are read the Airflow way (key file, private key and passphrase, host
key, no_host_key_check), against the real SFTP server of the harness.

The connection is defined in the ``AIRFLOW_CONN_*`` JSON form, which the Task SDK reads outside
a task; ``airflow connections add`` (the metadata DB) on a real scheduler is in
tests/system/scheduler/test_connections.py."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import SftpDestination
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import *  # noqa: F403 - fixtures used by name
from tests.fixtures.delivery import ArtifactFactory
from tests.services.sftp import USER, SftpServer
from tests.support.delivery import run

CONN_ID = "acme_sftp_hook"


def _define(monkeypatch: pytest.MonkeyPatch, server: SftpServer, **extra: object) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({
        "conn_type": "sftp", "host": "127.0.0.1", "port": server.port, "login": USER,
        "extra": extra}))


def _deliver(engine: sa.Engine, artifact, path: str):
    from export_airflow.runtime.connections import airflow_resolver

    return run(engine, SftpDestination(id="customer-sftp", conn_id=CONN_ID, path=path),
               artifact, resolver=airflow_resolver())


def _other_host_key() -> str:
    import asyncssh

    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def test_the_airflow_connection_opens_the_session_through_sftphook(
        monkeypatch: pytest.MonkeyPatch, sftp_server: SftpServer):
    from export_airflow.runtime.connections import resolve_through_airflow

    _define(monkeypatch, sftp_server, key_file=str(sftp_server.client_key_file),
            no_host_key_check=False, host_key=sftp_server.host_public_key)
    conn = resolve_through_airflow(CONN_ID)
    assert set(conn.clients) == {"sftp"}
    session = conn.clients["sftp"]()
    try:
        assert type(session).__name__ == "SFTPClient"
        transport = session.get_channel().get_transport()
        assert transport.get_remote_server_key().get_base64() == (
            sftp_server.host_public_key.split()[1])  # the pinned key, checked
        assert transport.get_username() == USER and transport.is_authenticated()
    finally:
        session.get_channel().get_transport().close()


def test_key_file_and_pinned_host_key_deliver(
        monkeypatch: pytest.MonkeyPatch, sftp_server: SftpServer, sqlite_engine: sa.Engine,
        make_artifact: ArtifactFactory):
    _define(monkeypatch, sftp_server, key_file=str(sftp_server.client_key_file),
            no_host_key_check=False, host_key=sftp_server.host_public_key)
    path = f"/upload/{uuid.uuid4().hex[:8]}"
    artifact = make_artifact(64 * 1024)
    outcome = _deliver(sqlite_engine, artifact, path)
    assert (outcome.state, outcome.receipt) == ("acknowledged", f"size={artifact.bytes}")
    landed = sftp_server.root / path.lstrip("/")
    assert (landed / artifact.name).read_bytes() == artifact.local_path.read_bytes()
    assert (landed / f"{artifact.name}.sha256").read_text() == (
        f"{artifact.sha256}  {artifact.name}\n")


# Few KDF rounds keep the test fast (the hook tries each key type, each paying the derivation);
# bcrypt warns that so few are weak, which is the point here.
@pytest.mark.filterwarnings("ignore:.*bcrypt.kdf.. called with only:UserWarning")
def test_an_encrypted_private_key_with_its_passphrase_delivers(
        monkeypatch: pytest.MonkeyPatch, sftp_server: SftpServer, sqlite_engine: sa.Engine,
        make_artifact: ArtifactFactory):
    """``private_key`` + ``private_key_passphrase``: read by the SSH hook (export_lib's own
    session never knew the passphrase)."""
    import asyncssh

    key = asyncssh.read_private_key(sftp_server.client_key_file)  # the server's authorised key
    encrypted = key.export_private_key(passphrase="correct horse", rounds=4).decode()
    _define(monkeypatch, sftp_server, private_key=encrypted,
            private_key_passphrase="correct horse", host_key=sftp_server.host_public_key)
    path = f"/upload/{uuid.uuid4().hex[:8]}"
    assert _deliver(sqlite_engine, make_artifact(), path).state == "acknowledged"


def test_a_wrong_host_key_is_refused_naming_the_connection_the_host_and_the_fix(
        monkeypatch: pytest.MonkeyPatch, sftp_server: SftpServer, sqlite_engine: sa.Engine,
        make_artifact: ArtifactFactory):
    _define(monkeypatch, sftp_server, key_file=str(sftp_server.client_key_file),
            no_host_key_check=False, host_key=_other_host_key())
    path = f"/upload/{uuid.uuid4().hex[:8]}"
    port = sftp_server.port
    with pytest.raises(DeliveryError) as info:
        _deliver(sqlite_engine, make_artifact(), path)
    assert str(info.value).endswith(
        f"connection {CONN_ID!r}: the SFTP server 127.0.0.1:{port} presented a host key "
        "(ssh-ed25519) that does not match the connection's extra.host_key, so nothing was "
        "sent: either the server's key changed or something is posing as it. Confirm the key "
        f"with the server's administrator ('ssh-keyscan -p {port} 127.0.0.1' shows what it "
        "presents), then set extra.host_key to that '<type> <base64>' line")
    assert info.value.retryable is False
    assert not (sftp_server.root / path.lstrip("/")).exists()


def test_settings_the_provider_refuses_are_a_delivery_error_naming_the_connection(
        monkeypatch: pytest.MonkeyPatch, sftp_server: SftpServer, sqlite_engine: sa.Engine,
        make_artifact: ArtifactFactory):
    _define(monkeypatch, sftp_server, host_key=sftp_server.host_public_key,
            no_host_key_check=True)
    with pytest.raises(DeliveryError, match=(
            rf": connection {CONN_ID!r}: the SFTP provider refuses its settings \(Must check host "
            r"key when provided\); fix the connection's extras")):
        _deliver(sqlite_engine, make_artifact(), f"/upload/{uuid.uuid4().hex[:8]}")
