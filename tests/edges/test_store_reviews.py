"""Review requests: one queue per pull request, claimed one at a time, on SQLite and PostgreSQL.

Every test that takes `engine` runs once per database (see conftest.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.edges.store import reviews
from tests.edges.test_store import all_at_once, new_run

T0 = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def enqueue(engine, run_id: int, key: str, *, kind: str = "fix", by: str = "octocat", **fields):
    return reviews.enqueue(engine, run_id=run_id, pr_number=12, kind=kind, key=key, requested_by=by, **fields)


def queue_of(engine, run_id: int) -> list[tuple[str, str]]:
    return [(request.dedupe_key, request.state) for request in reviews.requests(engine, run_id)]


# --- enqueue ----------------------------------------------------------------------------------


def test_a_new_request_is_queued_with_what_asked_for_it(engine):
    run = new_run(engine)
    request, created = enqueue(engine, run.id, "review:2", review_id=2**40 + 1, notes="Rename `total`.", now=T0)

    assert created is True
    stored = reviews.get(engine, request.id)
    assert stored == request
    assert (stored.run_id, stored.pr_number, stored.kind, stored.dedupe_key, stored.requested_by) == (
        run.id,
        12,
        "fix",
        "review:2",
        "octocat",
    )
    assert (stored.review_id, stored.comment_id, stored.notes) == (2**40 + 1, None, "Rename `total`.")
    assert (stored.state, stored.created_at, stored.started_at, stored.finished_at) == ("queued", T0, None, None)
    assert (stored.head_sha, stored.result, stored.error, stored.outcome()) == (None, None, None, None)


def test_a_redelivered_request_returns_the_first_row_and_changes_nothing(engine):
    run = new_run(engine)
    first, _ = enqueue(engine, run.id, "comment:9", comment_id=9, notes="first")
    again, created = enqueue(engine, run.id, "comment:9", comment_id=9, notes="second", by="hubot")

    assert created is False
    assert again == first
    assert [(request.notes, request.requested_by) for request in reviews.requests(engine, run.id)] == [
        ("first", "octocat")
    ]


def test_twenty_concurrent_deliveries_of_one_review_queue_it_once(engine):
    run = new_run(engine)
    outcomes = all_at_once(20, lambda: enqueue(engine, run.id, "review:5"))

    assert sorted(created for _, created in outcomes) == [False] * 19 + [True]
    assert len({request.id for request, _ in outcomes}) == 1
    assert queue_of(engine, run.id) == [("review:5", "queued")]


def test_enqueue_refuses_an_unknown_kind_naming_the_valid_ones(engine):
    run = new_run(engine)
    with pytest.raises(
        ValueError, match="unknown review request kind 'approve'; expected one of: fix, ci, self, update"
    ):
        enqueue(engine, run.id, "review:1", kind="approve")
    assert reviews.requests(engine, run.id) == []


@pytest.mark.parametrize(
    ("key", "by", "message"),
    [
        ("  ", "octocat", "needs a dedupe key"),
        ("review:1", "", "needs the login of who asked"),
    ],
)
def test_enqueue_needs_a_key_and_who_asked(engine, key, by, message):
    run = new_run(engine)
    with pytest.raises(ValueError, match=message):
        enqueue(engine, run.id, key, by=by)


def test_a_request_for_a_run_that_does_not_exist_is_refused(engine):
    with pytest.raises(LookupError, match="no run with id 999"):
        enqueue(engine, 999, "review:1")


def test_requests_are_listed_oldest_first_and_only_for_their_run(engine):
    run, other = new_run(engine), new_run(engine, issue_number=8)
    enqueue(engine, run.id, "review:1")
    enqueue(engine, other.id, "review:2")
    enqueue(engine, run.id, "self:1:abc", kind="self", by="lanebot")

    assert queue_of(engine, run.id) == [("review:1", "queued"), ("self:1:abc", "queued")]
    assert reviews.get(engine, 12345) is None


# --- claiming ---------------------------------------------------------------------------------


def test_the_oldest_queued_request_is_claimed_and_stamped(engine):
    run = new_run(engine)
    oldest, _ = enqueue(engine, run.id, "review:1")
    enqueue(engine, run.id, "comment:2")

    claimed = reviews.claim_next(engine, run.id, now=T0)

    assert (claimed.id, claimed.state, claimed.started_at) == (oldest.id, "running", T0)
    assert reviews.get(engine, oldest.id) == claimed
    assert queue_of(engine, run.id) == [("review:1", "running"), ("comment:2", "queued")]


def test_nothing_is_claimed_while_a_request_of_the_run_is_running(engine):
    run = new_run(engine)
    first, _ = enqueue(engine, run.id, "review:1")
    reviews.claim_next(engine, run.id)
    enqueue(engine, run.id, "comment:2")

    assert reviews.claim_next(engine, run.id) is None

    assert reviews.finish(engine, first.id, "done")
    assert reviews.claim_next(engine, run.id).dedupe_key == "comment:2"


def test_an_empty_queue_gives_nothing_to_claim(engine):
    run = new_run(engine)
    assert reviews.claim_next(engine, run.id) is None
    done, _ = enqueue(engine, run.id, "review:1")
    reviews.claim_next(engine, run.id)
    reviews.finish(engine, done.id, "failed", error="verify failed")
    assert reviews.claim_next(engine, run.id) is None


def test_another_runs_running_request_does_not_hold_this_run_back(engine):
    run, other = new_run(engine), new_run(engine, issue_number=8)
    enqueue(engine, other.id, "review:1")
    reviews.claim_next(engine, other.id)
    enqueue(engine, run.id, "review:2")

    assert reviews.claim_next(engine, run.id).dedupe_key == "review:2"


def test_twenty_concurrent_claimers_start_exactly_the_oldest_request(engine):
    run = new_run(engine)
    oldest, _ = enqueue(engine, run.id, "review:1")
    enqueue(engine, run.id, "review:2")
    enqueue(engine, run.id, "review:3")

    outcomes = all_at_once(20, lambda: reviews.claim_next(engine, run.id))

    claimed = [request for request in outcomes if request is not None]
    assert [request.id for request in claimed] == [oldest.id]
    assert queue_of(engine, run.id) == [("review:1", "running"), ("review:2", "queued"), ("review:3", "queued")]


@pytest.mark.parametrize("attempt", range(5))  # the interleaving this guards against is rare: try a few
def test_claimers_racing_new_requests_never_run_two_at_once(engine, attempt):
    run = new_run(engine)
    keys = iter(f"comment:{n}" for n in range(10))
    actions = iter([lambda: enqueue(engine, run.id, next(keys)), lambda: reviews.claim_next(engine, run.id)] * 10)

    all_at_once(20, lambda: next(actions)())

    states = [state for _, state in queue_of(engine, run.id)]
    assert len(states) == 10
    assert states.count("running") <= 1


# --- queue position ---------------------------------------------------------------------------


def test_queued_ahead_counts_the_running_request_and_older_queued_ones_of_the_same_run(engine):
    run, other = new_run(engine), new_run(engine, issue_number=8)
    finished, _ = enqueue(engine, run.id, "review:1")
    reviews.claim_next(engine, run.id)
    reviews.finish(engine, finished.id, "done")
    running, _ = enqueue(engine, run.id, "review:2")
    reviews.claim_next(engine, run.id)
    enqueue(engine, other.id, "review:3")
    second, _ = enqueue(engine, run.id, "comment:4")
    third, _ = enqueue(engine, run.id, "comment:5")

    assert [reviews.queued_ahead(engine, request) for request in (running, second, third)] == [0, 1, 2]


# --- finishing and updating -------------------------------------------------------------------


def test_a_running_request_finishes_once_with_its_outcome(engine):
    run = new_run(engine)
    request, _ = enqueue(engine, run.id, "review:1")
    reviews.claim_next(engine, run.id, now=T0)
    later = T0 + timedelta(minutes=3)

    assert (
        reviews.finish(
            engine, request.id, "done", now=later, head_sha="c0ffee", result={"addressed": [101], "not_addressed": []}
        )
        is True
    )
    assert reviews.finish(engine, request.id, "failed", error="too late") is False

    stored = reviews.get(engine, request.id)
    assert (stored.state, stored.head_sha, stored.error) == ("done", "c0ffee", None)
    assert (stored.started_at, stored.finished_at) == (T0, later)
    assert stored.outcome() == {"addressed": [101], "not_addressed": []}


def test_a_queued_request_cannot_be_finished(engine):
    run = new_run(engine)
    request, _ = enqueue(engine, run.id, "review:1")
    assert reviews.finish(engine, request.id, "done") is False
    assert reviews.get(engine, request.id).state == "queued"


@pytest.mark.parametrize("state", ["running", "queued", "merged"])
def test_finish_refuses_a_state_that_is_not_an_end(engine, state):
    run = new_run(engine)
    request, _ = enqueue(engine, run.id, "review:1")
    reviews.claim_next(engine, run.id)
    with pytest.raises(
        ValueError, match=f"unknown finished review request state '{state}'; expected one of: done, failed, cancelled"
    ):
        reviews.finish(engine, request.id, state)
    assert reviews.get(engine, request.id).state == "running"


def test_update_sets_what_became_known_and_refuses_the_rest(engine):
    run = new_run(engine)
    request, _ = enqueue(engine, run.id, "self:1:abc", kind="self", by="lanebot")
    reviews.update(engine, request.id, head_sha="abc", result='{"findings": 2}')
    reviews.update(engine, request.id, error="one verifier timed out")

    stored = reviews.get(engine, request.id)
    assert (stored.head_sha, stored.outcome(), stored.error, stored.state) == (
        "abc",
        {"findings": 2},
        "one verifier timed out",
        "queued",
    )
    with pytest.raises(
        ValueError, match="cannot set kind, state on a review request; settable: error, head_sha, result"
    ):
        reviews.update(engine, request.id, state="done", kind="fix")
    with pytest.raises(ValueError, match="result must be a mapping, or JSON text of an object"):
        reviews.update(engine, request.id, result="all good")
    with pytest.raises(LookupError, match="no review request with id 999"):
        reviews.update(engine, 999, error="x")


# --- start-up and closing ---------------------------------------------------------------------


def test_requests_left_running_go_back_to_the_queue_at_start_up(engine):
    first, second, idle = new_run(engine), new_run(engine, issue_number=8), new_run(engine, issue_number=9)
    interrupted, _ = enqueue(engine, second.id, "review:1")
    reviews.claim_next(engine, second.id)
    enqueue(engine, first.id, "review:2")
    reviews.claim_next(engine, first.id)
    enqueue(engine, idle.id, "review:3")

    assert reviews.requeue_running(engine) == [first.id, second.id]

    stored = reviews.get(engine, interrupted.id)
    assert (stored.state, stored.started_at) == ("queued", None)
    assert reviews.requeue_running(engine) == []
    assert reviews.claim_next(engine, second.id).id == interrupted.id


def test_runs_with_work_are_those_with_a_queued_or_running_request(engine):
    busy, waiting, finished, empty = (new_run(engine, issue_number=n) for n in (1, 2, 3, 4))
    enqueue(engine, busy.id, "review:1")
    reviews.claim_next(engine, busy.id)
    enqueue(engine, waiting.id, "review:2")
    enqueue(engine, waiting.id, "review:3")
    done, _ = enqueue(engine, finished.id, "review:4")
    reviews.claim_next(engine, finished.id)
    reviews.finish(engine, done.id, "done")

    assert reviews.runs_with_work(engine) == [busy.id, waiting.id]
    assert empty.id not in reviews.runs_with_work(engine)


def test_closing_the_pull_request_cancels_the_open_requests_and_keeps_the_finished_ones(engine):
    run, other = new_run(engine), new_run(engine, issue_number=8)
    done, _ = enqueue(engine, run.id, "review:1")
    reviews.claim_next(engine, run.id)
    reviews.finish(engine, done.id, "done")
    running, _ = enqueue(engine, run.id, "review:2")
    reviews.claim_next(engine, run.id)
    enqueue(engine, run.id, "comment:3")
    enqueue(engine, other.id, "review:4")

    assert reviews.cancel_open(engine, run.id, "the pull request was closed", now=T0) == 2

    assert queue_of(engine, run.id) == [("review:1", "done"), ("review:2", "cancelled"), ("comment:3", "cancelled")]
    cancelled = reviews.get(engine, running.id)
    assert (cancelled.error, cancelled.finished_at) == ("the pull request was closed", T0)
    assert reviews.get(engine, done.id).error is None
    assert queue_of(engine, other.id) == [("review:4", "queued")]
    assert reviews.finish(engine, running.id, "done") is False
    assert reviews.cancel_open(engine, run.id, "again") == 0
