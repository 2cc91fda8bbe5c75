"""Missed deliveries: what GitHub failed to deliver and lanebot never stored is redelivered, once; while
serving, a pass at start-up, every LANEBOT_RECOVER_INTERVAL and soon after the intake answered 5xx."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest
import respx
from sqlalchemy.exc import OperationalError

import bot.web.recovery
from bot.cli import main
from bot.edges.github.client import GitHubApp
from bot.edges.settings import Settings, SettingsError
from bot.edges.store import db, deliveries
from bot.web.recovery import PASS_MARGIN, DeliveryRecovery, plan_recovery, recover
from tests.app_helpers import (
    as_app_delivery,
    make_settings,
    payload_files,
    post_delivery,
    private_key_pem,
    running_lanebot,
    settle,
)

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
ISSUE_OPENED = as_app_delivery(next(path for path in payload_files() if path.match("issues/opened.payload.json")))


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


def test_through_a_relay_channel_an_event_github_saw_delivered_but_lanebot_never_stored_is_missed():
    """The channel answers 200 whether or not lanebot was reading it: its 2xx says nothing of lanebot."""
    attempts = [attempt(2, "stored", 200, 1), attempt(1, "lost", 200, 2)]
    plan = plan_recovery(attempts, stored_ids={"stored"}, relayed=True)
    assert plan.delivered == ["stored"]
    assert [(missed.guid, missed.delivery_id) for missed in plan.missed] == [("lost", 1)]
    assert plan_recovery(attempts, stored_ids={"stored"}).missed == []  # without a relay, 200 is lanebot's


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


# -- while serving: a pass at start-up, then every interval, and soon after the intake answered 5xx --------


class FakeDeliveryLog:
    """GitHub's list of the App's delivery attempts (newest first) and its redelivery endpoint."""

    def __init__(self) -> None:
        self.attempts: list[dict] = []
        self.listed_since: list[datetime] = []
        self.redelivered: list[int] = []
        self.unreachable = False
        self.hold: asyncio.Event | None = None  # while set to an unset event, listing waits for it
        self.listing_now = 0
        self.most_listing_at_once = 0

    def app_client(self) -> FakeDeliveryLog:
        return self

    async def hook_deliveries(self, since: datetime) -> AsyncIterator[dict]:
        self.listed_since.append(since)
        self.listing_now += 1
        self.most_listing_at_once = max(self.most_listing_at_once, self.listing_now)
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.unreachable:
                raise httpx.ConnectError("All connection attempts failed")
            for item in self.attempts:
                if datetime.fromisoformat(item["delivered_at"].replace("Z", "+00:00")) >= since:
                    yield item
        finally:
            self.listing_now -= 1

    async def redeliver(self, delivery_id: int) -> None:
        self.redelivered.append(delivery_id)


class Sleeps:
    """The recovery loop's injected sleep: each call waits until the test ends it (no real time passes)."""

    def __init__(self) -> None:
        self._calls: asyncio.Queue[tuple[float, asyncio.Future[None]]] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._calls.put((seconds, ended))
        await ended

    async def next(self) -> tuple[float, asyncio.Future[None]]:
        """The sleep the loop is in now (one it gave up on, cancelled, is skipped)."""
        with anyio.fail_after(5):
            while True:
                seconds, ended = await self._calls.get()
                await asyncio.sleep(0)  # a sleep being cancelled right now is cancelled after this turn
                if not ended.cancelled():
                    return seconds, ended


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def sqlite_engine(sqlite_url):
    engine = db.make_engine(sqlite_url)
    yield engine
    engine.dispose()


def failed_attempt(delivery_id: int, guid: str, at: datetime, status_code: int = 503) -> dict:
    return {**attempt(delivery_id, guid, status_code, 0), "delivered_at": at.isoformat().replace("+00:00", "Z")}


def store(engine, guid: str) -> None:
    deliveries.record(
        engine, delivery_id=guid, event="issues", action="opened", installation_id=4242, repository=None, body=b"{}"
    )


def recovery_loop(engine, github: FakeDeliveryLog, clock: Clock, sleeps: Sleeps, **options) -> DeliveryRecovery:
    return DeliveryRecovery(github, engine, interval=300, soon_after_failure=20, clock=clock, sleep=sleeps, **options)


async def test_a_delivery_that_fails_after_start_up_is_redelivered_by_the_next_pass_and_only_once(sqlite_engine):
    github, clock, sleeps = FakeDeliveryLog(), Clock(NOW), Sleeps()
    recovery = recovery_loop(sqlite_engine, github, clock, sleeps)
    recovery.start()
    try:
        seconds, interval_over = await sleeps.next()  # the start-up pass is done: it looked back a day
        assert seconds == 300
        assert github.listed_since == [NOW - timedelta(hours=24)]
        assert github.redelivered == []

        # While lanebot serves, GitHub fails to deliver an event (lanebot was restarting, say).
        github.attempts.insert(0, failed_attempt(201, "guid-late", NOW + timedelta(seconds=100)))
        clock.now = NOW + timedelta(seconds=300)
        interval_over.set_result(None)
        _, interval_over = await sleeps.next()
        # The second pass looks back to where the first began, less the margin, and asks for it once.
        assert github.listed_since[1] == NOW - PASS_MARGIN
        assert github.redelivered == [201]

        # GitHub's redelivery is stored; the list still shows only failed attempts for it.
        store(sqlite_engine, "guid-late")
        clock.now = NOW + timedelta(seconds=600)
        interval_over.set_result(None)
        await sleeps.next()
        assert github.listed_since[2] == NOW + timedelta(seconds=300) - PASS_MARGIN
        assert github.redelivered == [201]  # stored: never asked for again
    finally:
        await recovery.stop()


async def test_a_pass_that_fails_is_logged_with_what_to_do_and_the_next_pass_covers_its_time_too(sqlite_engine, caplog):
    github, clock, sleeps = FakeDeliveryLog(), Clock(NOW), Sleeps()
    recovery = recovery_loop(sqlite_engine, github, clock, sleeps)
    recovery.start()
    try:
        _, interval_over = await sleeps.next()
        github.unreachable = True
        clock.now = NOW + timedelta(seconds=300)
        interval_over.set_result(None)
        _, interval_over = await sleeps.next()  # the loop goes on
        [warning] = [record for record in caplog.records if record.levelname == "WARNING"]
        assert "ConnectError" in warning.getMessage()
        assert "lanebot deliveries recover" in warning.getMessage()

        github.unreachable = False
        github.attempts.insert(0, failed_attempt(202, "guid-during-outage", NOW + timedelta(seconds=200)))
        clock.now = NOW + timedelta(seconds=600)
        interval_over.set_result(None)
        await sleeps.next()
        assert github.listed_since[2] == github.listed_since[1] == NOW - PASS_MARGIN
        assert github.redelivered == [202]
    finally:
        await recovery.stop()


async def test_deliveries_the_intake_answered_5xx_bring_one_pass_soon_however_many_they_are(sqlite_engine):
    github, clock, sleeps = FakeDeliveryLog(), Clock(NOW), Sleeps()
    recovery = recovery_loop(sqlite_engine, github, clock, sleeps)
    recovery.start()
    try:
        assert (await sleeps.next())[0] == 300
        for _ in range(20):  # a burst of 503s: a lock outlasted the store timeout
            recovery.delivery_failed()
        seconds, soon_over = await sleeps.next()
        assert seconds == 20  # not the rest of the 300 s
        recovery.delivery_failed()  # more of the burst while waiting: the same pass takes them
        github.attempts.insert(0, failed_attempt(203, "guid-locked-out", NOW + timedelta(seconds=5)))
        clock.now = NOW + timedelta(seconds=25)
        soon_over.set_result(None)
        seconds, _ = await sleeps.next()
        assert seconds == 300
        assert len(github.listed_since) == 2
        assert github.redelivered == [203]

        # Failing again at once waits twice as long (a database down for an hour is not asked about
        # every 20 s); an interval with no failure brings the delay back to 20 s.
        recovery.delivery_failed()
        seconds, soon_over = await sleeps.next()
        assert seconds == 40
        soon_over.set_result(None)
        seconds, interval_over = await sleeps.next()
        assert seconds == 300
        interval_over.set_result(None)
        assert (await sleeps.next())[0] == 300
        recovery.delivery_failed()
        assert (await sleeps.next())[0] == 20
    finally:
        await recovery.stop()


async def test_two_passes_never_run_at_once(sqlite_engine):
    github = FakeDeliveryLog()
    github.hold = asyncio.Event()
    recovery = DeliveryRecovery(github, sqlite_engine, interval=300)
    first = asyncio.create_task(recovery.run_pass())
    second = asyncio.create_task(recovery.run_pass())
    await asyncio.sleep(0.05)
    assert github.listing_now == 1
    github.hold.set()
    with anyio.fail_after(5):
        await asyncio.gather(first, second)
    assert (len(github.listed_since), github.most_listing_at_once) == (2, 1)


async def test_stopping_in_the_middle_of_a_pass_or_of_a_wait_is_clean(sqlite_engine):
    github, sleeps = FakeDeliveryLog(), Sleeps()
    github.hold = asyncio.Event()
    recovery = recovery_loop(sqlite_engine, github, Clock(NOW), sleeps)
    recovery.start()
    await asyncio.sleep(0.05)
    assert github.listing_now == 1
    with anyio.fail_after(5):
        await recovery.stop()
    assert github.listing_now == 0
    recovery.delivery_failed()  # after stopping: nothing happens

    github.hold = None
    recovery = recovery_loop(sqlite_engine, github, Clock(NOW), sleeps)
    recovery.start()
    await sleeps.next()
    with anyio.fail_after(5):
        await recovery.stop()


async def test_with_an_interval_of_0_only_the_start_up_pass_runs(sqlite_engine):
    github, sleeps = FakeDeliveryLog(), Sleeps()
    recovery = DeliveryRecovery(github, sqlite_engine, interval=0, sleep=sleeps)
    recovery.start()
    with anyio.fail_after(5):
        while not github.listed_since:
            await asyncio.sleep(0.01)
    recovery.delivery_failed()
    await asyncio.sleep(0.05)
    assert len(github.listed_since) == 1
    await recovery.stop()


def test_the_interval_is_a_setting_of_300_seconds_by_default_and_0_turns_the_repeats_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = {"APP_ID": "4711", "PRIVATE_KEY": private_key_pem(), "WEBHOOK_SECRET": "s"}
    assert Settings.load(app, env_file=None).recover_interval == 300
    assert Settings.load({**app, "LANEBOT_RECOVER_INTERVAL": "0"}, env_file=None).recover_interval == 0
    assert Settings.load({**app, "LANEBOT_RECOVER_INTERVAL": "60"}, env_file=None).recover_interval == 60
    for wrong in ("-1", "soon", "5m"):
        with pytest.raises(SettingsError) as refused:
            Settings.load({**app, "LANEBOT_RECOVER_INTERVAL": wrong}, env_file=None)
        assert refused.value.names == ("LANEBOT_RECOVER_INTERVAL",)
        assert f"LANEBOT_RECOVER_INTERVAL must be a number of seconds 0 or more, not {wrong!r}" in str(refused.value)


# -- the same, through the running app and GitHub's REST API ------------------------------------------------


def github_listing(router: respx.MockRouter, items: list[dict]) -> dict[str, respx.Route]:
    """GitHub's delivery log as the test edits `items` (newest first), and its redelivery endpoint."""
    return {
        "list": router.get(f"{API}/app/hook/deliveries").mock(side_effect=lambda _: httpx.Response(200, json=items)),
        "redeliver": router.post(url__regex=rf"{API}/app/hook/deliveries/\d+/attempts").mock(
            return_value=httpx.Response(202, json={})
        ),
    }


async def called(route: respx.Route, times: int) -> None:
    with anyio.fail_after(10):
        while route.call_count < times:
            await asyncio.sleep(0.01)


async def test_while_serving_a_delivery_that_failed_after_start_up_is_redelivered_and_stored_once(engine):
    items: list[dict] = []
    settings = make_settings(str(engine.url), recover_deliveries=True, recover_interval=0.1)
    with respx.mock(assert_all_called=False) as router:
        routes = github_listing(router, items)
        async with running_lanebot(engine, settings=settings) as (app, client):
            await called(routes["list"], 1)  # the start-up pass: nothing missed
            items.insert(0, failed_attempt(301, "guid-after-start", datetime.now(UTC), 502))
            await called(routes["redeliver"], 1)
            assert redelivered_ids(routes["redeliver"]) == [301]
            # GitHub sends it again; lanebot stores it; later passes leave it alone.
            answer = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="guid-after-start")
            assert answer.status_code == 202
            passes = routes["list"].call_count
            await called(routes["list"], passes + 3)
            await settle(app)
    assert redelivered_ids(routes["redeliver"]) == [301]
    assert deliveries.known_ids(engine, NOW - timedelta(days=3650)) == {"guid-after-start"}


async def test_a_delivery_the_intake_answered_500_is_asked_for_again_soon(engine, monkeypatch):
    monkeypatch.setattr(bot.web.recovery, "SOON_AFTER_FAILURE_SECONDS", 0.05)
    items: list[dict] = []
    settings = make_settings(str(engine.url), recover_deliveries=True, recover_interval=3600)
    real_record_many = deliveries.record_many

    def disk_error(*args, **kwargs):
        raise OperationalError("INSERT INTO deliveries ...", {}, sqlite3.OperationalError("disk I/O error"))

    with respx.mock(assert_all_called=False) as router:
        routes = github_listing(router, items)
        async with running_lanebot(engine, settings=settings) as (app, client):
            await called(routes["list"], 1)
            monkeypatch.setattr(deliveries, "record_many", disk_error)
            failed = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="guid-500")
            assert failed.status_code == 500
            items.insert(0, failed_attempt(302, "guid-500", datetime.now(UTC), 500))  # as GitHub shows it
            monkeypatch.setattr(deliveries, "record_many", real_record_many)
            await called(routes["redeliver"], 1)  # long before the 3600 s interval
            assert redelivered_ids(routes["redeliver"]) == [302]
            again = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="guid-500")
            await settle(app)
    assert again.status_code == 202
    assert routes["list"].call_count == 2
