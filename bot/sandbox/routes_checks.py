"""REST routes of check runs: create, update, get, list for a ref or a check suite, list a run's
annotations; with GitHub's limits (summary and text at most 65,535 characters, at most 50
annotations a request, at most three actions with labels of at most 20 characters)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox.errors import GitHubError, invalid_request, missing_field, not_found, too_long
from bot.sandbox.rest import RestRoute, docs_url, json_response, paginate, read_json, repository
from bot.sandbox.state import CHECK_CONCLUSIONS, CHECK_STATUSES, CheckRun, Repository

RUNS = "https://docs.github.com/rest/checks/runs"
ANNOTATION_LEVELS = ("notice", "warning", "failure")
OUTPUT_LIMIT = 65535
MAX_ANNOTATIONS = 50
MAX_ACTIONS = 3
ACTION_LIMITS = {"label": 20, "description": 40, "identifier": 20}
ANNOTATION_FIELDS = ("path", "start_line", "end_line", "annotation_level", "message")


def _run(request: Request, repo: Repository) -> CheckRun:
    raw = str(request.path_params["check_run_id"])
    sandbox = request.app.state.sandbox
    run: CheckRun | None = sandbox.state.check_runs.get(int(raw)) if raw.isdigit() else None
    if run is None or run.repository_id != repo.id:
        raise not_found(docs_url(request))
    return run


def validated_fields(docs: str, body: dict[str, Any], *, creating: bool) -> dict[str, Any]:
    """The check-run fields of a create or update body, checked against GitHub's schema and limits."""
    fields: dict[str, Any] = {}
    for name in ("name", "head_sha", "details_url", "external_id"):
        if name in body:
            if not isinstance(body[name], str):
                raise invalid_request(docs, f"For 'properties/{name}', {body[name]!r} is not a string.")
            fields[name] = body[name]
    if creating:
        for name in ("name", "head_sha"):
            if not fields.get(name):
                raise missing_field(docs, name)
    status, conclusion = body.get("status"), body.get("conclusion")
    if status is not None:
        if status not in CHECK_STATUSES:
            raise invalid_request(
                docs, f"For 'properties/status', {status!r} is not one of {', '.join(CHECK_STATUSES)}."
            )
        fields["status"] = status
    if conclusion is not None:
        if conclusion not in CHECK_CONCLUSIONS:
            raise invalid_request(
                docs, f"For 'properties/conclusion', {conclusion!r} is not one of {', '.join(CHECK_CONCLUSIONS)}."
            )
        fields["conclusion"] = conclusion
    if status == "completed" and conclusion is None:
        raise missing_field(docs, "conclusion")
    for name in ("started_at", "completed_at"):
        if body.get(name) is not None:
            fields[name] = _timestamp(docs, name, body[name])
    if body.get("output") is not None:
        fields["output"] = _output(docs, body["output"])
    if body.get("actions") is not None:
        fields["actions"] = _actions(docs, body["actions"])
    return fields


def _timestamp(docs: str, name: str, value: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).replace(microsecond=0)
    except ValueError:
        raise invalid_request(docs, f"For 'properties/{name}', {value!r} is not a timestamp.") from None


def _output(docs: str, output: Any) -> dict[str, Any]:
    if not isinstance(output, dict):
        raise invalid_request(docs, f"For 'properties/output', {output!r} is not an object.")
    for name in ("title", "summary"):
        if not isinstance(output.get(name), str):
            raise missing_field(docs, name)
    for name in ("summary", "text"):
        value = output.get(name)
        if value is not None and not isinstance(value, str):
            raise invalid_request(docs, f"For 'properties/{name}', {value!r} is not a string.")
        if isinstance(value, str) and len(value) > OUTPUT_LIMIT:
            raise too_long(docs, OUTPUT_LIMIT, len(value))
    annotations = output.get("annotations") or []
    if not isinstance(annotations, list) or len(annotations) > MAX_ANNOTATIONS:
        raise invalid_request(
            docs, f"For 'properties/annotations', at most {MAX_ANNOTATIONS} annotations are allowed in one request."
        )
    for annotation in annotations:
        missing = [name for name in ANNOTATION_FIELDS if not isinstance(annotation, dict) or name not in annotation]
        if missing:
            raise missing_field(docs, missing[0])
        if annotation["annotation_level"] not in ANNOTATION_LEVELS:
            raise invalid_request(
                docs,
                f"For 'properties/annotation_level', {annotation['annotation_level']!r} is not one of "
                f"{', '.join(ANNOTATION_LEVELS)}.",
            )
    return {
        "title": output["title"],
        "summary": output["summary"],
        "text": output.get("text"),
        "annotations": annotations,
    }


def _actions(docs: str, actions: Any) -> list[dict[str, str]]:
    if not isinstance(actions, list):
        raise invalid_request(docs, f"For 'properties/actions', {actions!r} is not an array.")
    if len(actions) > MAX_ACTIONS:
        raise invalid_request(
            docs, f"For 'properties/actions', {len(actions)} items were supplied; at most {MAX_ACTIONS} are allowed."
        )
    checked = []
    for action in actions:
        if not isinstance(action, dict):
            raise invalid_request(docs, f"For 'items', {action!r} is not an object.")
        for name, limit in ACTION_LIMITS.items():
            value = action.get(name)
            if not isinstance(value, str):
                raise missing_field(docs, name)
            if len(value) > limit:
                raise invalid_request(
                    docs, f"For 'properties/{name}', {value!r} is too long (maximum is {limit} characters)."
                )
        checked.append({name: action[name] for name in ACTION_LIMITS})
    return checked


async def create_check_run(request: Request) -> Response:
    sandbox, _, repo = repository(request, "checks", "write")
    fields = validated_fields(docs_url(request), await read_json(request), creating=True)
    owner, name = repo.owner.login, repo.name
    sha = await sandbox.in_thread(sandbox.git.resolve, owner, name, fields["head_sha"])
    if sha is None or (len(fields["head_sha"]) == 40 and sha != fields["head_sha"]):
        raise GitHubError(422, f"No commit found for SHA: {fields['head_sha']}", documentation_url=docs_url(request))
    branch = await sandbox.in_thread(sandbox.git.branch_at, owner, name, sha)
    before = await sandbox.in_thread(sandbox.git.parent, owner, name, sha)
    suite = sandbox.state.check_suite_for(repo, sha, branch, before)
    fields.pop("head_sha")
    run_name = fields.pop("name")
    run = sandbox.state.create_check_run(repo, suite, name=run_name, fields=fields)
    await sandbox.check_run_created(repo, run, sandbox.bot, completed=run.status == "completed")
    return json_response(sandbox.renderer.check_run(repo, run), status=201)


async def update_check_run(request: Request) -> Response:
    sandbox, _, repo = repository(request, "checks", "write")
    run = _run(request, repo)
    fields = validated_fields(docs_url(request), await read_json(request), creating=False)
    fields.pop("head_sha", None)
    completed = sandbox.state.update_check_run(run, fields)
    await sandbox.check_run_updated(repo, run, sandbox.bot, completed)
    return json_response(sandbox.renderer.check_run(repo, run))


async def get_check_run(request: Request) -> Response:
    sandbox, _, repo = repository(request, "checks", "read")
    return json_response(sandbox.renderer.check_run(repo, _run(request, repo)))


async def list_for_ref(request: Request) -> Response:
    sandbox, _, repo = repository(request, "checks", "read")
    ref = request.path_params["ref"]
    sha = await sandbox.in_thread(sandbox.git.resolve, repo.owner.login, repo.name, ref)
    if sha is None:
        raise GitHubError(422, f"No commit found for SHA: {ref}", documentation_url=docs_url(request))
    return _run_list(request, repo, sandbox.state.check_runs_of(repo, sha))


async def list_in_suite(request: Request) -> Response:
    """The suite's check runs: by default the newest of each name (`filter=latest`), as GitHub lists them."""
    sandbox, _, repo = repository(request, "checks", "read")
    raw = str(request.path_params["check_suite_id"])
    suite = sandbox.state.check_suites.get(int(raw)) if raw.isdigit() else None
    if suite is None or suite.repository_id != repo.id:
        raise not_found(docs_url(request))
    return _run_list(request, repo, sandbox.state.suite_runs(suite))


async def list_annotations(request: Request) -> Response:
    """The run's annotations, in the order they were given, a page at a time."""
    sandbox, _, repo = repository(request, "checks", "read")
    run = _run(request, repo)
    page, headers = paginate(request, run.annotations)
    return json_response([sandbox.renderer.annotation(repo, run, annotation) for annotation in page], headers=headers)


def _run_list(request: Request, repo: Repository, found: list[CheckRun]) -> Response:
    sandbox = request.app.state.sandbox
    runs = sorted(found, key=lambda r: r.id, reverse=True)
    if request.query_params.get("filter", "latest") == "latest":
        newest: dict[str, CheckRun] = {}
        for run in runs:
            newest.setdefault(run.name, run)
        runs = list(newest.values())
    if "check_name" in request.query_params:
        runs = [r for r in runs if r.name == request.query_params["check_name"]]
    if "status" in request.query_params:
        runs = [r for r in runs if r.status == request.query_params["status"]]
    page, headers = paginate(request, runs)
    return json_response(
        {"total_count": len(runs), "check_runs": [sandbox.renderer.check_run(repo, r) for r in page]}, headers=headers
    )


_REPO = "/repos/{owner}/{repo}"
ROUTES = (
    RestRoute("POST", f"{_REPO}/check-runs", create_check_run, f"{RUNS}#create-a-check-run"),
    RestRoute("GET", f"{_REPO}/check-runs/{{check_run_id}}", get_check_run, f"{RUNS}#get-a-check-run"),
    RestRoute("PATCH", f"{_REPO}/check-runs/{{check_run_id}}", update_check_run, f"{RUNS}#update-a-check-run"),
    RestRoute(
        "GET", f"{_REPO}/commits/{{ref:path}}/check-runs", list_for_ref, f"{RUNS}#list-check-runs-for-a-git-reference"
    ),
    RestRoute(
        "GET",
        f"{_REPO}/check-runs/{{check_run_id}}/annotations",
        list_annotations,
        f"{RUNS}#list-check-run-annotations",
    ),
    RestRoute(
        "GET",
        f"{_REPO}/check-suites/{{check_suite_id}}/check-runs",
        list_in_suite,
        f"{RUNS}#list-check-runs-in-a-check-suite",
    ),
)
