"""The first tables: deliveries, installations, runs, plans, lanes, agent sessions, run events.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(), nullable=False),
        sa.Column("event", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=True),
        sa.Column("installation_id", sa.BigInteger(), nullable=True),
        sa.Column("repository", sa.String(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        _timestamp("received_at"),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("processed_at", nullable=True),
        sa.PrimaryKeyConstraint("seq", name="pk_deliveries"),
        sa.UniqueConstraint("delivery_id", name="uq_deliveries_delivery_id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_deliveries_status_seq", "deliveries", ["status", "seq"])

    op.create_table(
        "installations",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("account_login", sa.String(), nullable=False),
        sa.Column("account_type", sa.String(), nullable=False),
        sa.Column("repository_selection", sa.String(), nullable=False),
        sa.Column("suspended", sa.Boolean(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_installations"),
    )

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("installation_id", sa.BigInteger(), nullable=False),
        sa.Column("repository", sa.String(), nullable=False),
        sa.Column("issue_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("requested_by", sa.String(), nullable=False),
        sa.Column("plan_revision", sa.Integer(), nullable=False),
        sa.Column("approved_revision", sa.Integer(), nullable=True),
        sa.Column("integration_branch", sa.String(), nullable=True),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("gate_comment_id", sa.BigInteger(), nullable=True),
        sa.Column("progress_comment_id", sa.BigInteger(), nullable=True),
        sa.Column("base_sha", sa.String(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.Column("active_key", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("active_key", name="uq_runs_active_key"),
    )

    op.create_table(
        "plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("units_jsonl", sa.Text(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("feedback", sa.Text(), nullable=True),
        sa.Column("problems", sa.Text(), nullable=True),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_plans_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_plans"),
        sa.UniqueConstraint("run_id", "revision", name="uq_plans_run_id_revision"),
    )

    op.create_table(
        "lanes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("unit_id", sa.String(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("attempts_used", sa.Integer(), nullable=False),
        sa.Column("branch", sa.String(), nullable=True),
        sa.Column("base_sha", sa.String(), nullable=True),
        sa.Column("head_sha", sa.String(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("check_run_id", sa.BigInteger(), nullable=True),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        _timestamp("merged_at", nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_lanes_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_lanes"),
        sa.UniqueConstraint("run_id", "unit_id", name="uq_lanes_run_id_unit_id"),
    )

    op.create_table(
        "agent_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("lane_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("counts_as_retry", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("transcript_path", sa.String(), nullable=True),
        sa.Column("exit_status", sa.Integer(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        _timestamp("started_at"),
        _timestamp("ended_at", nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_agent_sessions_run_id_runs"),
        sa.ForeignKeyConstraint(["lane_id"], ["lanes.id"], name="fk_agent_sessions_lane_id_lanes"),
        sa.PrimaryKeyConstraint("id", name="pk_agent_sessions"),
    )
    op.create_index("ix_agent_sessions_run_id", "agent_sessions", ["run_id"])
    op.create_index("ix_agent_sessions_lane_id", "agent_sessions", ["lane_id"])

    op.create_table(
        "run_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        _timestamp("at"),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_run_events_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_run_events"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_run_events_run_id", "run_events", ["run_id"])


def downgrade() -> None:
    for table in ("run_events", "agent_sessions", "lanes", "plans", "runs", "installations", "deliveries"):
        op.drop_table(table)
