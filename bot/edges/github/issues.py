"""Small GitHub helpers for an issue: lanebot's comments, reactions and labels.

Every function takes a gidgethub client (an installation client scoped to the repository) and
does one thing. Two rules from DESIGN.md live here:

- A comment lanebot writes starts with a hidden marker (`bot.render.gate.marker`), and
  `post_or_update_marked_comment` looks for a comment holding that marker BEFORE creating one.
  When GitHub created the comment but the answer was lost (a timeout, a dropped connection), the
  next look finds it, so a lost response never becomes a duplicate.
- An issue holds at most one of lanebot's state labels: `set_state_label` applies
  `bot.core.labels.label_changes` in one write: a POST when there is only a label to add, a PUT of
  the issue's whole label list (its other labels as read, the wanted state label) when one goes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import httpx
from gidgethub import BadRequest, GitHubBroken
from gidgethub.abc import GitHubAPI

from bot.core.labels import LabelChanges, label_changes, restyle, trigger_label
from bot.core.lifecycle import RunState
from bot.edges.github.client import find_comment_by_marker, marked_comment

log = logging.getLogger(__name__)

__all__ = [
    "EYES",
    "add_reaction",
    "edit_comment_if_there",
    "ensure_trigger_label",
    "get_comment",
    "issue_labels",
    "list_comments",
    "post_or_update_marked_comment",
    "set_state_label",
    "split_repository",
    "update_comment",
]

EYES = "eyes"  # the 👀 reaction: "lanebot saw your command"
# How often a comment whose POST lost its answer is looked for (and, if absent, posted) again.
POST_ATTEMPTS = 3
_PER_PAGE = 100


def split_repository(repository: str) -> tuple[str, str]:
    """("owner", "name") of "owner/name"; a clear error for anything else."""
    owner, slash, name = repository.partition("/")
    if not (owner and slash and name) or "/" in name:
        raise ValueError(f"a repository is named 'owner/name', not {repository!r}")
    return owner, name


# --------------------------------------------------------------------------- comments


async def list_comments(client: GitHubAPI, repository: str, issue_number: int) -> list[dict[str, Any]]:
    """Every comment on the issue, oldest first (all pages)."""
    owner, name = split_repository(repository)
    url = "/repos/{owner}/{repo}/issues/{issue_number}/comments{?per_page}"
    url_vars: dict[str, str | int] = {"owner": owner, "repo": name, "issue_number": issue_number, "per_page": _PER_PAGE}
    return [comment async for comment in client.getiter(url, url_vars)]


async def get_comment(client: GitHubAPI, repository: str, comment_id: int) -> dict[str, Any] | None:
    """The issue comment `comment_id`, or None when it was deleted."""
    owner, name = split_repository(repository)
    try:
        comment: dict[str, Any] = await client.getitem(
            "/repos/{owner}/{repo}/issues/comments/{comment_id}",
            {"owner": owner, "repo": name, "comment_id": comment_id},
        )
        return comment
    except BadRequest as error:
        if error.status_code == 404:
            return None
        raise


async def update_comment(client: GitHubAPI, repository: str, comment_id: int, body: str) -> dict[str, Any]:
    owner, name = split_repository(repository)
    comment: dict[str, Any] = await client.patch(
        "/repos/{owner}/{repo}/issues/comments/{comment_id}",
        {"owner": owner, "repo": name, "comment_id": comment_id},
        data={"body": body},
    )
    return comment


async def edit_comment_if_there(
    client: GitHubAPI, repository: str, comment_id: int, body: str
) -> dict[str, Any] | None:
    """Edit the comment whose id lanebot keeps (no look for it first); None when it was deleted."""
    try:
        return await update_comment(client, repository, comment_id, body)
    except BadRequest as error:
        if error.status_code == 404:
            return None
        raise


async def post_or_update_marked_comment(
    client: GitHubAPI,
    repository: str,
    issue_number: int,
    body: str,
    *,
    marker: str,
    author: str | None = None,
    listed: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """lanebot's comment holding `marker` on the issue, made to read `body`.

    Looks for the comment first (written by a bot, or by `author`; in `listed`, the issue's
    comments as the caller read them since anything could have made it, when given); edits it
    when its body differs, creates it when there is none. `body` must contain `marker`. When a POST's answer
    is lost (a transport error after the request left) or is a 5xx (GitHub may have made the
    comment all the same), the comment is looked for again before anything is posted again, up to
    POST_ATTEMPTS times; then the last error is raised.
    """
    if marker not in body:
        raise ValueError(f"the comment body must contain its marker {marker!r}, so it can be found again")
    owner, name = split_repository(repository)
    lost: httpx.TransportError | GitHubBroken | None = None
    for attempt in range(POST_ATTEMPTS):
        if attempt == 0 and listed is not None:
            existing = marked_comment(listed, marker, author=author)
        else:
            existing = await find_comment_by_marker(client, repository, issue_number, marker, author=author)
        if existing is not None:
            if existing.get("body") == body:
                return existing
            return await update_comment(client, repository, existing["id"], body)
        try:
            created: dict[str, Any] = await client.post(
                "/repos/{owner}/{repo}/issues/{issue_number}/comments",
                {"owner": owner, "repo": name, "issue_number": issue_number},
                data={"body": body},
            )
            return created
        except (httpx.TransportError, GitHubBroken) as error:
            # Lost answer or a 5xx: the comment may or may not exist now; look before posting again.
            log.warning(
                "posting comment %s on %s#%d lost its answer (%s); looking for it before trying again",
                marker,
                repository,
                issue_number,
                type(error).__name__,
            )
            lost = error
    assert lost is not None
    raise lost


# --------------------------------------------------------------------------- reactions


async def add_reaction(client: GitHubAPI, repository: str, comment_id: int, content: str = EYES) -> None:
    """React to an issue comment (GitHub answers 200 with the existing reaction when it is there)."""
    owner, name = split_repository(repository)
    await client.post(
        "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
        {"owner": owner, "repo": name, "comment_id": comment_id},
        data={"content": content},
    )


# --------------------------------------------------------------------------- labels


async def ensure_trigger_label(client: GitHubAPI, repository: str, trigger: str) -> bool:
    """Create the trigger label when the repository lacks it (so people can pick it); whether it
    was created. One read when it is there. A label created meanwhile by someone else
    (422 `already_exists`) is fine. The state labels are made as runs reach them (`set_state_label`)."""
    owner, name = split_repository(repository)
    spec = trigger_label(trigger)
    try:
        await client.getitem("/repos/{owner}/{repo}/labels/{name}", {"owner": owner, "repo": name, "name": spec.name})
        return False
    except BadRequest as error:
        if error.status_code != 404:
            raise
    try:
        await client.post("/repos/{owner}/{repo}/labels", {"owner": owner, "repo": name}, data=spec.to_api())
    except BadRequest as error:
        if not _already_exists(error):
            raise
        return False
    log.info("created the label %s in %s", spec.name, repository)
    return True


def _already_exists(error: BadRequest) -> bool:
    errors = getattr(error, "errors", None) or []
    return error.status_code == 422 and any(
        isinstance(item, dict) and item.get("code") == "already_exists" for item in errors
    )


async def issue_labels(client: GitHubAPI, repository: str, issue_number: int) -> list[str]:
    """The names of the labels the issue holds now."""
    owner, name = split_repository(repository)
    url = "/repos/{owner}/{repo}/issues/{issue_number}/labels{?per_page}"
    url_vars: dict[str, str | int] = {"owner": owner, "repo": name, "issue_number": issue_number, "per_page": _PER_PAGE}
    return [label["name"] async for label in client.getiter(url, url_vars)]


async def set_state_label(
    client: GitHubAPI, repository: str, issue_number: int, state: RunState | str | None
) -> LabelChanges:
    """Give the issue exactly the state label of `state` (none for rejected, cancelled or no run).

    Reads the issue's labels, then writes once: adds the wanted label (POST, which leaves every
    other label alone) when nothing is to go, else sets the whole list (PUT) to the labels read
    less the state labels that go, plus the wanted one. A label a person adds in the moment
    between the read and the PUT is lost, as with any read-modify-write on GitHub's labels; the
    window is one round trip. Returns what was changed.
    """
    owner, name = split_repository(repository)
    current = await issue_labels(client, repository, issue_number)
    changes = label_changes(current, state)
    issue: dict[str, str | int] = {"owner": owner, "repo": name, "issue_number": issue_number}
    url = "/repos/{owner}/{repo}/issues/{issue_number}/labels"
    held: Any = None
    if changes.remove:
        gone = {label.casefold() for label in changes.remove}
        kept = [label for label in current if label.casefold() not in gone]
        held = await client.put(url, issue, data={"labels": [*kept, *changes.add]})
    elif changes.add:
        held = await client.post(url, issue, data={"labels": list(changes.add)})
    await _restyle_new_labels(client, repository, held if isinstance(held, list) else [], changes.add)
    return changes


async def _restyle_new_labels(
    client: GitHubAPI, repository: str, held: list[dict[str, Any]], added: Iterable[str]
) -> None:
    """Give lanebot's look to a state label GitHub has just made for the issue (grey, bare)."""
    owner, name = split_repository(repository)
    wanted = {label.casefold() for label in added}
    for label in held:
        spec = restyle(label) if str(label.get("name", "")).casefold() in wanted else None
        if spec is None:
            continue
        try:
            await client.patch(
                "/repos/{owner}/{repo}/labels/{name}",
                {"owner": owner, "repo": name, "name": str(label["name"])},
                data={"color": spec.color, "description": spec.description},
            )
        except (BadRequest, GitHubBroken) as error:
            # The issue holds its label already; a grey one shows the state as well, so the run goes on.
            log.warning("could not give %s its colour in %s: %s", label["name"], repository, error)
