"""What a lane attempt did besides its agent's session: when its check began, the end of the
check's output (passing or not) and the diff it committed, per file, for the dashboard.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(sa.Column("check_started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("check_output", sa.Text(), nullable=True))
        batch.add_column(sa.Column("diff_stat", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.drop_column("diff_stat")
        batch.drop_column("check_output")
        batch.drop_column("check_started_at")
