"""The schema of the first release (perfgate 0.1.0, whose own bookkeeping called it version 1):
schema_version, runs, case_specs, series, cases, measurements, written out as they were.

Revision ID: 0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the marker that says this database is a perfgate history (and, for the release before Alembic,
    # the schema version it checks)
    schema_version = op.create_table(
        "schema_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("application", sa.String(64), nullable=False),
    )
    op.bulk_insert(schema_version, [{"id": 1, "version": 1, "application": "perfgate.history"}])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(255), nullable=False, unique=True),
        sa.Column("suite", sa.String(255)),
        sa.Column("commit", sa.String(64)),
        sa.Column("branch", sa.String(255)),
        sa.Column("started_at", sa.String(64), nullable=False),
        sa.Column("added_at", sa.Float, nullable=False),
        sa.Column("machine_key", sa.String(255)),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("settings", sa.Text, nullable=False),
        sa.Column("source", sa.Text),
    )
    op.create_index("ix_runs_started", "runs", ["started_at"])
    op.create_table(
        "case_specs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("case_key", sa.String(512), nullable=False, unique=True),
        sa.Column("workload", sa.String(255), nullable=False),
        sa.Column("size", sa.String(255), nullable=False),
        sa.Column("toggles", sa.String(255), nullable=False),
        sa.Column("device", sa.String(64), nullable=False),
    )
    op.create_table(
        "series",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("case_spec", sa.Integer, sa.ForeignKey("case_specs.id"), nullable=False),
        sa.Column("metric", sa.String(128), nullable=False),
        sa.UniqueConstraint("case_spec", "metric", name="uq_series_case_metric"),
    )
    op.create_table(
        "cases",
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("case_spec", sa.Integer, sa.ForeignKey("case_specs.id"), primary_key=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("failure_class", sa.String(64)),
    )
    op.create_table(
        "measurements",
        sa.Column("series", sa.Integer, sa.ForeignKey("series.id"), primary_key=True),
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("ci_low", sa.Float),
        sa.Column("ci_high", sa.Float),
        sa.Column("n", sa.Integer),
    )


def downgrade() -> None:
    for table in ("measurements", "cases", "series", "case_specs", "runs", "schema_version"):
        op.drop_table(table)
