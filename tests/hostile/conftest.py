"""The delivery fixtures (real webhook servers, artifacts, a SQLite ledger) for the hostile
connection-URI and webhook-answer modules, imported once here."""

from tests.delivery.conftest import (  # noqa: F401 - fixtures used by name
    ArtifactFactory,
    certificates,
    https_webhook_server,
    make_artifact,
    sqlite_engine,
    webhook,
    webhook_server,
)
