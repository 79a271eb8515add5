"""Alembic environment: the caller hands over an open connection (see __init__.upgrade)."""

from alembic import context

from export_lib.ledger.migrations import VERSION_TABLE
from export_lib.ledger.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    version_table=VERSION_TABLE,
)
with context.begin_transaction():
    context.run_migrations()
