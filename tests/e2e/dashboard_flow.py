"""What the dashboard's end-to-end tests share: the demo's plan run in one repository of the
sandbox and a second, private, repository with a run of its own; and Sign in with GitHub followed
step by step without a browser (an httpx client keeping both sites' cookies)."""

from __future__ import annotations

import html
import re
import urllib.parse
from dataclasses import dataclass

import httpx

from bot.demo.plan import issue_body
from bot.demo.runner import repository_config
from bot.demo.stack import Stack
from bot.edges.store import db
from bot.edges.store import runs as store

REPO = "octo-org/tasks"
SECRET_REPO = "octo-org/secret"
PERSON = "maintainer"  # a collaborator on REPO only
OTHER = "keeper"  # the maintainer of SECRET_REPO
STEP_TIMEOUT = 240.0


@dataclass(frozen=True)
class Runs:
    readable: int  # the run of REPO's issue
    hidden: int  # the run of SECRET_REPO's issue
    readable_issue: int


def comment_with(stack: Stack, repository: str, number: int, marker: str) -> dict | None:
    comments = stack.issue(repository, number)["comments"]
    return next((c for c in comments if c["by_app"] and c["body"].startswith(marker)), None)


def run_id(stack: Stack, repository: str, number: int) -> int:
    engine = db.make_engine(stack.database_url)
    try:
        run = store.active_run(engine, repository, number)
    finally:
        engine.dispose()
    assert run is not None and run.id is not None, f"no run for {repository}#{number}"
    return run.id


def start_runs(stack: Stack, *, approve: bool = True) -> Runs:
    """The demo's plan labelled in REPO (approved when `approve`), and an issue labelled in the private
    SECRET_REPO (left at its gate); both runs' ids once lanebot has them."""
    config = repository_config("recipe")
    stack.create_repository(REPO, config=config, maintainers=(PERSON,))
    stack.create_repository(SECRET_REPO, config=config, maintainers=(OTHER,), private=True)
    human = stack.human
    assert human is not None
    number = human.open_issue(REPO, login=PERSON, title="Tasks need a status", body=issue_body())["number"]
    hidden = human.open_issue(SECRET_REPO, login=OTHER, title="Secret things", body=issue_body())["number"]
    human.add_label(REPO, number, "lanebot", login=PERSON)
    human.add_label(SECRET_REPO, hidden, "lanebot", login=OTHER)
    for repository, issue in ((REPO, number), (SECRET_REPO, hidden)):
        stack.wait_for(
            f"the gate comment on {repository}#{issue}",
            lambda repository=repository, issue=issue: comment_with(stack, repository, issue, "<!-- lanebot:gate"),
            timeout=STEP_TIMEOUT,
        )
    if approve:
        human.comment(REPO, number, login=PERSON, body="/approve")
    return Runs(run_id(stack, REPO, number), run_id(stack, SECRET_REPO, hidden), number)


def wait_for_pull(stack: Stack, number: int) -> dict:
    def probe() -> dict | None:
        pulls = stack.repository(REPO)["pulls"]
        return next((p for p in pulls if f"Closes #{number}" in (p["body"] or "")), None)

    return stack.wait_for("the pull request", probe, timeout=STEP_TIMEOUT)


_INPUT = re.compile(r"<input\b[^>]*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(r'([a-z_-]+)="([^"]*)"', re.IGNORECASE)


def form_fields(page: str) -> dict[str, str]:
    """The named inputs of the page's (first) form, unescaped."""
    form = page[page.index("<form") : page.index("</form>")]
    fields = {}
    for tag in _INPUT.findall(form):
        attributes = {k.lower(): html.unescape(v) for k, v in _ATTRIBUTE.findall(tag)}
        if "name" in attributes:
            fields[attributes["name"]] = attributes.get("value", "")
    return fields


def _location(response: httpx.Response, status: tuple[int, ...] = (302, 303)) -> str:
    assert response.status_code in status, (response.status_code, response.text[:500])
    return str(response.url.join(response.headers["location"]))


def sign_in(client: httpx.Client, stack: Stack, login: str) -> httpx.Response:
    """Sign in to lanebot's dashboard as `login` the way a browser would: every redirect followed by
    hand and checked, the sandbox's sign-in and authorize forms posted. The dashboard's runs page."""
    start = client.get(f"{stack.lanebot_url}/dashboard")
    login_url = _location(start)
    assert urllib.parse.urlsplit(login_url).path == "/dashboard/login"
    authorize = _location(client.get(login_url))
    split = urllib.parse.urlsplit(authorize)
    assert f"{split.scheme}://{split.netloc}" == stack.sandbox_url and split.path == "/login/oauth/authorize"
    query = dict(urllib.parse.parse_qsl(split.query))
    assert query["redirect_uri"] == f"{stack.lanebot_url}/dashboard/oauth/callback"
    state = query["state"]

    sign_in_url = _location(client.get(authorize))
    assert urllib.parse.urlsplit(sign_in_url).path == "/login"
    page = client.get(sign_in_url)
    assert page.status_code == 200 and 'action="/session"' in page.text
    fields = form_fields(page.text)
    fields["login"] = login
    back = _location(client.post(f"{stack.sandbox_url}/session", data=fields))
    assert urllib.parse.urlsplit(back).path == "/login/oauth/authorize"

    consent = client.get(back)
    assert consent.status_code == 200 and "Authorize" in consent.text, consent.text[:500]
    decision = {**form_fields(consent.text), "authorize": "1"}
    callback = _location(client.post(f"{stack.sandbox_url}/login/oauth/authorize", data=decision))
    split = urllib.parse.urlsplit(callback)
    assert f"{split.scheme}://{split.netloc}{split.path}" == f"{stack.lanebot_url}/dashboard/oauth/callback"
    returned = dict(urllib.parse.parse_qsl(split.query))
    assert returned["state"] == state and returned["code"]

    landing = _location(client.get(callback))
    assert landing == f"{stack.lanebot_url}/dashboard"
    runs = client.get(landing)
    assert runs.status_code == 200, runs.text[:1000]
    return runs
