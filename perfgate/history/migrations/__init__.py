"""The history store's schema migrations (Alembic), shipped inside the package.

``versions/`` holds one file per schema revision, oldest first: ``0001`` creates the schema of the
first release, written out in full (not from the models in perfgate/history/store.py, which follow the
latest revision). Opening a store runs ``upgrade head`` (perfgate.history.store.open_store); a store
made before Alembic is stamped at ``0001`` first.

Adding a revision: copy the newest file to ``versions/NNNN_what.py``, set ``revision`` to ``"NNNN"``
and ``down_revision`` to the previous one, write ``upgrade()`` with ``alembic.op`` (``downgrade()``
too), change the models in store.py to match, and set ``store.SCHEMA_HEAD`` to the new revision.
Never edit a revision that has shipped: stores out there already had it. A revision that a release
before Alembic must not read should also raise ``schema_version.version`` (that release refuses a
store whose version is above 1).
"""
