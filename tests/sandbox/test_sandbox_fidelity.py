"""The sandbox against GitHub itself: its webhook payloads against GitHub's real examples, its REST
routes against GitHub's documented routes.

Payloads: a scenario drives the sandbox through every (event, action) it can emit, on a repository
owned by a user and on one owned by an organization, capturing what it delivers. Each payload is
compared with the example for the same event and action under shared/github/webhooks, key by key
and recursively: the same names, the same JSON types. A null in the example matches any type;
arrays are compared on their first elements. A key the example lacks is accepted only where
another of GitHub's examples has it at the same path (examples of different ages differ), and is
then held to that example's type. The few other allowances are listed below, each with the reason
GitHub gives for it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from bot.sandbox import Sandbox, SandboxConfig, create_app, generate_app_key, served_rest_routes
from bot.sandbox.events import EMITTED

EXAMPLES = Path("/work/shared/github/webhooks")
APP_ID = 4242
SANDBOX_URL = "http://sandbox.test"
MISSING = object()

# Events GitHub has no example for, held to the example GitHub documents as having the same shape.
SUBSTITUTE_EXAMPLES = {
    # docs.github.com/en/webhooks/webhook-events-and-payloads#issues: "closed" and "reopened" carry
    # the same properties (issue, repository, sender, installation, organization).
    ("issues", "closed"): ("issues", "reopened"),
}

# Keys GitHub adds only in some circumstances, with the shape they then have.
CONDITIONAL_KEYS: dict[str, Any] = {
    # Deliveries to a GitHub App carry the installation (shared/github/webhooks/README.md;
    # docs.github.com/en/webhooks/webhook-events-and-payloads, "installation" in every event).
    ".installation": {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="},
    # "organization: present when the webhook is configured for an organization, or when the event
    # occurs from activity in a repository owned by an organization" (same page). Shape: the
    # organization object of check_run/requested_action.payload.json.
    ".organization": json.loads((EXAMPLES / "check_run/requested_action.payload.json").read_text())["organization"],
    # An issue that is a pull request says so (docs.github.com/en/rest/issues/issues: "pull_request"
    # on issues that are pull requests).
    ".issue.pull_request": {"url": "", "html_url": "", "diff_url": "", "patch_url": "", "merged_at": None},
    # issues.edited: "changes.title.from: the previous version of the title" beside changes.body
    # (docs.github.com/en/webhooks/webhook-events-and-payloads#issues); the example edits only the body.
    ".changes.title": {"from": ""},
    # A reply says which comment it answers: "in_reply_to_id" in the review-comment schema
    # (docs.github.com/en/rest/pulls/comments); the examples are of thread roots, which lack it.
    ".comment.in_reply_to_id": 1,
    # The check suite's App has its slug, as the App object has in GitHub's webhook schema
    # (docs.github.com/en/webhooks/webhook-events-and-payloads#check_suite, `check_suite.app.slug`);
    # the example predates it, check_run's examples have it.
    ".check_suite.app.slug": "octoapp",
}

# Keys an example has that GitHub leaves out in some circumstances (documented where named).
OPTIONAL_KEYS = {
    # A pushed commit's author or committer has a `username` only when the address is an account's
    # (docs.github.com/en/webhooks/webhook-events-and-payloads#push, "username" is not required).
    ".commits[].author.username",
    ".commits[].committer.username",
    ".head_commit.author.username",
    ".head_commit.committer.username",
    # A check suite has a deployment only when a deployment created it (REST check-suite schema).
    ".check_run.check_suite.deployment",
    # Only for a repository owned by an organization (see ".organization" above); the check_run
    # examples happen to come from one.
    ".organization",
}

# Fields GitHub's webhook schema makes nullable although the example happens to hold a value
# (docs.github.com/en/webhooks/webhook-events-and-payloads, the "null" alternatives of each field).
NULLABLE = {
    ".issue.assignee",
    ".issue.milestone",
    ".issue.body",
    ".issue.closed_at",
    ".issue.labels[].description",
    ".label.description",
    ".pull_request.labels[].description",
    ".pull_request.body",
    ".pull_request.closed_at",
    ".pull_request.merged_at",
    ".pull_request.merge_commit_sha",
    ".pull_request.assignee",
    ".pull_request.mergeable",
    ".pull_request.rebaseable",
    ".check_run.conclusion",
    ".check_run.completed_at",
    ".check_run.output.title",
    ".check_run.output.summary",
    ".check_run.output.text",
    ".check_run.check_suite.conclusion",
    ".check_run.check_suite.head_branch",
    ".review.body",
    ".changes.body.from",
    ".comment.performed_via_github_app",
    # push: "head_commit" is null when the push deleted the ref; an organization, as owner, has no
    # email (the push schema's repository owner: "email": string or null).
    ".head_commit",
    ".repository.owner.email",
}

# Objects whose keys are data, not schema: compared on the type of their values only.
MAPS = {
    ".check_run.app.permissions",
    ".check_run.check_suite.app.permissions",
    ".check_suite.app.permissions",
    ".repository.custom_properties",
    ".pull_request.head.repo.custom_properties",
    ".pull_request.base.repo.custom_properties",
    ".comment.performed_via_github_app.permissions",
    ".installation.permissions",
}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _walk(value: Any, path: str, into: dict[str, Any]) -> None:
    into.setdefault(path, value)
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{key}", into)
    elif isinstance(value, list) and value:
        _walk(value[0], f"{path}[]", into)


@functools.cache
def all_examples_references() -> tuple[dict[str, Any], set[str]]:
    """Every path any of GitHub's examples has (with a value seen there), and the paths where some
    example has null. An object at a path (`.issue`, `.pull_request.head.repo`) is the same kind of
    object in every event, so a key GitHub sends in one event's example is a key it sends."""
    seen: dict[str, Any] = {}
    nulls: set[str] = set()
    for example in sorted(EXAMPLES.glob("*/*.json")):
        paths: dict[str, Any] = {}
        _walk(json.loads(example.read_text()), "", paths)
        for path, value in paths.items():
            if value is None:
                nulls.add(path)
                seen.setdefault(path, None)
            elif seen.get(path) is None:
                seen[path] = value
    return seen, nulls


def member_example(action: str) -> dict[str, Any]:
    """GitHub's examples (shared/github/webhooks) have no `member` folder. The event's documented
    properties (docs.github.com/en/webhooks/webhook-events-and-payloads#member): `action`, `member`
    (a user), `changes` (edited: `old_permission.from`, the permission held before), `repository`,
    `sender`, and `installation`, `organization` as in every event. Built from those objects as
    GitHub's issues.opened example shows them."""
    issues = json.loads((EXAMPLES / "issues/opened.payload.json").read_text())
    example = {"action": action, "member": issues["sender"], "repository": issues["repository"]}
    if action == "edited":
        example["changes"] = {"old_permission": {"from": "write"}}
    return {**example, "sender": issues["sender"]}


def push_example() -> dict[str, Any]:
    """GitHub's examples (shared/github/webhooks) have no `push` folder. The event's documented
    properties (docs.github.com/en/webhooks/webhook-events-and-payloads#push), which has no action:
    `ref`, `before`, `after`, `created`, `deleted`, `forced`, `base_ref`, `compare`, `commits` (each
    `id`, `tree_id`, `distinct`, `message`, `timestamp`, `url`, `author` and `committer` as `name`,
    `email`, `username`, and the paths `added`, `removed`, `modified`), `head_commit` (a commit as
    in `commits`), `repository`, `pusher` (`name`, `email`), `sender`, and `installation`,
    `organization` as in every event. Its repository is GitHub's older shape: `url` the web page,
    `created_at` and `pushed_at` Unix seconds, the owner with a `name` and `email`, and `stargazers`
    and `master_branch`. Built on the repository and sender of GitHub's issues.opened example."""
    issues = json.loads((EXAMPLES / "issues/opened.payload.json").read_text())
    repository, sender = issues["repository"], issues["sender"]
    email = f"{sender['id']}+{sender['login']}@users.noreply.github.com"
    repository["owner"] = {"name": sender["login"], "email": email, **repository["owner"]}
    repository.update(
        {"url": repository["html_url"], "created_at": 1557933565, "pushed_at": 1557933657, "stargazers": 0}
    )
    repository["master_branch"] = repository["default_branch"]
    person = {"name": sender["login"], "email": email, "username": sender["login"]}
    commit = {
        "id": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        "tree_id": "31b122c26a97cf9af023e9ddab94a82c6e77b0ea",
        "distinct": True,
        "message": "Update README.md",
        "timestamp": "2019-05-15T15:20:30-05:00",
        "url": f"{repository['html_url']}/commit/6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        "author": person,
        "committer": person,
        "added": ["docs/new.md"],
        "removed": ["docs/old.md"],
        "modified": ["README.md"],
    }
    return {
        "ref": "refs/heads/main",
        "before": "0000000000000000000000000000000000000000",
        "after": commit["id"],
        "created": True,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": commit["url"],
        "commits": [commit],
        "head_commit": commit,
        "repository": repository,
        "pusher": {"name": sender["login"], "email": email},
        "sender": sender,
    }


BUILT_EXAMPLES = {("member", action) for action in ("added", "edited", "removed")} | {("push", None)}


def example_for(event: str, action: str | None) -> dict[str, Any]:
    if (event, action) == ("push", None):
        return push_example()
    if (event, action) in BUILT_EXAMPLES:
        return member_example(str(action))
    event, action = SUBSTITUTE_EXAMPLES.get((event, action), (event, action))
    return json.loads((EXAMPLES / event / f"{action}.payload.json").read_text())


def differences(example: Any, actual: Any, path: str, siblings: dict[str, Any], nulls: set[str]) -> list[str]:
    """How `actual` departs from `example` in key names and JSON types (see the module docstring)."""
    if example is None:
        return []
    if actual is None:
        if path in NULLABLE or path in nulls:
            return []
        return [f"{path}: null where GitHub's example has a {json_type(example)}"]
    if json_type(example) != json_type(actual):
        return [f"{path}: {json_type(actual)} where GitHub's example has a {json_type(example)}"]
    if isinstance(example, list):
        return differences(example[0], actual[0], f"{path}[]", siblings, nulls) if example and actual else []
    if not isinstance(example, dict):
        return []
    if path in MAPS:
        kinds = {json_type(v) for v in example.values()}
        return [
            f"{path}.{k}: {json_type(v)} among {kinds}"
            for k, v in actual.items()
            if kinds and json_type(v) not in kinds
        ]
    problems = []
    for key, value in example.items():
        if key in actual:
            problems += differences(value, actual[key], f"{path}.{key}", siblings, nulls)
        elif f"{path}.{key}" not in OPTIONAL_KEYS:
            problems.append(f"{path}.{key}: missing")
    for key in actual.keys() - example.keys():
        reference = CONDITIONAL_KEYS.get(f"{path}.{key}", siblings.get(f"{path}.{key}", MISSING))
        if reference is MISSING:
            problems.append(f"{path}.{key}: not in any GitHub example of this event")
        else:
            problems += differences(reference, actual[key], f"{path}.{key}", siblings, nulls)
    return problems


# the scenario


def _git(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(cwd or Path.cwd()),
            "PATH": "/usr/bin:/bin",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
        },
    )
    return result.stdout.strip()


async def _push_commit(sandbox: Sandbox, owner: str, name: str, branch: str, work: Path, text: str) -> None:
    """Commit to `branch` and push it straight into the bare repository, then tell the sandbox, as
    its smart-HTTP endpoint does after a push (that endpoint itself is tested with real git in
    test_sandbox.py)."""
    bare = sandbox.git.path(owner, name)
    if not work.exists():
        _git("clone", "--quiet", str(bare), str(work))
        _git("checkout", "--quiet", "-b", branch, cwd=work)
    (work / f"{branch.replace('/', '-')}.txt").write_text(text)
    _git("add", "--all", cwd=work)
    _git("commit", "--quiet", "-m", text, cwd=work)
    repository = sandbox.state.repository(owner, name)
    before = sandbox.git.refs(owner, name)
    _git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
    await sandbox.pushed(repository, before, sandbox.git.refs(owner, name), sandbox.bot)


async def _scenario(
    tmp: Path, private_key: str, public_key: str, owner: str, organization: bool
) -> list[tuple[str, dict]]:
    delivered: list[tuple[str, dict]] = []

    async def receive(request: httpx.Request) -> httpx.Response:
        delivered.append((request.headers["X-GitHub-Event"], json.loads(request.content)))
        return httpx.Response(202)

    sandbox = Sandbox(
        SandboxConfig(
            public_key_pem=public_key,
            app_id=APP_ID,
            webhook_url="http://lanebot.test/hooks",
            webhook_secret="secret",
            state_dir=tmp / "state",
            public_url=SANDBOX_URL,
        ),
        webhook_client=httpx.AsyncClient(transport=httpx.MockTransport(receive)),
    )
    project = tmp / "project"
    project.mkdir()
    (project / "README.md").write_text("# demo\n")
    transport = httpx.ASGITransport(app=create_app(sandbox))
    async with httpx.AsyncClient(transport=transport, base_url=SANDBOX_URL) as http:

        async def ok(response_future: Any) -> dict:
            response = await response_future
            assert response.status_code < 300, response.text
            return response.json()

        repo = f"{owner}/demo"
        created = await ok(
            http.post("/_sandbox/repos", json={"full_name": repo, "path": str(project), "organization": organization})
        )
        await ok(
            http.post(
                "/_sandbox/repos",
                json={"full_name": f"{owner}/second", "path": str(project), "organization": organization},
            )
        )
        now = int(sandbox.clock().timestamp())
        app_jwt = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(APP_ID)}, private_key, algorithm="RS256")
        minted = await ok(
            http.post(
                f"/app/installations/{created['installation_id']}/access_tokens",
                headers={"Authorization": f"Bearer {app_jwt}"},
            )
        )
        bot = {"Authorization": f"token {minted['token']}"}
        human, api = f"/_sandbox/repos/{repo}", f"/repos/{repo}"

        await ok(
            http.post(
                f"{human}/issues",
                json={
                    "as": "alice",
                    "role": "admin",
                    "title": "Add a thing",
                    "body": "Please.",
                    "labels": ["enhancement"],
                },
            )
        )
        await ok(http.post(f"{human}/issues/1/labels", json={"as": "alice", "name": "lanebot"}))
        await ok(http.post(f"{human}/issues/1/comments", json={"as": "bob", "role": "write", "body": "/plan"}))
        comment = await ok(http.post(f"{api}/issues/1/comments", headers=bot, json={"body": "Planning."}))
        await ok(http.patch(f"{api}/issues/comments/{comment['id']}", headers=bot, json={"body": "Planned."}))
        await ok(http.delete(f"{api}/issues/1/labels/enhancement", headers=bot))
        await ok(http.patch(f"{api}/issues/1", headers=bot, json={"title": "Add a thing, planned"}))
        await ok(http.patch(f"{api}/issues/1", headers=bot, json={"state": "closed"}))
        await ok(http.patch(f"{api}/issues/1", headers=bot, json={"state": "open"}))

        branch, work = "lanebot/1/thing", tmp / "work"
        await _push_commit(sandbox, owner, "demo", branch, work, "first")
        await ok(
            http.post(
                f"{api}/pulls",
                headers=bot,
                json={"title": "Add a thing", "head": branch, "base": "main", "body": "Closes #1", "draft": True},
            )
        )
        await ok(http.post(f"{api}/issues/2/labels", headers=bot, json={"labels": ["lanebot:running"]}))
        await ok(http.delete(f"{api}/issues/2/labels/lanebot:running", headers=bot))
        await ok(http.post(f"{human}/issues/2/comments", json={"as": "bob", "body": "/fix the typo"}))
        await _push_commit(sandbox, owner, "demo", branch, work, "second")
        await ok(
            http.post(f"{human}/pulls/2/reviews", json={"as": "alice", "event": "REQUEST_CHANGES", "body": "A typo."})
        )
        await ok(http.post(f"{api}/pulls/2/requested_reviewers", headers=bot, json={"reviewers": ["bob"]}))
        inline = {"path": "lanebot-1-thing.txt", "line": 1, "side": "RIGHT", "body": "Why this word?"}
        await ok(
            http.post(
                f"{api}/pulls/2/reviews", headers=bot, json={"event": "COMMENT", "body": "Notes.", "comments": [inline]}
            )
        )
        [root] = await ok(http.get(f"{api}/pulls/2/comments", headers=bot))
        await ok(http.post(f"{human}/pulls/comments/{root['id']}/replies", json={"as": "bob", "body": "Because."}))
        head = sandbox.git.resolve(owner, "demo", branch)
        run = await ok(
            http.post(
                f"{api}/check-runs",
                headers=bot,
                json={
                    "name": "lane: thing",
                    "head_sha": head,
                    "status": "in_progress",
                    "external_id": "run-1",
                    "actions": [{"label": "Retry", "description": "Run the lane again", "identifier": "retry"}],
                },
            )
        )
        await ok(
            http.patch(
                f"{api}/check-runs/{run['id']}",
                headers=bot,
                json={"conclusion": "failure", "output": {"title": "Check failed", "summary": "1 test failed"}},
            )
        )
        await ok(http.post(f"{human}/check-runs/{run['id']}/rerequest", json={"as": "bob"}))
        failing = {"title": "1 test failed", "summary": "test_thing failed", "text": "E assert 1 == 2"}
        annotation = {"path": "README.md", "start_line": 1, "end_line": 1, "annotation_level": "failure"}
        tests = {
            "name": "tests",
            "conclusion": "failure",
            "output": {**failing, "annotations": [annotation | {"message": "No."}]},
        }
        await ok(http.post(f"{human}/ci-reports", json={"sha": head, "runs": [tests]}))
        await ok(
            http.post(f"{human}/check-runs/{run['id']}/requested-action", json={"as": "bob", "identifier": "retry"})
        )
        await ok(http.patch(f"{api}/pulls/2", headers=bot, json={"state": "closed"}))
        await ok(http.patch(f"{api}/pulls/2", headers=bot, json={"state": "open"}))
        await _push_commit(sandbox, owner, "demo", "ready", tmp / "merged", "ready")
        await ok(
            http.post(
                f"{api}/pulls",
                headers=bot,
                json={"title": "Ready", "head": "ready", "base": "main", "body": "Closes #1", "draft": False},
            )
        )
        await ok(http.post(f"{human}/pulls/3/merge", json={"as": "alice"}))
        assert (await http.delete(f"{api}/git/refs/heads/ready", headers=bot)).status_code == 204
        # an admin adds carol, lowers her role, then removes her
        await ok(http.post(f"{human}/collaborators", json={"login": "carol", "role": "write"}))
        await ok(http.post(f"{human}/collaborators", json={"login": "carol", "role": "read"}))
        await ok(http.delete(f"{human}/collaborators/carol"))
        await sandbox.webhooks.drain()
    await sandbox.close()
    return delivered


@functools.cache
def app_key() -> tuple[str, str]:
    return generate_app_key()


@pytest.fixture(scope="module")
def deliveries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[tuple[str, str], list[dict]]]:
    """Payloads by (event, action), from the scenario on a user's and on an organization's repository."""
    private_key, public_key = app_key()
    by_owner = {}
    for owner, organization in (("alice", False), ("acme", True)):
        delivered = asyncio.run(_scenario(tmp_path_factory.mktemp(owner), private_key, public_key, owner, organization))
        grouped: dict[tuple[str, str], list[dict]] = {}
        for event, payload in delivered:
            grouped.setdefault((event, payload.get("action")), []).append(payload)
        by_owner[owner] = grouped
    return by_owner


def test_the_scenario_makes_the_sandbox_send_every_event_and_action_it_can(deliveries) -> None:
    for owner, grouped in deliveries.items():
        assert set(grouped) == set(EMITTED), owner


def test_every_emitted_event_has_a_github_example_to_be_held_to() -> None:
    for event, action in set(EMITTED) - BUILT_EXAMPLES:
        substitute = SUBSTITUTE_EXAMPLES.get((event, action), (event, action))
        assert (EXAMPLES / substitute[0] / f"{substitute[1]}.payload.json").is_file(), (event, action)


@pytest.mark.parametrize("owner", ["alice", "acme"])
@pytest.mark.parametrize(("event", "action"), EMITTED, ids=[f"{e}.{a}" if a else e for e, a in EMITTED])
def test_payload_has_the_keys_and_types_of_githubs_example(
    deliveries, owner: str, event: str, action: str | None
) -> None:
    example = example_for(event, action)
    siblings, nulls = all_examples_references()
    for payload in deliveries[owner][(event, action)]:
        assert differences(example, payload, "", siblings, nulls) == []


def test_a_merged_pull_requests_closed_payload_says_merged_by_whom_and_at_which_commit(deliveries) -> None:
    for grouped in deliveries.values():
        merged = [p["pull_request"] for p in grouped[("pull_request", "closed")] if p["pull_request"]["merged"]]
        assert len(merged) == 1
        assert (merged[0]["state"], merged[0]["merged_by"]["login"]) == ("closed", "alice")
        assert merged[0]["merged_at"] and re.fullmatch(r"[0-9a-f]{40}", merged[0]["merge_commit_sha"])
        unmerged = [p["pull_request"] for p in grouped[("pull_request", "closed")] if not p["pull_request"]["merged"]]
        assert unmerged and all(p["merged_at"] is None for p in unmerged)


def test_each_push_says_what_it_did_to_its_ref(deliveries) -> None:
    for owner, grouped in deliveries.items():
        pushes = {(p["ref"], p["created"], p["deleted"]): p for p in grouped[("push", None)]}
        html = f"{SANDBOX_URL}/{owner}/demo"
        # the scenario's first push makes lanebot's branch: one new commit, a page of that commit
        made = pushes[("refs/heads/lanebot/1/thing", True, False)]
        [first] = made["commits"]
        assert (made["before"], made["after"], made["forced"]) == ("0" * 40, first["id"], False)
        assert made["compare"] == f"{html}/commit/{first['id']}" and made["head_commit"] == first
        assert (first["message"], first["added"], first["distinct"]) == ("first", ["lanebot-1-thing.txt"], True)
        assert made["pusher"]["name"] == made["sender"]["login"] == "lanebot[bot]"
        # the second moves it on: the two tips compared, the file modified
        moved = pushes[("refs/heads/lanebot/1/thing", False, False)]
        [second] = moved["commits"]
        assert moved["before"] == first["id"] and moved["after"] == second["id"]
        assert moved["compare"] == f"{html}/compare/{first['id'][:12]}...{second['id'][:12]}"
        assert (second["modified"], second["added"]) == (["lanebot-1-thing.txt"], [])
        # a person merging pull request #3 pushes its merge commit onto main, GitHub committing it
        merged = pushes[("refs/heads/main", False, False)]
        merge = merged["head_commit"]
        assert merge["message"].startswith("Merge pull request #3") and merge["id"] == merged["after"]
        assert merge["committer"] == {"name": "GitHub", "email": "noreply@github.com", "username": "web-flow"}
        assert merge["author"]["username"] == merged["pusher"]["name"] == "alice"
        assert [c["message"] for c in merged["commits"]] == ["ready", merge["message"]]
        assert merge["added"] == ["ready.txt"] and merge["distinct"] and not merged["forced"]
        # deleting the merged branch through the API: no commit after it
        deleted = pushes[("refs/heads/ready", False, True)]
        assert (deleted["after"], deleted["commits"], deleted["head_commit"]) == ("0" * 40, [], None)
        # GitHub's older repository shape in every push
        repository = made["repository"]
        assert repository["url"] == html and repository["master_branch"] == "main"
        assert isinstance(repository["created_at"], int) and isinstance(repository["pushed_at"], int)


INSTALLATION_EVENTS = ("installation", "installation_repositories")


def test_payloads_of_an_organizations_repository_name_the_organization(deliveries) -> None:
    for (event, action), payloads in deliveries["acme"].items():
        if event not in INSTALLATION_EVENTS:
            assert all(p["organization"]["login"] == "acme" for p in payloads), (event, action)
    for (event, action), payloads in deliveries["alice"].items():
        assert all("organization" not in p for p in payloads), (event, action)


def test_every_repository_event_names_the_installation_by_id_and_node_id(deliveries) -> None:
    for grouped in deliveries.values():
        installation_id = grouped[("installation", "created")][0]["installation"]["id"]
        for (event, _), payloads in grouped.items():
            if event not in INSTALLATION_EVENTS:
                assert all(
                    p["installation"] == {"id": installation_id, "node_id": p["installation"]["node_id"]}
                    for p in payloads
                )


def test_the_comparison_catches_a_missing_key_a_wrong_type_and_an_invented_key() -> None:
    example = {"a": 1, "b": {"c": "x"}, "d": [{"e": True}], "n": None}
    assert differences(example, {"a": 1, "b": {"c": "y"}, "d": [{"e": False}], "n": 5}, "", {}, set()) == []
    assert differences(example, {"b": {"c": "y"}, "d": [], "n": None}, "", {}, set()) == [".a: missing"]
    assert differences(example, {"a": "1", "b": {"c": "y"}, "d": [{"e": 1}], "n": None}, "", {}, set()) == [
        ".a: string where GitHub's example has a number",
        ".d[].e: number where GitHub's example has a boolean",
    ]
    assert differences(example, {"a": 1, "b": {"c": "y", "z": 0}, "d": [], "n": None}, "", {}, set()) == [
        ".b.z: not in any GitHub example of this event"
    ]
    assert differences(example, {"a": None, "b": {"c": "y"}, "d": [], "n": None}, "", {}, set()) == [
        ".a: null where GitHub's example has a number"
    ]


# routes

REST = "https://docs.github.com/en/rest"
# Every route the sandbox may serve, with the docs.github.com page that documents it.
DOCUMENTED_ROUTES = {
    ("GET", "/users/{username}"): f"{REST}/users/users#get-a-user",
    ("GET", "/user"): f"{REST}/users/users#get-the-authenticated-user",
    (
        "GET",
        "/user/installations",
    ): f"{REST}/apps/installations#list-app-installations-accessible-to-the-user-access-token",
    (
        "GET",
        "/user/installations/{installation_id}/repositories",
    ): f"{REST}/apps/installations#list-repositories-accessible-to-the-user-access-token",
    ("GET", "/app"): f"{REST}/apps/apps#get-the-authenticated-app",
    ("GET", "/app/installations"): f"{REST}/apps/apps#list-installations-for-the-authenticated-app",
    ("GET", "/app/installations/{installation_id}"): f"{REST}/apps/apps#get-an-installation-for-the-authenticated-app",
    (
        "POST",
        "/app/installations/{installation_id}/access_tokens",
    ): f"{REST}/apps/apps#create-an-installation-access-token-for-an-app",
    (
        "GET",
        "/repos/{owner}/{repo}/installation",
    ): f"{REST}/apps/apps#get-a-repository-installation-for-the-authenticated-app",
    (
        "GET",
        "/installation/repositories",
    ): f"{REST}/apps/installations#list-repositories-accessible-to-the-app-installation",
    ("GET", "/app/hook/config"): f"{REST}/apps/webhooks#get-a-webhook-configuration-for-an-app",
    ("PATCH", "/app/hook/config"): f"{REST}/apps/webhooks#update-a-webhook-configuration-for-an-app",
    ("GET", "/app/hook/deliveries"): f"{REST}/apps/webhooks#list-deliveries-for-an-app-webhook",
    ("GET", "/app/hook/deliveries/{delivery_id}"): f"{REST}/apps/webhooks#get-a-delivery-for-an-app-webhook",
    (
        "POST",
        "/app/hook/deliveries/{delivery_id}/attempts",
    ): f"{REST}/apps/webhooks#redeliver-a-delivery-for-an-app-webhook",
    ("GET", "/rate_limit"): f"{REST}/rate-limit/rate-limit#get-rate-limit-status-for-the-authenticated-user",
    ("GET", "/repos/{owner}/{repo}"): f"{REST}/repos/repos#get-a-repository",
    ("GET", "/repos/{owner}/{repo}/contents/{path}"): f"{REST}/repos/contents#get-repository-content",
    ("DELETE", "/repos/{owner}/{repo}/git/refs/{ref}"): f"{REST}/git/refs#delete-a-reference",
    (
        "GET",
        "/repos/{owner}/{repo}/collaborators/{username}/permission",
    ): f"{REST}/collaborators/collaborators#get-repository-permissions-for-a-user",
    ("GET", "/repos/{owner}/{repo}/issues"): f"{REST}/issues/issues#list-repository-issues",
    ("POST", "/repos/{owner}/{repo}/issues"): f"{REST}/issues/issues#create-an-issue",
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}"): f"{REST}/issues/issues#get-an-issue",
    ("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}"): f"{REST}/issues/issues#update-an-issue",
    ("GET", "/repos/{owner}/{repo}/issues/comments"): f"{REST}/issues/comments#list-issue-comments-for-a-repository",
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): f"{REST}/issues/comments#list-issue-comments",
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): f"{REST}/issues/comments#create-an-issue-comment",
    ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): f"{REST}/issues/comments#get-an-issue-comment",
    ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): f"{REST}/issues/comments#update-an-issue-comment",
    (
        "GET",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
    ): f"{REST}/reactions/reactions#list-reactions-for-an-issue-comment",
    (
        "POST",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
    ): f"{REST}/reactions/reactions#create-reaction-for-an-issue-comment",
    (
        "POST",
        "/repos/{owner}/{repo}/issues/{issue_number}/reactions",
    ): f"{REST}/reactions/reactions#create-reaction-for-an-issue",
    ("GET", "/repos/{owner}/{repo}/labels"): f"{REST}/issues/labels#list-labels-for-a-repository",
    ("POST", "/repos/{owner}/{repo}/labels"): f"{REST}/issues/labels#create-a-label",
    ("GET", "/repos/{owner}/{repo}/labels/{name}"): f"{REST}/issues/labels#get-a-label",
    ("PATCH", "/repos/{owner}/{repo}/labels/{name}"): f"{REST}/issues/labels#update-a-label",
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/labels"): f"{REST}/issues/labels#list-labels-for-an-issue",
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels"): f"{REST}/issues/labels#add-labels-to-an-issue",
    ("PUT", "/repos/{owner}/{repo}/issues/{issue_number}/labels"): f"{REST}/issues/labels#set-labels-for-an-issue",
    (
        "DELETE",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
    ): f"{REST}/issues/labels#remove-a-label-from-an-issue",
    ("GET", "/repos/{owner}/{repo}/pulls"): f"{REST}/pulls/pulls#list-pull-requests",
    ("POST", "/repos/{owner}/{repo}/pulls"): f"{REST}/pulls/pulls#create-a-pull-request",
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}"): f"{REST}/pulls/pulls#get-a-pull-request",
    ("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}"): f"{REST}/pulls/pulls#update-a-pull-request",
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews",
    ): f"{REST}/pulls/reviews#list-reviews-for-a-pull-request",
    (
        "POST",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews",
    ): f"{REST}/pulls/reviews#create-a-review-for-a-pull-request",
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}",
    ): f"{REST}/pulls/reviews#get-a-review-for-a-pull-request",
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments",
    ): f"{REST}/pulls/reviews#list-comments-for-a-pull-request-review",
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}/comments",
    ): f"{REST}/pulls/comments#list-review-comments-on-a-pull-request",
    (
        "POST",
        "/repos/{owner}/{repo}/pulls/{pull_number}/comments",
    ): f"{REST}/pulls/comments#create-a-review-comment-for-a-pull-request",
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/comments/{comment_id}",
    ): f"{REST}/pulls/comments#get-a-review-comment-for-a-pull-request",
    (
        "POST",
        "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies",
    ): f"{REST}/pulls/comments#create-a-reply-for-a-review-comment",
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
    ): f"{REST}/pulls/review-requests#get-all-requested-reviewers-for-a-pull-request",
    (
        "POST",
        "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
    ): f"{REST}/pulls/review-requests#request-reviewers-for-a-pull-request",
    ("POST", "/repos/{owner}/{repo}/check-runs"): f"{REST}/checks/runs#create-a-check-run",
    ("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}"): f"{REST}/checks/runs#get-a-check-run",
    ("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}"): f"{REST}/checks/runs#update-a-check-run",
    (
        "GET",
        "/repos/{owner}/{repo}/commits/{ref}/check-runs",
    ): f"{REST}/checks/runs#list-check-runs-for-a-git-reference",
    (
        "GET",
        "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations",
    ): f"{REST}/checks/runs#list-check-run-annotations",
    (
        "GET",
        "/repos/{owner}/{repo}/check-suites/{check_suite_id}/check-runs",
    ): f"{REST}/checks/runs#list-check-runs-in-a-check-suite",
}


def _template(path: str) -> str:
    """A route path with its parameters unnamed and without Starlette's converters."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_rest_route_the_sandbox_serves_is_a_documented_github_route() -> None:
    documented = {(method, _template(path)) for method, path in DOCUMENTED_ROUTES}
    undocumented = [(m, p) for m, p in served_rest_routes() if (m, _template(p)) not in documented]
    assert undocumented == []


def test_the_documented_routes_are_docs_github_com_rest_pages() -> None:
    assert all(url.startswith("https://docs.github.com/en/rest/") and "#" in url for url in DOCUMENTED_ROUTES.values())


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/repos/alice/demo/branches"),
        ("GET", "/nothing/here"),
        ("DELETE", "/repos/alice/demo"),
        ("GET", "/repos/alice/demo/"),
        ("POST", "/app"),
    ],
)
async def test_what_github_does_not_serve_is_404_with_githubs_body(tmp_path: Path, method: str, path: str) -> None:
    _, public_key = app_key()
    sandbox = Sandbox(SandboxConfig(public_key_pem=public_key, state_dir=tmp_path))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(sandbox)), base_url=SANDBOX_URL) as http:
        response = await http.request(method, path)
    await sandbox.close()
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.json() == {
        "message": "Not Found",
        "documentation_url": "https://docs.github.com/rest",
        "status": "404",
    }
