"""What `lanebot demo --workers N` (and the tests and benches of workers) borrows: a Redis database
number and a PostgreSQL database.

Both are taken on servers the person already runs (LANEBOT_BROKER_URL, DATABASE_URL), held only
for as long as they are needed, and given back after: the Redis database number is claimed (a key set only if absent,
which expires on its own should the demo be killed) and emptied at the end; the PostgreSQL database
is created under a name of its own and dropped at the end. So two demos, or a demo and the tests
never share a queue or a table. A server that cannot be reached is a `ServiceUnavailable` that says what to start.
"""

from __future__ import annotations

import contextlib
import urllib.parse
import uuid
from collections.abc import Iterator

import redis
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from bot.edges.store import db

DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
# The key a holder of a Redis database number sets in it.
CLAIM_KEY = "lanebot:test-claim"
CLAIM_S = 6 * 3600  # a claim left by a demo that was killed ends by itself after this long
_NUMBERS = range(1, 16)  # Redis has 16 by default; 0, where a real lanebot's broker may be, is left alone
_CONNECT_S = 3


class ServiceUnavailable(RuntimeError):
    """Redis or PostgreSQL cannot be reached or used; the message says what to start or set."""


def shown_url(url: str) -> str:
    """`url` without its password, to print."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _with_number(url: str, number: int) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path=f"/{number}"))


@contextlib.contextmanager
def claimed_redis(broker_url: str, *, user: str = "lanebot demo --workers") -> Iterator[str]:
    """A Redis database number on the server of `broker_url` that nobody else holds: the broker's
    URL on it. Emptied after, if the claim is still ours. `user` names who asks, in errors."""
    if not broker_url.lower().startswith(("redis://", "rediss://")):
        raise ServiceUnavailable(
            f"{user} runs over Redis; LANEBOT_BROKER_URL is {shown_url(broker_url)}. "
            f"Unset it to use {DEFAULT_BROKER_URL}, or set it to a Redis URL."
        )
    try:
        redis.Redis.from_url(broker_url, socket_connect_timeout=_CONNECT_S, socket_timeout=_CONNECT_S).ping()
    except (redis.RedisError, ValueError) as error:
        raise ServiceUnavailable(
            f"Redis at {shown_url(broker_url)} (LANEBOT_BROKER_URL) cannot be reached ({type(error).__name__}: "
            f"{error}). Start Redis (`redis-server`, or `docker run -d -p 6379:6379 redis:7`), or set "
            "LANEBOT_BROKER_URL to one that runs."
        ) from None
    token = uuid.uuid4().hex
    client: redis.Redis | None = None
    for number in _NUMBERS:
        candidate = redis.Redis.from_url(_with_number(broker_url, number), socket_connect_timeout=_CONNECT_S)
        try:
            if candidate.set(CLAIM_KEY, token, nx=True, ex=CLAIM_S):
                client = candidate
                break
        except redis.ResponseError:  # "DB index is out of range": a server with fewer databases
            candidate.close()
            break
        candidate.close()
    if client is None:
        raise ServiceUnavailable(
            f"every Redis database number 1 to 15 at {shown_url(broker_url)} is held by another demo or test "
            f"(the key {CLAIM_KEY}); wait for one to end"
        )
    try:
        yield _with_number(broker_url, number)
    finally:
        with contextlib.suppress(redis.RedisError):
            if client.get(CLAIM_KEY) == token.encode():
                client.flushdb()
        client.close()


@contextlib.contextmanager
def throwaway_postgres(
    server_url: str, *, user: str = "lanebot demo --workers", prefix: str = "lanebot_demo"
) -> Iterator[str]:
    """A database of its own (named `prefix_<random>`), created on the PostgreSQL server of
    `server_url` and dropped after: its URL. `user` names who asks, in errors."""
    try:
        if not make_url(server_url).get_backend_name().startswith("postgresql"):
            raise ArgumentError("not PostgreSQL")
    except ArgumentError:
        raise ServiceUnavailable(
            f"{user} needs PostgreSQL (several processes share the database); DATABASE_URL is "
            f"{shown_url(server_url)}. Unset it to use {DEFAULT_POSTGRES_URL}, or set it to a PostgreSQL server."
        ) from None
    server = db.make_engine(server_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": _CONNECT_S})
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with server.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:
        server.dispose()
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ServiceUnavailable(
            f"PostgreSQL at {shown_url(server_url)} (DATABASE_URL) cannot be reached or will not create a database "
            f"({reason}). Start PostgreSQL (`sudo service postgresql start`, or `docker run -d -p 5432:5432 "
            "-e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`), or set DATABASE_URL to a server where this user "
            "may CREATE DATABASE."
        ) from None
    try:
        yield server.url.set(database=name).render_as_string(hide_password=False)
    finally:
        try:
            with server.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            server.dispose()
