"""REST routes of a repository itself: the repository, file contents, deleting a branch or tag, a
user's permission; and users."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox.errors import GitHubError, not_found
from bot.sandbox.gitstore import FileEntry, valid_ref_name
from bot.sandbox.rest import RestRoute, docs_url, empty_response, json_response, repository, sandbox_of
from bot.sandbox.state import FOLDED_PERMISSION, Repository

REPOS = "https://docs.github.com/rest/repos"
LARGEST_INLINE_FILE = 1024 * 1024  # GitHub returns no content for bigger files


async def get_repository(request: Request) -> Response:
    sandbox, _, repo = repository(request, "metadata", "read")
    return json_response(sandbox.renderer.repository(repo, rest=True))


def encode_content(content: bytes) -> str:
    """Base64 in lines of 60 characters, each ending in a newline, as GitHub sends file contents."""
    encoded = base64.b64encode(content).decode()
    return "".join(encoded[i : i + 60] + "\n" for i in range(0, len(encoded), 60))


def _entry(base_url: str, repo: Repository, ref: str, entry: FileEntry) -> dict[str, Any]:
    api = f"{base_url}/repos/{repo.full_name}"
    self_url = f"{api}/contents/{quote(entry.path)}?ref={quote(ref)}"
    git_url = f"{api}/git/{'trees' if entry.kind == 'dir' else 'blobs'}/{entry.sha}"
    html_url = (
        f"{base_url}/{repo.full_name}/{'tree' if entry.kind == 'dir' else 'blob'}/{quote(ref)}/{quote(entry.path)}"
    )
    download = None if entry.kind == "dir" else f"{base_url}/{repo.full_name}/raw/{quote(ref)}/{quote(entry.path)}"
    return {
        "type": entry.kind,
        "size": entry.size,
        "name": entry.name,
        "path": entry.path,
        "sha": entry.sha,
        "url": self_url,
        "git_url": git_url,
        "html_url": html_url,
        "download_url": download,
        "_links": {"self": self_url, "git": git_url, "html": html_url},
    }


async def get_contents(request: Request) -> Response:
    sandbox, _, repo = repository(request, "contents", "read")
    ref = request.query_params.get("ref") or repo.default_branch
    owner, name = repo.owner.login, repo.name
    commit = await sandbox.in_thread(sandbox.git.resolve, owner, name, ref)
    if commit is None:
        raise GitHubError(404, f"No commit found for the ref {ref}", documentation_url=docs_url(request))
    found = await sandbox.in_thread(sandbox.git.read, owner, name, commit, request.path_params.get("path", ""))
    if found is None:
        raise not_found(docs_url(request))
    base_url = sandbox.renderer.base_url
    if isinstance(found, list):
        return json_response([_entry(base_url, repo, ref, entry) for entry in found])
    shape = _entry(base_url, repo, ref, found)
    content = found.content or b""
    inline = len(content) <= LARGEST_INLINE_FILE
    shape["content"] = encode_content(content) if inline else ""
    shape["encoding"] = "base64" if inline else "none"
    return json_response(shape)


async def delete_reference(request: Request) -> Response:
    """`heads/<branch>` or `tags/<tag>`: 204, or GitHub's 422 "Reference does not exist"."""
    sandbox, _, repo = repository(request, "contents", "write")  # only an installation may write
    ref = request.path_params["ref"]
    kind, _, short = ref.partition("/")
    held = None
    if kind in ("heads", "tags") and valid_ref_name(short):
        held = await sandbox.in_thread(sandbox.git.delete_ref, repo.owner.login, repo.name, f"refs/{ref}")
    if held is None:
        raise GitHubError(422, "Reference does not exist", documentation_url=docs_url(request))
    sandbox.ref_deleted(repo, f"refs/{ref}", held, sandbox.bot)
    return empty_response()


async def collaborator_permission(request: Request) -> Response:
    sandbox, _, repo = repository(request, "metadata", "read")
    account = sandbox.state.find_account(request.path_params["username"])
    if account is None:
        raise not_found(docs_url(request))
    role = sandbox.state.role_of(repo, account.login)
    if role is None and not repo.private:
        role = "read"  # anyone can read a public repository
    folded = FOLDED_PERMISSION[role] if role else "none"
    return json_response(sandbox.renderer.collaborator_permission(repo, account, role, folded))


async def get_user(request: Request) -> Response:
    """A public user (or a bot account such as `lanebot[bot]`); no authentication needed."""
    sandbox = sandbox_of(request)
    account = sandbox.state.find_account(request.path_params["username"])
    if account is None:
        raise not_found(docs_url(request))
    return json_response(sandbox.renderer.profile(account))


ROUTES = (
    RestRoute("GET", "/users/{username}", get_user, "https://docs.github.com/rest/users/users#get-a-user"),
    RestRoute("GET", "/repos/{owner}/{repo}", get_repository, f"{REPOS}/repos#get-a-repository"),
    RestRoute(
        "GET", "/repos/{owner}/{repo}/contents/{path:path}", get_contents, f"{REPOS}/contents#get-repository-content"
    ),
    RestRoute(
        "DELETE",
        "/repos/{owner}/{repo}/git/refs/{ref:path}",
        delete_reference,
        "https://docs.github.com/rest/git/refs#delete-a-reference",
    ),
    RestRoute(
        "GET",
        "/repos/{owner}/{repo}/collaborators/{username}/permission",
        collaborator_permission,
        "https://docs.github.com/rest/collaborators/collaborators#get-repository-permissions-for-a-user",
    ),
)
