"""lanebot's comments, reactions and labels on an issue, against GitHub mocked at the HTTP level.

Response bodies follow GitHub's REST documentation (issue comments, reactions, labels). The client
is lanebot's own (its retry policy decides what is repeated); sleeping is injected, never done.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import respx
from gidgethub import BadRequest

from bot.core.labels import STATE_LABELS, label_for
from bot.core.text import marker
from bot.edges.github.client import LanebotAPI
from bot.edges.github.issues import (
    add_reaction,
    ensure_trigger_label,
    list_comments,
    post_or_update_marked_comment,
    set_state_label,
)

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
REPO = "octocat/hello-world"
ISSUE = f"{API}/repos/{REPO}/issues/7"
GATE = marker("gate", 3, rev=1)


class Waits(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as http:
        yield LanebotAPI(http, base_url=API, sleep=Waits())


def comment(number: int, body: str, login: str = "lanebot[bot]", kind: str = "Bot") -> dict[str, Any]:
    return {
        "id": number,
        "node_id": f"IC_{number}",
        "url": f"{API}/repos/{REPO}/issues/comments/{number}",
        "html_url": f"https://github.com/{REPO}/issues/7#issuecomment-{number}",
        "body": body,
        "user": {"login": login, "id": 100 + number, "type": kind, "site_admin": False},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "issue_url": ISSUE,
        "author_association": "NONE",
    }


def label(name: str, color: str = "ededed", description: str | None = None) -> dict[str, Any]:
    return {
        "id": abs(hash(name)) % 10**9,
        "node_id": f"LA_{name}",
        "url": f"{API}/repos/{REPO}/labels/{name}",
        "name": name,
        "description": description,
        "color": color,
        "default": False,
    }


class IssueComments:
    """The issue's comments as GitHub keeps them: listed, created and edited through the API."""

    def __init__(
        self,
        mock: respx.MockRouter,
        *existing: dict[str, Any],
        lose_first_answer: bool = False,
        lose_before_creating: bool = False,
    ) -> None:
        self.comments = list(existing)
        self.lose_first_answer = lose_first_answer
        self.lose_before_creating = lose_before_creating
        self.posts = mock.post(f"{ISSUE}/comments").mock(side_effect=self.create)
        self.lists = mock.get(url__regex=rf"{ISSUE}/comments(\?.*)?$").mock(side_effect=self.list)
        self.patches = mock.patch(url__regex=rf"{API}/repos/{REPO}/issues/comments/\d+$").mock(side_effect=self.edit)

    def list(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self.comments)

    def create(self, request: httpx.Request) -> httpx.Response:
        if self.lose_before_creating:
            self.lose_before_creating = False
            raise httpx.ReadTimeout("the answer never came", request=request)
        created = comment(1000 + len(self.comments), json.loads(request.content)["body"])
        self.comments.append(created)
        if self.lose_first_answer:
            self.lose_first_answer = False
            raise httpx.ReadTimeout("GitHub created the comment, but its answer never came", request=request)
        return httpx.Response(201, json=created)

    def edit(self, request: httpx.Request) -> httpx.Response:
        number = int(request.url.path.rsplit("/", 1)[1])
        found = next(item for item in self.comments if item["id"] == number)
        found["body"] = json.loads(request.content)["body"]
        return httpx.Response(200, json=found)


# --------------------------------------------------------------------------- comments


@respx.mock
async def test_a_marked_comment_is_created_when_lanebot_has_none_on_the_issue(client):
    issue = IssueComments(respx.mock, comment(1, "Please split this.", login="octocat", kind="User"))
    created = await post_or_update_marked_comment(client, REPO, 7, f"{GATE}\nThe plan", marker=GATE)
    assert created["body"] == f"{GATE}\nThe plan"
    assert issue.posts.call_count == 1 and issue.patches.call_count == 0


@respx.mock
async def test_the_existing_marked_comment_is_edited_instead_of_posting_another(client):
    issue = IssueComments(respx.mock, comment(5, f"{GATE}\nold plan"))
    edited = await post_or_update_marked_comment(client, REPO, 7, f"{GATE}\nnew plan", marker=GATE)
    assert edited["id"] == 5 and issue.comments[0]["body"] == f"{GATE}\nnew plan"
    assert issue.posts.call_count == 0 and issue.patches.call_count == 1


@respx.mock
async def test_an_unchanged_marked_comment_is_left_alone(client):
    issue = IssueComments(respx.mock, comment(5, f"{GATE}\nthe plan"))
    await post_or_update_marked_comment(client, REPO, 7, f"{GATE}\nthe plan", marker=GATE)
    assert issue.posts.call_count == 0 and issue.patches.call_count == 0


@respx.mock
async def test_a_human_quoting_the_marker_does_not_make_the_comment_lanebots(client):
    issue = IssueComments(respx.mock, comment(5, f"{GATE}\nI copied this", login="mallory", kind="User"))
    await post_or_update_marked_comment(client, REPO, 7, f"{GATE}\nthe plan", marker=GATE)
    assert issue.posts.call_count == 1 and issue.comments[0]["body"] == f"{GATE}\nI copied this"


@respx.mock
async def test_a_lost_answer_after_github_created_the_comment_does_not_make_a_duplicate(client):
    issue = IssueComments(respx.mock, lose_first_answer=True)
    found = await post_or_update_marked_comment(client, REPO, 7, f"{GATE}\nthe plan", marker=GATE)
    assert [item["body"] for item in issue.comments] == [f"{GATE}\nthe plan"]
    assert found["id"] == issue.comments[0]["id"]
    assert issue.posts.call_count == 1  # looked for first, found it, posted nothing more


@respx.mock
async def test_a_post_lost_before_github_created_it_is_posted_again_once(client):
    issue = IssueComments(respx.mock, lose_before_creating=True)
    await post_or_update_marked_comment(client, REPO, 7, f"{GATE}\nthe plan", marker=GATE)
    assert [item["body"] for item in issue.comments] == [f"{GATE}\nthe plan"]
    assert issue.posts.call_count == 2


async def test_a_body_without_its_marker_is_refused_before_any_request(client):
    with pytest.raises(ValueError, match="must contain its marker"):
        await post_or_update_marked_comment(client, REPO, 7, "no marker here", marker=GATE)


@respx.mock
async def test_every_page_of_comments_is_listed(client):
    second = f"{API}/repositories/1/issues/7/comments?per_page=100&page=2"
    respx.get(second).respond(200, json=[comment(2, "second page")])
    respx.get(f"{ISSUE}/comments?per_page=100").respond(
        200, json=[comment(1, "first page")], headers={"link": f'<{second}>; rel="next", <{second}>; rel="last"'}
    )
    assert [item["body"] for item in await list_comments(client, REPO, 7)] == ["first page", "second page"]


# --------------------------------------------------------------------------- reactions


@respx.mock
async def test_an_accepted_command_gets_the_eyes_reaction_on_its_comment(client):
    route = respx.post(f"{API}/repos/{REPO}/issues/comments/42/reactions").respond(
        201,
        json={
            "id": 1,
            "node_id": "REA_1",
            "content": "eyes",
            "created_at": "2026-01-01T00:00:00Z",
            "user": {"login": "lanebot[bot]", "type": "Bot"},
        },
    )
    await add_reaction(client, REPO, 42)
    assert json.loads(route.calls.last.request.content) == {"content": "eyes"}


# --------------------------------------------------------------------------- labels


@respx.mock
async def test_the_trigger_label_is_created_with_colour_and_description_when_the_repository_lacks_it(client):
    respx.get(f"{API}/repos/{REPO}/labels/lanebot").respond(404, json={"message": "Not Found"})
    created = respx.post(f"{API}/repos/{REPO}/labels").respond(201, json=label("lanebot"))
    assert await ensure_trigger_label(client, REPO, "lanebot") is True
    [body] = [json.loads(call.request.content) for call in created.calls]
    assert body["name"] == "lanebot" and len(body["color"]) == 6 and body["description"]


@respx.mock
async def test_a_trigger_label_that_is_there_costs_one_read(client):
    respx.get(f"{API}/repos/{REPO}/labels/plan-me").respond(200, json=label("plan-me", "5319e7"))
    created = respx.post(f"{API}/repos/{REPO}/labels")
    assert await ensure_trigger_label(client, REPO, "plan-me") is False
    assert not created.called


@respx.mock
async def test_a_label_someone_else_created_meanwhile_is_fine(client):
    respx.get(f"{API}/repos/{REPO}/labels/lanebot").respond(404, json={"message": "Not Found"})
    already = {
        "message": "Validation Failed",
        "errors": [{"resource": "Label", "code": "already_exists", "field": "name"}],
        "documentation_url": "https://docs.github.com/rest/issues/labels#create-a-label",
    }
    respx.post(f"{API}/repos/{REPO}/labels").respond(422, json=already)
    assert await ensure_trigger_label(client, REPO, "lanebot") is False


@respx.mock
async def test_another_validation_failure_when_creating_a_label_is_raised(client):
    respx.get(f"{API}/repos/{REPO}/labels/lanebot").respond(404, json={"message": "Not Found"})
    invalid = {
        "message": "Validation Failed",
        "errors": [{"resource": "Label", "code": "invalid", "field": "color"}],
        "documentation_url": "https://docs.github.com/rest/issues/labels#create-a-label",
    }
    respx.post(f"{API}/repos/{REPO}/labels").respond(422, json=invalid)
    with pytest.raises(BadRequest):
        await ensure_trigger_label(client, REPO, "lanebot")


class IssueLabels:
    """The issue's labels as GitHub keeps them, with every intermediate set recorded. A label the
    repository lacks is made as GitHub makes it when an issue gets it: grey, no description."""

    def __init__(self, mock: respx.MockRouter, *names: str, repository_lacks: tuple[str, ...] = ()) -> None:
        self.names = list(names)
        self.seen: list[list[str]] = []
        lacking = {name.casefold() for name in repository_lacks}
        self.styles = {spec.name: (spec.color, spec.description) for spec in STATE_LABELS if spec.name not in lacking}
        mock.get(f"{ISSUE}/labels?per_page=100").mock(side_effect=lambda _: httpx.Response(200, json=self.listed()))
        self.adds = mock.post(f"{ISSUE}/labels").mock(side_effect=self.add)
        self.removes = mock.delete(url__regex=rf"{ISSUE}/labels/.+").mock(side_effect=self.remove)
        self.sets = mock.put(f"{ISSUE}/labels").mock(side_effect=self.set)
        self.restyles = mock.patch(url__regex=rf"{API}/repos/{REPO}/labels/.+").mock(side_effect=self.restyle)

    def listed(self) -> list[dict[str, Any]]:
        return [label(name, *self.styles.setdefault(name, ("ededed", None))) for name in self.names]

    def restyle(self, request: httpx.Request) -> httpx.Response:
        name = unquote(httpx.URL(request.url).path.rsplit("/", 1)[1])
        body = json.loads(request.content)
        self.styles[name] = (body["color"], body["description"])
        return httpx.Response(200, json=label(name, *self.styles[name]))

    def add(self, request: httpx.Request) -> httpx.Response:
        self.names += [name for name in json.loads(request.content)["labels"] if name not in self.names]
        self.seen.append(list(self.names))
        return httpx.Response(200, json=self.listed())

    def set(self, request: httpx.Request) -> httpx.Response:
        self.names = list(dict.fromkeys(json.loads(request.content)["labels"]))
        self.seen.append(list(self.names))
        return httpx.Response(200, json=self.listed())

    def remove(self, request: httpx.Request) -> httpx.Response:
        name = httpx.URL(request.url).path.rsplit("/", 1)[1]
        if name not in self.names:
            return httpx.Response(404, json={"message": "Label does not exist"})
        self.names.remove(name)
        self.seen.append(list(self.names))
        return httpx.Response(200, json=self.listed())


@respx.mock
async def test_the_state_label_is_swapped_in_one_write_and_other_labels_stay(client):
    issue = IssueLabels(respx.mock, "bug", "lanebot", "lanebot:planning")
    changes = await set_state_label(client, REPO, 7, "awaiting_approval")
    assert (changes.add, changes.remove) == (("lanebot:awaiting-approval",), ("lanebot:planning",))
    assert issue.seen == [["bug", "lanebot", "lanebot:awaiting-approval"]]
    assert (issue.sets.call_count, issue.adds.call_count, issue.removes.call_count) == (1, 0, 0)


@respx.mock
async def test_a_label_with_none_to_remove_is_added_leaving_the_others_alone(client):
    issue = IssueLabels(respx.mock, "bug", "lanebot")
    await set_state_label(client, REPO, 7, "planning")
    assert issue.names == ["bug", "lanebot", "lanebot:planning"]
    assert (issue.adds.call_count, issue.sets.call_count) == (1, 0)


@respx.mock
async def test_a_stray_second_state_label_is_removed_too(client):
    issue = IssueLabels(respx.mock, "lanebot:running", "lanebot:failed")
    await set_state_label(client, REPO, 7, "running")
    assert issue.names == ["lanebot:running"] and issue.adds.call_count == 0


@respx.mock
async def test_a_rejected_run_leaves_no_state_label_even_one_listed_that_is_gone_by_now(client):
    issue = IssueLabels(respx.mock, "lanebot:awaiting-approval")
    respx.get(f"{ISSUE}/labels?per_page=100").respond(
        200, json=[label("lanebot:awaiting-approval"), label("lanebot:blocked")]
    )  # blocked is gone by now
    await set_state_label(client, REPO, 7, "rejected")
    assert issue.names == [] and issue.sets.call_count == 1


@respx.mock
async def test_a_state_label_the_repository_lacks_is_made_by_github_then_given_lanebots_look_once(client):
    issue = IssueLabels(respx.mock, "bug", "lanebot:planning", repository_lacks=("lanebot:awaiting-approval",))
    await set_state_label(client, REPO, 7, "awaiting_approval")
    [restyled] = issue.restyles.calls
    assert unquote(restyled.request.url.path).endswith("/labels/lanebot:awaiting-approval")
    assert issue.styles["lanebot:awaiting-approval"] == (
        label_for("awaiting_approval").color,
        label_for("awaiting_approval").description,
    )

    await set_state_label(client, REPO, 7, "planning")
    await set_state_label(client, REPO, 7, "awaiting_approval")
    assert issue.restyles.call_count == 1


@respx.mock
async def test_a_restyle_github_refuses_leaves_the_state_label_set_and_is_only_logged(client, caplog):
    issue = IssueLabels(respx.mock, "lanebot:planning", repository_lacks=("lanebot:running",))
    issue.restyles.respond(403, json={"message": "Resource not accessible by integration"})
    changes = await set_state_label(client, REPO, 7, "running")
    assert changes.add == ("lanebot:running",) and issue.names == ["lanebot:running"]
    assert "could not give lanebot:running its colour" in caplog.text


@respx.mock
async def test_a_state_label_a_person_restyled_grey_with_a_description_is_left_as_it_is(client):
    issue = IssueLabels(respx.mock, "lanebot:planning")
    issue.styles["lanebot:running"] = ("ededed", "ours, in grey")
    await set_state_label(client, REPO, 7, "running")
    assert issue.restyles.call_count == 0 and issue.styles["lanebot:running"] == ("ededed", "ours, in grey")


@respx.mock
async def test_the_right_label_already_there_means_no_request_at_all(client):
    issue = IssueLabels(respx.mock, "lanebot:done")
    changes = await set_state_label(client, REPO, 7, "done")
    assert not changes and issue.adds.call_count == 0 and issue.removes.call_count == 0
