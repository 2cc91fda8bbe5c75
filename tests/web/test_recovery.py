"""Missed deliveries: what GitHub failed to deliver and lanebot never stored is redelivered, once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import respx

from bot.cli import main
from bot.edges.github.client import GitHubApp
from bot.edges.store import deliveries
from bot.web.recovery import plan_recovery, recover
from tests.app_helpers import make_settings, private_key_pem

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)


def attempt(
    delivery_id: int,
    guid: str,
    status_code: int,
    hours_ago: float,
    *,
    redelivery: bool = False,
    event: str = "issues",
    action: str | None = "opened",
) -> dict:
    """One item of `GET /app/hook/deliveries`, shaped as GitHub's REST docs show it."""
    return {
        "id": delivery_id,
        "guid": guid,
        "delivered_at": (NOW - timedelta(hours=hours_ago)).isoformat().replace("+00:00", "Z"),
        "redelivery": redelivery,
        "duration": 0.27,
        "status": "OK"
        if 200 <= status_code < 300
        else ("timed out" if status_code == 0 else f"Invalid HTTP Response: {status_code}"),
        "status_code": status_code,
        "event": event,
        "action": action,
        "installation_id": 4242,
        "repository_id": 1296269,
        "throttled_at": None,
    }


# Newest first, as GitHub lists them, over two pages; the second page runs past the window.
PAGE_1 = [
    attempt(110, "guid-retried-ok", 200, 1, redelivery=True),
    attempt(109, "guid-missed", 503, 2),
    attempt(108, "guid-stored", 500, 3),
    attempt(107, "guid-retried-ok", 502, 4),
]
PAGE_2 = [
    attempt(106, "guid-timed-out", 0, 5, event="issue_comment", action="created"),
    attempt(105, "guid-missed", 504, 6),
    attempt(104, "guid-fine", 202, 7),
    attempt(103, "guid-too-old", 500, 30),
]
PAGE_3 = [attempt(102, "guid-older-still", 500, 40)]


def mock_github(router: respx.MockRouter, *, refuse: set[int] = frozenset()) -> dict[str, respx.Route]:
    pages = {None: (PAGE_1, "v1_page2"), "v1_page2": (PAGE_2, "v1_page3"), "v1_page3": (PAGE_3, None)}

    def list_page(request: httpx.Request) -> httpx.Response:
        items, next_cursor = pages[request.url.params.get("cursor")]
        headers = {}
        if next_cursor:
            headers["Link"] = f'<{API}/app/hook/deliveries?per_page=100&cursor={next_cursor}>; rel="next"'
        return httpx.Response(200, json=items, headers=headers)

    def redeliver(request: httpx.Request, delivery_id: str) -> httpx.Response:
        if int(delivery_id) in refuse:
            return httpx.Response(422, json={"message": "Validation Failed"})
        return httpx.Response(202, json={})

    return {
        "list": router.get(f"{API}/app/hook/deliveries").mock(side_effect=list_page),
        "redeliver": router.post(url__regex=rf"{API}/app/hook/deliveries/(?P<delivery_id>\d+)/attempts").mock(
            side_effect=redeliver
        ),
    }


def redelivered_ids(route: respx.Route) -> list[int]:
    return [int(call.request.url.path.split("/")[-2]) for call in route.calls]


async def test_only_events_that_failed_and_were_never_stored_are_redelivered(engine):
    deliveries.record(
        engine,
        delivery_id="guid-stored",
        event="issues",
        action="opened",
        installation_id=4242,
        repository="Codertocat/Hello-World",
        body=b"{}",
        received_at=NOW - timedelta(hours=3),
    )
    with respx.mock(assert_all_called=False) as router:
        routes = mock_github(router)
        async with GitHubApp(make_settings()) as github:
            report = await recover(github, engine, timedelta(hours=24), now=NOW)

    # Each missed event once, through its newest attempt, the event first attempted earliest first.
    assert redelivered_ids(routes["redeliver"]) == [109, 106]
    assert [missed.guid for missed in report.redelivered] == ["guid-missed", "guid-timed-out"]
    assert report.stored_despite_failure == ["guid-stored"]
    assert report.delivered == 2  # guid-retried-ok (a failed then a successful attempt) and guid-fine
    assert (report.attempts_listed, report.events_listed) == (7, 5)
    # Listing stopped at the first attempt older than the window: page 3 was never asked for.
    cursors = [call.request.url.params.get("cursor") for call in routes["list"].calls]
    assert cursors == [None, "v1_page2"]
    # The App authenticates with its JWT for both endpoints.
    assert all(call.request.headers["authorization"].startswith("Bearer ") for call in router.calls)


async def test_a_refused_redelivery_is_reported_and_the_others_still_go(engine):
    with respx.mock(assert_all_called=False) as router:
        routes = mock_github(router, refuse={106})
        async with GitHubApp(make_settings()) as github:
            report = await recover(github, engine, timedelta(hours=24), now=NOW)
    assert redelivered_ids(routes["redeliver"]) == [109, 106, 108]
    assert [missed.guid for missed in report.redelivered] == ["guid-missed", "guid-stored"]
    [(refused, why)] = report.not_redelivered
    assert refused.guid == "guid-timed-out"
    assert "Validation Failed" in why
    assert any(line.startswith("redelivery refused: issue_comment.created guid-timed-out") for line in report.lines())


def test_an_event_with_any_successful_attempt_needs_nothing():
    plan = plan_recovery([attempt(2, "g", 200, 1, redelivery=True), attempt(1, "g", 500, 2)], stored_ids=set())
    assert (plan.delivered, plan.missed) == (["g"], [])


def test_an_event_whose_attempts_all_failed_is_redelivered_through_its_newest_attempt():
    plan = plan_recovery([attempt(3, "g", 500, 1, redelivery=True), attempt(1, "g", 404, 2)], stored_ids=set())
    [missed] = plan.missed
    assert (missed.guid, missed.delivery_id, missed.attempts, missed.last_status_code) == ("g", 3, 2, 500)


def test_an_event_lanebot_stored_is_not_redelivered_even_if_github_saw_a_failure():
    plan = plan_recovery([attempt(1, "g", 0, 1)], stored_ids={"g"})
    assert (plan.stored_despite_failure, plan.missed) == (["g"], [])


def test_lanebot_deliveries_recover_prints_what_it_did(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("PRIVATE_KEY_PATH", "GITHUB_API_URL", "WEBHOOK_PATH", "LANEBOT_RECOVER_DELIVERIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APP_ID", "4711")
    monkeypatch.setenv("PRIVATE_KEY", private_key_pem())
    monkeypatch.setenv("WEBHOOK_SECRET", "s")
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'lanebot.db'}")
    items = [{**item, "delivered_at": (datetime.now(UTC) - timedelta(hours=1)).isoformat()} for item in PAGE_1]
    with respx.mock() as router:
        router.get(f"{API}/app/hook/deliveries").mock(return_value=httpx.Response(200, json=items))
        redeliver = router.post(f"{API}/app/hook/deliveries/109/attempts").mock(
            return_value=httpx.Response(202, json={})
        )
        router.post(f"{API}/app/hook/deliveries/108/attempts").mock(return_value=httpx.Response(202, json={}))
        status = main(["deliveries", "recover", "--since", "24h"])
    out = capsys.readouterr().out
    assert status == 0
    assert redeliver.called
    assert "4 delivery attempts for 3 events" in out
    assert "redelivery requested: issues.opened guid-missed (attempt 109" in out


def test_lanebot_deliveries_recover_refuses_a_duration_it_cannot_read(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["deliveries", "recover", "--since", "yesterday"])
    assert exited.value.code == 2
    assert "'yesterday' is not a duration such as 30m, 24h or 3d" in capsys.readouterr().err
