"""People in the sandbox as on github.com: an admin gives, changes and takes away collaborators' roles
(GitHub sends `member` added, edited, removed), and a person renames their account (the id stays, the
old login is free for someone else, whom `GET /users/{username}` then shows with a new id)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sandbox.test_sandbox import harness

pytestmark = pytest.mark.anyio

REPO = "acme/demo"
HUMAN = f"/_sandbox/repos/{REPO}"


async def test_giving_changing_and_removing_a_role_sends_member_added_edited_removed(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository(REPO, organization=True)
        await h.http.post(f"{HUMAN}/collaborators", json={"login": "carol", "role": "write"})
        await h.http.post(f"{HUMAN}/collaborators", json={"login": "carol", "role": "write"})  # no change: no event
        await h.http.post(f"{HUMAN}/collaborators", json={"login": "carol", "role": "read"})
        removed = await h.http.delete(f"{HUMAN}/collaborators/carol")
        assert removed.status_code == 200 and removed.json()["collaborators"] == {}
        assert await h.delivered() == [("member", "added"), ("member", "edited"), ("member", "removed")]
        payloads = [json.loads(request.content) for request in h.receiver.requests]
        assert {p["member"]["login"] for p in payloads} == {"carol"}
        assert payloads[1]["changes"] == {"old_permission": {"from": "write"}}
        assert all(p["repository"]["full_name"] == REPO and p["organization"]["login"] == "acme" for p in payloads)


async def test_removing_someone_who_is_no_collaborator_is_a_404(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository(REPO, organization=True)
        response = await h.http.delete(f"{HUMAN}/collaborators/nobody")
        assert response.status_code == 404 and "is not a collaborator" in response.json()["message"]
        assert await h.delivered() == []


async def test_taking_a_role_away_takes_the_permission_away(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository(REPO, organization=True)
        await h.http.post(f"{HUMAN}/collaborators", json={"login": "carol", "role": "write"})
        await h.http.delete(f"{HUMAN}/collaborators/carol")
        token = await h.token(repo["installation_id"])
        body = (await h.http.get(f"/repos/{REPO}/collaborators/carol/permission", headers=token)).json()
        assert (body["permission"], body["role_name"]) == ("none", "none")


async def test_a_renamed_login_can_be_registered_by_someone_else_with_another_id(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository(REPO, organization=True)
        await h.http.post(f"{HUMAN}/collaborators", json={"login": "ana", "role": "write"})
        first = (await h.http.get("/users/ana")).json()
        renamed = await h.http.post("/_sandbox/users/ana/rename", json={"login": "ana-old"})
        assert renamed.json() == {"login": "ana-old", "id": first["id"]}
        assert (await h.http.get("/users/ana")).status_code == 404  # the old login is free
        assert (await h.http.get("/users/ana-old")).json()["id"] == first["id"]
        # Someone else registers "ana" (appearing when they first act) and is given write too.
        await h.http.post(f"{HUMAN}/collaborators", json={"login": "ana", "role": "write"})
        newcomer = (await h.http.get("/users/ana")).json()
        assert newcomer["id"] != first["id"]
        token = await h.token(repo["installation_id"])
        kept = (await h.http.get(f"/repos/{REPO}/collaborators/ana-old/permission", headers=token)).json()
        assert kept["role_name"] == "write" and kept["user"]["id"] == first["id"]  # the role followed the person


async def test_a_rename_to_a_taken_or_malformed_login_is_refused(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository(REPO, organization=True)
        for login in ("ana", "bob"):
            await h.http.post(f"{HUMAN}/collaborators", json={"login": login, "role": "read"})
        taken = await h.http.post("/_sandbox/users/ana/rename", json={"login": "BOB"})
        assert taken.status_code == 422 and "already taken" in taken.json()["message"]
        malformed = await h.http.post("/_sandbox/users/ana/rename", json={"login": "no spaces"})
        assert malformed.status_code == 422
        owner = await h.http.post("/_sandbox/users/acme/rename", json={"login": "acme2"})
        assert owner.status_code == 422
