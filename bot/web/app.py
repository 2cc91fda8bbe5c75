"""The web application: the webhook intake, the health check and the App set-up pages.

`create_app(settings)` builds it; uvicorn can also import `bot.web.app:app`, built from the
environment on first access. Start-up migrates the database, starts the dispatcher (whose first
pass takes whatever was stored but not processed before a restart) and, with
LANEBOT_RECOVER_DELIVERIES=1, asks GitHub for the deliveries it failed to make: at start-up, every
LANEBOT_RECOVER_INTERVAL seconds while serving, and soon after the intake answered one 5xx
(bot/web/recovery.py). Shutdown stops the intake's writer (bot/web/intake.py) first, so that every
delivery handed to it is answered, then the recovery, then the dispatcher.
Background work (planning, building) runs in `bot.runner.jobs.Jobs`, which resumes unfinished runs at
start-up and is stopped after the dispatcher.
`create_setup_app()` serves only the set-up pages, for `lanebot setup` before the App exists; the
App itself never serves them (they show its App id and its .env's path to whoever asks).
`/healthz` writes to the database (one row, changed to itself) so that a database that can be
read but not written (read-only, disk full, locked) answers 503, as deliveries would fail.
`/metrics` is Prometheus's text format (bot/web/metrics.py), with nothing secret in it.
`/dashboard` is the read-only dashboard behind Sign in with GitHub (bot/web/dashboard), off (404,
saying which settings turn it on) without GITHUB_CLIENT_ID and GITHUB_CLIENT_SECRET.
With LANEBOT_WEBHOOK_PROXY_URL, the lifespan also reads that relay channel and hands each delivery
to this app's own webhook endpoint (bot/edges/webhook_proxy.py); it is stopped first at shutdown.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from anyio import to_thread
from gidgethub import routing
from sqlalchemy.engine import Engine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot import __version__
from bot.edges.github.client import GitHubApp
from bot.edges.github.permissions import cache_for
from bot.edges.settings import DEFAULT_API_URL, DEFAULT_WEBHOOK_PATH, Settings
from bot.edges.store import db, deliveries
from bot.edges.store.approvers import DatabasePins
from bot.edges.webhook_proxy import WebhookProxy, relay_to_app
from bot.runner.jobs import Jobs
from bot.web import intake as webhooks
from bot.web import registration as setup
from bot.web.dashboard import GitHubUsers, dashboard_routes
from bot.web.dispatcher import Dispatcher, HandlerContext
from bot.web.metrics import ServeMetrics
from bot.web.recovery import DeliveryRecovery

log = logging.getLogger(__name__)

# How long the health check's write waits for another writer's lock before it says "unwritable".
HEALTH_LOCK_TIMEOUT_SECONDS = 2.0


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    github: GitHubApp | None = None,
    router: routing.Router | None = None,
    github_users: GitHubUsers | None = None,
) -> Starlette:
    """The lanebot web app for `settings`; `engine`, `github`, `router` and `github_users` (the
    dashboard's seam to GitHub's OAuth and user API) replace the defaults."""
    owns_engine = engine is None
    engine = engine if engine is not None else db.make_engine(settings.database_url)
    owns_github = github is None
    github = github if github is not None else GitHubApp(settings)
    cache_for(github, pins=DatabasePins(engine))  # gate.approvers' pinned ids outlive restarts
    if router is None:
        from bot.web.handlers import router as all_handlers

        router = all_handlers
    jobs = Jobs(HandlerContext(engine=engine, github=github, settings=settings))
    dispatcher = Dispatcher(engine, router, jobs.context, workers=settings.dispatch_workers)
    writer = webhooks.DeliveryWriter(engine, dispatcher.wake, store_timeout=settings.intake_store_timeout)
    budget = webhooks.BodyBudget(settings.intake_max_bodies, settings.intake_max_buffered_bytes)
    recovery = (
        DeliveryRecovery(github, engine, interval=settings.recover_interval, relayed=bool(settings.webhook_proxy_url))
        if settings.recover_deliveries
        else None
    )

    # Set when the server is told to stop (SIGTERM, SIGINT): the dashboard's event streams end, as
    # uvicorn waits for open responses before it shuts the app down.
    closing = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        restore = _on_termination(closing.set)
        await to_thread.run_sync(db.migrate, engine)
        await jobs.resume()
        dispatcher.start()
        writer.start()
        if recovery is not None and not settings.webhook_proxy_url:
            recovery.start()  # through a relay channel: once lanebot reads it (_start_webhook_proxy)
        log.info("lanebot %s receiving webhooks at %s", __version__, settings.webhook_path)
        proxy = _start_webhook_proxy(settings, _app, recovery)
        try:
            yield
        finally:
            if proxy is not None:  # first: nothing more reaches the intake's writer
                await proxy.stop()
            await writer.stop()
            if recovery is not None:
                await recovery.stop()
            await dispatcher.stop()
            await jobs.stop()
            if owns_github:
                await github.aclose()
            if owns_engine:
                engine.dispose()
            restore()

    recent = webhooks.RecentBodies(window_seconds=settings.replay_window)
    metrics = ServeMetrics(engine, github)
    endpoint = webhooks.make_endpoint(
        writer,
        settings.webhook_secret,
        budget=budget,
        recent=recent,
        on_failed=recovery.delivery_failed if recovery is not None else None,
        on_outcome=metrics.delivery,
    )
    routes = [
        Route(settings.webhook_path, endpoint, methods=["POST"]),
        Route("/healthz", _health_endpoint(engine), methods=["GET"]),
        Route("/metrics", metrics.endpoint(), methods=["GET"]),
        *dashboard_routes(settings, engine, users=github_users, closing=closing),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.settings = settings
    app.state.closing = closing
    app.state.engine = engine
    app.state.github = github
    app.state.dispatcher = dispatcher
    app.state.writer = writer
    app.state.budget = budget
    app.state.jobs = jobs
    app.state.recovery = recovery
    app.state.metrics = metrics
    return app


def _start_webhook_proxy(settings: Settings, app: Starlette, recovery: DeliveryRecovery | None) -> WebhookProxy | None:
    """With a relay channel set (LANEBOT_WEBHOOK_PROXY_URL): read it, delivering to this app's endpoint.

    A channel relays only to those reading it at that moment: GitHub's redeliveries reach lanebot
    only once it reads the channel, so the recovery starts then; and what the channel took while
    lanebot was not reading is lost to it, so each reconnection brings a recovery pass forward."""
    if not settings.webhook_proxy_url:
        return None
    log.info("webhook relay channel from %s", settings.webhook_proxy_setting)

    def connected(connections: int) -> None:
        if recovery is None:
            return
        if connections == 1:
            recovery.start()
        else:
            recovery.delivery_failed()

    proxy = relay_to_app(settings.webhook_proxy_url, app, settings.webhook_path, on_connected=connected)
    proxy.start()
    app.state.webhook_proxy = proxy
    return proxy


def create_setup_app(
    *,
    public_url: str,
    env_file: str | Path = ".env",
    github_api_url: str = DEFAULT_API_URL,
    webhook_path: str = DEFAULT_WEBHOOK_PATH,
    webhook_url: str = "",
) -> Starlette:
    """Only the set-up pages: needs no App settings, writes them to `env_file`; `webhook_url`: a relay
    channel GitHub delivers to instead (LANEBOT_WEBHOOK_PROXY_URL).

    `public_url` is where GitHub reaches this lanebot (the manifest's webhook and callback URLs
    are built on it); the request's Host header is never used.
    """
    config = setup.SetupConfig(
        env_path=Path(env_file),
        github_api_url=github_api_url,
        webhook_path=webhook_path,
        public_url=public_url,
        webhook_url=webhook_url,
    )
    return Starlette(routes=setup.routes(config))


def _health_endpoint(engine: Engine) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def healthz(_request: Request) -> JSONResponse:
        try:
            waiting = await run_in_threadpool(deliveries.waiting_count, engine)
        except Exception as error:  # any failure to query is "not reachable" to a load balancer
            return _unhealthy("unreachable", error)
        try:
            await run_in_threadpool(
                functools.partial(deliveries.probe_write, engine, lock_timeout=HEALTH_LOCK_TIMEOUT_SECONDS)
            )
        except Exception as error:  # read-only, disk full, locked: deliveries could not be stored
            return _unhealthy("unwritable", error)
        return JSONResponse(
            {"status": "ok", "version": __version__, "database": "reachable", "deliveries_waiting": waiting}
        )

    return healthz


def _unhealthy(database: str, error: Exception) -> JSONResponse:
    log.warning("health check: the database is %s (%s)", database, webhooks.describe_store_error(error))
    return JSONResponse(
        {"status": "unavailable", "version": __version__, "database": database, "error": type(error).__name__},
        status_code=503,
    )


def __getattr__(name: str) -> Any:
    # `uvicorn bot.web.app:app` reads the settings only when it asks for the app, not at import.
    if name == "app":
        application = create_app(Settings.load())
        globals()["app"] = application
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _on_termination(callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` too when SIGTERM or SIGINT arrives, before the handler already there (uvicorn's,
    which starts its graceful shutdown); gives back the function that puts the handlers back. Only the
    main thread may set handlers: elsewhere (a test's client) nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    # Only onto a handler someone installed (uvicorn's): the defaults are left as they are.
    previous: dict[int, Callable[[int, Any], Any]] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        installed = signal.getsignal(sig)
        if callable(installed):
            previous[int(sig)] = installed

    def handler(sig: int, frame: Any) -> None:
        callback()
        previous[sig](sig, frame)

    for number in previous:
        signal.signal(number, handler)

    def restore() -> None:
        for number, before in previous.items():
            if signal.getsignal(number) is handler:
                signal.signal(number, before)

    return restore
