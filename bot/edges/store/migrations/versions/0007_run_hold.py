"""A run's hold (`/hold [reason]`, `/unhold`): who held it, why and since when, beside its state.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("held_by", sa.String(), nullable=True))
        batch.add_column(sa.Column("held_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("held_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("held_at")
        batch.drop_column("held_reason")
        batch.drop_column("held_by")
