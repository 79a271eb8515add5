"""SFTP delivery against a real SSH/SFTP server: temp name + rename, drops, auth, host keys."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import SftpDestination
from export_lib.delivery import DeliverableArtifact, delivery_id
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.sftp import CuttingProxy, SftpServer
from tests.support.delivery import RUN_KEY, only_record, run


@pytest.fixture()
def upload_dir(sftp_server: SftpServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP", sftp_server.connection_uri())
    return f"/upload/{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def proxy(sftp_server: SftpServer) -> Iterator[CuttingProxy]:
    cutting = CuttingProxy(target_port=sftp_server.port).start()
    yield cutting
    cutting.stop()


def _listing(sftp_server: SftpServer, path: str) -> dict[str, int]:
    directory = sftp_server.root / path.lstrip("/")
    return {p.name: p.stat().st_size for p in directory.iterdir()} if directory.exists() else {}


def _sidecar_size(artifact: DeliverableArtifact) -> int:
    return len(f"{artifact.sha256}  {artifact.name}\n")


def test_sftp_delivers_once_under_the_final_name_with_a_sidecar(
    ledger_engine: sa.Engine, sftp_server: SftpServer, upload_dir: str, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact(256 * 1024)
    destination = SftpDestination(id="customer-sftp", conn_id="acme_sftp", path=upload_dir)
    first = run(ledger_engine, destination, artifact)
    final = sftp_server.root / upload_dir.lstrip("/") / artifact.name
    stamp = final.stat().st_ino, final.stat().st_mtime_ns
    second = run(ledger_engine, destination, artifact)
    assert (first.state, first.receipt, second.already_delivered) == (
        "acknowledged", f"size={artifact.bytes}", True)
    assert (final.stat().st_ino, final.stat().st_mtime_ns) == stamp
    assert final.read_bytes() == artifact.local_path.read_bytes()
    assert _listing(sftp_server, upload_dir) == {artifact.name: artifact.bytes,
                                                 f"{artifact.name}.sha256": _sidecar_size(artifact)}


def test_connection_dropped_mid_upload_never_shows_a_partial_final_file(
    ledger_engine: sa.Engine, sftp_server: SftpServer, proxy: CuttingProxy, upload_dir: str,
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    artifact = make_artifact(1024 * 1024)
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP", sftp_server.connection_uri(port=proxy.port))
    destination = SftpDestination(id="customer-sftp", conn_id="acme_sftp", path=upload_dir)
    proxy.cut_after = 300 * 1024  # handshake + ~a quarter of the file
    with pytest.raises(DeliveryError, match="attempt 1 failed, will retry until") as info:
        run(ledger_engine, destination, artifact)
    assert info.value.retryable is True and proxy.cuts == 1
    temp = f".{artifact.name}.part-{delivery_id(RUN_KEY, 1, 'customer-sftp')}"
    after_drop = _listing(sftp_server, upload_dir)
    assert artifact.name not in after_drop
    assert set(after_drop) == {temp} and 0 < after_drop[temp] < artifact.bytes

    proxy.cut_after = None
    outcome = run(ledger_engine, destination, artifact)
    assert (outcome.state, outcome.attempts) == ("acknowledged", 2)
    assert _listing(sftp_server, upload_dir) == {artifact.name: artifact.bytes,
                                                 f"{artifact.name}.sha256": _sidecar_size(artifact)}
    final = sftp_server.root / upload_dir.lstrip("/") / artifact.name
    assert final.read_bytes() == artifact.local_path.read_bytes()
    assert [h["outcome"] for h in only_record(ledger_engine)["history"]] == ["retryable_failure",
                                                                       "delivered"]


def test_file_stored_but_unacknowledged_is_verified_not_rewritten(
    sqlite_engine: sa.Engine, sftp_server: SftpServer, upload_dir: str,
    make_artifact: ArtifactFactory,
) -> None:
    artifact = make_artifact()
    directory = sftp_server.root / upload_dir.lstrip("/")
    directory.mkdir(parents=True)
    (directory / artifact.name).write_bytes(artifact.local_path.read_bytes())  # no sidecar yet
    inode = (directory / artifact.name).stat().st_ino
    outcome = run(sqlite_engine, SftpDestination(id="customer-sftp", conn_id="acme_sftp",
                                                 path=upload_dir), artifact)
    assert (outcome.already_present, outcome.receipt) == (True, f"present size={artifact.bytes}")
    assert (directory / artifact.name).stat().st_ino == inode
    assert (directory / f"{artifact.name}.sha256").read_text().split()[0] == artifact.sha256


def test_key_authentication(
    sqlite_engine: sa.Engine, sftp_server: SftpServer, upload_dir: str,
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP", sftp_server.connection_uri(key=True))
    outcome = run(sqlite_engine, SftpDestination(id="customer-sftp", conn_id="acme_sftp",
                                                 path=upload_dir), make_artifact())
    assert outcome.state == "acknowledged"


def test_wrong_password_is_permanent_and_masked(
    sqlite_engine: sa.Engine, sftp_server: SftpServer, upload_dir: str,
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP", sftp_server.connection_uri(password="guess"))
    with pytest.raises(DeliveryError, match=r"connection 'acme_sftp' \(sftp://"
                       r"127\.0\.0\.1:\d+\) was refused: SSH authentication failed") as info:
        run(sqlite_engine, SftpDestination(id="customer-sftp", conn_id="acme_sftp",
                                           path=upload_dir), make_artifact())
    assert info.value.retryable is False and "guess" not in str(info.value)
    assert (only_record(sqlite_engine)["state"], only_record(sqlite_engine)["attempts"]) == (
        "exhausted", 1)


def test_unexpected_host_key_is_permanent(
    sqlite_engine: sa.Engine, sftp_server: SftpServer, upload_dir: str,
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    import asyncssh

    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    uri = sftp_server.connection_uri().split("?")[0]
    from urllib.parse import quote

    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP", f"{uri}?host_key={quote(other, safe='')}")
    with pytest.raises(DeliveryError, match=r"the SFTP server 127\.0\.0\.1:\d+ presented a host "
                       r"key \(ssh-ed25519\) that does not match the connection's extra\.host_key"
                       ) as info:
        run(sqlite_engine, SftpDestination(id="customer-sftp", conn_id="acme_sftp",
                                           path=upload_dir), make_artifact())
    assert info.value.retryable is False
    assert _listing(sftp_server, upload_dir) == {}
