"""Alembic's environment: migrations run on the connection (and inside the transaction) that
perfgate.history.store passes in ``config.attributes["connection"]``; never on a URL of their own."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
