"""The old Alembic environment (commit 2c06e69): it targeted only the run-ledger metadata."""

from alembic import context

from export_lib.ledger.migrations import VERSION_TABLE
from tests.support.legacy_ledger.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    version_table=VERSION_TABLE,
)
with context.begin_transaction():
    context.run_migrations()
