"""Delivery test fixtures: real servers for every destination type, and ledgers on both DBs.

The S3 and GCS servers are session fixtures of ``tests/conftest.py`` (the ledger tests use them
too). Servers start once per session and stop even when tests fail. Each test gets fresh ledger
tables (an SQLAlchemy Engine): an SQLite file, or a fresh schema on the session PostgreSQL
(``ledger_engine`` is parametrised over both where a test says so).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from export_lib.delivery import DeliverableArtifact, delivery_metadata
from tests.services.http import WebhookReceiver, start_receiver, stop_receiver
from tests.services.postgres import PostgresServer
from tests.services.sftp import SftpServer, start_sftp, stop_sftp
from tests.services.smtp import SmtpRelay, start_smtp, stop_smtp
from tests.services.tls import ServerCertificates, make_certificates


@pytest.fixture(scope="session")
def sftp_server() -> Iterator[SftpServer]:
    server = start_sftp()
    try:
        yield server
    finally:
        stop_sftp(server)


@pytest.fixture(scope="session")
def webhook_server() -> Iterator[WebhookReceiver]:
    receiver = start_receiver()
    try:
        yield receiver
    finally:
        stop_receiver(receiver)


@pytest.fixture()
def webhook(webhook_server: WebhookReceiver) -> WebhookReceiver:
    webhook_server.state.reset()
    return webhook_server


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[SmtpRelay]:
    relay = start_smtp()
    try:
        yield relay
    finally:
        stop_smtp(relay)


@pytest.fixture()
def smtp(smtp_server: SmtpRelay) -> SmtpRelay:
    smtp_server.reset()
    return smtp_server


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def smtp_tls_server(certificates: ServerCertificates) -> Iterator[SmtpRelay]:
    """A relay that requires STARTTLS, with a certificate from a private test CA."""
    relay = start_smtp(certificates.server_context())
    try:
        yield relay
    finally:
        stop_smtp(relay)


@pytest.fixture(scope="session")
def https_webhook_server(certificates: ServerCertificates) -> Iterator[WebhookReceiver]:
    receiver = start_receiver(certificates.server_context())
    try:
        yield receiver
    finally:
        stop_receiver(receiver)


@pytest.fixture()
def sqlite_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'ledger_engine.db'}")
    delivery_metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture()
def pg_engine(postgres_server: PostgresServer, pg_schema: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_server.sqlalchemy_url,
                              connect_args={"options": f"-csearch_path={pg_schema}"})
    delivery_metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_engine(request: pytest.FixtureRequest) -> sa.Engine:
    """The delivery tables' engine on SQLite (embedded demo) and on PostgreSQL (production).
    (Named *_engine: the ledger fixtures of tests/ledger return a ``Ledger``, these an Engine.)"""
    name = "sqlite_engine" if request.param == "sqlite" else "pg_engine"
    return request.getfixturevalue(name)


ArtifactFactory = Callable[..., DeliverableArtifact]


@pytest.fixture()
def make_artifact(tmp_path: Path) -> ArtifactFactory:
    """A published artifact file of ``size`` bytes (deterministic content per ``seed``)."""

    def make(size: int = 4096, *, version: int = 1, seed: str = "a",
             name: str | None = None) -> DeliverableArtifact:
        name = name or f"acme_daily-spend_2026-03-28_v{version}.csv"
        published = tmp_path / "published" / seed
        published.mkdir(parents=True, exist_ok=True)
        path = published / name
        line = f"2026-03-28,{seed},12.50\n".encode()
        path.write_bytes((line * (size // len(line) + 1))[:size])
        data = path.read_bytes()
        return DeliverableArtifact(
            local_path=path, name=name, version=version,
            sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
            rows=data.count(b"\n"), format="csv",
            uri=f"s3://exports-internal/acme/daily-spend/{name}",
            window_start=datetime(2026, 3, 28, tzinfo=UTC),
            window_end=datetime(2026, 3, 29, tzinfo=UTC),
            manifest={"company": "acme", "schedule": "daily-spend"},
        )

    return make
