"""The database: migrations, deliveries, runs and their history, on SQLite and PostgreSQL.

Every test that takes `engine` or `database_url` runs once per database (see conftest.py).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Integer, MetaData, inspect, text
from sqlalchemy.exc import StatementError

import bot.cli
from bot.edges.store import deliveries, runs
from bot.edges.store.db import (
    alembic_config,
    current_revision,
    head_revision,
    make_engine,
    migrate,
    normalise_url,
)
from bot.edges.store.models import metadata

TABLES = {
    "deliveries",
    "installations",
    "runs",
    "plans",
    "lanes",
    "agent_sessions",
    "run_events",
    "review_requests",
    "approver_pins",
    "job_leases",
}
T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
Result = TypeVar("Result")


def all_at_once(count: int, action: Callable[[], Result]) -> list[Result]:
    """Run `action` in `count` threads released together by a barrier; their results."""
    barrier = threading.Barrier(count)

    def contender() -> Result:
        barrier.wait()
        return action()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: contender(), range(count)))


def record(engine, delivery_id: str, *, event: str = "issues", body: bytes = b"{}", **fields) -> bool:
    values = dict(action="opened", installation_id=42, repository="octo/repo", received_at=None) | fields
    return deliveries.record(engine, delivery_id=delivery_id, event=event, body=body, **values)


def new_run(engine, issue_number: int = 7, repository: str = "octo/repo"):
    return runs.create_run(
        engine, installation_id=42, repository=repository, issue_number=issue_number, requested_by="mona"
    )


# --- migrations -------------------------------------------------------------------------------


def test_migrate_from_empty_creates_every_table(database_url):
    engine = make_engine(database_url)
    try:
        assert inspect(engine).get_table_names() == []
        assert migrate(engine) == head_revision()
        assert set(inspect(engine).get_table_names()) == TABLES | {"alembic_version"}
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_migrating_again_changes_nothing_and_keeps_the_data(engine):
    record(engine, "d-1")
    assert migrate(engine) == head_revision()
    assert migrate(engine) == head_revision()
    assert [row.delivery_id for row in deliveries.list_recent(engine, 10)] == ["d-1"]


def test_migrate_accepts_a_url(database_url):
    assert migrate(database_url) == head_revision()
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_migration_history_is_one_line_from_base_to_a_single_head():
    scripts = ScriptDirectory.from_config(alembic_config())
    assert scripts.get_heads() == [head_revision()]
    chain = list(scripts.walk_revisions("base", "heads"))
    assert chain[-1].down_revision is None
    assert all(len(script.nextrev) <= 1 for script in chain)


def test_models_match_the_migrated_schema(engine):
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), metadata) == []


def test_schema_comparison_notices_a_column_the_migrations_lack(engine):
    changed = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["deliveries"].append_column(Column("priority", Integer(), nullable=True))
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), changed)
    assert [(kind, column.name) for kind, _, table, column in differences] == [("add_column", "priority")]


# --- engines ----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["postgres://me@db.example/lanebot", "postgresql://me@db.example/lanebot"])
def test_postgresql_urls_use_the_installed_psycopg_driver(url):
    assert normalise_url(url).render_as_string() == "postgresql+psycopg://me@db.example/lanebot"


def test_an_explicit_driver_and_sqlite_urls_are_kept_as_given():
    assert normalise_url("postgresql+psycopg://me@h/db").drivername == "postgresql+psycopg"
    assert normalise_url("sqlite:///./lanebot.db").render_as_string() == "sqlite:///./lanebot.db"


@pytest.mark.parametrize("url", ["mysql://me:hunter2@h/db", "hunter2 is not a url"])
def test_unsupported_urls_are_refused_without_echoing_them(url):
    with pytest.raises(ValueError) as refusal:
        make_engine(url)
    assert "hunter2" not in str(refusal.value)
    assert "sqlite" in str(refusal.value) and "postgresql" in str(refusal.value)


def test_sqlite_connections_use_wal_a_busy_timeout_and_foreign_keys(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'pragmas.db'}")
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
            assert connection.execute(text("PRAGMA busy_timeout")).scalar_one() > 0
            assert connection.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
    finally:
        engine.dispose()


def test_a_new_sqlite_database_and_its_wal_files_are_created_0600(tmp_path):
    previous = os.umask(0o022)
    try:
        database = tmp_path / "lanebot.db"
        engine = make_engine(f"sqlite:///{database}")
        try:
            migrate(engine)
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
                made = [database, *(database.with_name(database.name + tail) for tail in ("-wal", "-shm"))]
                for path in made:
                    if path.exists():
                        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        finally:
            engine.dispose()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


def test_an_existing_database_file_keeps_its_mode_and_memory_urls_make_no_file(tmp_path, monkeypatch):
    database = tmp_path / "kept.db"
    database.touch(mode=0o640)
    database.chmod(0o640)
    make_engine(f"sqlite:///{database}").dispose()
    monkeypatch.chdir(tmp_path)
    make_engine("sqlite://").dispose()
    make_engine("sqlite:///:memory:").dispose()

    assert stat.S_IMODE(database.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.db"]


def test_foreign_keys_are_enforced(engine):
    with pytest.raises(Exception, match="(?i)foreign key"):
        runs.append_event(engine, 999, "orphan")


def test_timestamps_come_back_as_the_same_instant_in_utc(engine):
    two_hours_east = datetime(2026, 1, 2, 5, 4, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    record(engine, "d-1", received_at=two_hours_east)
    [stored] = deliveries.list_recent(engine, 1)
    assert stored.received_at == T0
    assert stored.received_at.utcoffset() == timedelta(0)


def test_naive_timestamps_are_refused(engine):
    with pytest.raises(StatementError, match="naive datetime"):
        record(engine, "d-1", received_at=datetime(2026, 1, 2))
    assert deliveries.list_recent(engine, 10) == []


# --- deliveries -------------------------------------------------------------------------------


def test_a_new_delivery_is_stored_pending_with_its_exact_body(engine):
    body = b'{"action": "opened"}\xff\x00 not even utf-8'
    assert record(engine, "d-1", body=body, received_at=T0) is True
    [stored] = deliveries.claim_pending(engine, 10)
    assert (stored.delivery_id, stored.event, stored.action, stored.installation_id, stored.repository) == (
        "d-1",
        "issues",
        "opened",
        42,
        "octo/repo",
    )
    assert (stored.body, stored.received_at, stored.status, stored.error, stored.processed_at) == (
        body,
        T0,
        "pending",
        None,
        None,
    )


def test_a_delivery_without_action_installation_or_repository_is_stored(engine):
    assert record(engine, "ping-1", event="ping", action=None, installation_id=None, repository=None)
    [stored] = deliveries.list_recent(engine, 1)
    assert (stored.event, stored.action, stored.installation_id, stored.repository) == ("ping", None, None, None)


def test_a_redelivery_of_a_stored_id_returns_false_and_changes_nothing(engine):
    assert record(engine, "d-1", body=b"first") is True
    assert record(engine, "d-1", body=b"second", event="push") is False
    [stored] = deliveries.list_recent(engine, 10)
    assert (stored.body, stored.event) == (b"first", "issues")


def test_github_installation_ids_beyond_32_bits_are_stored(engine):
    record(engine, "d-1", installation_id=2**40 + 3)
    assert deliveries.list_recent(engine, 1)[0].installation_id == 2**40 + 3


def test_twenty_concurrent_records_of_one_delivery_store_one_row_and_one_true(engine):
    outcomes = all_at_once(20, lambda: record(engine, "same-id"))
    assert sorted(outcomes) == [False] * 19 + [True]
    assert deliveries.waiting_count(engine) == 1


def test_an_empty_delivery_id_is_refused(engine):
    with pytest.raises(ValueError, match="X-GitHub-Delivery"):
        record(engine, "")


def test_pending_deliveries_are_claimed_in_arrival_order_up_to_the_limit(engine):
    for delivery_id in ("c", "a", "b"):
        record(engine, delivery_id)
    assert [row.delivery_id for row in deliveries.claim_pending(engine, 2)] == ["c", "a"]
    claimed = deliveries.claim_pending(engine, 10)
    assert [row.delivery_id for row in claimed] == ["c", "a", "b"]
    assert [row.seq for row in claimed] == sorted(row.seq for row in claimed)


def test_processed_and_failed_deliveries_are_no_longer_claimed_or_waiting(engine):
    for delivery_id in ("d-1", "d-2", "d-3"):
        record(engine, delivery_id)
    first, second, third = deliveries.claim_pending(engine, 10)
    deliveries.mark_processed(engine, first.seq, now=T0)
    deliveries.mark_failed(engine, second.seq, "KeyError: 'issue'\nTraceback ...", now=T0)

    assert [row.delivery_id for row in deliveries.claim_pending(engine, 10)] == ["d-3"]
    assert deliveries.waiting_count(engine) == 1
    by_id = {row.delivery_id: row for row in deliveries.list_recent(engine, 10)}
    assert (by_id["d-1"].status, by_id["d-1"].error, by_id["d-1"].processed_at) == ("processed", None, T0)
    assert (by_id["d-2"].status, by_id["d-2"].error, by_id["d-2"].processed_at) == (
        "failed",
        "KeyError: 'issue'\nTraceback ...",
        T0,
    )


def test_marking_a_delivery_that_is_not_stored_raises(engine):
    with pytest.raises(LookupError, match="seq 12345"):
        deliveries.mark_processed(engine, 12345)
    with pytest.raises(LookupError, match="seq 12345"):
        deliveries.mark_failed(engine, 12345, "boom")


def test_known_ids_are_the_deliveries_received_since_the_given_time(engine):
    record(engine, "old", received_at=T0 - timedelta(hours=25))
    record(engine, "edge", received_at=T0 - timedelta(hours=24))
    record(engine, "new", received_at=T0)
    assert deliveries.known_ids(engine, T0 - timedelta(hours=24)) == {"edge", "new"}


def test_recent_deliveries_are_listed_newest_first_up_to_the_limit(engine):
    for delivery_id in ("d-1", "d-2", "d-3"):
        record(engine, delivery_id)
    assert [row.delivery_id for row in deliveries.list_recent(engine, 2)] == ["d-3", "d-2"]
    with pytest.raises(ValueError, match="at least 1"):
        deliveries.list_recent(engine, 0)


# --- runs -------------------------------------------------------------------------------------


def test_a_new_run_is_planning_and_holds_its_issue(engine):
    run = new_run(engine)
    stored = runs.get_run(engine, run.id)
    assert (stored.state, stored.plan_revision, stored.active_key) == ("planning", 0, "octo/repo#7")
    assert runs.active_run(engine, "octo/repo", 7).id == run.id
    assert runs.unfinished_runs(engine) == [stored]


def test_an_issue_cannot_get_a_second_active_run(engine):
    first = new_run(engine)
    with pytest.raises(
        runs.ActiveRunExists, match=rf"octo/repo#7 already has an active run: run {first.id} \(planning\)"
    ):
        new_run(engine)
    assert new_run(engine, issue_number=8).id != first.id
    assert new_run(engine, repository="octo/other").id != first.id


def test_twenty_concurrent_requests_for_one_issue_create_one_run(engine):
    def request_run():
        try:
            return new_run(engine).id
        except runs.ActiveRunExists as refusal:
            return refusal

    outcomes = all_at_once(20, request_run)
    [winner] = [outcome for outcome in outcomes if isinstance(outcome, int)]
    refusals = [outcome for outcome in outcomes if isinstance(outcome, runs.ActiveRunExists)]
    assert len(refusals) == 19
    assert {refusal.run.id for refusal in refusals} == {winner}


@pytest.mark.parametrize("finished", ["rejected", "cancelled", "failed"])
def test_a_rejected_cancelled_or_failed_run_releases_its_issue(engine, finished):
    first = new_run(engine)
    assert runs.transition(engine, first.id, "planning", finished)
    assert runs.get_run(engine, first.id).active_key is None
    assert runs.active_run(engine, "octo/repo", 7) is None
    assert new_run(engine).id != first.id


def test_a_done_run_holds_its_issue_until_it_is_closed(engine):
    run = new_run(engine)
    assert runs.transition(engine, run.id, "planning", "done")
    with pytest.raises(runs.ActiveRunExists):
        new_run(engine)
    assert runs.close_run(engine, run.id) is True
    assert runs.close_run(engine, run.id) is False
    assert new_run(engine).id != run.id


def test_the_runs_with_an_open_pull_request_are_the_done_ones_still_holding_their_issue(engine):
    def run_at(issue: int, state: str, pr: int | None, repository: str = "octo/repo") -> int:
        run = new_run(engine, repository=repository, issue_number=issue)
        runs.transition(engine, run.id, "planning", state)
        if pr is not None:
            runs.update_run(engine, run.id, pr_number=pr)
        return run.id

    open_one, other_open = run_at(1, "done", 11), run_at(2, "done", 12)
    merged = run_at(3, "done", 13)
    runs.close_run(engine, merged)  # what a merge does
    run_at(4, "cancelled", 14)  # closed unmerged
    run_at(5, "integrating", None)  # no pull request yet
    run_at(6, "done", 16, repository="octo/elsewhere")

    assert [run.id for run in runs.runs_with_open_pull(engine, "Octo/Repo")] == [open_one, other_open]


def test_only_a_done_run_can_be_closed(engine):
    run = new_run(engine)
    assert runs.close_run(engine, run.id) is False
    assert runs.get_run(engine, run.id).active_key == "octo/repo#7"


def test_a_finished_run_cannot_come_back_while_another_run_holds_its_issue(engine):
    old = new_run(engine)
    runs.transition(engine, old.id, "planning", "rejected")
    current = new_run(engine)
    with pytest.raises(runs.ActiveRunExists, match=f"run {current.id}"):
        runs.transition(engine, old.id, "rejected", "planning")
    assert runs.get_run(engine, old.id).state == "rejected"


def test_transition_moves_only_from_the_expected_state_and_sets_the_fields(engine):
    run = new_run(engine)
    assert runs.transition(engine, run.id, "awaiting_approval", "running") is False
    assert runs.get_run(engine, run.id).state == "planning"

    assert runs.transition(engine, run.id, "planning", "awaiting_approval", gate_comment_id=2**35, now=T0) is True
    stored = runs.get_run(engine, run.id)
    assert (stored.state, stored.gate_comment_id, stored.updated_at) == ("awaiting_approval", 2**35, T0)


def test_twenty_concurrent_approvals_start_exactly_one_run(engine):
    run = new_run(engine)
    runs.transition(engine, run.id, "planning", "awaiting_approval")
    outcomes = all_at_once(
        20, lambda: runs.transition(engine, run.id, "awaiting_approval", "running", approved_revision=1)
    )
    assert sorted(outcomes) == [False] * 19 + [True]
    assert runs.get_run(engine, run.id).state == "running"
    starts = [event.payload() for event in runs.run_events(engine, run.id) if event.payload().get("to") == "running"]
    assert starts == [{"from": "awaiting_approval", "to": "running"}]


def test_the_approval_stores_the_issue_as_approved_in_the_same_compare_and_set(engine):
    run = new_run(engine)
    runs.transition(engine, run.id, "planning", "awaiting_approval")
    body = "Users want to archive items.\n" * 3_000  # issue bodies run to 65,536 characters
    approved = dict(approved_revision=1, approved_issue_title="Archive items 📦", approved_issue_body=body)
    assert runs.transition(engine, run.id, "awaiting_approval", "running", **approved)
    stored = runs.get_run(engine, run.id)
    assert (stored.approved_issue_title, stored.approved_issue_body) == ("Archive items 📦", body)


def test_transition_refuses_unknown_states_and_fields(engine):
    run = new_run(engine)
    with pytest.raises(ValueError, match="unknown run state 'approved'"):
        runs.transition(engine, run.id, "planning", "approved")
    with pytest.raises(ValueError, match="cannot set active_key, colour on a run"):
        runs.transition(engine, run.id, "planning", "running", colour="red", active_key="x")
    assert runs.get_run(engine, run.id).state == "planning"


def test_update_run_sets_fields_without_touching_the_state(engine):
    run = new_run(engine)
    runs.update_run(engine, run.id, pr_number=12, integration_branch="lanebot/7", base_sha="abc")
    stored = runs.get_run(engine, run.id)
    assert (stored.state, stored.pr_number, stored.integration_branch, stored.base_sha) == (
        "planning",
        12,
        "lanebot/7",
        "abc",
    )
    with pytest.raises(LookupError, match="no run with id 999"):
        runs.update_run(engine, 999, pr_number=1)


def test_create_run_refuses_a_malformed_repository_or_issue(engine):
    with pytest.raises(ValueError, match="owner/name"):
        new_run(engine, repository="just-a-name")
    with pytest.raises(ValueError, match="issue numbers start at 1"):
        new_run(engine, issue_number=0)


# --- plans ------------------------------------------------------------------------------------


def test_plan_revisions_count_up_from_one_and_the_latest_is_the_runs(engine):
    run = new_run(engine)
    assert runs.latest_plan(engine, run.id) is None
    first = runs.add_plan(engine, run.id, units_jsonl='{"id": "a"}\n', source="agent", problems="cycle: a -> a")
    second = runs.add_plan(engine, run.id, units_jsonl='{"id": "b"}\n', source="hand", feedback="split it")
    assert (first.revision, second.revision) == (1, 2)
    latest = runs.latest_plan(engine, run.id)
    assert (latest.revision, latest.units_jsonl, latest.source, latest.feedback) == (
        2,
        '{"id": "b"}\n',
        "hand",
        "split it",
    )
    assert runs.get_plan(engine, run.id, 1).problems == "cycle: a -> a"
    assert runs.get_run(engine, run.id).plan_revision == 2


def test_concurrent_plans_of_one_run_get_distinct_revisions(engine):
    run = new_run(engine)
    plans = all_at_once(10, lambda: runs.add_plan(engine, run.id, units_jsonl="{}", source="agent"))
    assert sorted(plan.revision for plan in plans) == list(range(1, 11))
    assert runs.latest_plan(engine, run.id).revision == 10


def test_a_plan_needs_a_known_source_and_an_existing_run(engine):
    run = new_run(engine)
    with pytest.raises(ValueError, match="unknown plan source 'llm'"):
        runs.add_plan(engine, run.id, units_jsonl="{}", source="llm")
    with pytest.raises(LookupError, match="no run with id 999"):
        runs.add_plan(engine, 999, units_jsonl="{}", source="agent")


# --- events -----------------------------------------------------------------------------------


def test_a_runs_events_are_kept_in_the_order_they_happened(engine):
    run = new_run(engine)
    runs.transition(engine, run.id, "planning", "awaiting_approval")
    runs.add_plan(engine, run.id, units_jsonl="{}", source="hand")
    runs.append_event(engine, run.id, "comment", {"id": 5, "text": "ü"}, now=T0)
    history = runs.run_events(engine, run.id)
    assert [(event.kind, event.payload()) for event in history] == [
        ("created", {"requested_by": "mona"}),
        ("state", {"from": "planning", "to": "awaiting_approval"}),
        ("plan", {"revision": 1, "source": "hand"}),
        ("comment", {"id": 5, "text": "ü"}),
    ]
    assert history[-1].at == T0


def test_events_of_other_runs_stay_apart(engine):
    mine, theirs = new_run(engine), new_run(engine, issue_number=8)
    runs.append_event(engine, theirs.id, "note")
    assert [event.kind for event in runs.run_events(engine, mine.id)] == ["created"]


# --- lanes ------------------------------------------------------------------------------------


def test_lanes_are_created_pending_once_per_unit_with_their_round(engine):
    run = new_run(engine)
    created = runs.create_lanes(engine, run.id, [["schema", "docs"], ["api"]])
    assert [(lane.unit_id, lane.round, lane.state, lane.attempts_used) for lane in created] == [
        ("schema", 1, "pending", 0),
        ("docs", 1, "pending", 0),
        ("api", 2, "pending", 0),
    ]
    runs.set_lane_state(engine, created[0].id, "pending", "running")
    again = runs.create_lanes(engine, run.id, [["schema", "docs"], ["api"]])
    assert [(lane.id, lane.state) for lane in again] == [
        (created[0].id, "running"),
        (created[1].id, "pending"),
        (created[2].id, "pending"),
    ]


def test_lanes_need_units_each_in_one_round(engine):
    run = new_run(engine)
    with pytest.raises(ValueError, match="repeated: a"):
        runs.create_lanes(engine, run.id, [["a", "b"], ["a"]])
    with pytest.raises(ValueError, match="at least one unit"):
        runs.create_lanes(engine, run.id, [])
    assert runs.lanes(engine, run.id) == []


def test_lane_state_changes_only_from_the_expected_state_and_is_stamped(engine):
    run = new_run(engine)
    [lane] = runs.create_lanes(engine, run.id, [["schema"]])
    assert runs.set_lane_state(engine, lane.id, "running", "finished") is False
    assert runs.set_lane_state(engine, lane.id, "pending", "running", now=T0, branch="lanebot/7/schema")
    later = T0 + timedelta(minutes=5)
    assert runs.set_lane_state(engine, lane.id, "running", "finished", now=later, head_sha="f00d")
    assert runs.set_lane_state(engine, lane.id, "finished", "merged", now=later + timedelta(minutes=1))
    stored = runs.get_lane(engine, run.id, "schema")
    assert (stored.state, stored.branch, stored.head_sha) == ("merged", "lanebot/7/schema", "f00d")
    assert (stored.started_at, stored.finished_at, stored.merged_at) == (T0, later, later + timedelta(minutes=1))
    lane_events = [event.payload() for event in runs.run_events(engine, run.id) if event.kind == "lane"]
    assert [(event["from"], event["to"]) for event in lane_events] == [
        ("pending", "running"),
        ("running", "finished"),
        ("finished", "merged"),
    ]


def test_twenty_workers_racing_for_one_lane_start_it_once(engine):
    run = new_run(engine)
    [lane] = runs.create_lanes(engine, run.id, [["schema"]])
    outcomes = all_at_once(20, lambda: runs.set_lane_state(engine, lane.id, "pending", "running"))
    assert sorted(outcomes) == [False] * 19 + [True]


def test_update_lane_sets_fields_and_refuses_unknown_ones(engine):
    run = new_run(engine)
    [lane] = runs.create_lanes(engine, run.id, [["schema"]])
    runs.update_lane(engine, lane.id, check_run_id=2**40, attempts_used=1, failure="check failed")
    stored = runs.get_lane(engine, run.id, "schema")
    assert (stored.check_run_id, stored.attempts_used, stored.failure, stored.state) == (
        2**40,
        1,
        "check failed",
        "pending",
    )
    with pytest.raises(ValueError, match="cannot set state on a lane"):
        runs.update_lane(engine, lane.id, state="merged")


# --- agent sessions ---------------------------------------------------------------------------


def test_session_attempts_are_numbered_per_lane_and_kind(engine):
    run = new_run(engine)
    schema, docs = runs.create_lanes(engine, run.id, [["schema", "docs"]])
    started = [
        runs.start_session(engine, run_id=run.id, kind="plan"),
        runs.start_session(engine, run_id=run.id, kind="lane", lane_id=schema.id),
        runs.start_session(engine, run_id=run.id, kind="lane", lane_id=schema.id, counts_as_retry=False),
        runs.start_session(engine, run_id=run.id, kind="lane", lane_id=docs.id),
        runs.start_session(engine, run_id=run.id, kind="plan"),
    ]
    assert [session.attempt for session in started] == [1, 1, 2, 1, 2]
    assert [session.id for session in runs.sessions(engine, run.id)] == [session.id for session in started]
    assert [session.counts_as_retry for session in runs.sessions(engine, run.id)] == [True, True, False, True, True]


def test_a_session_ends_once_with_its_outcome(engine):
    run = new_run(engine)
    started = runs.start_session(engine, run_id=run.id, kind="plan", host="runner-1", now=T0)
    runs.update_session(engine, started.id, pid=4242, transcript_path="/var/lanebot/t/1.jsonl")
    assert [session.pid for session in runs.running_sessions(engine)] == [4242]

    assert runs.finish_session(
        engine,
        started.id,
        status="succeeded",
        now=T0 + timedelta(seconds=90),
        exit_status=0,
        input_tokens=1200,
        output_tokens=300,
        cost_usd=0.042,
    )
    assert runs.finish_session(engine, started.id, status="lost") is False
    [stored] = runs.sessions(engine, run.id)
    assert (stored.status, stored.exit_status, stored.input_tokens, stored.output_tokens, stored.cost_usd) == (
        "succeeded",
        0,
        1200,
        300,
        pytest.approx(0.042),
    )
    assert (stored.host, stored.started_at, stored.ended_at) == ("runner-1", T0, T0 + timedelta(seconds=90))
    assert runs.running_sessions(engine, run.id) == []


def test_sessions_refuse_unknown_kinds_and_statuses(engine):
    run = new_run(engine)
    with pytest.raises(ValueError, match="unknown session kind 'deploy'"):
        runs.start_session(engine, run_id=run.id, kind="deploy")
    started = runs.start_session(engine, run_id=run.id, kind="plan")
    with pytest.raises(ValueError, match="unknown finished session status 'running'"):
        runs.finish_session(engine, started.id, status="running")


# --- the command line -------------------------------------------------------------------------


def test_the_database_commands_are_part_of_lanebot():
    assert "db" in bot.cli.COMMAND_MODULES


def test_lanebot_migrate_creates_the_schema_and_then_has_nothing_to_do(database_url, capsys):
    assert bot.cli.main(["migrate", "--database-url", database_url]) == 0
    assert f"upgraded from an empty database to revision {head_revision()}" in capsys.readouterr().out
    assert bot.cli.main(["migrate", "--database-url", database_url]) == 0
    assert f"already at revision {head_revision()}" in capsys.readouterr().out


def test_lanebot_migrate_reads_DATABASE_URL(database_url, monkeypatch, capsys):
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert bot.cli.main(["migrate"]) == 0
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_lanebot_deliveries_list_shows_the_newest_first(engine, database_url, capsys):
    record(engine, "d-1", event="ping", action=None, repository=None)
    record(engine, "d-2")
    record(engine, "d-3", event="issue_comment", action="created")
    [_, second, _] = deliveries.claim_pending(engine, 10)
    deliveries.mark_failed(engine, second.seq, "RuntimeError: no token\n  at line 3")

    assert bot.cli.main(["deliveries", "list", "--limit", "2", "--database-url", database_url]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        ["id", "event", "action", "repository", "status", "error"],
        ["d-3", "issue_comment", "created", "octo/repo", "pending", "-"],
        ["d-2", "issues", "opened", "octo/repo", "failed", "RuntimeError:", "no", "token"],
    ]


def test_lanebot_deliveries_list_on_an_empty_database_says_so(engine, database_url, capsys):
    assert bot.cli.main(["deliveries", "list", "--database-url", database_url]) == 0
    assert capsys.readouterr().out.strip() == "no deliveries stored"


def test_lanebot_deliveries_list_asks_for_a_migration_first(database_url, capsys):
    assert bot.cli.main(["deliveries", "list", "--database-url", database_url]) == 2
    assert "run `lanebot migrate` first" in capsys.readouterr().err


def test_lanebot_deliveries_list_refuses_a_limit_below_one(database_url, capsys):
    assert bot.cli.main(["deliveries", "list", "--limit", "0", "--database-url", database_url]) == 2
    assert "--limit must be at least 1, got 0" in capsys.readouterr().err


def test_lanebot_refuses_an_unsupported_database_url(capsys):
    assert bot.cli.main(["migrate", "--database-url", "mysql://me:hunter2@h/db"]) == 2
    error = capsys.readouterr().err
    assert "unsupported database" in error and "hunter2" not in error


def test_lanebot_reports_an_unreachable_database(tmp_path, capsys):
    missing_folder = tmp_path / "no-such-folder" / "lanebot.db"
    assert bot.cli.main(["migrate", "--database-url", f"sqlite:///{missing_folder}"]) == 1
    assert "cannot use the database at sqlite:///" in capsys.readouterr().err


def test_the_caps_count_in_the_database_runs_building_ahead_per_repository_and_lanes_running_everywhere(engine):
    path = ("planning", "awaiting_approval", "running", "integrating")

    def building(repository: str, issue: int, state: str) -> runs.Run:
        run = runs.create_run(engine, installation_id=1, repository=repository, issue_number=issue, requested_by="m")
        for before, after in zip(path, path[1 : path.index(state) + 1]):
            assert runs.transition(engine, run.id, before, after)
        return runs.get_run(engine, run.id)

    first = building("Octo/App", 1, "integrating")
    other_repository = building("octo/other", 1, "running")
    second = building("octo/app", 2, "running")
    waiting = building("octo/app", 3, "awaiting_approval")

    assert runs.building_ahead(engine, first) == 0
    assert runs.building_ahead(engine, second) == 1  # the first (names compared without case)
    assert runs.building_ahead(engine, other_repository) == 0
    assert runs.building_ahead(engine, waiting) == 2

    runs.create_lanes(engine, second.id, [["a", "b"]])
    runs.create_lanes(engine, other_repository.id, [["c"]])
    for run_id, unit in ((second.id, "a"), (other_repository.id, "c")):
        lane = runs.get_lane(engine, run_id, unit)
        assert runs.set_lane_state(engine, lane.id, "pending", "running")
    assert runs.lanes_running(engine) == 2
