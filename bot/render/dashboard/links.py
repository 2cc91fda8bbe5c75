"""Links to GitHub for a run: its issue, its pull request, a lane's check run. Pure.

Built from the run's repository (`owner/name`, as the database holds it) and numbers only, on
GitHub's web address (https://github.com, a GitHub Enterprise host, or the sandbox's origin), never on
anything a request carries. Each path segment is percent-encoded, so no repository name can reach
another path or host.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["check_run_url", "issue_url", "pull_url", "repository_url", "web_url_for_api"]

_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def web_url_for_api(api_url: str) -> str:
    """GitHub's web address for an API address: github.com for api.github.com, a GHE.com or GHES
    host for theirs, else the API URL's origin (the sandbox serves both on one origin)."""
    parsed = urllib.parse.urlsplit(api_url.rstrip("/"))
    if parsed.netloc == "api.github.com":
        return f"{parsed.scheme}://github.com"
    if parsed.netloc.startswith("api.") and parsed.netloc.endswith(".ghe.com"):
        return f"{parsed.scheme}://{parsed.netloc[len('api.') :]}"
    return f"{parsed.scheme}://{parsed.netloc}"


def repository_url(web: str, repository: str) -> str:
    if not _REPOSITORY.fullmatch(repository):
        raise ValueError(f"repository must be 'owner/name', got {repository!r}")
    owner, name = repository.split("/")
    return f"{web.rstrip('/')}/{urllib.parse.quote(owner, safe='')}/{urllib.parse.quote(name, safe='')}"


def _numbered(web: str, repository: str, kind: str, number: int) -> str:
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"{kind} numbers are whole numbers from 1, got {number!r}")
    return f"{repository_url(web, repository)}/{kind}/{number}"


def issue_url(web: str, repository: str, number: int) -> str:
    return _numbered(web, repository, "issues", number)


def pull_url(web: str, repository: str, number: int) -> str:
    return _numbered(web, repository, "pull", number)


def check_run_url(web: str, repository: str, check_run_id: int) -> str:
    """A check run's page (what GitHub gives as the check run's `html_url`)."""
    return _numbered(web, repository, "runs", check_run_id)
