"""Shared fixtures: a database on SQLite and on PostgreSQL, and the anyio backend.

`database_url` runs each test that uses it (or `engine`, built on it) twice: on a SQLite file
in the test's tmp_path, and on PostgreSQL at $LANEBOT_TEST_POSTGRES_URL (default
postgresql://postgres@127.0.0.1:5432/test) in a schema no other test sees at the same time.
When PostgreSQL cannot be reached the postgres cases skip with the reason, except under
CI=true, where they fail: CI must not pass by testing less. `bwrap` does the same for the tests
of the jail (bot.edges.jail) when bubblewrap does not work on the host.

Migrating costs more than most tests, so it is done once per session where it can be: a test
that asks for `engine` gets a copy of a migrated SQLite file, or a PostgreSQL schema that an
earlier test left at the newest revision, emptied. A test asking only for `database_url` gets
an empty database.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from bot.edges.jail import find_bwrap, probe
from bot.edges.store.db import head_revision, make_engine, migrate
from bot.edges.store.models import metadata
from tests.services import unavailable

POSTGRES_URL_ENV = "LANEBOT_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Engine]:
    """An engine on the test PostgreSQL server; skips (or fails under CI) when it is unreachable."""
    url = os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL)
    engine = make_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as error:
        engine.dispose()
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        where = engine.url.render_as_string(hide_password=True)
        message = f"PostgreSQL at {where} is unreachable ({reason}); set {POSTGRES_URL_ENV} to one that is"
        unavailable(message)
    yield engine
    engine.dispose()


class PostgresSchemas:
    """Private schemas on the test server: made on demand, reused only when left migrated."""

    def __init__(self, server: Engine) -> None:
        self.server = server
        self.migrated_spares: list[str] = []
        self.in_use: set[str] = set()

    def url(self, schema: str) -> str:
        url = self.server.url.update_query_dict({"options": f"-csearch_path={schema}"})
        return url.render_as_string(hide_password=False)

    def take(self, *, migrated: bool) -> str:
        if migrated and self.migrated_spares:
            schema = self.migrated_spares.pop()
        else:
            schema = f"test_{uuid.uuid4().hex[:16]}"
            with self.server.begin() as connection:
                connection.execute(text(f'CREATE SCHEMA "{schema}"'))
            if migrated:
                migrate(self.url(schema))
        self.in_use.add(schema)
        return schema

    def give_back(self, schema: str) -> None:
        """Keep the schema for another test if it is exactly at the newest revision, else drop it."""
        self.in_use.discard(schema)
        if self._is_migrated(schema):
            self._empty(schema)
            self.migrated_spares.append(schema)
        else:
            self._drop(schema)

    def drop_all(self) -> None:
        for schema in [*self.migrated_spares, *self.in_use]:
            self._drop(schema)

    def _is_migrated(self, schema: str) -> bool:
        tables = set(inspect(self.server).get_table_names(schema=schema))
        if tables != set(metadata.tables) | {"alembic_version"}:
            return False
        with self.server.connect() as connection:
            versions = connection.execute(text(f'SELECT version_num FROM "{schema}".alembic_version')).scalars().all()
        return versions == [head_revision()]

    def _empty(self, schema: str) -> None:
        with self.server.begin() as connection:
            _fail_rather_than_hang(connection)
            for table in reversed(metadata.sorted_tables):
                connection.execute(text(f'DELETE FROM "{schema}"."{table.name}"'))
            connection.execute(
                text(
                    "SELECT setval(c.oid, 1, false) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE c.relkind = 'S' AND n.nspname = :schema"
                ),
                {"schema": schema},
            )

    def _drop(self, schema: str) -> None:
        with self.server.begin() as connection:
            _fail_rather_than_hang(connection)
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


def _fail_rather_than_hang(connection) -> None:
    # A connection a test forgot to close must fail the clean-up, not hang the whole suite.
    connection.execute(text("SET LOCAL lock_timeout = '10s'"))


@pytest.fixture(scope="session")
def postgres_schemas(postgres_server: Engine) -> Iterator[PostgresSchemas]:
    schemas = PostgresSchemas(postgres_server)
    yield schemas
    schemas.drop_all()


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per test session, copied for each test that needs one."""
    path = tmp_path_factory.mktemp("migrated") / "lanebot.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()  # the last connection closing folds the WAL back into the file
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, migrated_sqlite_file: Path) -> str:
    """A migrated SQLite database of this test's own."""
    path = tmp_path / "lanebot.db"
    shutil.copyfile(migrated_sqlite_file, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of the parametrized kind, private to this test: empty, or migrated when the
    test also asks for `engine`."""
    migrated = "engine" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "lanebot.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("migrated_sqlite_file"), path)
        yield f"sqlite:///{path}"
        return
    schemas: PostgresSchemas = request.getfixturevalue("postgres_schemas")
    schema = schemas.take(migrated=migrated)
    try:
        yield schemas.url(schema)
    finally:
        schemas.give_back(schema)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on `database_url`, migrated to the newest revision."""
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def bwrap() -> str:
    """bubblewrap's path, for the tests of the jail; skips (or fails under CI) when it does not work here."""
    problem = probe()
    path = find_bwrap()
    if problem is not None or path is None:
        message = f"the jail cannot be tested: {problem}"
        unavailable(message)
    return path


from tests.model_server.scenarios import scripted  # noqa: E402
from tests.model_server.server import ModelServer  # noqa: E402


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A scripted model server on loopback (tests/model_server/server.py) that answers every call
    with a short closing text until the test sets `.responder`; closed, its threads joined, after."""
    with ModelServer(scripted()) as server:
        yield server
