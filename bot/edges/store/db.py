"""Engines, sessions and migrations: how lanebot reaches its database.

`DATABASE_URL` is SQLite by default (`sqlite:///./lanebot.db`, in WAL mode) or PostgreSQL
(`postgresql://` or `postgres://`, driven by psycopg 3). Migrations are Alembic revisions kept
inside this package and run programmatically, so `lanebot migrate` works from an installed
package with no `alembic.ini`. To write a new revision after changing the models:

    python -c "from alembic import command; from bot.edges.store.db import alembic_config; \
command.revision(alembic_config('sqlite:///./lanebot.db'), message='what changed', autogenerate=True)"
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, create_engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.sql.dml import Insert
from sqlmodel import Session

DEFAULT_DATABASE_URL = "sqlite:///./lanebot.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Any fixed number: it names the lock two `lanebot migrate` processes take on PostgreSQL.
_MIGRATION_LOCK_ID = 0x1A4EB07


def normalise_url(url: str) -> URL:
    """Parse a database URL, pointing PostgreSQL at the installed psycopg (v3) driver.

    Raises ValueError, without echoing the URL (it may hold a password), for anything that is
    not a SQLite or PostgreSQL URL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(
            "the database URL could not be parsed; expected e.g. sqlite:///./lanebot.db "
            "or postgresql://user@host:5432/lanebot"
        ) from None
    backend = parsed.get_backend_name()
    if backend in ("postgres", "postgresql") and parsed.drivername in ("postgres", "postgresql"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend in ("postgresql", "sqlite"):
        return parsed
    raise ValueError(
        f"unsupported database {parsed.drivername!r}: lanebot stores its state in SQLite "
        "(sqlite:///path) or PostgreSQL (postgresql://...)"
    )


def display_url(url: str | URL | Engine) -> str:
    """The URL with any password masked, for messages and logs."""
    if isinstance(url, Engine):
        url = url.url
    parsed = url if isinstance(url, URL) else normalise_url(url)
    return parsed.render_as_string(hide_password=True)


def make_engine(url: str, **engine_options: Any) -> Engine:
    """An engine for `url`; SQLite connections get WAL, a busy timeout and foreign keys.

    PostgreSQL connections are pinged when taken from the pool (`pool_pre_ping`), so one the server
    cut while it sat there (a restart, a failover, pg_terminate_backend) is replaced before use
    instead of failing the first statement; `engine_options` may say otherwise.
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "postgresql":
        engine_options.setdefault("pool_pre_ping", True)
    engine = create_engine(parsed, **engine_options)
    if parsed.get_backend_name() == "sqlite":
        _create_private_database_file(parsed)
        event.listen(engine, "connect", _configure_sqlite_connection)
    return engine


def _create_private_database_file(url: URL) -> None:
    """Create a SQLite database file that does not exist yet (in a folder that does) 0600, before
    SQLite would make it with the umask's 0644: it holds the runs and the installations' state. SQLite
    gives its -wal and -shm files the database file's mode."""
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("uri"):
        return
    path = Path(database)
    if not path.parent.is_dir():
        return  # a missing folder stays an unreachable database, as SQLite reports it
    with suppress(OSError):  # there already, or not writable: SQLite says so when it connects
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


@contextmanager
def session(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends cleanly and rolls back when it raises.

    Objects stay readable after the block (no expiry on commit).
    """
    with Session(engine, expire_on_commit=False) as db_session:
        try:
            yield db_session
            db_session.commit()
        except BaseException:
            db_session.rollback()
            raise


def insert_ignoring_duplicates(engine: Engine | Connection, table: Table, unique_columns: Sequence[str]) -> Insert:
    """INSERT ... ON CONFLICT (unique_columns) DO NOTHING, in the engine's dialect.

    One statement, no read before the write: a duplicate is never an error, however many writers
    race. Ask with RETURNING whether a row went in: psycopg reports a row count of -1 for a row
    ON CONFLICT skipped.
    """
    dialect = engine.dialect.name
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=list(unique_columns))
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=list(unique_columns))
    raise ValueError(f"unsupported database dialect {dialect!r}")


def alembic_config(url: str | None = None) -> Config:
    """Alembic's configuration for lanebot's migrations, built in code (no alembic.ini)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        # ConfigParser interpolates '%'; URL-encoded characters must survive it.
        plain_url = normalise_url(url).render_as_string(hide_password=False)
        config.set_main_option("sqlalchemy.url", plain_url.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest migration revision shipped with this package."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no Alembic revisions found under {MIGRATIONS}")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def migrate(target: str | Engine) -> str:
    """Upgrade the database (a URL or an engine) to the newest revision; returns that revision.

    Idempotent. On PostgreSQL an advisory lock makes concurrent callers (a release step and
    several starting web processes) take turns instead of racing to create the same tables.
    """
    engine = make_engine(target) if isinstance(target, str) else target
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        return head_revision()
    finally:
        if isinstance(target, str):
            engine.dispose()
