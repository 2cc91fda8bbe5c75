"""The dashboard's routes and pages (see bot/web/dashboard/__init__.py for what each shows)."""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from bot.core.diffstat import parse_numstat, totals
from bot.edges.files import TranscriptRefused, read_transcript
from bot.edges.settings import Settings
from bot.edges.store import dashboard as listing
from bot.edges.store import runs as store
from bot.edges.store.models import RUN_STATES, AgentSession
from bot.render.dashboard.graph_svg import graph_svg
from bot.render.dashboard.links import web_url_for_api
from bot.render.dashboard.runs import (
    RunSummary,
    cost_text,
    duration_between,
    held_words,
    run_row,
    state_words,
    tokens_text,
    when,
)
from bot.render.dashboard.transcript import parse_transcript
from bot.runner.lanes import LaneFailure
from bot.runner.sessions import host_name
from bot.web.dashboard import views
from bot.web.dashboard.github import GitHubUsers, HttpGitHubUsers, RefreshRefused, SignInFailed, TokenRejected
from bot.web.dashboard.session import (
    ACCESS_TTL_SECONDS,
    COOKIE_NAME,
    COOKIE_PATH,
    LOGIN_SECONDS,
    AccessCache,
    CookieSealer,
    Renewals,
    SignedIn,
    session_key,
)

log = logging.getLogger(__name__)

CALLBACK_PATH = "/dashboard/oauth/callback"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "
        "form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_STATIC = Path(__file__).resolve().parent / "static"
_STATIC_FILES = {"dashboard.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
EVENTS_PATH = "/dashboard/events"
# How long the browser waits before it connects again when a stream ends (EventSource's `retry`).
RETRY_MS = 2000
KEEPALIVE_SECONDS = 15.0
_CODE = re.compile(r"[A-Za-z0-9_-]{1,200}")
_NEXT = re.compile(r"/dashboard(?:/[A-Za-z0-9._~/-]*)?(?:\?[A-Za-z0-9._~=&%+-]*)?")
_RUN_ID = re.compile(r"[0-9]{1,18}")
_UNIT = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).resolve().parents[1] / "templates" / "dashboard"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True)
class Person:
    login: str
    session_id: str
    repositories: frozenset[str]

    def may_read(self, repository: str) -> bool:
        return repository.lower() in self.repositories


@dataclass
class Dashboard:
    """The dashboard of one lanebot: its settings, database, seam to GitHub and sessions."""

    settings: Settings
    engine: Engine
    users: GitHubUsers | None  # None: the dashboard is off (no OAuth client in the settings)
    clock: Callable[[], float] = time.time
    access: AccessCache = field(default_factory=AccessCache)
    renewals: Renewals = field(default_factory=Renewals)
    # Live updates: how often a stream asks the database whether its page changed, and how long one
    # stream lasts (the browser connects again, and the person's access is checked again).
    poll_seconds: float = 1.0
    stream_seconds: float = ACCESS_TTL_SECONDS
    # Set when the server is stopping: every stream ends at its next poll.
    closing: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sealer = CookieSealer(session_key(self.settings.webhook_secret, self.settings.github_client_secret))
        self.web_url = web_url_for_api(self.settings.github_api_url)

    # -- helpers ---------------------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def redirect_uri(self) -> str | None:
        public = self.settings.public_url
        return public.rstrip("/") + CALLBACK_PATH if public else None

    def secure(self, request: Request) -> bool:
        public = self.settings.public_url
        return public.startswith("https://") if public else request.url.scheme == "https"

    def page(
        self, name: str, request: Request, *, status: int = 200, person: Person | None = None, **context: Any
    ) -> Response:
        context.setdefault("live", None)
        html = _templates.get_template(name).render(person=person, path=request.url.path, **context)
        return HTMLResponse(html, status_code=status)

    def message(self, request: Request, status: int, title: str, text: str, **context: Any) -> Response:
        return self.page("message.html", request, status=status, title=title, text=text, **context)

    def not_found(self, request: Request, person: Person | None = None) -> Response:
        return self.message(request, 404, "Not found", "There is no such page, or you cannot see it.", person=person)

    def set_session(self, response: Response, request: Request, data: dict[str, Any], *, max_age: int) -> None:
        response.set_cookie(
            COOKIE_NAME,
            self.sealer.seal(data, now=self.clock()),
            max_age=max_age,
            path=COOKIE_PATH,
            httponly=True,
            samesite="lax",
            secure=self.secure(request),
        )

    def clear_session(self, response: Response, request: Request) -> None:
        response.delete_cookie(
            COOKIE_NAME, path=COOKIE_PATH, httponly=True, samesite="lax", secure=self.secure(request)
        )

    def sign_in_redirect(self, request: Request) -> Response:
        return RedirectResponse(_login_url(request), status_code=303)

    async def person(self, request: Request) -> Person | Response:
        """Who is signed in, with what they may read (asked of GitHub again once it is stale), or
        the response that sends them to sign in."""
        signed = SignedIn.from_cookie(self.sealer.open(request.cookies.get(COOKIE_NAME), now=self.clock()))
        if signed is None:
            return self.sign_in_redirect(request)
        repositories = self.access.get(signed.session_id, now=self.clock())
        if repositories is None:
            try:
                signed, repositories = await self._ask_access(request, signed)
            except (TokenRejected, RefreshRefused):
                return self.sign_in_again(request, signed)
            except SignInFailed as error:  # fail closed: no stale access when GitHub cannot say
                return self.message(request, 502, "GitHub could not be asked", str(error))
            self.access.put(signed.session_id, repositories, now=self.clock())
        return Person(signed.login, signed.session_id, repositories)

    async def _ask_access(self, request: Request, signed: SignedIn) -> tuple[SignedIn, frozenset[str]]:
        """What the person may read, asked of GitHub with their token, renewed first when it is about
        to expire, or after GitHub answered 401 to it."""
        assert self.users is not None
        renewed = signed.needs_renewal(now=self.clock())
        if renewed:
            signed = await self._renew(request, signed)
        try:
            return signed, await self.users.readable_repositories(signed.token)
        except TokenRejected:
            if renewed or not signed.can_renew(now=self.clock()):
                raise
        signed = await self._renew(request, signed)
        return signed, await self.users.readable_repositories(signed.token)

    async def _renew(self, request: Request, signed: SignedIn) -> SignedIn:
        """The session with a new token pair from its refresh token; the response will carry its cookie."""
        assert self.users is not None
        if signed.refresh_token is None or not signed.can_renew(now=self.clock()):
            raise TokenRejected("the sign-in expired and has no live refresh token")
        tokens = await self.renewals.renew(signed.refresh_token, self.users.refresh, clock=self.clock)
        renewed = signed.renewed(tokens, now=self.clock())
        request.state.renewed_session = functools.partial(
            self.set_session, request=request, data=renewed.cookie(), max_age=renewed.cookie_seconds(now=self.clock())
        )
        log.info("dashboard: %s's sign-in renewed", signed.login)
        return renewed

    def sign_in_again(self, request: Request, signed: SignedIn) -> Response:
        """GitHub no longer takes the person's token and it cannot be renewed: say so, and sign them out."""
        self.access.drop(signed.session_id)
        response = self.message(
            request,
            401,
            "Sign in again",
            "Your sign-in with GitHub has expired or was revoked: sign in again to carry on.",
            retry=True,
            sign_in_url=_login_url(request),
        )
        self.clear_session(response, request)
        return response

    # -- pages -----------------------------------------------------------------------------

    async def runs_page(self, request: Request) -> Response:
        person = await self.person(request)
        if isinstance(person, Response):
            return person
        repository = request.query_params.get("repository") or None
        state = request.query_params.get("state") or None
        if state is not None and state not in RUN_STATES:
            return self.message(
                request, 400, "Unknown state", f"Runs are in one of: {', '.join(RUN_STATES)}.", person=person
            )
        found = await run_in_threadpool(
            functools.partial(listing.list_runs, self.engine, person.repositories, repository=repository, state=state)
        )
        repositories = await run_in_threadpool(listing.repositories_with_runs, self.engine, person.repositories)
        now = self.now()
        rows = [run_row(_summary(found_run), now=now) for found_run in found]
        return self.page(
            "runs.html",
            request,
            person=person,
            rows=rows,
            repositories=repositories,
            states=[(value, state_words(value)) for value in RUN_STATES],
            chosen_repository=repository or "",
            chosen_state=state or "",
            web_url=self.web_url,
            live=EVENTS_PATH,
        )

    async def run_page(self, request: Request) -> Response:
        person = await self.person(request)
        if isinstance(person, Response):
            return person
        run = await run_in_threadpool(store.get_run, self.engine, request.path_params["run_id"])
        if run is None or run.id is None or not person.may_read(run.repository):
            return self.not_found(request, person)
        revision = run.approved_revision
        plan = await run_in_threadpool(
            (lambda: store.get_plan(self.engine, run.id or 0, revision))
            if revision
            else (lambda: store.latest_plan(self.engine, run.id or 0))
        )
        lanes = await run_in_threadpool(store.lanes, self.engine, run.id)
        sessions = await run_in_threadpool(store.sessions, self.engine, run.id)
        events = await run_in_threadpool(store.run_events, self.engine, run.id)
        graph = views.plan_graph(plan)
        now = self.now()
        svg = None
        if graph is not None:
            states = {lane.unit_id: lane.state for lane in lanes}
            svg = Markup(graph_svg(graph, states, label=f"The unit graph of {run.repository}#{run.issue_number}"))
        return self.page(
            "run.html",
            request,
            person=person,
            run=run,
            state=state_words(run.state),
            held=held_words(run.held_by, run.held_at, run.held_reason),
            started=when(run.created_at),
            links=views.run_links(self.web_url, run),
            svg=svg,
            plan=plan,
            lanes=views.lane_views(run, graph, lanes, sessions, self.web_url, now),
            timing=views.timing(graph, lanes, sessions, now),
            timelines=views.timelines(graph, lanes, sessions, events, now),
            sessions=views.session_views(sessions, now),
            events=views.event_views(events),
            live=f"{EVENTS_PATH}?run={run.id}",
        )

    async def attempt_page(self, request: Request) -> Response:
        person = await self.person(request)
        if isinstance(person, Response):
            return person
        unit_id, number = request.path_params["unit"], request.path_params["attempt"]
        run = await run_in_threadpool(store.get_run, self.engine, request.path_params["run_id"])
        if run is None or run.id is None or not person.may_read(run.repository) or not _UNIT.fullmatch(unit_id):
            return self.not_found(request, person)
        lane = await run_in_threadpool(store.get_lane, self.engine, run.id, unit_id)
        sessions = await run_in_threadpool(store.sessions, self.engine, run.id) if lane else []
        session = next(
            (s for s in sessions if lane and s.lane_id == lane.id and s.kind == "lane" and s.attempt == number), None
        )
        if lane is None or session is None:
            return self.not_found(request, person)
        transcript, problem = await self._transcript(session)
        failure = LaneFailure.from_text(lane.failure) if lane.failure else None
        check = failure if failure is not None and failure.attempt == number else None
        diff = parse_numstat(session.diff_stat)
        added, deleted = totals(diff)
        check_output = session.check_output if session.check_output is not None else (check.output if check else None)
        return self.page(
            "attempt.html",
            request,
            person=person,
            run=run,
            lane=lane,
            session=session,
            attempt=number,
            host=session.host or "—",
            started=when(session.started_at),
            ended=when(session.ended_at),
            tokens=tokens_text(session.input_tokens, session.output_tokens),
            cost=cost_text(session.cost_usd),
            check=check,
            check_output=check_output,
            check_took=duration_between(session.check_started_at, session.ended_at)
            if session.check_started_at and session.ended_at
            else None,
            diff=diff,
            added=added,
            deleted=deleted,
            transcript=transcript,
            problem=problem,
            links=views.run_links(self.web_url, run),
        )

    async def _transcript(self, session: AgentSession) -> tuple[Any, str | None]:
        if not session.transcript_path:
            return None, "No transcript was recorded for this attempt."
        try:
            read = await run_in_threadpool(read_transcript, self.settings.workdir, session.transcript_path)
        except TranscriptRefused as refused:
            log.warning("dashboard: transcript of session %s refused: %s", session.id, refused)
            return None, f"lanebot reads transcripts only under its work folder's transcripts/: {refused}."
        except OSError as error:
            return None, f"The transcript cannot be read ({type(error).__name__})."
        if read is None:
            where = session.host or "another host"
            here = host_name()
            if session.host and session.host != here:
                return None, f"The transcript is on {where}, not on this host ({here})."
            return None, "The transcript is not on this host (it was removed, or never written)."
        data, cut = read
        return await run_in_threadpool(functools.partial(parse_transcript, data, cut=cut)), None

    # -- live updates ----------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """Server-sent events for a page: `?run=<id>` for a run's page, nothing for the runs list. An
        event `change` (its data a digest of the page's rows) when the stream starts and whenever what
        the page shows changed; `gone` when the run no longer exists. Access is checked as the pages
        check it; a stream ends after `stream_seconds` and the browser connects again (`retry`)."""
        person = await self.person(request)
        if isinstance(person, Response):
            if person.status_code in (302, 303):  # an EventSource cannot sign in: say so, plainly
                refused = PlainTextResponse("Sign in again.", status_code=401)
                if "set-cookie" in person.headers:
                    refused.headers["set-cookie"] = person.headers["set-cookie"]
                return refused
            return person
        raw = request.query_params.get("run")
        version: Callable[[], str | None]
        if raw is None:
            repositories = person.repositories
            version = functools.partial(listing.runs_version, self.engine, repositories)
        else:
            run = await run_in_threadpool(store.get_run, self.engine, int(raw)) if _RUN_ID.fullmatch(raw) else None
            if run is None or run.id is None or not person.may_read(run.repository):
                return self.not_found(request, person)
            version = functools.partial(listing.run_version, self.engine, run.id)
        return StreamingResponse(
            self._stream(request, version),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _stream(self, request: Request, version: Callable[[], str | None]) -> AsyncIterator[str]:
        # The reconnection delay goes out with the first state, in one write: a stream cut right
        # after it opened (lanebot stopping) still told the browser where the page stood.
        preamble = f"retry: {RETRY_MS}\n\n"
        loop = asyncio.get_running_loop()
        ends = loop.time() + self.stream_seconds
        last: str | None = None
        quiet_since = loop.time()
        while loop.time() < ends and not self.closing.is_set():
            if await request.is_disconnected():
                return
            current = await run_in_threadpool(version)
            if current is None:
                yield preamble + "event: gone\ndata: \n\n"
                return
            if current != last:
                last, quiet_since = current, loop.time()
                yield preamble + f"event: change\ndata: {current}\n\n"
                preamble = ""
            elif loop.time() - quiet_since >= KEEPALIVE_SECONDS:
                quiet_since = loop.time()
                yield ": still here\n\n"
            await asyncio.sleep(self.poll_seconds)
        if preamble:
            yield preamble

    # -- signing in and out ----------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        assert self.users is not None
        target = request.query_params.get("next", "/dashboard")
        state = secrets.token_urlsafe(24)
        response = RedirectResponse(
            self.users.authorize_url(state=state, redirect_uri=self.redirect_uri()), status_code=303
        )
        self.set_session(
            response,
            request,
            {"state": state, "next": target if _NEXT.fullmatch(target) else "/dashboard"},
            max_age=LOGIN_SECONDS,
        )
        return response

    async def callback(self, request: Request) -> Response:
        assert self.users is not None
        data = self.sealer.open(request.cookies.get(COOKIE_NAME), now=self.clock(), max_age=LOGIN_SECONDS)
        expected = data.get("state") if data else None
        given = request.query_params.get("state", "")
        if not isinstance(expected, str) or not given or not hmac.compare_digest(expected, given):
            return self.message(
                request,
                403,
                "Sign-in not recognised",
                "This sign-in was not started in this browser, or it expired.",
                retry=True,
            )
        if request.query_params.get("error"):
            return self.message(request, 403, "Sign-in cancelled", "GitHub did not sign you in.", retry=True)
        code = request.query_params.get("code", "")
        if not _CODE.fullmatch(code):
            return self.message(request, 400, "Sign-in failed", "GitHub's answer has no valid code.", retry=True)
        try:
            tokens = await self.users.exchange_code(code, redirect_uri=self.redirect_uri())
            user = await self.users.user(tokens.access_token)
            repositories = await self.users.readable_repositories(tokens.access_token)
        except SignInFailed as error:
            return self.message(request, 502, "Sign-in failed", str(error), retry=True)
        session_id = secrets.token_urlsafe(18)
        signed = SignedIn.start(user, session_id, tokens, now=self.clock())
        self.access.put(session_id, repositories, now=self.clock())
        target = data.get("next") if data else None
        response = RedirectResponse(
            target if isinstance(target, str) and _NEXT.fullmatch(target) else "/dashboard", 303
        )
        self.set_session(response, request, signed.cookie(), max_age=signed.cookie_seconds(now=self.clock()))
        log.info("dashboard: %s signed in (%d repositories readable)", user.login, len(repositories))
        return response

    async def logout(self, request: Request) -> Response:
        data = self.sealer.open(request.cookies.get(COOKIE_NAME), now=self.clock())
        if data and isinstance(data.get("sid"), str):
            self.access.drop(data["sid"])
        response = self.message(request, 200, "Signed out", "You are signed out of lanebot's dashboard.", retry=True)
        self.clear_session(response, request)
        return response

    async def off(self, request: Request) -> Response:
        return self.page("off.html", request, status=404)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC_FILES:
            return self.not_found(request)
        return Response(_static_file(name), media_type=_STATIC_FILES[name], headers={"Cache-Control": "max-age=3600"})


@functools.cache
def _static_file(name: str) -> bytes:
    return (_STATIC / name).read_bytes()


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="/")


def _login_url(request: Request) -> str:
    """The sign-in page, told to come back to the page asked for (any but the runs list)."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    query = f"?next={_quote(target)}" if _NEXT.fullmatch(target) and target != "/dashboard" else ""
    return f"/dashboard/login{query}"


def _summary(found: listing.RunListing) -> RunSummary:
    run = found.run
    return RunSummary(
        run_id=run.id or 0,
        repository=run.repository,
        issue_number=run.issue_number,
        state=run.state,
        created_at=run.created_at,
        updated_at=run.updated_at,
        lanes_total=found.lanes_total,
        lanes_merged=found.lanes_merged,
        sessions=found.sessions,
        input_tokens=found.input_tokens,
        output_tokens=found.output_tokens,
        cost_usd=found.cost_usd,
        pr_number=run.pr_number,
        held_by=run.held_by,
    )


def _secured(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    @functools.wraps(endpoint)
    async def secured(request: Request) -> Response:
        response = await endpoint(request)
        renewed_session = getattr(request.state, "renewed_session", None)
        if renewed_session is not None and "set-cookie" not in response.headers:
            renewed_session(response)  # the session's new token pair (Dashboard._renew)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return secured


def dashboard_routes(
    settings: Settings,
    engine: Engine,
    *,
    users: GitHubUsers | None = None,
    clock: Callable[[], float] = time.time,
    poll_seconds: float = 1.0,
    stream_seconds: float = ACCESS_TTL_SECONDS,
    closing: threading.Event | None = None,
) -> list[Route]:
    """The /dashboard routes; `users` replaces the HTTP client of GitHub's OAuth and user API;
    `poll_seconds` and `stream_seconds` time the live updates, which end when `closing` is set
    (`Dashboard`). Without GITHUB_CLIENT_ID
    and GITHUB_CLIENT_SECRET every page but the static files says the dashboard is off."""
    enabled = bool(settings.github_client_id and settings.github_client_secret)
    if enabled and users is None:
        users = HttpGitHubUsers(
            web_url=web_url_for_api(settings.github_api_url),
            api_url=settings.github_api_url,
            client_id=settings.github_client_id,
            client_secret=settings.github_client_secret,
        )
    dashboard = Dashboard(
        settings,
        engine,
        users if enabled else None,
        clock=clock,
        poll_seconds=poll_seconds,
        stream_seconds=stream_seconds,
        closing=closing or threading.Event(),
    )
    static = Route("/dashboard/static/{name}", _secured(dashboard.static), methods=["GET"])
    if not enabled:
        return [static, Route("/dashboard{rest:path}", _secured(dashboard.off), methods=["GET", "POST"])]
    pages: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
        ("/dashboard", dashboard.runs_page, ["GET"]),
        ("/dashboard/", dashboard.runs_page, ["GET"]),
        ("/dashboard/login", dashboard.login, ["GET"]),
        (CALLBACK_PATH, dashboard.callback, ["GET"]),
        ("/dashboard/logout", dashboard.logout, ["POST"]),
        (EVENTS_PATH, dashboard.events, ["GET"]),
        ("/dashboard/runs/{run_id:int}", dashboard.run_page, ["GET"]),
        ("/dashboard/runs/{run_id:int}/lanes/{unit}/attempts/{attempt:int}", dashboard.attempt_page, ["GET"]),
    ]
    routes = [static] + [Route(path, _secured(endpoint), methods=methods) for path, endpoint, methods in pages]

    async def unknown(request: Request) -> Response:
        return dashboard.not_found(request)

    routes.append(Route("/dashboard/{rest:path}", _secured(unknown), methods=["GET", "POST"]))
    return routes
