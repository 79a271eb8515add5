"""Destination config validation: escapes and foreign hosts fail at load, naming the field."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from export_lib.config.destinations import (
    Destination,
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
    WebhookDestination,
    select_destinations,
)
from export_lib.config.messages import issues_from_validation
from export_lib.errors import ConfigError

ADAPTER: TypeAdapter[Destination] = TypeAdapter(Destination)


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        pytest.param({"id": "d", "type": "local", "path": "../other"}, "path",
                     r"path '\.\./other' escapes its base with a '\.\.' segment",
                     id="local-dotdot"),
        pytest.param({"id": "d", "type": "local", "path": "acme/../../etc"}, "path",
                     r"escapes its base", id="local-inner-dotdot"),
        pytest.param({"id": "d", "type": "s3", "bucket": "acme-in", "prefix": "in/../x"},
                     "prefix", r"prefix 'in/\.\./x' escapes its base", id="s3-dotdot"),
        pytest.param({"id": "d", "type": "s3", "bucket": "acme-in", "prefix": "/in"},
                     "prefix", r"prefix '/in' is absolute.*\(e\.g\. 'in'\)", id="s3-absolute"),
        pytest.param({"id": "d", "type": "gcs", "bucket": "acme-in", "prefix": "a//b"},
                     "prefix", r"empty segment", id="gcs-double-slash"),
        pytest.param({"id": "d", "type": "sftp", "path": "/upload/..\\x"}, "path",
                     r"escapes its base", id="sftp-backslash-dotdot"),
        pytest.param({"id": "d", "type": "webhook", "conn_id": "hook",
                      "endpoint": "https://evil.example/x"}, "endpoint",
                     r"endpoint 'https://evil\.example/x' is a URL; the host comes from the "
                     r"connection", id="webhook-foreign-host"),
        pytest.param({"id": "d", "type": "webhook", "conn_id": "hook", "endpoint": "/a/../b"},
                     "endpoint", r"escapes its base", id="webhook-dotdot"),
        pytest.param({"id": "d", "type": "email", "to": ["not-an-address"]}, "to",
                     r"to has invalid address\(es\) \['not-an-address'\]", id="email-address"),
        pytest.param({"id": "d", "type": "email", "to": ["a@b.example"],
                      "max_attachment_bytes": 10**9}, "max_attachment_bytes",
                     r"less than or equal to 26214400", id="email-attachment-cap"),
        pytest.param({"id": "d", "type": "webhook", "conn_id": "hook", "timeout_seconds": 0},
                     "timeout_seconds", r"greater than 0", id="webhook-timeout"),
    ],
)
def test_bad_destination_is_rejected_naming_the_field(
    config: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        ADAPTER.validate_python(config)
    (error,) = info.value.errors()
    assert error["loc"][-1] == field


@pytest.mark.parametrize(("model", "config", "line"), [
    pytest.param(S3Destination, {"id": "d", "bucket": "Bad_Bucket"},
                 "acme.yaml: bucket: 'Bad_Bucket' is not a valid bucket name: use 3 to 63 "
                 "lower-case letters, digits, '.' or '-', starting and ending with a letter or "
                 "digit, as S3 requires (e.g. exports-bucket)", id="s3-bucket-name"),
    pytest.param(GcsDestination, {"id": "d", "bucket": "x"},
                 "acme.yaml: bucket: 'x' is not a valid bucket name: use 3 to 222 lower-case "
                 "letters, digits, '.', '-' or '_', starting and ending with a letter or digit "
                 "(e.g. exports-bucket)", id="gcs-bucket-too-short"),
    pytest.param(LocalDestination, {"id": "-d", "path": "x"},
                 "acme.yaml: id: '-d' is not a valid id: use lower-case letters, digits, '-' or "
                 "'_', starting with a letter or digit (e.g. acme-dir)", id="destination-id"),
    pytest.param(WebhookDestination, {"id": "d", "conn_id": ".hook"},
                 "acme.yaml: conn_id: '.hook' is not a valid connection id: use letters, digits, "
                 "'_', '.' or '-', starting with a letter, digit or '_' (e.g. acme_webhook)",
                 id="webhook-conn-id"),
    pytest.param(WebhookDestination, {"id": "d"},
                 "acme.yaml: conn_id: required field is missing; add it, e.g. conn_id: acme_webhook",
                 id="webhook-conn-id-missing"),
])
def test_a_pattern_or_missing_field_is_said_in_words(model, config, line) -> None:
    """What a config author reads (the loader's formatter): the rule and an example, never
    the regular expression pydantic reports."""
    with pytest.raises(ValidationError) as info:
        model.model_validate(config)
    assert issues_from_validation("acme.yaml", model, info.value) == [line]


def test_valid_destinations_keep_their_values() -> None:
    local = ADAPTER.validate_python({"id": "nas", "type": "local", "path": "/mnt/acme"})
    s3 = ADAPTER.validate_python({"id": "bucket", "type": "s3", "bucket": "acme-in",
                                  "prefix": "reports/daily/"})
    assert isinstance(local, LocalDestination) and local.path == "/mnt/acme"
    assert isinstance(s3, S3Destination) and s3.prefix == "reports/daily/"


def test_select_destinations_keeps_config_order_and_refuses_unknown_ids() -> None:
    configured = [
        LocalDestination(id="archive", path="acme"),
        SftpDestination(id="customer-sftp", path="/upload"),
        WebhookDestination(id="notify", conn_id="acme_hook"),
    ]
    assert select_destinations(configured, None) == tuple(configured)
    chosen = select_destinations(configured, ["notify", "archive"])
    assert [d.id for d in chosen] == ["archive", "notify"]
    with pytest.raises(
        ConfigError,
        match=r"destination\(s\) \['http-evil'\] are not configured for this schedule; "
        r"configured: \['archive', 'customer-sftp', 'notify'\]",
    ):
        select_destinations(configured, ["archive", "http-evil"])


def test_select_destinations_refuses_duplicate_ids() -> None:
    configured = [LocalDestination(id="a", path="x"), LocalDestination(id="a", path="y")]
    with pytest.raises(ConfigError, match=r"\['a'\] appear more than once"):
        select_destinations(configured, None)
