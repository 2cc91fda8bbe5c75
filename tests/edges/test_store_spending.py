"""What the store adds up for the budget: a run's session costs and a repository's day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.edges.store import runs

MIDNIGHT = datetime(2026, 12, 2, tzinfo=UTC)


def new_run(engine, issue_number: int, repository: str = "octo/repo"):
    return runs.create_run(
        engine, installation_id=42, repository=repository, issue_number=issue_number, requested_by="mona"
    )


def session_costing(engine, run_id: int, cost: float | None, *, started: datetime) -> None:
    row = runs.start_session(engine, run_id=run_id, kind="plan", now=started)
    runs.finish_session(engine, row.id, status="succeeded", cost_usd=cost, input_tokens=10, output_tokens=1)


def test_a_run_with_no_sessions_spent_nothing(engine):
    run = new_run(engine, 1)
    assert runs.spent_usd(engine, run.id, repository="octo/repo", since=MIDNIGHT) == (0.0, 0.0)


def test_the_run_counts_its_own_sessions_and_the_day_every_run_of_the_repository_since_midnight(engine):
    run, sibling, elsewhere = new_run(engine, 1), new_run(engine, 2), new_run(engine, 3, repository="octo/other")
    session_costing(engine, run.id, 0.5, started=MIDNIGHT - timedelta(hours=1))  # yesterday
    session_costing(engine, run.id, 0.25, started=MIDNIGHT + timedelta(hours=1))
    session_costing(engine, run.id, None, started=MIDNIGHT + timedelta(hours=2))  # no cost reported
    session_costing(engine, sibling.id, 2.0, started=MIDNIGHT)
    session_costing(engine, elsewhere.id, 9.0, started=MIDNIGHT + timedelta(hours=3))

    assert runs.spent_usd(engine, run.id, repository="octo/repo", since=MIDNIGHT) == (0.75, 2.25)
    assert runs.spent_usd(engine, sibling.id, repository="octo/repo", since=MIDNIGHT) == (2.0, 2.25)
