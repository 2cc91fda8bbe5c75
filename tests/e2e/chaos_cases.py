"""The reliability cases, shared by bench/chaos.py (figures over many runs) and tests/e2e/test_faults.py.

Each case drives the real stack (bot/demo/stack.py: `lanebot sandbox serve` and `lanebot serve` as
processes), injects its fault, lets the run finish, and then counts what GitHub shows and what
lanebot stored, into a `Tally`:

- pull requests per issue (each run must end in exactly one),
- duplicate comments: two of lanebot's comments with the same hidden marker (`<!-- lanebot:... -->`),
- duplicate labels: a label twice on an issue, or more than one `lanebot:` state label at the end,
- duplicate check runs: two of a lane's check runs with the same name, head and `external_id`
  (a lane reports one per commit), two successful verify check runs so, or one left open at the end,
- lanes merged more than once: a `Merge lane '<unit>' of #<n>` subject twice on the integration branch,
- deliveries lost: a delivery GitHub sent that lanebot answered 2xx but did not store, or stored and
  never processed, or one GitHub shows as failed that lanebot never stored; counted as they stand,
  then again after `lanebot deliveries recover` (what an operator runs after an outage).

Every wait is bounded (`STEP_TIMEOUT`); a run that does not finish in time counts as not completed,
with what was seen.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from bot.demo import services
from bot.demo.plan import issue_body
from bot.demo.runner import repository_config
from bot.demo.stack import Stack, StepTimedOut
from bot.edges.store.db import make_engine

MAINTAINER = "maintainer"
OWNER = "octo-org"
STEP_TIMEOUT = float(os.environ.get("LANEBOT_CHAOS_STEP_TIMEOUT", "120"))
POSTGRES_SERVER = os.environ.get("LANEBOT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# Every API request lanebot makes, not the human API (people) and not git's smart HTTP.
API_PATHS = r"(?!/_sandbox/)(?!.*\.git/)(?!.*\.git$)/.*"
_MARKER = re.compile(r"\A\s*(<!-- lanebot:[^>]*-->)")
_PHASE_LABELS = ("lanebot:planning", "lanebot:awaiting-approval", "lanebot:running", "lanebot:done")


@dataclass
class Tally:
    """One case's figures over its runs."""

    case: str
    runs: int = 0
    faults: int = 0  # faults that acted (answers GitHub replaced, kills, locks, ...)
    completed: int = 0  # runs that ended in exactly one pull request, labelled done
    extra_pulls: int = 0  # pull requests beyond one per run (and runs with none count in `completed`)
    duplicate_comments: int = 0
    duplicate_labels: int = 0
    duplicate_check_runs: int = 0
    merged_twice: int = 0
    lost_deliveries: int = 0  # lost even after `lanebot deliveries recover`
    recovered_deliveries: int = 0  # lost until the operator ran `lanebot deliveries recover`
    retried_checks: int = 0
    seconds: float = 0.0
    runs_started: dict[str, int] = field(default_factory=dict)  # lanebot's runs per issue, where counted
    slowest_answer: float = 0.0  # the slowest webhook answer GitHub saw, where the case measures it
    notes: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return self.extra_pulls + self.duplicate_comments + self.duplicate_labels + self.duplicate_check_runs

    @property
    def clean(self) -> bool:
        return (
            self.completed == self.runs and self.duplicates == 0 and self.merged_twice == 0 and not self.lost_deliveries
        )

    def add(self, seen: Observation) -> None:
        self.runs += 1
        self.completed += seen.completed
        self.extra_pulls += max(seen.pulls - 1, 0)
        self.duplicate_comments += seen.duplicate_comments
        self.duplicate_labels += seen.duplicate_labels
        self.duplicate_check_runs += seen.duplicate_check_runs
        self.merged_twice += seen.merged_twice
        self.retried_checks += seen.retried_checks
        self.notes.extend(seen.notes)


@dataclass
class Observation:
    """What GitHub shows of one run (one issue), counted."""

    pulls: int = 0
    completed: bool = False
    duplicate_comments: int = 0
    duplicate_labels: int = 0
    duplicate_check_runs: int = 0
    merged_twice: int = 0
    retried_checks: int = 0  # verify run again on the same commit, each time on a new check run
    notes: list[str] = field(default_factory=list)


# -- the stack ------------------------------------------------------------------------------------


@contextlib.contextmanager
def chaos_stack(root: Path, *, database_url: str | None = None, env: dict[str, str] | None = None) -> Iterator[Stack]:
    """The stack under `root`, lanebot on `database_url` (its own SQLite file when None)."""
    shared = root / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    lanebot_env = {"LANEBOT_JAIL_READ_ONLY": str(shared), **(env or {})}
    with Stack(root / "stack", lanebot_env=lanebot_env, database=database_url or "") as stack:
        yield stack


def throwaway_postgres() -> contextlib.AbstractContextManager[str]:
    """A database of its own on the PostgreSQL server (created, then dropped): its URL."""
    return services.throwaway_postgres(POSTGRES_SERVER, user="the chaos cases", prefix="lanebot_chaos")


def terminate_connections(database_url: str) -> int:
    """pg_terminate_backend on every connection to that database but this one: how many were cut."""
    server = make_engine(POSTGRES_SERVER, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    name = make_engine(database_url).url.database
    try:
        with server.connect() as connection:
            cut = connection.execute(
                text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            ).scalar_one()
    finally:
        server.dispose()
    return int(cut)


# -- one run ---------------------------------------------------------------------------------------


def config(**build: object) -> str:
    text_ = repository_config("recipe")
    extra = "".join(f"  {key}: {value}\n" for key, value in build.items())
    return text_.replace("build:\n", "build:\n" + extra, 1)


def new_repository(stack: Stack, name: str, *, maintainers: tuple[str, ...] = (MAINTAINER,), cfg: str = "") -> str:
    full_name = f"{OWNER}/{name}"
    stack.create_repository(full_name, config=cfg or config(max_retries=1), maintainers=maintainers)
    return full_name


def open_labelled_issue(stack: Stack, repo: str, body: str | None = None) -> int:
    assert stack.human is not None
    number: int = stack.human.open_issue(repo, login=MAINTAINER, title="Do the thing", body=body or issue_body())[
        "number"
    ]
    stack.human.add_label(repo, number, "lanebot", login=MAINTAINER)
    return number


def issue(stack: Stack, repo: str, number: int) -> dict[str, Any]:
    return stack.issue(repo, number)


def app_comments(stack: Stack, repo: str, number: int) -> list[dict[str, Any]]:
    return [c for c in issue(stack, repo, number)["comments"] if c["by_app"]]


def wait_for_gate(stack: Stack, repo: str, number: int, *, timeout: float | None = None) -> None:
    stack.wait_for(
        "the gate comment and lanebot:awaiting-approval",
        lambda: (
            "lanebot:awaiting-approval" in issue(stack, repo, number)["labels"]
            and any(c["body"].lstrip().startswith("<!-- lanebot:gate") for c in app_comments(stack, repo, number))
        ),
        timeout=timeout or STEP_TIMEOUT,
        seen=lambda: seen(stack, repo, number),
    )


def approve(stack: Stack, repo: str, number: int, login: str = MAINTAINER) -> None:
    assert stack.human is not None
    stack.human.comment(repo, number, login=login, body="/approve")


def pulls_of(stack: Stack, repo: str, number: int) -> list[dict[str, Any]]:
    return [
        p
        for p in stack.repository(repo)["pulls"]
        if p["pull_request"]["head"] == f"lanebot/{number}" or f"Closes #{number}" in (p["body"] or "")
    ]


def wait_for_done(stack: Stack, repo: str, number: int, *, timeout: float | None = None) -> None:
    stack.wait_for(
        "the pull request and lanebot:done",
        lambda: pulls_of(stack, repo, number) and "lanebot:done" in issue(stack, repo, number)["labels"],
        timeout=timeout or STEP_TIMEOUT,
        seen=lambda: seen(stack, repo, number),
    )


def seen(stack: Stack, repo: str, number: int) -> str:
    try:
        shown = issue(stack, repo, number)
    except Exception as error:  # the sandbox itself may be the problem
        return f"(the sandbox did not answer: {error})"
    bodies = [c["body"][:120] for c in shown["comments"] if c["by_app"]]
    return f"labels {shown['labels']}; lanebot's comments {bodies}"


def quiet(stack: Stack, *, timeout: float = 60.0) -> None:
    """Every delivery made so far delivered, and every one lanebot stored processed (bounded)."""
    assert stack.human is not None
    stack.human.drain()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not stored_deliveries(stack, status="pending"):
            return
        time.sleep(0.3)


def full_run(stack: Stack, repo: str, *, between: Callable[[int], None] | None = None) -> int:
    """Issue → gate → /approve → pull request → done; `between(number)` after the approval."""
    number = open_labelled_issue(stack, repo)
    wait_for_gate(stack, repo, number)
    approve(stack, repo, number)
    if between is not None:
        between(number)
    wait_for_done(stack, repo, number)
    return number


# -- counting --------------------------------------------------------------------------------------


def observe(stack: Stack, repo: str, number: int) -> Observation:
    out = Observation()
    shown = issue(stack, repo, number)
    pulls = pulls_of(stack, repo, number)
    out.pulls = len(pulls)
    out.completed = len(pulls) == 1 and "lanebot:done" in shown["labels"]
    if not out.completed:
        out.notes.append(f"{repo}#{number} did not complete: {len(pulls)} pull request(s); {seen(stack, repo, number)}")
    items = [shown, *pulls]
    for item in items:
        markers = Counter(m.group(1) for c in item["comments"] if c["by_app"] and (m := _MARKER.match(c["body"])))
        for text_, count in markers.items():
            if count > 1:
                out.duplicate_comments += count - 1
                out.notes.append(f"{repo}#{item['number']}: {count} comments with {text_}")
        labels = Counter(item["labels"])
        out.duplicate_labels += sum(count - 1 for count in labels.values())
    states = [label for label in shown["labels"] if label.startswith("lanebot:")]
    if len(states) > 1:
        out.duplicate_labels += len(states) - 1
        out.notes.append(f"{repo}#{number}: state labels {states}")
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for check in stack.repository(repo)["check_runs"]:
        if "run=" in (check["external_id"] or ""):
            groups.setdefault((check["name"], check["head_sha"], check["external_id"]), []).append(check)
    for (name, head, _), runs in groups.items():
        # A lane's attempt that ends on a commit an earlier one reported on completes that check run
        # again. verify run again on a commit starts a new one (GitHub never reopens one): not a
        # duplicate, but two successes are. A check run left open at the end is one too many.
        done = [c for c in runs if c["status"] == "completed"]
        extra = len(runs) - len(done)
        if name == "lanebot / verify":
            extra += max(sum(1 for c in done if c["conclusion"] == "success") - 1, 0)
        else:
            extra += max(len(done) - 1, 0)
        if extra:
            out.duplicate_check_runs += extra
            states = [(c["status"], c["conclusion"]) for c in runs]
            out.notes.append(f"{repo}: check runs {name!r} on {head[:8]}: {states}")
        elif len(runs) > 1:
            out.retried_checks += len(runs) - 1
    for subject, count in Counter(merge_commits(stack, repo, number)).items():
        if count > 1:
            out.merged_twice += 1
            out.notes.append(f"{repo}: {subject!r} {count} times")
    return out


def lane_reports(stack: Stack, repo: str) -> list[dict[str, Any]]:
    """The lanes' check runs: each made when its attempt ended, completed with its result."""
    return [c for c in stack.repository(repo)["check_runs"] if "unit=" in (c["external_id"] or "")]


def lane_running(stack: Stack, repo: str, number: int) -> bool:
    """Whether the run's progress comment shows a lane running (bot.render.progress)."""
    return any(
        c["body"].startswith("<!-- lanebot:progress") and ": running · round " in c["body"]
        for c in app_comments(stack, repo, number)
    )


def merge_commits(stack: Stack, repo: str, number: int) -> list[str]:
    done = subprocess.run(
        ["git", "--git-dir", str(bare_repository(stack, repo)), "log", "--format=%s", f"lanebot/{number}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return [line for line in done.stdout.splitlines() if line.startswith("Merge lane ")]


def bare_repository(stack: Stack, repo: str) -> Path:
    name = repo.split("/")[1]
    return next(
        path for path in (stack.root / "sandbox").rglob(f"{name}.git") if path.parent.name == repo.split("/")[0]
    )


def stored_deliveries(stack: Stack, *, status: str | None = None) -> dict[str, str]:
    """delivery id → status, as lanebot stored them."""
    engine = make_engine(stack.database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT delivery_id, status FROM deliveries")).all()
    finally:
        engine.dispose()
    return {row[0]: row[1] for row in rows if status is None or row[1] == status}


def lost_deliveries(stack: Stack) -> list[str]:
    """Deliveries GitHub made that lanebot lost (see the module docstring), each described."""
    assert stack.human is not None
    sent = stack.human.deliveries()
    stored = stored_deliveries(stack)
    answered = {d["guid"] for d in sent if 200 <= d["status_code"] < 300}
    lost = [f"{guid}: answered 2xx, not stored" for guid in sorted(answered - set(stored))]
    lost += [f"{guid}: never answered 2xx" for guid in sorted({d["guid"] for d in sent} - answered - set(stored))]
    lost += [f"{guid}: stored, still {status}" for guid, status in sorted(stored.items()) if status == "pending"]
    return lost


def failed_handling(stack: Stack) -> list[str]:
    return sorted(stored_deliveries(stack, status="failed"))


def finish(tally: Tally, stack: Stack, repos: list[tuple[str, int]], started: float) -> Tally:
    """Count what GitHub shows of each run, and the deliveries lost: first as they stand, then after
    `lanebot deliveries recover` (what an operator runs after an outage) for those it brings back."""
    quiet(stack)
    for repo, number in repos:
        tally.add(observe(stack, repo, number))
    lost = lost_deliveries(stack)
    if lost:
        tally.notes.extend(f"delivery {entry} (before `lanebot deliveries recover`)" for entry in lost)
        tally.notes.append("recover: " + " / ".join(recover(stack)))
        quiet(stack)
        after = lost_deliveries(stack)
        tally.recovered_deliveries += len(lost) - len(after)
        tally.lost_deliveries += len(after)
        tally.notes.extend(f"lost delivery {entry}" for entry in after)
    failed = failed_handling(stack)
    if failed:
        tally.notes.append(f"{len(failed)} deliveries stored as failed by the dispatcher")
    if tally.retried_checks:
        tally.notes.append(f"verify run again {tally.retried_checks} time(s) on a commit, each on a new check run")
    tally.seconds += time.monotonic() - started
    return tally


def attempt(tally: Tally, stack: Stack, repo: str, body: Callable[[], int]) -> tuple[str, int] | None:
    """Run `body` (one run; it returns the issue number); a timeout is a run that did not complete."""
    try:
        return repo, body()
    except StepTimedOut as error:
        tally.runs += 1
        tally.notes.append(f"{repo}: {error}")
        return None


# -- case 1: GitHub's errors -----------------------------------------------------------------------


GITHUB_ERRORS = (  # (status, share of API requests, Retry-After, secondary rate limit)
    (502, 0.04, None, False),
    (500, 0.03, None, False),
    (403, 0.015, 1, True),
    (429, 0.015, 1, True),
)
# Requests whose repetition is harmless, as lanebot's client judges (bot/edges/github/client.py):
# every method but POST, and the POSTs that create nothing new.
REPEATABLE = (
    r"(?!/_sandbox/)(?!.*\.git/)(?!.*\.git$)(/app/installations/\d+/access_tokens|/app/hook/deliveries/\d+/attempts"
    r"|.*/issues/\d+/labels|.*/pulls/\d+/requested_reviewers|.*/reactions|/graphql)"
)


def ten_percent(seed: int, *, server_errors_on: str = "*") -> list[dict[str, Any]]:
    """The faults of case 1, as the human API takes them. `server_errors_on="repeatable"`: the 5xx only
    on requests lanebot's client may repeat (every method but a creating POST); rate limits on all."""
    from bot.sandbox.faults import SECONDARY_RATE_LIMIT

    faults: list[dict[str, Any]] = []
    for index, (status, rate, retry_after, secondary) in enumerate(GITHUB_ERRORS):
        routes = [("*", API_PATHS)]
        if not secondary and server_errors_on == "repeatable":
            routes = [(method, API_PATHS) for method in ("GET", "PATCH", "PUT", "DELETE")] + [("POST", REPEATABLE)]
        for method, path in routes:
            fault: dict[str, Any] = {"method": method, "path": path, "status": status, "times": None}
            fault |= {"rate": rate, "seed": seed * 100 + index}
            if secondary:
                fault |= {"retry_after": retry_after, "message": SECONDARY_RATE_LIMIT}
            faults.append(fault)
    return faults


def github_errors(
    root: Path, runs: int, *, seed: int = 1, faults: list[dict[str, Any]] | None = None, case: str = ""
) -> Tally:
    """10% of lanebot's API requests answered 502, 500, or a secondary rate limit with Retry-After
    (or the `faults` given, in the human API's terms)."""
    tally = Tally(
        case or "GitHub answers 10% of API requests with 502, 500 or a secondary rate limit (Retry-After 1 s)"
    )
    started = time.monotonic()
    with chaos_stack(root) as stack:
        assert stack.human is not None
        repos = [new_repository(stack, f"faults-{i}") for i in range(runs)]
        for fault in ten_percent(seed) if faults is None else faults:
            stack.human.add_fault(**fault)
        done = [found for repo in repos if (found := attempt(tally, stack, repo, lambda r=repo: full_run(stack, r)))]
        stack.human.clear_faults()
        fired = stack.human.faults()["fired"]
        tally.faults = len(fired)
        api = [line for line in stack.api_requests() if not line.startswith(("GET /_", "POST /_"))]
        tally.notes.append(
            f"{len(fired)} of {len(api)} API requests answered with an error ({Counter(f['fault']['status'] for f in fired)})"
        )
        return finish(tally, stack, done, started)


# -- case 2: SIGKILL -------------------------------------------------------------------------------


KILL_POINTS = ("planning", "lanes", "merge", "integrate", "pull request")


def sigkill(root: Path, runs: int, *, seed: int = 2, points: tuple[str, ...] = KILL_POINTS) -> Tally:
    """Each run: lanebot SIGKILLed at one point (in turn through `points`, at a random moment in it), restarted."""
    tally = Tally("lanebot SIGKILLed once per run (planning, lanes, merge, integrate, PR creation), restarted")
    rng = random.Random(seed)
    started = time.monotonic()
    with chaos_stack(root) as stack:
        done: list[tuple[str, int]] = []
        for index in range(runs):
            point = points[index % len(points)]
            repo = new_repository(stack, f"kill-{index}")
            killed: list[str] = []

            def one(repo: str = repo, point: str = point, killed: list[str] = killed) -> int:
                return killed_run(stack, repo, point, rng, killed)

            found = attempt(tally, stack, repo, one)
            tally.faults += len(killed)
            tally.notes.append(f"{repo}: killed at {point}: {', '.join(killed) or 'the run finished first'}")
            if found:
                done.append(found)
        return finish(tally, stack, done, started)


def killed_run(stack: Stack, repo: str, point: str, rng: random.Random, killed: list[str]) -> int:
    def kill_when(what: str, condition: Callable[[], bool], *, delay: float) -> None:
        try:
            stack.wait_for(what, condition, timeout=STEP_TIMEOUT, poll=0.05)
        except StepTimedOut:
            return
        time.sleep(delay)
        stack.kill_lanebot()
        killed.append(f"{what} + {delay:.2f} s")
        stack.start_lanebot()

    def held(path: str) -> bool:
        """Whether the sandbox holds (or held) a request to `path` of this repository (a delay fault)."""
        assert stack.human is not None
        fired = stack.human.faults()["fired"]
        return any(f["fault"]["delay"] and re.fullmatch(path, f["path"]) for f in fired)

    number = open_labelled_issue(stack, repo)
    if point == "planning":
        # From the request log, not the issue's labels: a hand-written plan is planned in a moment,
        # and the planning label can come and go between two polls of the issue.
        planning = f"POST /repos/{repo}/issues/{number}/labels "
        kill_when(
            "lanebot:planning asked for",
            lambda: any(line.startswith(planning) for line in stack.api_requests()),
            delay=rng.uniform(0, 0.3),
        )
    wait_for_gate(stack, repo, number)
    if point == "pull request":
        assert stack.human is not None
        path = rf"/repos/{repo}/issues/{number}/labels"
        stack.human.add_fault(method="PUT", path=path, delay=8, body_contains="lanebot:done")  # the label swap
    approve(stack, repo, number)
    branch_has = lambda prefix: any(s.startswith(prefix) for s in merge_commits(stack, repo, number))  # noqa: E731
    if point == "lanes":
        # While the other lanes run, or between the lane's report and the lane's state being recorded.
        kill_when(
            "the first lane's result reported", lambda: bool(lane_reports(stack, repo)), delay=rng.uniform(0, 1.0)
        )
    elif point == "merge":
        kill_when("the first merge pushed", lambda: branch_has("Merge lane "), delay=rng.uniform(0, 0.5))
    elif point == "integrate":
        kill_when(
            "the verify check run",
            lambda: any(c["name"] == "lanebot / verify" for c in stack.repository(repo)["check_runs"]),
            delay=rng.uniform(0, 0.5),
        )
    elif point == "pull request":
        # Between the pull request's creation and the issue's `lanebot:done` label: the sandbox holds
        # the label's request (a delay fault), so the kill lands there every time.
        kill_when("the pull request, its done label held", lambda: held(path), delay=rng.uniform(0, 0.5))
    wait_for_done(stack, repo, number)
    return number


# -- case 3: the same delivery 20 times, /approve 20 times ----------------------------------------


def concurrent(root: Path, copies: int = 20) -> Tally:
    """One delivery sent `copies` times at once; `/approve` from `copies` maintainers at once."""
    tally = Tally(
        f"the same delivery {copies} times at once; /approve {copies} times at once from different maintainers"
    )
    started = time.monotonic()
    with chaos_stack(root) as stack:
        assert stack.human is not None
        # a. The labelled delivery and then the /approve delivery, each sent `copies` times at once.
        repo = new_repository(stack, "same-delivery")
        number = open_labelled_issue(stack, repo)
        wait_for_gate(stack, repo, number)
        labelled = last_delivery(stack, "issues", "labeled")
        approve(stack, repo, number)
        approved = last_delivery(stack, "issue_comment", "created")
        answers = send_at_once(stack, labelled, copies) + send_at_once(stack, approved, copies)
        tally.faults += 2 * copies
        tally.notes.append(f"the copies were answered {dict(Counter(answers))}")
        runs = [found for found in [attempt(tally, stack, repo, lambda: wait_done(stack, repo, number))] if found]
        # b. /approve from `copies` maintainers at once.
        maintainers = tuple(f"maintainer-{i}" for i in range(copies))
        repo_b = new_repository(stack, "many-approvals", maintainers=(MAINTAINER, *maintainers))
        number_b = open_labelled_issue(stack, repo_b)
        wait_for_gate(stack, repo_b, number_b)
        at_once([lambda login=login: approve(stack, repo_b, number_b, login) for login in maintainers])
        tally.faults += copies
        runs += [
            found for found in [attempt(tally, stack, repo_b, lambda: wait_done(stack, repo_b, number_b))] if found
        ]
        result = finish(tally, stack, runs, started)
        result.runs_started = count_runs(stack)
        result.notes.append(f"runs lanebot started per issue: {result.runs_started}")
        return result


def wait_done(stack: Stack, repo: str, number: int) -> int:
    wait_for_done(stack, repo, number)
    return number


def last_delivery(stack: Stack, event: str, action: str) -> dict[str, Any]:
    assert stack.human is not None
    found = [d for d in stack.human.deliveries() if d["event"] == event and d["action"] == action]
    return stack.human.delivery(found[-1]["id"])


def send_at_once(stack: Stack, delivery: dict[str, Any], copies: int) -> list[int]:
    """The delivery's exact signed request, `copies` times at once to lanebot; the statuses."""
    headers = {k: v for k, v in delivery["request"]["headers"].items() if k.lower() != "content-length"}
    body = delivery["raw_body"].encode()
    statuses: list[int] = []
    lock = threading.Lock()

    def send() -> None:
        try:
            status = httpx.post(
                f"{stack.lanebot_url}/api/github/webhooks", content=body, headers=headers, timeout=30
            ).status_code
        except httpx.HTTPError:
            status = 0
        with lock:
            statuses.append(status)

    at_once([send] * copies)
    return statuses


def at_once(calls: list[Callable[[], object]]) -> None:
    barrier = threading.Barrier(len(calls))

    def go(call: Callable[[], object]) -> None:
        barrier.wait(timeout=30)
        call()

    threads = [threading.Thread(target=go, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def count_runs(stack: Stack) -> dict[str, int]:
    engine = make_engine(stack.database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT repository, issue_number FROM runs")).all()
    finally:
        engine.dispose()
    return dict(Counter(f"{row[0]}#{row[1]}" for row in rows))


# -- case 4: the database and the disk ------------------------------------------------------------


def postgres_cut(root: Path, runs: int, *, seed: int = 4) -> Tally:
    """lanebot on PostgreSQL; its connections terminated (pg_terminate_backend) at a random moment of each run."""
    tally = Tally("PostgreSQL: lanebot's connections terminated (pg_terminate_backend) mid-run")
    rng = random.Random(seed)
    started = time.monotonic()
    with throwaway_postgres() as url, chaos_stack(root, database_url=url) as stack:
        done: list[tuple[str, int]] = []
        for index in range(runs):
            repo = new_repository(stack, f"pg-{index}")

            def cut(number: int) -> None:
                time.sleep(rng.uniform(0.2, 3.0))
                tally.faults += terminate_connections(url)

            if found := attempt(tally, stack, repo, lambda r=repo: full_run(stack, r, between=cut)):
                done.append(found)
        return finish(tally, stack, done, started)


def sqlite_lock(root: Path, *, hold: float = 12.0) -> Tally:
    """Another connection holds SQLite's write lock for `hold` seconds while an issue is opened and
    labelled. lanebot answers within GitHub's 10 s: stored (202) or, when the lock outlasts its store
    deadline, 503, which GitHub shows as failed and lanebot's own recovery asks for again; the run
    must still finish. The slowest answer goes to the notes."""
    import sqlite3

    tally = Tally(f"SQLite: another connection holds the write lock for {hold:g} s during intake")
    started = time.monotonic()
    with chaos_stack(root) as stack:
        assert stack.human is not None
        repo = new_repository(stack, "locked")
        stack.human.drain()
        database = stack.database_url.removeprefix("sqlite:///")
        holder = sqlite3.connect(database, timeout=30, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        tally.faults += 1
        released = threading.Timer(hold, lambda: holder.execute("ROLLBACK"))
        released.start()
        try:
            number = open_labelled_issue(stack, repo)
            stack.human.drain()
        finally:
            released.join(timeout=hold + 5)
            holder.close()
        sent = stack.human.deliveries()
        tally.slowest_answer = max((d["duration"] for d in sent), default=0.0)
        tally.notes.append(
            f"deliveries answered {dict(Counter(d['status_code'] for d in sent))}; the slowest answer took "
            f"{tally.slowest_answer:.1f} s"
        )
        # A delivery answered 503 is GitHub's to show as failed and lanebot's own recovery's to ask
        # for again, about 20 s later (bot/web/recovery.py): no operator here.
        found = attempt(tally, stack, repo, lambda: finish_run(stack, repo, number))
        return finish(tally, stack, [found] if found else [], started)


def finish_run(stack: Stack, repo: str, number: int) -> int:
    wait_for_gate(stack, repo, number)
    approve(stack, repo, number)
    wait_for_done(stack, repo, number)
    return number


def recover(stack: Stack) -> list[str]:
    """`lanebot deliveries recover`, as an operator runs it: its output lines."""
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "deliveries", "recover", "--env-file", str(stack.root / "no.env")],
        env=stack.lanebot_environment(),
        cwd=stack.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stack.human is not None
    stack.human.drain()
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()][-5:]


def disk_full(root: Path, *, size_mb: int = 64) -> Tally:
    """LANEBOT_WORKDIR on a small tmpfs, filled while a lane works, freed a little later."""
    tally = Tally(f"the work disk (a {size_mb} MB tmpfs as LANEBOT_WORKDIR) full mid-lane")
    started = time.monotonic()
    mount = root / "workdisk"
    mount.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        tally.notes.append(f"not measured: mount refused ({mounted.stderr.strip()})")
        return tally
    try:
        workdir = mount / "work"
        with chaos_stack(root, env={"LANEBOT_WORKDIR": str(workdir)}) as stack:
            repo = new_repository(stack, "disk", cfg=config(max_retries=1))
            filler = mount / "filler"

            def fill(number: int) -> None:
                stack.wait_for(
                    "a lane running", lambda: lane_running(stack, repo, number), timeout=STEP_TIMEOUT, poll=0.05
                )
                subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True, check=False)
                tally.faults += 1
                time.sleep(3)
                filler.unlink()

            found = attempt(tally, stack, repo, lambda: disk_full_run(stack, repo, fill))
            return finish(tally, stack, [found] if found else [], started)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def disk_full_run(stack: Stack, repo: str, fill: Callable[[int], None]) -> int:
    """A run whose lanes meet a full disk: done, or blocked and then /retry after the disk is freed."""
    number = open_labelled_issue(stack, repo)
    wait_for_gate(stack, repo, number)
    approve(stack, repo, number)
    fill(number)
    stack.wait_for(
        "done or blocked",
        lambda: {"lanebot:done", "lanebot:blocked"} & set(issue(stack, repo, number)["labels"]),
        timeout=STEP_TIMEOUT,
        seen=lambda: seen(stack, repo, number),
    )
    if "lanebot:blocked" in issue(stack, repo, number)["labels"]:
        assert stack.human is not None
        stack.human.comment(repo, number, login=MAINTAINER, body="/retry")
    wait_for_done(stack, repo, number)
    return number


def table(tallies: list[Tally]) -> str:
    lines = [
        "| case | runs | faults injected | runs completed | extra PRs | dup. comments | dup. labels | dup. check runs "
        "| lanes merged twice | deliveries lost (recovered by hand) | time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in tallies:
        lines.append(
            f"| {t.case} | {t.runs} | {t.faults} | {t.completed} | {t.extra_pulls} | {t.duplicate_comments} "
            f"| {t.duplicate_labels} | {t.duplicate_check_runs} | {t.merged_twice} "
            f"| {t.lost_deliveries} ({t.recovered_deliveries}) | {t.seconds:.0f} s |"
        )
    return "\n".join(lines)
