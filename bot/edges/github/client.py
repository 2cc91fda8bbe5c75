"""lanebot's GitHub REST client: gidgethub's httpx `GitHubAPI` plus one retry policy and credentials.

Every request goes through `LanebotAPI._request`, the one place that
  - sets the API version header and GitHub's JSON media type,
  - adds the credentials (the App's JWT, or an installation token fetched per attempt, so a
    long wait never sends an expired token),
  - retries: 5xx answers and connection failures back off exponentially a bounded number of
    times; a primary rate limit waits for `x-ratelimit-reset`; a secondary limit waits
    `retry-after` seconds, or at least a minute, growing (gidgethub raises on these without
    waiting, so the raw response is read here, before gidgethub turns it into an exception),
  - sends the mutations of one installation one at a time (GitHub's advice against secondary
    limits), while reads go concurrently,
  - keeps rate limits per installation and bounded: while one request of an installation waits
    out a limit, that installation's other requests wait with it (a `RateLimitGate` each; other
    installations are not touched), every wait is logged with the installation and the reset
    time, and a request whose waits would pass `RetryPolicy.max_rate_limit_wait` in all
    (LANEBOT_MAX_RATE_LIMIT_WAIT) fails at once with `RateLimitTooLong`, which says until when,
  - remembers what each installation's latest answer said of its limit (`x-ratelimit-remaining` and
    `x-ratelimit-reset`: `GitHubApp.rate_limit_remaining`), which the metrics show,
  - reads again conditionally: the ETag (and Last-Modified) of each GET's answer is kept with its
    body in a small bounded cache per App (`ConditionalCache`, one view per installation and token
    scope), and gidgethub sends them back as `If-None-Match` / `If-Modified-Since`; GitHub answers
    304 when nothing changed, which does not count against the rate limit, and the kept body is
    used. Nothing is ever served from the cache without GitHub's 304.

A request that may have taken effect is not repeated blindly: a POST that creates something
(a comment, a check run, a pull request) is not retried after a 5xx or a connection that broke
after the request was sent, because the first one may have landed. Callers recover from that
by looking first (`find_comment_by_marker`, the PR by its head branch). A POST GitHub refused
for a rate limit, or one that never left (connect failures), is always safe to repeat.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives import serialization
from gidgethub import sansio
from gidgethub.abc import GitHubAPI
from gidgethub.httpx import GitHubAPI as HttpxGitHubAPI

from bot.edges.github.auth import InstallationTokens, app_jwt

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
DEFAULT_API_URL = "https://api.github.com"  # github.com; GitHub Enterprise Server and the sandbox set their own
MEDIA_TYPE = "application/vnd.github+json"
REQUESTER = "lanebot"
_GIDGETHUB_DEFAULT_ACCEPT = sansio.accept_format()

# POSTs whose repetition changes nothing (or nothing that matters), so they may be retried
# like the idempotent methods: minting a token, asking for a redelivery (intake deduplicates
# by delivery id), creating a repository's label (a repeat is a 422 `already_exists`, which the
# caller takes as done), adding labels and requested reviewers (sets), reactions (GitHub returns
# the existing one) and GraphQL, to which lanebot sends queries only.
_REPEATABLE_POSTS = re.compile(
    r"(/app/installations/\d+/access_tokens"
    r"|/app/hook/deliveries/\d+/attempts"
    r"|/repos/[^/]+/[^/]+/labels"
    r"|/issues/\d+/labels"
    r"|/pulls/\d+/requested_reviewers"
    r"|/reactions"
    r"|/graphql)$"
)
_GRAPHQL = re.compile(r"/graphql$")
# Failures that happen before a request reaches GitHub: nothing can have taken effect.
_NOTHING_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
Authorization = Callable[[], Awaitable[str | None]]


DEFAULT_MAX_RATE_LIMIT_WAIT = 300.0


class RateLimitTooLong(Exception):
    """GitHub's rate limit would keep a request waiting longer than lanebot waits in all."""

    def __init__(self, who: str, request: str, seconds: float, until: float, cap: float) -> None:
        self.who = who
        self.seconds = seconds
        self.until = datetime.fromtimestamp(until, UTC)
        self.cap = cap
        super().__init__(
            f"GitHub rate-limited {who} until {self.until:%Y-%m-%d %H:%M:%S} UTC ({request}): waiting "
            f"{seconds:.0f} s more would pass lanebot's cap of {cap:.0f} s (LANEBOT_MAX_RATE_LIMIT_WAIT), "
            "so the call failed; retry it after the reset"
        )


@dataclass(frozen=True)
class RateLimitWait:
    """One wait for GitHub's rate limit to lift."""

    started_at: datetime
    until: datetime


RECENT_WAITS = 20


@dataclass(frozen=True)
class RateLimitReading:
    """What GitHub's latest answer to an installation said of its rate limit (`x-ratelimit-*`)."""

    remaining: int
    reset: float | None  # epoch seconds when the limit's window starts again
    observed_at: float  # epoch seconds of that answer


class RateLimitGate:
    """One installation's rate limit: closed while one of its requests waits one out, so that
    the installation's other requests wait with it rather than ask GitHub again."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._closers = 0
        self._clock = clock
        self.until: float | None = None  # epoch seconds, while closed
        # The latest waits, oldest first, for the progress comment to show (bounded: a long outage
        # is a few entries of minutes, not one per request).
        self.waits: collections.deque[RateLimitWait] = collections.deque(maxlen=RECENT_WAITS)
        self.reading: RateLimitReading | None = None  # the latest answer's `x-ratelimit-*` headers

    def observe(self, headers: Mapping[str, str]) -> None:
        """Remember what an answer's `x-ratelimit-remaining` and `x-ratelimit-reset` say (when it has them)."""
        remaining = _number(headers.get("x-ratelimit-remaining"))
        if remaining is not None:
            self.reading = RateLimitReading(int(remaining), _number(headers.get("x-ratelimit-reset")), self._clock())

    async def wait_open(self) -> None:
        await self._open.wait()

    @contextlib.contextmanager
    def closed_until(self, until: float) -> Iterator[None]:
        self.waits.append(RateLimitWait(datetime.fromtimestamp(self._clock(), UTC), datetime.fromtimestamp(until, UTC)))
        self._closers += 1
        self.until = max(self.until or until, until)
        self._open.clear()
        try:
            yield
        finally:
            self._closers -= 1
            if self._closers == 0:
                self.until = None
                self._open.set()


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait before trying a failed request again, or None for "do not retry"."""

    max_retries: int = 4
    backoff: float = 1.0  # first wait after a 5xx or a connection failure; doubles each time
    backoff_cap: float = 60.0
    secondary_wait: float = 60.0  # GitHub: "wait for at least one minute", then longer
    reset_slack: float = 1.0  # our clock and GitHub's differ a little
    max_rate_limit_wait: float = DEFAULT_MAX_RATE_LIMIT_WAIT  # all of one request's rate-limit waits together

    def after_response(
        self,
        retries: int,
        status: int,
        headers: Mapping[str, str],
        message: str,
        *,
        now: float,
        repeatable: bool,
    ) -> float | None:
        if retries >= self.max_retries:
            return None
        if status >= 500:
            return self._backoff(retries) if repeatable else None
        if status in (403, 429):
            return self._rate_limit_wait(retries, status, headers, message, now)
        return None

    def after_transport_error(self, retries: int, *, nothing_sent: bool, repeatable: bool) -> float | None:
        if retries >= self.max_retries or not (nothing_sent or repeatable):
            return None
        return self._backoff(retries)

    def _backoff(self, retries: int) -> float:
        return min(self.backoff * 2.0**retries, self.backoff_cap)

    def _rate_limit_wait(
        self, retries: int, status: int, headers: Mapping[str, str], message: str, now: float
    ) -> float | None:
        retry_after = _number(headers.get("retry-after"))
        if retry_after is not None:
            return max(retry_after, 0.0)
        reset = _number(headers.get("x-ratelimit-reset"))
        if headers.get("x-ratelimit-remaining") == "0" and reset is not None:
            return max(reset - now, 0.0) + self.reset_slack
        if status == 429 or "rate limit" in message.lower():
            return self.secondary_wait * 2.0**retries
        return None  # an ordinary 403: permissions, not pace


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _error_message(body: bytes) -> str:
    try:
        message = json.loads(body).get("message", "")
    except (ValueError, AttributeError):
        return ""
    return message if isinstance(message, str) else ""


def may_repeat(method: str, url: str) -> bool:
    """Whether sending this request twice is harmless (see the module docstring)."""
    return method.upper() != "POST" or _REPEATABLE_POSTS.search(urlsplit(url).path) is not None


CONDITIONAL_CACHE_ENTRIES = 256
CONDITIONAL_CACHE_BYTES = 16 * 1024 * 1024
CacheEntry = tuple[str | None, str | None, Any, str | None]  # gidgethub's: etag, last-modified, data, next page


class ConditionalCache:
    """The validators and bodies of the latest GET answers, least recently used dropped first.

    Bounded in entries and in the bodies' size as JSON: lanebot reads again a handful of things
    per run (its repository's workflow file and metadata, an issue's comments and labels), so a
    few hundred cover every run in flight. Keys are (scope, URL): ETags differ per token, so each
    installation and token scope has its own view (`view`)."""

    def __init__(self, max_entries: int = CONDITIONAL_CACHE_ENTRIES, max_bytes: int = CONDITIONAL_CACHE_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: collections.OrderedDict[tuple[str, str], tuple[CacheEntry, int]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, str]) -> CacheEntry | None:
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def put(self, key: tuple[str, str], entry: CacheEntry) -> None:
        self.drop(key)
        size = len(json.dumps(entry[2], default=str))
        if size > self.max_bytes:
            return
        self._entries[key] = (entry, size)
        self.size += size
        while len(self._entries) > self.max_entries or self.size > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.size -= dropped

    def drop(self, key: tuple[str, str]) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self.size -= found[1]

    def urls(self, scope: str) -> list[str]:
        return [url for owner, url in self._entries if owner == scope]

    def view(self, scope: str) -> CacheView:
        return CacheView(self, scope)


class CacheView(MutableMapping[str, CacheEntry]):
    """One scope's part of a ConditionalCache, as the mapping gidgethub's `cache=` takes (URL -> entry)."""

    def __init__(self, cache: ConditionalCache, scope: str) -> None:
        self._cache = cache
        self._scope = scope

    def __getitem__(self, url: str) -> CacheEntry:
        entry = self._cache.get((self._scope, url))
        if entry is None:
            raise KeyError(url)
        return entry

    def __setitem__(self, url: str, entry: CacheEntry) -> None:
        self._cache.put((self._scope, url), entry)

    def __delitem__(self, url: str) -> None:
        self._cache.drop((self._scope, url))

    def __iter__(self) -> Iterator[str]:
        return iter(self._cache.urls(self._scope))

    def __len__(self) -> int:
        return len(self._cache.urls(self._scope))


class LanebotAPI(HttpxGitHubAPI):
    """gidgethub's httpx `GitHubAPI` with lanebot's headers, credentials, retries and serial mutations."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str = DEFAULT_API_URL,
        authorization: Authorization | None = None,
        mutation_lock: asyncio.Lock | None = None,
        rate_limit: RateLimitGate | None = None,
        who: str = "lanebot",
        on_unauthorized: Callable[[], None] | None = None,
        policy: RetryPolicy = RetryPolicy(),
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.time,
        cache: MutableMapping[str, CacheEntry] | None = None,
    ) -> None:
        super().__init__(http, REQUESTER, base_url=base_url, cache=cache)
        self._authorization = authorization
        self._mutation_lock = mutation_lock
        self._gate = rate_limit if rate_limit is not None else RateLimitGate()
        self._who = who
        self._on_unauthorized = on_unauthorized
        self._policy = policy
        self._sleep = sleep
        self._clock = clock

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        reads = method.upper() == "GET" or _GRAPHQL.search(urlsplit(url).path) is not None  # queries only
        if reads or self._mutation_lock is None:
            return await self._send_with_retries(method, url, headers, body)
        async with self._mutation_lock:
            return await self._send_with_retries(method, url, headers, body)

    async def _send_with_retries(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        repeatable = may_repeat(method, url)
        request = f"{method} {urlsplit(url).path}"
        retries = 0
        waited = await self._wait_at_gate(request)
        while True:
            request_headers = await self._headers(headers)
            try:
                response = await super()._request(method, url, request_headers, body)
            except httpx.TransportError as error:
                delay = self._policy.after_transport_error(
                    retries, nothing_sent=isinstance(error, _NOTHING_SENT), repeatable=repeatable
                )
                if delay is None:
                    raise
                log.warning("%s: %s; retry %d in %.0f s", request, type(error).__name__, retries + 1, delay)
                await self._sleep(delay)
            else:
                self._gate.observe(response[1])
                delay = self._delay_after(response, retries, repeatable)
                if delay is None:
                    return response
                if response[0] in (403, 429):
                    waited += await self._wait_out_rate_limit(request, response[0], delay, waited, retries)
                else:
                    log.warning("%s: HTTP %d; retry %d in %.0f s", request, response[0], retries + 1, delay)
                    await self._sleep(delay)
            retries += 1

    async def _wait_at_gate(self, request: str) -> float:
        """Wait while another request of this installation waits out a limit; return the seconds it should take."""
        until = self._gate.until
        if until is None:
            return 0.0
        seconds = max(until - self._clock(), 0.0)
        self._check_cap(request, seconds, 0.0, until)
        log.info("%s waits %.0f s for %s's rate limit to lift", request, seconds, self._who)
        await self._gate.wait_open()
        return seconds

    async def _wait_out_rate_limit(self, request: str, status: int, delay: float, waited: float, retries: int) -> float:
        until = self._clock() + delay
        self._check_cap(request, delay, waited, until)
        log.warning(
            "GitHub rate-limited %s (%s: HTTP %d); waiting %.0f s, until %s UTC (retry %d)",
            self._who,
            request,
            status,
            delay,
            datetime.fromtimestamp(until, UTC).strftime("%H:%M:%S"),
            retries + 1,
        )
        with self._gate.closed_until(until):
            await self._sleep(delay)
        return delay

    def _check_cap(self, request: str, seconds: float, waited: float, until: float) -> None:
        cap = self._policy.max_rate_limit_wait
        if waited + seconds > cap:
            error = RateLimitTooLong(self._who, request, seconds, until, cap)
            log.error("%s", error)
            raise error

    def _delay_after(
        self, response: tuple[int, Mapping[str, str], bytes], retries: int, repeatable: bool
    ) -> float | None:
        status, headers, content = response
        if status == 401 and self._on_unauthorized is not None:
            self._on_unauthorized()
        message = _error_message(content) if status >= 400 else ""
        return self._policy.after_response(retries, status, headers, message, now=self._clock(), repeatable=repeatable)

    async def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        result = {name.lower(): value for name, value in headers.items()}
        result["x-github-api-version"] = API_VERSION
        if result.get("accept") == _GIDGETHUB_DEFAULT_ACCEPT:
            result["accept"] = MEDIA_TYPE
        if "authorization" not in result and self._authorization is not None:
            credential = await self._authorization()
            if credential is not None:
                result["authorization"] = credential
        return result


class AppClient(LanebotAPI):
    """Acts as the App itself (JWT): its webhook deliveries and its installations."""

    async def hook_deliveries(self, since: datetime, *, per_page: int = 100) -> AsyncIterator[dict[str, Any]]:
        """The App's webhook deliveries delivered at or after `since`, newest first (as GitHub lists them)."""
        since = since if since.tzinfo else since.replace(tzinfo=UTC)
        async for delivery in self.getiter("/app/hook/deliveries{?per_page}", {"per_page": per_page}):
            if _timestamp(delivery["delivered_at"]) < since:
                return
            yield delivery

    async def redeliver(self, delivery_id: int) -> None:
        """Ask GitHub to send a delivery again (`POST /app/hook/deliveries/{id}/attempts`, 202)."""
        await self.post("/app/hook/deliveries/{delivery_id}/attempts", {"delivery_id": delivery_id}, data=b"")

    async def installation(self, installation_id: int) -> dict[str, Any]:
        installation: dict[str, Any] = await self.getitem(
            "/app/installations/{installation_id}", {"installation_id": installation_id}
        )
        return installation


class InstallationClient(LanebotAPI):
    """Acts as one installation, with a token scoped to `repository` ("owner/name"; None: all repositories)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        installation_id: int,
        repository: str | None,
        narrowed: Callable[[str], InstallationClient] | None = None,
        **kwargs: Any,
    ):
        super().__init__(http, **kwargs)
        self.installation_id = installation_id
        self.repository = repository
        self._narrowed = narrowed

    def for_repository(self, repository: str) -> InstallationClient:
        """A client of the same installation with a token scoped to `repository` ("owner/name"):
        itself when it is one, else a sibling from the same App (so a read of that repository alone
        need not mint an installation-wide token)."""
        if self._narrowed is None or (self.repository or "").lower() == repository.lower():
            return self
        return self._narrowed(repository)

    def __repr__(self) -> str:
        return f"InstallationClient(installation_id={self.installation_id}, repository={self.repository!r})"


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@functools.lru_cache(maxsize=4)
def signing_key(pem: str) -> Any:
    """The App's private key, parsed once: parsing checks the RSA key, which is slow; signing with it is not."""
    return serialization.load_pem_private_key(pem.encode(), password=None)


class AppIdentity(Protocol):
    """What the client needs of lanebot's settings (bot.edges.settings.Settings has it)."""

    @property
    def app_id(self) -> str: ...
    @property
    def private_key(self) -> str: ...
    @property
    def github_api_url(self) -> str: ...


class GitHubApp:
    """The App: its settings, one HTTP connection pool, its token cache and per-installation mutation locks."""

    def __init__(
        self,
        settings: AppIdentity,
        http: httpx.AsyncClient | None = None,
        *,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.time,
    ) -> None:
        if policy is None:
            policy = RetryPolicy(
                max_rate_limit_wait=getattr(settings, "max_rate_limit_wait", DEFAULT_MAX_RATE_LIMIT_WAIT)
            )
        self.settings = settings
        self.http = http if http is not None else httpx.AsyncClient(timeout=httpx.Timeout(30.0))
        self._owns_http = http is None
        self._options: dict[str, Any] = dict(base_url=settings.github_api_url, policy=policy, sleep=sleep, clock=clock)
        self._clock = clock
        self._signing_key = signing_key(settings.private_key)
        self._mutation_locks: dict[int, asyncio.Lock] = {}
        self._rate_limits: dict[int | None, RateLimitGate] = {}  # None: the App's own (JWT) requests
        self.conditional_cache = ConditionalCache()
        self.tokens = InstallationTokens(self.app_client(), settings.app_id, self._signing_key, clock=clock)

    def __repr__(self) -> str:
        return f"GitHubApp(app_id={self.settings.app_id!r}, api={self.settings.github_api_url!r})"

    async def __aenter__(self) -> GitHubApp:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    def app_client(self) -> AppClient:
        async def bearer() -> str:
            return f"Bearer {app_jwt(self.settings.app_id, self._signing_key, now=self._clock())}"

        return AppClient(self.http, authorization=bearer, rate_limit=self._gate(None), who="the App", **self._options)

    def rate_limited_until(self, installation_id: int | None) -> datetime | None:
        """When the rate limit a request of the installation (None: the App) waits out lifts; None if none does."""
        until = self._rate_limits[installation_id].until if installation_id in self._rate_limits else None
        return datetime.fromtimestamp(until, UTC) if until is not None else None

    def rate_limit_waits(self, installation_id: int | None) -> tuple[RateLimitWait, ...]:
        """The installation's latest waits for GitHub's rate limit (this process's), oldest first."""
        gate = self._rate_limits.get(installation_id)
        return tuple(gate.waits) if gate is not None else ()

    def rate_limit_remaining(self, installation_id: int | None) -> RateLimitReading | None:
        """The installation's (None: the App's) rate limit as GitHub's latest answer to this process gave it."""
        gate = self._rate_limits.get(installation_id)
        return gate.reading if gate is not None else None

    def rate_limit_readings(self) -> dict[int | None, RateLimitReading]:
        """Every installation's (None: the App's) latest reading, for the metrics."""
        return {key: gate.reading for key, gate in list(self._rate_limits.items()) if gate.reading is not None}

    def _gate(self, installation_id: int | None) -> RateLimitGate:
        gate = self._rate_limits.get(installation_id)
        if gate is None:
            gate = self._rate_limits[installation_id] = RateLimitGate(clock=self._clock)
        return gate

    def installation_client(self, installation_id: int, repository: str | None) -> InstallationClient:
        """A client acting as the installation with a token scoped to `repository` ("owner/name")."""

        async def token() -> str:
            return f"token {await self.tokens.token(installation_id, repository)}"

        return InstallationClient(
            self.http,
            installation_id=installation_id,
            repository=repository,
            authorization=token,
            mutation_lock=self._mutation_locks.setdefault(installation_id, asyncio.Lock()),
            rate_limit=self._gate(installation_id),
            who=f"installation {installation_id}",
            on_unauthorized=lambda: self.tokens.forget(installation_id, repository),
            cache=self.conditional_cache.view(f"{installation_id}:{repository or '*'}"),
            narrowed=lambda name: self.installation_client(installation_id, name),
            **self._options,
        )


async def convert_manifest(
    http: httpx.AsyncClient, code: str, *, api_url: str = DEFAULT_API_URL, sleep: Sleep = asyncio.sleep
) -> dict[str, Any]:
    """Exchange the App-manifest flow's `code` for the new App's credentials (no auth needed).

    The answer holds `id`, `slug`, `html_url`, `pem`, `webhook_secret`, `client_id` and
    `client_secret`. The code is single-use, so a failed exchange is not repeated.
    """
    api = LanebotAPI(http, base_url=api_url, sleep=sleep)
    credentials: dict[str, Any] = await api.post("/app-manifests/{code}/conversions", {"code": code}, data=b"")
    return credentials


async def find_comment_by_marker(
    client: GitHubAPI, repo: str, issue_number: int, marker: str, *, author: str | None = None
) -> dict[str, Any] | None:
    """The first comment on the issue written by a bot (or by `author`) that contains `marker`.

    Markers are hidden HTML comments lanebot puts in what it writes; looking for one before
    creating a comment is how a lost response does not become a duplicate. Humans' comments
    are ignored even if they quote the marker.
    """
    owner, name = repo.split("/", 1)
    url = "/repos/{owner}/{repo}/issues/{issue_number}/comments{?per_page}"
    url_vars: dict[str, str | int] = {"owner": owner, "repo": name, "issue_number": issue_number, "per_page": 100}
    comment: dict[str, Any]
    async for comment in client.getiter(url, url_vars):
        if marked_comment([comment], marker, author=author) is not None:
            return comment
    return None


def marked_comment(
    comments: Iterable[dict[str, Any]], marker: str, *, author: str | None = None
) -> dict[str, Any] | None:
    """The first of `comments` written by a bot (or by `author`) that contains `marker`."""
    for comment in comments:
        user = comment.get("user") or {}
        written_by_us = user.get("login") == author if author is not None else user.get("type") == "Bot"
        if written_by_us and marker in (comment.get("body") or ""):
            return comment
    return None
