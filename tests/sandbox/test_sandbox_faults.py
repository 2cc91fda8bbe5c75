"""The sandbox's test-only faults (bot/sandbox/faults.py): a chosen request is answered with an
error without being done, or is done and its answer cut off; each fault acts as often as it was
told to, on the requests it names, and says when it has.

Most tests drive the sandbox in-process (tests.sandbox.test_sandbox's harness); cutting an answer off
needs a real connection, so that test serves it on a loopback port.
"""

from __future__ import annotations

import time

import httpx
import jwt
import pytest

from bot.sandbox.faults import SECONDARY_RATE_LIMIT, Fault, FaultBook, FaultError
from tests.app_helpers import private_key_pem
from tests.sandbox.test_sandbox import harness
from tests.sandbox_helpers import APP_ID, SandboxRepository, served_sandbox

pytestmark = pytest.mark.anyio

COMMENTS = r"/repos/alice/demo/issues/\d+/comments"


async def test_a_status_fault_answers_with_githubs_error_without_doing_the_request_then_is_used_up(tmp_path, project):
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        auth = await h.token(repo["installation_id"])
        number = await h.issue("alice/demo")
        fault = h.sandbox.faults.add(Fault("POST", COMMENTS, status=502))

        refused = await h.http.post(f"/repos/alice/demo/issues/{number}/comments", headers=auth, json={"body": "one"})
        accepted = await h.http.post(f"/repos/alice/demo/issues/{number}/comments", headers=auth, json={"body": "two"})

        assert refused.status_code == 502
        assert refused.json() == {
            "message": "Bad Gateway",
            "documentation_url": "https://docs.github.com/rest",
            "status": "502",
        }
        assert accepted.status_code == 201
        issue = h.sandbox.state.repository("alice", "demo").issues[number]
        assert [h.sandbox.state.comments[i].body for i in issue.comment_ids] == ["two"]
        assert h.sandbox.faults.fired == [("POST", f"/repos/alice/demo/issues/{number}/comments", fault)]
        assert h.sandbox.faults.pending == []


async def test_a_fault_with_body_contains_passes_other_bodies_through_untouched(tmp_path, project):
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        auth = await h.token(repo["installation_id"])
        number = await h.issue("alice/demo")
        h.sandbox.faults.add(Fault("POST", COMMENTS, status=500, body_contains="<!-- marker -->"))

        plain = await h.http.post(f"/repos/alice/demo/issues/{number}/comments", headers=auth, json={"body": "hi"})
        marked = await h.http.post(
            f"/repos/alice/demo/issues/{number}/comments", headers=auth, json={"body": "<!-- marker --> hi"}
        )

        assert (plain.status_code, marked.status_code) == (201, 500)
        assert plain.json()["body"] == "hi"  # the body read to match the fault still reached the route


async def test_a_fault_for_every_request_acts_until_cleared_and_other_routes_are_untouched(tmp_path, project):
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        auth = await h.token(repo["installation_id"])
        h.sandbox.faults.add(Fault("GET", "/repos/alice/demo", status=503, times=None))

        answers = [(await h.http.get("/repos/alice/demo", headers=auth)).status_code for _ in range(3)]
        other = await h.http.get("/repos/alice/demo/labels", headers=auth)
        h.sandbox.faults.clear()
        after = await h.http.get("/repos/alice/demo", headers=auth)

        assert answers == [503, 503, 503] and other.status_code == 200 and after.status_code == 200
        assert len(h.sandbox.faults.fired) == 3


def test_a_dropped_answer_is_done_and_its_client_sees_the_connection_close(tmp_path):
    (tmp_path / "project").mkdir()
    with served_sandbox(tmp_path) as server:
        repository = SandboxRepository.create(server, tmp_path / "project", "alice/demo", {"README.md": "# demo\n"})
        number = repository.open_issue("An issue", "Text", login="alice")
        now = int(time.time())
        claims = {"iat": now - 60, "exp": now + 540, "iss": str(APP_ID)}
        app_jwt = jwt.encode(claims, private_key_pem(), algorithm="RS256")
        with httpx.Client(base_url=server.url) as http:
            minted = http.post(
                f"/app/installations/{repository.installation_id}/access_tokens",
                headers={"Authorization": f"Bearer {app_jwt}"},
            )
            auth = {"Authorization": f"token {minted.json()['token']}"}
            server.sandbox.faults.add(Fault("POST", COMMENTS, drop_answer=True))

            with pytest.raises(httpx.RemoteProtocolError):
                http.post(f"/repos/alice/demo/issues/{number}/comments", headers=auth, json={"body": "landed"})
            listed = http.get(f"/repos/alice/demo/issues/{number}/comments", headers=auth)

        assert [comment["body"] for comment in listed.json()] == ["landed"]
        repository.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"method": "GET", "path": "/x", "status": 502, "drop_answer": True}, "either a status to answer with or"),
        ({"method": "GET", "path": "/x"}, "either a status to answer with or drop_answer"),
        ({"method": "FETCH", "path": "/x", "status": 502}, "method must be one of GET, POST, PATCH, PUT, DELETE"),
        ({"method": "GET", "path": "(", "status": 502}, "path must be a regular expression"),
        ({"method": "GET", "path": "/x", "status": 200}, "status must be an error status from 400 to 599"),
        ({"method": "GET", "path": "/x", "status": "502"}, "'status' must be a whole number"),
        ({"method": "GET", "path": "/x", "status": 502, "times": 0}, "times must be at least 1"),
        ({"method": "GET", "path": "/x", "drop_answer": "yes"}, "'drop_answer' must be true or false"),
    ],
    ids=["both", "neither", "method", "path", "status", "status-text", "times", "drop-answer-text"],
)
async def test_the_human_api_refuses_a_fault_it_cannot_set_saying_what_was_wrong(tmp_path, project, body, message):
    async with harness(tmp_path, project) as h:
        response = await h.http.post("/_sandbox/faults", json=body)
        assert response.status_code == 422
        assert message in response.json()["message"]
        assert h.sandbox.faults.pending == []


async def test_the_human_api_sets_lists_and_clears_faults(tmp_path, project):
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo", private=False)
        added = await h.http.post(
            "/_sandbox/faults", json={"method": "get", "path": "/repos/alice/demo", "status": 500, "times": 2}
        )
        await h.http.get("/repos/alice/demo")
        listed = await h.http.get("/_sandbox/faults")
        cleared = await h.http.delete("/_sandbox/faults")

        assert added.status_code == 201
        assert added.json()["pending"] == [
            {
                "method": "GET",
                "path": "/repos/alice/demo",
                "status": 500,
                "drop_answer": False,
                "body_contains": None,
                "times": 2,
                "rate": None,
                "seed": None,
                "retry_after": None,
                "message": None,
                "delay": None,
            }
        ]
        assert [fired["path"] for fired in listed.json()["fired"]] == ["/repos/alice/demo"]
        assert listed.json()["pending"] != [] and cleared.json()["pending"] == []
        assert (await h.http.get("/repos/alice/demo")).status_code == 200


async def test_the_fault_routes_themselves_cannot_be_made_to_fail(tmp_path, project):
    async with harness(tmp_path, project) as h:
        h.sandbox.faults.add(Fault("DELETE", "/_sandbox/.*", status=500, times=None))
        assert (await h.http.delete("/_sandbox/faults")).status_code == 200
        assert h.sandbox.faults.pending == [] and h.sandbox.faults.fired == []


def test_a_fault_is_checked_when_it_is_made():
    with pytest.raises(FaultError, match="times must be at least 1"):
        Fault("GET", "/x", status=500, times=-1)
    assert Fault("get", "/repos/.+", status=500).matches("GET", "/repos/a/b", b"")
    assert not Fault("GET", "/repos", status=500).matches("GET", "/repos/a/b", b"")  # the whole path must match


def test_two_alike_faults_each_act_once():
    book = FaultBook()
    first, second = book.add(Fault("GET", "/x", status=500)), book.add(Fault("GET", "/x", status=500))
    taken = [book.take("GET", "/x", b"") for _ in range(3)]
    assert taken == [first, second, None]


async def test_a_secondary_rate_limit_fault_answers_with_retry_after_and_githubs_message(tmp_path, project):
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        auth = await h.token(repo["installation_id"])
        h.sandbox.faults.add(Fault("*", "/repos/alice/demo", status=403, retry_after=7, message=SECONDARY_RATE_LIMIT))

        limited = await h.http.get("/repos/alice/demo", headers=auth)

        assert limited.status_code == 403 and limited.headers["retry-after"] == "7"
        assert limited.json()["message"].startswith("You have exceeded a secondary rate limit")


def test_a_fault_with_a_rate_acts_on_that_share_of_matching_requests_and_a_seed_repeats_it():
    def picked(seed: int) -> list[bool]:
        book = FaultBook()
        book.add(Fault("*", "/x", status=502, times=None, rate=0.1, seed=seed))
        return [book.take(method, "/x", b"") is not None for method in ("GET", "POST") * 1000]

    first = picked(3)
    assert 150 <= sum(first) <= 250  # 10% of 2,000, well inside chance
    assert picked(3) == first and picked(4) != first


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ({"rate": 0}, "rate must be a share of the matching requests"),
        ({"rate": 1.5}, "rate must be a share of the matching requests"),
        ({"drop_answer": True, "status": None, "retry_after": 1}, "retry_after needs a status"),
        ({"retry_after": -1}, "retry_after needs a status"),
        ({"drop_answer": True, "status": None, "message": "x"}, "message needs a status"),
    ],
    ids=["rate-zero", "rate-above-one", "retry-after-without-status", "retry-after-negative", "message-without-status"],
)
def test_a_rate_retry_after_or_message_that_cannot_be_used_is_refused(fault, message):
    with pytest.raises(FaultError, match=message):
        Fault(**{"method": "GET", "path": "/x", "status": 500, **fault})


async def test_the_human_api_sets_a_fault_with_a_rate_and_a_retry_after(tmp_path, project):
    async with harness(tmp_path, project) as h:
        body = {
            "method": "*",
            "path": "/repos/.*",
            "status": 429,
            "times": None,
            "rate": 0.5,
            "seed": 1,
            "retry_after": 2,
        }
        added = await h.http.post("/_sandbox/faults", json=body)
        refused = await h.http.post("/_sandbox/faults", json={**body, "rate": "half"})

        assert added.status_code == 201
        assert added.json()["pending"][0] | body == added.json()["pending"][0]
        assert refused.status_code == 422 and "'rate' must be a number" in refused.json()["message"]


async def test_a_delay_fault_holds_the_request_then_does_it(tmp_path, project):
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        auth = await h.token(repo["installation_id"])
        number = await h.issue("alice/demo")
        h.sandbox.faults.add(Fault("POST", COMMENTS, delay=0.3, body_contains="late"))

        started = time.monotonic()
        held = await h.http.post(f"/repos/alice/demo/issues/{number}/comments", headers=auth, json={"body": "late"})

        assert held.status_code == 201 and time.monotonic() - started >= 0.3
        assert len(h.sandbox.faults.fired) == 1
        with pytest.raises(FaultError, match="a delay is seconds"):
            Fault("GET", "/x", status=500, delay=1)
