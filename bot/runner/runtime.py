"""What every job of a run needs, rebuilt from the database and GitHub: the run's `Runtime`.

A job (a lane attempt, a merge round, the integrate step) is identified by ids only, so it loads
here everything else: the run row, the approved plan's graph, the repository's workflow (its
`.github/lanebot.yml` chain over the defaults, read at the commit the run started from), the
repository's clone URL and default branch (`GET /repos/{owner}/{repo}`), the issue's text as it was
approved (stored on the run by `/approve`, so an edit made since reaches no lane, no integrate step
and no pull request), the mirror cache under `settings.workdir`, and the identity lanebot commits as.

The installation token reaches git only through `Credentials` (the mirror's provider, which puts
it in git's environment); it is never stored here, logged, or put in a URL.

The commit identity is the App's bot account (`<slug>[bot]`, as GitHub shows its commits) unless
the host sets one: `settings.commit_author`, or else the environment's LANEBOT_COMMIT_AUTHOR, as
`Name <email>`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from anyio import to_thread
from gidgethub.abc import GitHubAPI
from sqlalchemy.engine import Engine

from bot.core.graph import Graph
from bot.core.plans import IssueText
from bot.core.text import sanitize_untrusted
from bot.core.workflow import Workflow
from bot.edges.files import private_dir
from bot.edges.git import Credentials, Identity, Mirror, Worktree
from bot.edges.github.issues import split_repository
from bot.edges.store import runs as store
from bot.edges.store.models import Run
from bot.runner.context import EngineContext, GitHubContext, RuntimeContext
from bot.runner.plan import stored_graph
from bot.runner.repository_workflow import installation_workflow
from bot.runner.sessions import host_name

log = logging.getLogger(__name__)

__all__ = [
    "COMMIT_AUTHOR_ENV",
    "Repository",
    "Runtime",
    "add_worktree",
    "commit_identity",
    "db",
    "forget_runtimes",
    "host_name",
    "load_runtime",
    "parse_author",
    "remove_worktree",
]

COMMIT_AUTHOR_ENV = "LANEBOT_COMMIT_AUTHOR"
_AUTHOR = re.compile(r"^\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+)>\s*$")
_T = TypeVar("_T")


async def db(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Call a (blocking) store function off the event loop."""
    return await to_thread.run_sync(functools.partial(function, *args, **kwargs))


@dataclass(frozen=True)
class Repository:
    """What `GET /repos/{owner}/{repo}` says that a run needs."""

    full_name: str
    clone_url: str
    default_branch: str
    html_url: str

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Repository:
        try:
            return cls(
                full_name=data["full_name"],
                clone_url=data["clone_url"],
                default_branch=data["default_branch"],
                html_url=data["html_url"],
            )
        except KeyError as missing:
            raise ValueError(f"GitHub's repository answer has no {missing.args[0]!r}") from None


@dataclass(frozen=True)
class Runtime:
    """One run's surroundings, as one job sees them."""

    context: RuntimeContext
    run: Run
    repository: Repository
    workflow: Workflow
    graph: Graph
    issue: IssueText
    client: GitHubAPI
    mirror: Mirror
    identity: Identity

    @property
    def engine(self) -> Engine:
        return self.context.engine

    @property
    def workdir(self) -> Path:
        return Path(self.context.settings.workdir).absolute()

    @property
    def run_id(self) -> int:
        """The run's id: set once its row was stored, which every loaded run's was."""
        assert self.run.id is not None
        return self.run.id

    @property
    def issue_number(self) -> int:
        return self.run.issue_number

    def issue_context(self) -> dict[str, Any]:
        """The issue as the prompt templates take it: untrusted text sanitized."""
        return {
            "number": self.issue.number,
            "title": sanitize_untrusted(self.issue.title),
            "body": sanitize_untrusted(self.issue.body),
        }

    def worktree_path(self, name: str) -> Path:
        owner, repo = split_repository(self.run.repository)
        return self.workdir / "worktrees" / owner / repo / f"run-{self.run.id}" / name

    def transcript_path(self, folder: str, attempt: int, prefix: str = "attempt") -> Path:
        """`<workdir>/transcripts/<run>/<folder>/<prefix>-<attempt>.jsonl`."""
        path = self.workdir / "transcripts" / str(self.run.id) / folder / f"{prefix}-{attempt}.jsonl"
        private_dir(path.parent)  # the transcript's folders 0700; the Transcript writes it 0600
        return path

    def script_path(self, name: str) -> Path:
        """Where a check or verify command is written before `sh` runs it (outside every worktree)."""
        return self.workdir / "scripts" / str(self.run.id) / f"{name}.sh"

    def scratch_path(self, name: str) -> Path:
        """A private place of the run's for files that must not stay in a worktree."""
        return self.workdir / "scratch" / str(self.run.id) / name


_CACHE: dict[tuple[int, int], tuple[float, Runtime]] = {}
CACHE_TTL_S = 60.0


async def load_runtime(context: RuntimeContext, run_id: int) -> Runtime:
    """Everything a job of run `run_id` needs; raises LookupError when the run or its plan is gone.

    The run's row is read every time; what GitHub said (repository, workflow, issue) is reused
    for a minute within this process, so a run's many jobs do not each ask again.
    """
    run = await db(store.get_run, context.engine, run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    key = (id(context.engine), run_id)
    cached = _CACHE.get(key)
    if cached is not None and cached[1].context is context and time.monotonic() - cached[0] < CACHE_TTL_S:
        return dataclasses.replace(cached[1], run=run)
    runtime = await _load(context, run)
    _CACHE[key] = (time.monotonic(), runtime)
    return runtime


def forget_runtimes(context: EngineContext) -> None:
    """Drop what `load_runtime` keeps for the context's database."""
    for key in [key for key in _CACHE if key[0] == id(context.engine)]:
        del _CACHE[key]


async def _load(context: RuntimeContext, run: Run) -> Runtime:
    owner, name = split_repository(run.repository)
    client = context.github.installation_client(run.installation_id, run.repository)
    repository = Repository.from_api(await client.getitem("/repos/{owner}/{repo}", {"owner": owner, "repo": name}))
    workflow = await installation_workflow(context.github, run.installation_id, run.repository, run.base_sha)
    graph = await _approved_graph(context, run)
    issue = _approved_issue(run) or await _read_issue(client, owner, name, run.issue_number)
    mirror = Mirror(context.settings.workdir, run.repository, repository.clone_url, _credentials(context, run))
    identity = await commit_identity(context, client)
    return Runtime(
        context=context,
        run=run,
        repository=repository,
        workflow=workflow,
        graph=graph,
        issue=issue,
        client=client,
        mirror=mirror,
        identity=identity,
    )


async def _approved_graph(context: EngineContext, run: Run) -> Graph:
    if run.approved_revision is not None:
        plan = await db(store.get_plan, context.engine, run.id, run.approved_revision)
    else:
        log.warning("run %d has no approved revision recorded; building its latest plan", run.id)
        plan = await db(store.latest_plan, context.engine, run.id)
    if plan is None:
        raise LookupError(f"run {run.id} has no plan to build (approved revision {run.approved_revision})")
    return stored_graph(plan.units_jsonl)


def _approved_issue(run: Run) -> IssueText | None:
    """The issue as it was approved (stored by `/approve`), so an edit made since reaches no step."""
    if run.approved_issue_title is None:
        return None
    return IssueText(number=run.issue_number, title=run.approved_issue_title, body=run.approved_issue_body or "")


async def _read_issue(client: GitHubAPI, owner: str, name: str, number: int) -> IssueText:
    """The issue as GitHub has it now: only for a run approved before approvals stored the issue."""
    log.warning("the run of %s/%s#%d has no approved copy of its issue; reading the issue now", owner, name, number)
    issue = await client.getitem(
        "/repos/{owner}/{repo}/issues/{issue_number}", {"owner": owner, "repo": name, "issue_number": number}
    )
    return IssueText(number=number, title=issue.get("title") or "", body=issue.get("body") or "")


def _credentials(context: GitHubContext, run: Run) -> Callable[[], Awaitable[Credentials]]:
    async def credentials() -> Credentials:
        return Credentials(token=await context.github.tokens.token(run.installation_id, run.repository))

    return credentials


# --------------------------------------------------------------------------- worktrees


async def add_worktree(mirror: Mirror, path: Path, *, branch: str, start: str) -> Worktree:
    """A lane's or the integration branch's worktree (Mirror takes its lock for the bookkeeping)."""
    return await mirror.add_worktree(path, branch=branch, start=start)


async def remove_worktree(mirror: Mirror, path: Path) -> None:
    await mirror.remove_worktree(path)


# --------------------------------------------------------------------------- the commit identity

_APP_IDENTITIES: dict[str, Identity] = {}


def parse_author(text: str, source: str) -> Identity:
    """`Name <email>` as an Identity; a clear error naming `source` otherwise."""
    match = _AUTHOR.match(text)
    if match is None:
        raise ValueError(f"{source} must read `Name <email>`, e.g. `lanebot <lanebot@example.com>`; got {text!r}")
    return Identity(match["name"], match["email"])


async def commit_identity(context: RuntimeContext, client: GitHubAPI) -> Identity:
    """The host's configured author, else the App's bot account (looked up once per App)."""
    # An extra some hosts set; RunnerSettings cannot declare a member that may be absent.
    author: str | None = getattr(context.settings, "commit_author", None)
    if author:
        return parse_author(author, "settings.commit_author")
    configured = os.environ.get(COMMIT_AUTHOR_ENV, "").strip()
    if configured:
        return parse_author(configured, COMMIT_AUTHOR_ENV)
    app_id = str(context.settings.app_id)
    if app_id not in _APP_IDENTITIES:
        app = await context.github.app_client().getitem("/app")
        slug = app["slug"]
        user = await client.getitem("/users/{username}", {"username": f"{slug}[bot]"})
        _APP_IDENTITIES[app_id] = Identity.for_app(slug, int(user["id"]))
    return _APP_IDENTITIES[app_id]
