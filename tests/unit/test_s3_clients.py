"""S3 clients read botocore's data once per process (export_lib.storage.clients.share_loader):
each boto3 session has a loader of its own, and every export task that opens a store or an S3
destination built one and read the S3 model, endpoints and partitions again (~60 ms of CPU)."""

from __future__ import annotations

import botocore.loaders
import pytest

from export_lib.source.connections import Connection
from export_lib.storage import clients

CONN = Connection(conn_id="s3", conn_type="aws", login="key", password="secret",
                  extra={"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"})


@pytest.fixture()
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files botocore reads from here on, in a process whose shared loader is new."""
    monkeypatch.setattr(clients, "_loader", None)
    seen: list[str] = []
    original = botocore.loaders.JSONFileLoader.load_file

    def load_file(self, file_path):
        seen.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", load_file)
    return seen


def test_the_second_client_reads_no_data_file(reads: list[str]):
    first = clients.s3_client(CONN)
    read_by_first = len(reads)
    second = clients.s3_client(CONN, connect_timeout=3)

    assert read_by_first > 0
    assert len(reads) == read_by_first
    assert (second.meta.endpoint_url, second.meta.region_name) == ("http://127.0.0.1:9",
                                                                   "eu-west-1")
    assert (first.meta.config.connect_timeout, second.meta.config.connect_timeout) == (10, 3)


def test_after_the_warm_up_a_client_reads_no_data_file(reads: list[str]):
    clients.warm_s3()
    assert reads  # the warm-up read them (the check can fail)
    reads.clear()

    client = clients.s3_client(CONN)

    assert reads == []
    assert client.meta.service_model.service_name == "s3"


def test_a_session_without_a_component_registry_keeps_its_own_loader(reads: list[str]):
    class Other:  # another SDK's session: nothing to share
        pass

    clients.share_loader(Other())
    assert clients._loader is None
