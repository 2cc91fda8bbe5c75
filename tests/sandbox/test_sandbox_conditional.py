"""The sandbox answers conditional requests as GitHub does: an ETag on every GET's 200, Last-Modified
on a single resource with `updated_at`, 304 with no body on a matching If-None-Match (or an
If-Modified-Since not older than Last-Modified), and a 304 does not count against the rate limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sandbox.test_sandbox import harness

pytestmark = pytest.mark.anyio


async def test_a_get_carries_an_etag_and_a_matching_if_none_match_is_304_with_no_body(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        url = "/repos/alice/demo/contents/.github/lanebot.yml"
        first = await h.http.get(url, headers=token)
        etag = first.headers["etag"]
        assert first.status_code == 200 and etag.startswith('W/"')
        assert "Authorization" in first.headers["vary"]

        again = await h.http.get(url, headers={**token, "If-None-Match": etag})

        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == etag
        assert (await h.http.get(url, headers={**token, "If-None-Match": 'W/"other", ' + etag})).status_code == 304
        assert (await h.http.get(url, headers={**token, "If-None-Match": "*"})).status_code == 304
        assert (await h.http.get(url, headers={**token, "If-None-Match": 'W/"other"'})).status_code == 200


async def test_a_304_does_not_count_against_the_rate_limit_and_a_200_does(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        first = await h.http.get("/repos/alice/demo", headers=token)
        remaining = int(first.headers["x-ratelimit-remaining"])

        unchanged = await h.http.get("/repos/alice/demo", headers={**token, "If-None-Match": first.headers["etag"]})
        read_again = await h.http.get("/repos/alice/demo", headers=token)

        assert unchanged.status_code == 304 and int(unchanged.headers["x-ratelimit-remaining"]) == remaining
        assert int(read_again.headers["x-ratelimit-remaining"]) == remaining - 1


async def test_a_change_makes_a_new_etag_so_the_old_one_gets_the_new_body(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        url = "/repos/alice/demo/issues/1/comments"
        before = await h.http.get(url, headers=token)
        await h.http.post(url, headers=token, json={"body": "new"})

        after = await h.http.get(url, headers={**token, "If-None-Match": before.headers["etag"]})

        assert after.status_code == 200 and [c["body"] for c in after.json()] == ["new"]
        assert after.headers["etag"] != before.headers["etag"]


async def test_another_token_gets_another_etag_as_githubs_vary_authorization_says(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        first_token = await h.token(repo["installation_id"])
        second_token = await h.token(repo["installation_id"])
        etag = (await h.http.get("/repos/alice/demo", headers=first_token)).headers["etag"]

        other = await h.http.get("/repos/alice/demo", headers={**second_token, "If-None-Match": etag})

        assert other.status_code == 200 and other.headers["etag"] != etag


async def test_a_single_resource_has_last_modified_and_if_modified_since_is_304_until_it_changes(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        first = await h.http.get("/repos/alice/demo/issues/1", headers=token)
        modified = first.headers["last-modified"]
        assert modified.endswith(" GMT")

        unchanged = await h.http.get("/repos/alice/demo/issues/1", headers={**token, "If-Modified-Since": modified})
        h.clock.advance(seconds=5)
        await h.http.patch("/repos/alice/demo/issues/1", headers=token, json={"title": "Renamed"})
        changed = await h.http.get("/repos/alice/demo/issues/1", headers={**token, "If-Modified-Since": modified})

        assert unchanged.status_code == 304
        assert changed.status_code == 200 and changed.json()["title"] == "Renamed"
        assert "last-modified" not in (await h.http.get("/repos/alice/demo/issues/1/comments", headers=token)).headers


async def test_if_none_match_wins_over_if_modified_since(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        modified = (await h.http.get("/repos/alice/demo/issues/1", headers=token)).headers["last-modified"]

        answer = await h.http.get(
            "/repos/alice/demo/issues/1",
            headers={**token, "If-Modified-Since": modified, "If-None-Match": 'W/"stale"'},
        )

        assert answer.status_code == 200


async def test_the_request_log_shows_a_304_as_such(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        etag = (await h.http.get("/repos/alice/demo", headers=token)).headers["etag"]
        await h.http.get("/repos/alice/demo", headers={**token, "If-None-Match": etag})

        assert h.sandbox.served[-2:] == [("GET", "/repos/alice/demo", 200), ("GET", "/repos/alice/demo", 304)]
