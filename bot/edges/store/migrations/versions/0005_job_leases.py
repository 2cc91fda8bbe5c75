"""Job leases: which runner host does a job of a run now, until when (the Celery executor's workers).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_leases",
        sa.Column("job_key", sa.String(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_job_leases_run_id_runs"),
        sa.PrimaryKeyConstraint("job_key", name="pk_job_leases"),
    )
    op.create_index("ix_job_leases_run_id", "job_leases", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_leases_run_id", table_name="job_leases")
    op.drop_table("job_leases")
