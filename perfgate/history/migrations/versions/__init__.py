"""Alembic revisions of the history store (Alembic skips this file)."""
