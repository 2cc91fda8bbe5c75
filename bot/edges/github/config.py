"""A repository's lanebot settings: `.github/lanebot.yml`, read through GitHub's contents API.

Where the file comes from follows Probot's conventions, so maintainers already know them:
  - the repository's own `.github/lanebot.yml` on its default branch (or `ref`);
  - when it has none, `.github/lanebot.yml` in the owner's `.github` repository;
  - `_extends: repo`, `_extends: owner/repo`, optionally `:path/to/file.yml`, loads that file
    as a base (followed recursively, with a loop guard and a depth limit); the extending
    file's keys override the base's. A bare `repo` means the extending file's own owner.

`_extends` to a repository of another owner is refused unless the host allows that owner:
`extends_owners` (the host's LANEBOT_ALLOW_EXTENDS_OWNERS, names or `*` for any owner). A file
it loads decides what lanebot runs on the repository (`verify`, the agents, who may approve), so
the host says whose files it trusts; the repository's own owner (and its `.github` repository) is
always trusted.

A missing file (404) is "no configuration"; a missing `_extends` target is an error (a typo
must not silently drop the shared settings); any other API failure propagates. The files are
handed, base first, to the workflow loader, which merges and validates them.

The client must be able to read every repository involved: a token scoped to one repository
cannot see the owner's `.github` repository, so use an installation client with
`repository=None` (or public repositories only). The repository's own file is read with
`own_client` when given (a client scoped to it, whose token lanebot mints anyway), so the
installation-wide token is minted only when the fallback or an `_extends` needs it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI

from bot.core.workflow import WorkflowError, parse_yaml

CONFIG_PATH = ".github/lanebot.yml"
OWNER_DEFAULTS_REPO = ".github"
MAX_EXTENDS = 5  # `_extends` hops followed from the first file
EXTENDS_OWNERS_SETTING = "LANEBOT_ALLOW_EXTENDS_OWNERS"
ANY_OWNER = "*"

_EXTENDS = re.compile(
    r"(?:(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/)?"
    r"(?P<repo>[A-Za-z0-9._-]+)"
    r"(?::(?P<path>[A-Za-z0-9._-][A-Za-z0-9._/-]*\.ya?ml))?"
)


@dataclass(frozen=True)
class ConfigLocation:
    owner: str
    repo: str
    path: str = CONFIG_PATH

    @property
    def source(self) -> str:
        return f"{self.owner}/{self.repo}:{self.path}"

    @property
    def identity(self) -> tuple[str, str, str]:
        # GitHub owner and repository names are case-insensitive.
        return self.owner.lower(), self.repo.lower(), self.path


def parse_extends(value: Any, extending: ConfigLocation) -> ConfigLocation:
    """Where `_extends: value` in the file at `extending` points."""
    match = _EXTENDS.fullmatch(value) if isinstance(value, str) else None
    if match is None or ".." in (match["path"] or "").split("/"):
        raise WorkflowError(
            [f"{extending.source}: `_extends: {value!r}` is not `repo`, `owner/repo` or `owner/repo:path/to/file.yml`"]
        )
    return ConfigLocation(
        owner=match["owner"] or extending.owner,
        repo=match["repo"],
        path=match["path"] or CONFIG_PATH,
    )


def refuse_foreign_owner(
    target: ConfigLocation, extending: ConfigLocation, repository_owner: str, extends_owners: Collection[str]
) -> None:
    """Raise unless `target`'s owner is the repository's own or one the host allows."""
    allowed = {name.lower() for name in extends_owners}
    if target.owner.lower() == repository_owner.lower() or ANY_OWNER in allowed or target.owner.lower() in allowed:
        return
    raise WorkflowError(
        [
            f"{extending.source}: `_extends: {target.owner}/{target.repo}` names a repository of another owner "
            f"({target.owner}), and a file it loads decides what lanebot runs on {repository_owner}'s repositories; "
            f"this host allows that only for owners listed in {EXTENDS_OWNERS_SETTING} "
            f"(e.g. {EXTENDS_OWNERS_SETTING}={target.owner})"
        ]
    )


async def load_config_chain(
    client: GitHubAPI,
    owner: str,
    repo: str,
    ref: str | None = None,
    *,
    extends_owners: Collection[str] = (),
    own_client: GitHubAPI | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Every configuration file that applies, as (source, mapping), base first; [] when none.
    `_extends` may name another owner's repository only when `extends_owners` lists that owner.
    `own_client` (default `client`) reads the repository's own file."""
    first = await _first_file(client, own_client or client, owner, repo, ref)
    if first is None:
        return []
    chain = [first]
    while (extends := chain[-1][1].get("_extends")) is not None:
        location, _ = chain[-1]
        if len(chain) > MAX_EXTENDS:
            raise WorkflowError([f"{location.source}: `_extends` goes deeper than {MAX_EXTENDS} files"])
        target = parse_extends(extends, location)
        refuse_foreign_owner(target, location, owner, extends_owners)
        _refuse_loop(chain, target)
        text = await read_file(client, target)
        if text is None:
            raise WorkflowError(
                [
                    f"{location.source}: `_extends: {extends}` names {target.source}, which does not "
                    "exist or which lanebot's installation cannot read"
                ]
            )
        chain.append((target, parse_yaml(text, target.source)))
    return [(location.source, mapping) for location, mapping in reversed(chain)]


async def _first_file(
    client: GitHubAPI, own_client: GitHubAPI, owner: str, repo: str, ref: str | None
) -> tuple[ConfigLocation, dict[str, Any]] | None:
    candidates = [(ConfigLocation(owner, repo), ref, own_client)]
    if repo.lower() != OWNER_DEFAULTS_REPO:
        candidates.append((ConfigLocation(owner, OWNER_DEFAULTS_REPO), None, client))
    for location, at, reader in candidates:
        text = await read_file(reader, location, at)
        if text is not None:
            return location, parse_yaml(text, location.source)
    return None


def _refuse_loop(chain: Sequence[tuple[ConfigLocation, Mapping[str, Any]]], target: ConfigLocation) -> None:
    seen = [location.identity for location, _ in chain]
    if target.identity in seen:
        cycle = [location.source for location, _ in chain[seen.index(target.identity) :]]
        raise WorkflowError([f"`_extends` makes a loop: {' -> '.join(cycle + [target.source])}"])


async def read_file(client: GitHubAPI, location: ConfigLocation, ref: str | None = None) -> str | None:
    """The file's text from the contents API (default branch unless `ref`), None on a 404.

    A file read at a commit's full sha is kept (in this process): what a commit holds never
    changes, so the next read of it there costs no request. A 404 is not kept: it may mean the
    installation could not see the repository then."""
    key = (location.owner.casefold(), location.repo.casefold(), location.path, ref)
    if ref is not None and FULL_SHA.fullmatch(ref):
        kept = _AT_COMMIT.get(key)
        if kept is not None:
            return kept
    try:
        item = await client.getitem(
            "/repos/{owner}/{repo}/contents/{+path}{?ref}",
            {"owner": location.owner, "repo": location.repo, "path": location.path, "ref": ref},
        )
    except BadRequest as error:
        if error.status_code == 404:
            return None
        raise
    text = _decoded(item, location)
    if ref is not None and FULL_SHA.fullmatch(ref):
        _AT_COMMIT[key] = text
        while len(_AT_COMMIT) > _AT_COMMIT_LIMIT:
            _AT_COMMIT.pop(next(iter(_AT_COMMIT)), None)  # the oldest
    return text


FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_AT_COMMIT_LIMIT = 256  # files (each at most 1 MB by the contents API; workflow files are small)
_AT_COMMIT: dict[tuple[str, str, str, str | None], str] = {}


def _decoded(item: Any, location: ConfigLocation) -> str:
    if not isinstance(item, dict) or item.get("type") != "file":
        raise WorkflowError([f"{location.source} is not a file"])
    if item.get("encoding") != "base64":
        raise WorkflowError([f"{location.source} is too large for the contents API (over 1 MB)"])
    try:
        return base64.b64decode(item.get("content", "")).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise WorkflowError([f"{location.source} is not UTF-8 text"]) from None
