"""The pending upload URI an attempt records (export_lib/storage/multipart.py, ADR 0031)."""

from __future__ import annotations

from export_lib.storage.multipart import parse_pending, pending_uri


def test_a_pending_upload_uri_round_trips_any_upload_id():
    upload = "2~Ab+c/d=e&f?g"  # S3's ids are opaque: anything a query string must escape
    uri = pending_uri("exports", "p/acme/daily/a__v1.csv", upload, "0f3a")
    assert uri == ("s3://exports/p/acme/daily/a__v1.csv?upload=2~Ab%2Bc%2Fd%3De%26f%3Fg"
                   "&attempt=0f3a")
    assert parse_pending(uri) == ("p/acme/daily/a__v1.csv", upload, "0f3a")


def test_a_plain_object_uri_is_not_pending():
    assert parse_pending("s3://exports/p/.staging/0f3a.csv") is None
    assert parse_pending("file:///srv/exports/.staging/0f3a.csv") is None
