"""Alembic environment: the caller hands over an open connection (see __init__.upgrade)."""

from alembic import context

from export_lib.ledger.migrations import context_options

connection = context.config.attributes["connection"]
context.configure(connection=connection, **context_options(connection))
with context.begin_transaction():
    context.run_migrations()
