"""GitHub's JSON shapes for the sandbox's records: the objects REST answers and webhooks carry.

Pure functions of the state. Key names, order and value types follow GitHub's real payloads
(octokit's examples under shared/github/webhooks) and the REST reference; the fidelity tests hold
them to that. The sandbox serves API and web pages from one address, so `url` (API) and
`html_url` (web) share a host, as on GitHub Enterprise without a subdomain.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from bot.sandbox.state import (
    NO_ACCESS_FLAGS,
    REACTION_CONTENTS,
    ROLE_FLAGS,
    Account,
    AppRecord,
    CheckRun,
    CheckSuite,
    Comment,
    Installation,
    Issue,
    Label,
    Reaction,
    Repository,
    Review,
    ReviewComment,
    SandboxState,
)

Json = dict[str, Any]

# Repository URL templates, in the order GitHub lists them (`{base}` is the repository's API URL).
_REPOSITORY_URLS = (
    ("forks_url", "/forks"),
    ("keys_url", "/keys{/key_id}"),
    ("collaborators_url", "/collaborators{/collaborator}"),
    ("teams_url", "/teams"),
    ("hooks_url", "/hooks"),
    ("issue_events_url", "/issues/events{/number}"),
    ("events_url", "/events"),
    ("assignees_url", "/assignees{/user}"),
    ("branches_url", "/branches{/branch}"),
    ("tags_url", "/tags"),
    ("blobs_url", "/git/blobs{/sha}"),
    ("git_tags_url", "/git/tags{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"),
    ("trees_url", "/git/trees{/sha}"),
    ("statuses_url", "/statuses/{sha}"),
    ("languages_url", "/languages"),
    ("stargazers_url", "/stargazers"),
    ("contributors_url", "/contributors"),
    ("subscribers_url", "/subscribers"),
    ("subscription_url", "/subscription"),
    ("commits_url", "/commits{/sha}"),
    ("git_commits_url", "/git/commits{/sha}"),
    ("comments_url", "/comments{/number}"),
    ("issue_comment_url", "/issues/comments{/number}"),
    ("contents_url", "/contents/{+path}"),
    ("compare_url", "/compare/{base}...{head}"),
    ("merges_url", "/merges"),
    ("archive_url", "/{archive_format}{/ref}"),
    ("downloads_url", "/downloads"),
    ("issues_url", "/issues{/number}"),
    ("pulls_url", "/pulls{/number}"),
    ("milestones_url", "/milestones{/number}"),
    ("notifications_url", "/notifications{?since,all,participating}"),
    ("labels_url", "/labels{/name}"),
    ("releases_url", "/releases{/id}"),
    ("deployments_url", "/deployments"),
)


def timestamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def noreply_email(account: Account) -> str:
    """The address GitHub gives an account that keeps its own private: `<id>+<login>@users.noreply.github.com`."""
    return f"{account.id}+{account.login}@users.noreply.github.com"


def author_association(role: str | None, repository: Repository, account: Account) -> str:
    """GitHub's author_association of the account on this repository."""
    if repository.owner.id == account.id:
        return "OWNER"
    return "NONE" if role is None else "COLLABORATOR"


@dataclass(frozen=True)
class Renderer:
    """Renders records as GitHub does, with URLs on the sandbox's own address."""

    state: SandboxState
    base_url: str  # e.g. http://127.0.0.1:3100, no trailing slash

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    # accounts

    def _login_path(self, account: Account) -> str:
        return quote(account.login, safe="")

    def user(self, account: Account) -> Json:
        api = f"{self.base_url}/users/{self._login_path(account)}"
        html = (
            f"{self.base_url}/apps/{account.login.removesuffix('[bot]')}"
            if account.type == "Bot"
            else f"{self.base_url}/{account.login}"
        )
        return {
            "login": account.login,
            "id": account.id,
            "node_id": account.node_id,
            "avatar_url": f"{self.base_url}/avatars/u/{account.id}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": html,
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": account.type,
            "site_admin": False,
        }

    def profile(self, account: Account) -> Json:
        """A user as `GET /users/{username}` and `GET /user` show them: the user and their public profile."""
        return {
            **self.user(account),
            "name": None,
            "company": None,
            "blog": "",
            "location": None,
            "email": None,
            "hireable": None,
            "bio": None,
            "twitter_username": None,
            "public_repos": 0,
            "public_gists": 0,
            "followers": 0,
            "following": 0,
            "created_at": "2008-01-14T04:33:35Z",
            "updated_at": "2008-01-14T04:33:35Z",
        }

    def organization(self, account: Account) -> Json:
        api = f"{self.base_url}/orgs/{account.login}"
        return {
            "login": account.login,
            "id": account.id,
            "node_id": account.node_id,
            "url": api,
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events",
            "hooks_url": f"{api}/hooks",
            "issues_url": f"{api}/issues",
            "members_url": f"{api}/members{{/member}}",
            "public_members_url": f"{api}/public_members{{/member}}",
            "avatar_url": f"{self.base_url}/avatars/u/{account.id}?v=4",
            "description": account.description or "",
        }

    # the App

    def app(self, app: AppRecord, *, rest: bool = False) -> Json:
        shape: Json = {
            "id": app.id,
            "slug": app.slug,
            "node_id": app.node_id,
        }
        if rest:
            shape["client_id"] = app.client_id
        shape.update(
            {
                "owner": self.user(app.owner),
                "name": app.name,
                "description": app.description,
                "external_url": f"{self.base_url}/apps/{app.slug}",
                "html_url": f"{self.base_url}/apps/{app.slug}",
                "created_at": timestamp(app.created_at),
                "updated_at": timestamp(app.created_at),
                "permissions": dict(app.permissions),
                "events": list(app.events),
            }
        )
        if rest:
            shape["installations_count"] = len(self.state.installations)
        return shape

    def installation(self, installation: Installation, *, webhook: bool = False) -> Json:
        """The installation; webhooks give its times as Unix seconds, REST as ISO 8601 (as GitHub does)."""
        app = self.state.app
        created: str | int | None = timestamp(installation.created_at)
        if webhook:
            created = int(installation.created_at.timestamp())
        return {
            "id": installation.id,
            "account": self.user(installation.account),
            "repository_selection": "selected",
            "access_tokens_url": f"{self.base_url}/app/installations/{installation.id}/access_tokens",
            "repositories_url": f"{self.base_url}/installation/repositories",
            "html_url": f"{self.base_url}/settings/installations/{installation.id}",
            "app_id": app.id,
            "app_slug": app.slug,
            "target_id": installation.account.id,
            "target_type": installation.account.type,
            "permissions": dict(installation.permissions),
            "events": list(installation.events),
            "created_at": created,
            "updated_at": created,
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": None,
            "suspended_at": None,
        }

    def installation_reference(self, installation_id: int) -> Json:
        return {"id": installation_id, "node_id": self.state.installations[installation_id].node_id}

    # repositories

    def repository_api_url(self, repository: Repository) -> str:
        return f"{self.base_url}/repos/{repository.full_name}"

    def clone_url(self, repository: Repository) -> str:
        return f"{self.base_url}/{repository.full_name}.git"

    def repository(self, repository: Repository, *, rest: bool = False) -> Json:
        api = self.repository_api_url(repository)
        html = f"{self.base_url}/{repository.full_name}"
        shape: Json = {
            "id": repository.id,
            "node_id": repository.node_id,
            "name": repository.name,
            "full_name": repository.full_name,
            "private": repository.private,
            "owner": self.user(repository.owner),
            "html_url": html,
            "description": repository.description,
            "fork": False,
            "url": api,
        }
        shape.update({key: api + suffix for key, suffix in _REPOSITORY_URLS})
        open_issues = repository.open_issues_count
        shape.update(
            {
                "created_at": timestamp(repository.created_at),
                "updated_at": timestamp(repository.updated_at),
                "pushed_at": timestamp(repository.pushed_at),
                "git_url": f"git://{self.host}/{repository.full_name}.git",
                "ssh_url": f"git@{self.host}:{repository.full_name}.git",
                "clone_url": self.clone_url(repository),
                "svn_url": html,
                "homepage": None,
                "size": 0,
                "stargazers_count": 0,
                "watchers_count": 0,
                "language": None,
                "has_issues": True,
                "has_projects": True,
                "has_downloads": True,
                "has_wiki": True,
                "has_pages": False,
                "forks_count": 0,
                "mirror_url": None,
                "archived": False,
                "disabled": False,
                "open_issues_count": open_issues,
                "license": None,
                "forks": 0,
                "open_issues": open_issues,
                "watchers": 0,
                "default_branch": repository.default_branch,
                "is_template": False,
                "topics": [],
                "visibility": "private" if repository.private else "public",
                "web_commit_signoff_required": False,
                "custom_properties": {},
            }
        )
        if rest:
            shape.update({"allow_forking": True, "network_count": 0, "subscribers_count": 0})
            if repository.owner.type == "Organization":
                shape["organization"] = self.user(repository.owner)
        return shape

    def push_repository(self, repository: Repository) -> Json:
        """The repository as a `push` webhook shows it, GitHub's older shape: `url` is the web page,
        `created_at` and `pushed_at` are Unix seconds, the owner has a `name` and `email`, and
        `stargazers` and `master_branch` repeat `stargazers_count` and `default_branch`."""
        shown = self.repository(repository)
        owner = repository.owner
        email = None if owner.type == "Organization" else noreply_email(owner)
        shown["owner"] = {"name": owner.login, "email": email, **shown["owner"]}
        shown["url"] = shown["html_url"]
        shown["created_at"] = int(repository.created_at.timestamp())
        shown["pushed_at"] = int(repository.pushed_at.timestamp())
        ordered: Json = {}
        for key, value in shown.items():
            ordered[key] = value
            if key == "default_branch":
                ordered.update({"stargazers": shown["stargazers_count"], "master_branch": value})
        return ordered

    # labels, reactions, issues, comments

    def label(self, repository: Repository, label: Label) -> Json:
        return {
            "id": label.id,
            "node_id": label.node_id,
            "url": f"{self.repository_api_url(repository)}/labels/{quote(label.name)}",
            "name": label.name,
            "color": label.color,
            "default": label.default,
            "description": label.description,
        }

    def reactions(self, url: str, reactions: list[Reaction]) -> Json:
        rollup: Json = {"url": url, "total_count": len(reactions)}
        rollup.update({content: sum(1 for r in reactions if r.content == content) for content in REACTION_CONTENTS})
        return rollup

    def reaction(self, reaction: Reaction) -> Json:
        return {
            "id": reaction.id,
            "node_id": reaction.node_id,
            "user": self.user(reaction.user),
            "content": reaction.content,
            "created_at": timestamp(reaction.created_at),
        }

    def association(self, repository: Repository, account: Account) -> str:
        return author_association(self.state.role_of(repository, account.login), repository, account)

    def issue(self, repository: Repository, issue: Issue, *, rest: bool = False) -> Json:
        api = f"{self.repository_api_url(repository)}/issues/{issue.number}"
        html_kind = "pull" if issue.is_pull else "issues"
        shape: Json = {
            "url": api,
            "repository_url": self.repository_api_url(repository),
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.base_url}/{repository.full_name}/{html_kind}/{issue.number}",
            "id": issue.id,
            "node_id": issue.node_id,
            "number": issue.number,
            "title": issue.title,
            "user": self.user(issue.user),
            "labels": [self.label(repository, label) for label in issue.labels],
            "state": issue.state,
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": len(issue.comment_ids),
            "created_at": timestamp(issue.created_at),
            "updated_at": timestamp(issue.updated_at),
            "closed_at": timestamp(issue.closed_at),
            "author_association": self.association(repository, issue.user),
            "active_lock_reason": None,
        }
        if issue.pull is not None:
            pulls = f"{self.base_url}/{repository.full_name}/pull/{issue.number}"
            shape["draft"] = issue.pull.draft
            shape["pull_request"] = {
                "url": f"{self.repository_api_url(repository)}/pulls/{issue.number}",
                "html_url": pulls,
                "diff_url": f"{pulls}.diff",
                "patch_url": f"{pulls}.patch",
                "merged_at": timestamp(issue.pull.merged_at),
            }
        shape["body"] = issue.body
        shape["reactions"] = self.reactions(f"{api}/reactions", issue.reactions)
        if issue.pull is None:
            shape["draft"] = False
        shape.update({"timeline_url": f"{api}/timeline", "performed_via_github_app": None})
        if rest:
            shape.update(
                {
                    "state_reason": issue.state_reason,
                    "closed_by": self.user(issue.closed_by) if issue.closed_by else None,
                }
            )
        return shape

    def comment(self, repository: Repository, comment: Comment) -> Json:
        api = f"{self.repository_api_url(repository)}/issues/comments/{comment.id}"
        issue = repository.issues[comment.issue_number]
        kind = "pull" if issue.is_pull else "issues"
        return {
            "url": api,
            "html_url": f"{self.base_url}/{repository.full_name}/{kind}/{issue.number}#issuecomment-{comment.id}",
            "issue_url": f"{self.repository_api_url(repository)}/issues/{issue.number}",
            "id": comment.id,
            "node_id": comment.node_id,
            "user": self.user(comment.user),
            "created_at": timestamp(comment.created_at),
            "updated_at": timestamp(comment.updated_at),
            "author_association": self.association(repository, comment.user),
            "performed_via_github_app": self.app(self.state.app) if comment.by_app else None,
            "body": comment.body,
            "reactions": self.reactions(f"{api}/reactions", comment.reactions),
        }

    # pull requests

    def _branch(self, repository: Repository, ref: str, sha: str) -> Json:
        return {
            "label": f"{repository.owner.login}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(repository.owner),
            "repo": self.repository(repository),
        }

    def pull_request(
        self, repository: Repository, issue: Issue, *, full: bool = True, mergeable: bool | None = None
    ) -> Json:
        """A pull request; `full=False` is the shorter form review events carry."""
        pull = issue.pull
        assert pull is not None
        api = f"{self.repository_api_url(repository)}/pulls/{issue.number}"
        html = f"{self.base_url}/{repository.full_name}/pull/{issue.number}"
        issue_api = f"{self.repository_api_url(repository)}/issues/{issue.number}"
        statuses = f"{self.repository_api_url(repository)}/statuses/{pull.head_sha}"
        shape: Json = {
            "url": api,
            "id": pull.id,
            "node_id": pull.node_id,
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue_api,
            "number": issue.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self.user(issue.user),
            "body": issue.body,
            "created_at": timestamp(issue.created_at),
            "updated_at": timestamp(issue.updated_at),
            "closed_at": timestamp(issue.closed_at),
            "merged_at": timestamp(pull.merged_at),
            "merge_commit_sha": pull.merge_commit_sha,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [self.user(account) for account in pull.requested_reviewers],
            "requested_teams": [],
            "labels": [self.label(repository, label) for label in issue.labels],
            "milestone": None,
        }
        if not full:
            shape["draft"] = pull.draft
        shape.update(
            {
                "commits_url": f"{api}/commits",
                "review_comments_url": f"{api}/comments",
                "review_comment_url": f"{self.repository_api_url(repository)}/pulls/comments{{/number}}",
                "comments_url": f"{issue_api}/comments",
                "statuses_url": statuses,
                "head": self._branch(repository, pull.head_ref, pull.head_sha),
                "base": self._branch(repository, pull.base_ref, pull.base_sha),
                "_links": {
                    "self": {"href": api},
                    "html": {"href": html},
                    "issue": {"href": issue_api},
                    "comments": {"href": f"{issue_api}/comments"},
                    "review_comments": {"href": f"{api}/comments"},
                    "review_comment": {"href": f"{self.repository_api_url(repository)}/pulls/comments{{/number}}"},
                    "commits": {"href": f"{api}/commits"},
                    "statuses": {"href": statuses},
                },
                "author_association": self.association(repository, issue.user),
                "auto_merge": None,
                "active_lock_reason": None,
            }
        )
        if full:
            merged = pull.merged_at is not None
            shape.update(
                {
                    "draft": pull.draft,
                    "merged": merged,
                    "mergeable": mergeable,
                    "rebaseable": mergeable,
                    "mergeable_state": "unknown" if mergeable is None else ("clean" if mergeable else "dirty"),
                    "merged_by": self.user(pull.merged_by) if pull.merged_by else None,
                    "comments": len(issue.comment_ids),
                    "review_comments": len(self.state.review_comments_of(repository, issue)),
                    "maintainer_can_modify": pull.maintainer_can_modify,
                    "commits": pull.commits,
                    "additions": pull.additions,
                    "deletions": pull.deletions,
                    "changed_files": pull.changed_files,
                }
            )
        return shape

    def pull_request_reference(self, repository: Repository, issue: Issue) -> Json:
        """The minimal pull request check runs and suites list."""
        assert issue.pull is not None
        repo = {"id": repository.id, "url": self.repository_api_url(repository), "name": repository.name}
        return {
            "url": f"{self.repository_api_url(repository)}/pulls/{issue.number}",
            "id": issue.pull.id,
            "number": issue.number,
            "head": {"ref": issue.pull.head_ref, "sha": issue.pull.head_sha, "repo": repo},
            "base": {"ref": issue.pull.base_ref, "sha": issue.pull.base_sha, "repo": repo},
        }

    def review(self, repository: Repository, review: Review, *, rest: bool = False) -> Json:
        """A submitted review. REST gives its state in capitals (APPROVED) and a review without text an
        empty body; webhooks give the state in small letters (approved) and such a body as null."""
        pull_api = f"{self.repository_api_url(repository)}/pulls/{review.pull_number}"
        html = f"{self.base_url}/{repository.full_name}/pull/{review.pull_number}#pullrequestreview-{review.id}"
        body = (review.body or "") if rest else review.body
        state = review.state.upper() if rest else review.state
        return {
            "id": review.id,
            "node_id": review.node_id,
            "user": self.user(review.user),
            "body": body,
            "commit_id": review.commit_id,
            "submitted_at": timestamp(review.submitted_at),
            "state": state,
            "html_url": html,
            "pull_request_url": pull_api,
            "author_association": self.association(repository, review.user),
            "_links": {"html": {"href": html}, "pull_request": {"href": pull_api}},
        }

    def review_comment_url(self, repository: Repository, comment: ReviewComment) -> str:
        return f"{self.repository_api_url(repository)}/pulls/comments/{comment.id}"

    def review_comment_html_url(self, repository: Repository, comment: ReviewComment) -> str:
        return f"{self.base_url}/{repository.full_name}/pull/{comment.pull_number}#discussion_r{comment.id}"

    def review_comment(self, repository: Repository, comment: ReviewComment, *, rest: bool = False) -> Json:
        """A review comment; `in_reply_to_id` only on replies (GitHub leaves it out of roots), and
        `subject_type` only in REST answers (the webhook examples have none)."""
        api = self.review_comment_url(repository, comment)
        html = self.review_comment_html_url(repository, comment)
        pull_api = f"{self.repository_api_url(repository)}/pulls/{comment.pull_number}"
        shape: Json = {
            "url": api,
            "pull_request_review_id": comment.review_id,
            "id": comment.id,
            "node_id": comment.node_id,
            "diff_hunk": comment.diff_hunk,
            "path": comment.path,
            "position": comment.position,
            "original_position": comment.original_position,
            "commit_id": comment.commit_id,
            "original_commit_id": comment.original_commit_id,
        }
        if comment.in_reply_to_id is not None:
            shape["in_reply_to_id"] = comment.in_reply_to_id
        shape.update(
            {
                "user": self.user(comment.user),
                "body": comment.body,
                "created_at": timestamp(comment.created_at),
                "updated_at": timestamp(comment.updated_at),
                "html_url": html,
                "pull_request_url": pull_api,
                "author_association": self.association(repository, comment.user),
                "_links": {"self": {"href": api}, "html": {"href": html}, "pull_request": {"href": pull_api}},
                "reactions": self.reactions(f"{api}/reactions", comment.reactions),
                "start_line": comment.start_line,
                "original_start_line": comment.original_start_line,
                "start_side": comment.start_side,
                "line": comment.line,
                "original_line": comment.original_line,
                "side": comment.side,
            }
        )
        if rest:
            shape["subject_type"] = "line"
        return shape

    # checks

    def check_suite(self, repository: Repository, suite: CheckSuite, *, head_commit: Json | None = None) -> Json:
        """A check suite as check runs embed it; with `head_commit` (git's facts of the head) as the
        `check_suite` webhook shows it, with its runs' count and URL too."""
        runs = self.state.suite_runs(suite)
        if runs and all(run.status == "completed" for run in runs):
            status, conclusion = "completed", _suite_conclusion([run.conclusion for run in runs])
        else:
            status = "in_progress" if any(run.status != "queued" for run in runs) else "queued"
            conclusion = None
        pulls = self.state.open_pulls_at(repository, suite.head_sha)
        return {
            "id": suite.id,
            "node_id": suite.node_id,
            "head_branch": suite.head_branch,
            "head_sha": suite.head_sha,
            "status": status,
            "conclusion": conclusion,
            "url": f"{self.repository_api_url(repository)}/check-suites/{suite.id}",
            "before": suite.before,
            "after": suite.head_sha,
            "pull_requests": [self.pull_request_reference(repository, p) for p in pulls],
            "app": self.app(self.state.app_of(suite.app_id)),
            "created_at": timestamp(suite.created_at),
            "updated_at": timestamp(suite.updated_at),
            **(
                {}
                if head_commit is None
                else {
                    "latest_check_runs_count": len({run.name for run in runs}),
                    "check_runs_url": f"{self.repository_api_url(repository)}/check-suites/{suite.id}/check-runs",
                    "head_commit": head_commit,
                }
            ),
        }

    def check_run(self, repository: Repository, run: CheckRun) -> Json:
        api = f"{self.repository_api_url(repository)}/check-runs/{run.id}"
        suite = self.state.check_suites[run.suite_id]
        pulls = self.state.open_pulls_at(repository, run.head_sha)
        output = dict(run.output)
        output["annotations_url"] = f"{api}/annotations"
        return {
            "id": run.id,
            "node_id": run.node_id,
            "head_sha": run.head_sha,
            "external_id": run.external_id,
            "url": api,
            "html_url": f"{self.base_url}/{repository.full_name}/runs/{run.id}",
            "details_url": run.details_url or f"{self.base_url}/apps/{self.state.app_of(run.app_id).slug}",
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": timestamp(run.started_at),
            "completed_at": timestamp(run.completed_at),
            "output": output,
            "name": run.name,
            "check_suite": self.check_suite(repository, suite),
            "app": self.app(self.state.app_of(run.app_id)),
            "pull_requests": [self.pull_request_reference(repository, p) for p in pulls],
        }

    def annotation(self, repository: Repository, run: CheckRun, annotation: dict[str, object]) -> Json:
        """One annotation as GET .../check-runs/{id}/annotations lists it (GitHub's check-annotation)."""
        path = str(annotation["path"])
        return {
            "path": path,
            "start_line": annotation["start_line"],
            "end_line": annotation["end_line"],
            "start_column": annotation.get("start_column"),
            "end_column": annotation.get("end_column"),
            "annotation_level": annotation["annotation_level"],
            "title": annotation.get("title"),
            "message": annotation["message"],
            "raw_details": annotation.get("raw_details"),
            "blob_href": f"{self.base_url}/{repository.full_name}/blob/{run.head_sha}/{path}",
        }

    # collaborators

    def collaborator_permission(self, repository: Repository, account: Account, role: str | None, folded: str) -> Json:
        user = self.user(account)
        user["permissions"] = dict(ROLE_FLAGS[role]) if role else dict(NO_ACCESS_FLAGS)
        user["role_name"] = role or "none"
        return {"permission": folded, "role_name": role or "none", "user": user}


def _suite_conclusion(conclusions: list[str | None]) -> str:
    """A finished suite's conclusion: the most severe of its runs'."""
    for worst in ("action_required", "failure", "timed_out", "cancelled", "stale"):
        if worst in conclusions:
            return worst
    if conclusions and all(c in ("neutral", "skipped") for c in conclusions):
        return "neutral"
    return "success"
