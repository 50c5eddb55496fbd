"""perfgate history: every run kept in a database, series per case and metric, change points, trend
reports and bisect. No torch anywhere in this package.

- ``store``: the database (SQLAlchemy; SQLite file or PostgreSQL), where it is, its versioned schema
- ``writing``: a run added in one transaction; ``reading``: each case's series, its keys and metrics
- ``ingest``: results.json -> a run record (commit, branch, machine, per-case statistics)
- ``show``: series as a table, CSV or JSON
- ``detect``: change points (E-divisive means, Hunter/Otava style) and creep (Mann-Kendall + Theil-Sen)
- ``report``: history.html, an SVG trend chart per case and metric
- ``bisect``: the first commit of a step, measured pairwise in lockstep in temporary worktrees

The user's guide is docs/history.md.
"""
