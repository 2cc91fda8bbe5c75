"""GitHub's GraphQL API, the part lanebot reads: a pull request's review threads (which GitHub's
REST API does not say are resolved or outdated).

`POST /graphql` with an installation token, as REST takes it. The schema is SDL that copies
GitHub's own type and field names for the subset served (`repository { pullRequest {
reviewThreads { ... comments { ... } } } }`, and `node(id:)`); graphql-core runs the queries.
Answers are GitHub's: HTTP 200 with `data` and `errors`, each error of the API itself with
GitHub's `type` (NOT_FOUND, FORBIDDEN, MISSING_PAGINATION_BOUNDARIES, EXCESSIVE_PAGINATION,
INVALID_CURSOR_ARGUMENTS) and message. A connection must be given `first` (at most 100); `last`
and `before` are not served. Errors of the query itself (syntax, unknown fields) carry
graphql-core's wording, not GitHub's. As on GitHub, a bot's GraphQL `login` has no "[bot]"
suffix (REST's `lanebot[bot]` is GraphQL's `lanebot`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from graphql import GraphQLError, GraphQLInterfaceType, GraphQLSchema, build_schema, graphql_sync
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.sandbox.auth import Principal, has_permission, token_covers
from bot.sandbox.core import Sandbox
from bot.sandbox.errors import GitHubError
from bot.sandbox.rest import caller, json_response, read_json, sandbox_of
from bot.sandbox.shapes import timestamp
from bot.sandbox.state import Account, Issue, Repository, ReviewComment, ReviewThread

AUTHENTICATION_DOCS = "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql"
MAX_PAGE = 100
T = TypeVar("T")

SDL = """
scalar DateTime
scalar URI

enum DiffSide { LEFT RIGHT }
enum PullRequestState { OPEN CLOSED MERGED }
enum CommentAuthorAssociation {
  COLLABORATOR CONTRIBUTOR FIRST_TIMER FIRST_TIME_CONTRIBUTOR MANNEQUIN MEMBER NONE OWNER
}

interface Node { id: ID! }

interface Actor {
  avatarUrl(size: Int): URI!
  login: String!
  resourcePath: URI!
  url: URI!
}

type User implements Node & Actor {
  avatarUrl(size: Int): URI!
  databaseId: Int
  id: ID!
  login: String!
  resourcePath: URI!
  url: URI!
}

type Bot implements Node & Actor {
  avatarUrl(size: Int): URI!
  databaseId: Int
  id: ID!
  login: String!
  resourcePath: URI!
  url: URI!
}

type PageInfo {
  endCursor: String
  hasNextPage: Boolean!
  hasPreviousPage: Boolean!
  startCursor: String
}

type Repository implements Node {
  databaseId: Int
  id: ID!
  isPrivate: Boolean!
  name: String!
  nameWithOwner: String!
  pullRequest(number: Int!): PullRequest
}

type PullRequest implements Node {
  baseRefName: String!
  databaseId: Int
  headRefName: String!
  headRefOid: String!
  id: ID!
  number: Int!
  repository: Repository!
  reviewThreads(first: Int, after: String): PullRequestReviewThreadConnection!
  state: PullRequestState!
  title: String!
  url: URI!
}

type PullRequestReviewThreadConnection {
  edges: [PullRequestReviewThreadEdge]
  nodes: [PullRequestReviewThread]
  pageInfo: PageInfo!
  totalCount: Int!
}

type PullRequestReviewThreadEdge {
  cursor: String!
  node: PullRequestReviewThread
}

type PullRequestReviewThread implements Node {
  comments(first: Int, after: String): PullRequestReviewCommentConnection!
  diffSide: DiffSide!
  id: ID!
  isCollapsed: Boolean!
  isOutdated: Boolean!
  isResolved: Boolean!
  line: Int
  originalLine: Int
  originalStartLine: Int
  path: String!
  pullRequest: PullRequest!
  repository: Repository!
  resolvedBy: User
  startDiffSide: DiffSide
  startLine: Int
}

type PullRequestReviewCommentConnection {
  edges: [PullRequestReviewCommentEdge]
  nodes: [PullRequestReviewComment]
  pageInfo: PageInfo!
  totalCount: Int!
}

type PullRequestReviewCommentEdge {
  cursor: String!
  node: PullRequestReviewComment
}

type PullRequestReviewComment implements Node {
  author: Actor
  authorAssociation: CommentAuthorAssociation!
  body: String!
  createdAt: DateTime!
  databaseId: Int
  diffHunk: String!
  id: ID!
  line: Int
  originalLine: Int
  originalStartLine: Int
  outdated: Boolean!
  path: String!
  pullRequest: PullRequest!
  replyTo: PullRequestReviewComment
  startLine: Int
  updatedAt: DateTime!
  url: URI!
}

type Query {
  node(id: ID!): Node
  repository(owner: String!, name: String!, followRenames: Boolean = true): Repository
}
"""


class Failure(Exception):
    """An error GitHub's GraphQL API reports: its `type` and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Context:
    """Who asks (an installation's token), and what it may see, as REST decides it (bot/sandbox/auth.py)."""

    sandbox: Sandbox
    principal: Principal

    def visible(self, repository: Repository) -> bool:
        return not repository.private or token_covers(self.principal, repository)

    def may_read_pulls(self, repository: Repository) -> bool:
        """A token covering the repository needs pull_requests read; any token may read a public one's."""
        token = self.principal.token
        if token is not None and token_covers(self.principal, repository):
            return has_permission(token.permissions, "pull_requests", "read")
        return not repository.private


def _schema() -> GraphQLSchema:
    schema = build_schema(SDL)
    for interface in ("Node", "Actor"):
        abstract = schema.get_type(interface)
        assert isinstance(abstract, GraphQLInterfaceType)  # both are interfaces in SDL
        abstract.resolve_type = lambda value, _info, _type: value.typename
    return schema


SCHEMA = _schema()


# pagination


def _cursor(index: int) -> str:
    return base64.b64encode(f"cursor:v2:{index}".encode()).decode()


def _after(after: str | None) -> int:
    """The index the page starts at: just past the `after` cursor."""
    if after is None:
        return 0
    try:
        text = base64.b64decode(after, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = ""
    prefix, _, index = text.rpartition(":")
    if prefix != "cursor:v2" or not index.isdigit():
        raise Failure("INVALID_CURSOR_ARGUMENTS", f"`{after}` does not appear to be a valid cursor.")
    return int(index) + 1


@dataclass(frozen=True)
class PageInfo:
    startCursor: str | None
    endCursor: str | None
    hasNextPage: bool
    hasPreviousPage: bool


@dataclass(frozen=True)
class Edge:
    cursor: str
    node: Any


@dataclass(frozen=True)
class Connection:
    totalCount: int
    nodes: list[Any]
    edges: list[Edge]
    pageInfo: PageInfo


def _page(
    connection: str, items: list[T], first: int | None, after: str | None, show: Callable[[T], Any]
) -> Connection:
    """One page of `items`, as GitHub pages a connection (first is required, at most 100)."""
    if first is None:
        raise Failure(
            "MISSING_PAGINATION_BOUNDARIES",
            f"You must provide a `first` or `last` value to properly paginate the `{connection}` connection.",
        )
    if first > MAX_PAGE:
        raise Failure(
            "EXCESSIVE_PAGINATION",
            f"Requesting {first} records on the `{connection}` connection exceeds "
            f"the `first` limit of {MAX_PAGE} records.",
        )
    if first < 0:
        raise Failure("INVALID_PAGINATION", f"`first` on the `{connection}` connection cannot be less than zero.")
    start = _after(after)
    edges = [Edge(_cursor(start + offset), show(item)) for offset, item in enumerate(items[start : start + first])]
    info = PageInfo(
        startCursor=edges[0].cursor if edges else None,
        endCursor=edges[-1].cursor if edges else None,
        hasNextPage=start + first < len(items),
        hasPreviousPage=start > 0,
    )
    return Connection(totalCount=len(items), nodes=[edge.node for edge in edges], edges=edges, pageInfo=info)


# the objects a query walks through: one class per GraphQL type, its fields as attributes (or
# methods, for fields with arguments), as graphql-core's default resolver reads them


class ActorNode:
    def __init__(self, context: Context, account: Account) -> None:
        renderer = context.sandbox.renderer
        self.typename = "Bot" if account.type == "Bot" else "User"
        self.account = account
        self.base_url = renderer.base_url
        self.id, self.databaseId, self.login = account.node_id, account.id, account.login.removesuffix("[bot]")
        self.url = renderer.user(account)["html_url"]
        self.resourcePath = self.url.removeprefix(renderer.base_url)

    def avatarUrl(self, _info: Any, size: int | None = None) -> str:
        url = f"{self.base_url}/avatars/u/{self.account.id}?v=4"
        return url if size is None else f"{url}&s={size}"


class RepositoryNode:
    typename = "Repository"

    def __init__(self, context: Context, repository: Repository) -> None:
        self.context, self.record = context, repository
        self.id, self.databaseId, self.name = repository.node_id, repository.id, repository.name
        self.nameWithOwner, self.isPrivate = repository.full_name, repository.private

    def pullRequest(self, _info: Any, number: int) -> PullRequestNode:
        if not self.context.may_read_pulls(self.record):
            raise Failure("FORBIDDEN", "Resource not accessible by integration")
        issue = self.record.issues.get(number)
        if issue is None or issue.pull is None:
            raise Failure("NOT_FOUND", f"Could not resolve to a PullRequest with the number of {number}.")
        return PullRequestNode(self.context, self.record, issue)


class PullRequestNode:
    typename = "PullRequest"

    def __init__(self, context: Context, repository: Repository, issue: Issue) -> None:
        pull = issue.pull
        assert pull is not None
        self.context, self.record, self.issue = context, repository, issue
        self.id, self.databaseId, self.number, self.title = pull.node_id, pull.id, issue.number, issue.title
        self.headRefName, self.headRefOid, self.baseRefName = pull.head_ref, pull.head_sha, pull.base_ref
        self.state = "MERGED" if pull.merged_at else issue.state.upper()
        self.url = f"{context.sandbox.renderer.base_url}/{repository.full_name}/pull/{issue.number}"
        self.repository = RepositoryNode(context, repository)

    def reviewThreads(self, _info: Any, first: int | None = None, after: str | None = None) -> Connection:
        threads = self.context.sandbox.state.threads_of(self.record, self.issue)
        return _page("reviewThreads", threads, first, after, self.thread)

    def thread(self, thread: ReviewThread) -> ThreadNode:
        return ThreadNode(self.context, self, thread)


class ThreadNode:
    typename = "PullRequestReviewThread"

    def __init__(self, context: Context, pull: PullRequestNode, thread: ReviewThread) -> None:
        root = context.sandbox.state.review_comments[thread.root_id]
        self.context, self.thread, self.pullRequest, self.repository = context, thread, pull, pull.repository
        self.id, self.path, self.line, self.originalLine = thread.node_id, root.path, root.line, root.original_line
        self.startLine, self.originalStartLine = root.start_line, root.original_start_line
        self.diffSide, self.startDiffSide = root.side, root.start_side
        self.isResolved = self.isCollapsed = thread.resolved
        self.isOutdated = root.outdated
        self.resolvedBy = ActorNode(context, thread.resolved_by) if thread.resolved_by else None

    def comments(self, _info: Any, first: int | None = None, after: str | None = None) -> Connection:
        comments = self.context.sandbox.state.thread_comments(self.thread)
        return _page("comments", comments, first, after, lambda c: CommentNode(self.context, self.pullRequest, c))


class CommentNode:
    typename = "PullRequestReviewComment"

    def __init__(self, context: Context, pull: PullRequestNode, comment: ReviewComment) -> None:
        renderer = context.sandbox.renderer
        self.context, self.comment, self.pullRequest = context, comment, pull
        self.id, self.databaseId, self.body, self.path = comment.node_id, comment.id, comment.body, comment.path
        self.diffHunk, self.line, self.originalLine = comment.diff_hunk, comment.line, comment.original_line
        self.startLine, self.originalStartLine = comment.start_line, comment.original_start_line
        self.outdated = comment.outdated
        self.createdAt, self.updatedAt = timestamp(comment.created_at), timestamp(comment.updated_at)
        self.url = renderer.review_comment_html_url(pull.record, comment)
        self.author = ActorNode(context, comment.user)
        self.authorAssociation = renderer.association(pull.record, comment.user)

    def replyTo(self, _info: Any) -> CommentNode | None:
        if self.comment.in_reply_to_id is None:
            return None
        root = self.context.sandbox.state.review_comments[self.comment.in_reply_to_id]
        return CommentNode(self.context, self.pullRequest, root)


class QueryRoot:
    def __init__(self, context: Context) -> None:
        self.context = context

    def repository(self, _info: Any, owner: str, name: str, followRenames: bool = True) -> RepositoryNode:
        found = self.context.sandbox.state.repository(owner, name)
        if found is None or not self.context.visible(found):
            raise Failure("NOT_FOUND", f"Could not resolve to a Repository with the name '{owner}/{name}'.")
        return RepositoryNode(self.context, found)

    def node(self, _info: Any, id: str) -> ThreadNode | CommentNode:
        found = self._thread_or_comment(id)
        if found is None:
            raise Failure("NOT_FOUND", f"Could not resolve to a node with the global id of '{id}'")
        return found

    def _thread_or_comment(self, node_id: str) -> ThreadNode | CommentNode | None:
        state = self.context.sandbox.state
        for thread in state.review_threads.values():
            if thread.node_id == node_id:
                pull = self._pull_node(thread.repository_id, thread.pull_number)
                return pull.thread(thread) if pull else None
        for comment in state.review_comments.values():
            if comment.node_id == node_id:
                pull = self._pull_node(comment.repository_id, comment.pull_number)
                return CommentNode(self.context, pull, comment) if pull else None
        return None

    def _pull_node(self, repository_id: int, number: int) -> PullRequestNode | None:
        repository = self.context.sandbox.state.repository_by_id(repository_id)
        if repository is None or not self.context.visible(repository) or not self.context.may_read_pulls(repository):
            return None
        return PullRequestNode(self.context, repository, repository.issues[number])


# the endpoint


def _shown_error(error: GraphQLError) -> dict[str, Any]:
    """An error as GitHub words it: its type (for the API's own), path, locations, message."""
    shown: dict[str, Any] = {}
    if isinstance(error.original_error, Failure):
        shown["type"] = error.original_error.kind
    if error.path:
        shown["path"] = list(error.path)
    if error.locations:
        shown["locations"] = [{"line": where.line, "column": where.column} for where in error.locations]
    shown["message"] = error.message
    return shown


def run_query(
    sandbox: Sandbox,
    principal: Principal,
    query: str,
    variables: dict[str, Any] | None = None,
    operation_name: str | None = None,
) -> dict[str, Any]:
    """The answer to one query, as GitHub's `{"data", "errors"}` (no `data` when the query never ran)."""
    with sandbox.state.locked():
        result = graphql_sync(
            SCHEMA,
            query,
            root_value=QueryRoot(Context(sandbox, principal)),
            variable_values=variables,
            operation_name=operation_name,
        )
    answer: dict[str, Any] = {}
    if result.data is not None:
        answer["data"] = result.data
    if result.errors:
        answer["errors"] = [_shown_error(error) for error in result.errors]
    return answer


async def graphql_endpoint(request: Request) -> Response:
    sandbox = sandbox_of(request)
    principal = caller(request)
    if principal.kind != "installation":
        raise GitHubError(401, "This endpoint requires you to be authenticated.", documentation_url=AUTHENTICATION_DOCS)
    body = await read_json(request)
    query, variables = body.get("query"), body.get("variables")
    if not isinstance(query, str) or not query.strip():
        return json_response({"errors": [{"message": "A query attribute must be specified and must be a string."}]})
    if variables is not None and not isinstance(variables, dict):
        return json_response({"errors": [{"message": "Variables are invalid JSON."}]})
    operation = body.get("operationName")
    return json_response(
        run_query(sandbox, principal, query, variables, operation if isinstance(operation, str) else None)
    )


ROUTES = [Route("/graphql", graphql_endpoint, methods=["POST"])]
