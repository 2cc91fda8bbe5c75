"""Alembic's entry point for lanebot's migrations.

`bot.edges.store.db.migrate` hands over an open connection in `config.attributes["connection"]`;
without one (Alembic's own commands given `alembic_config(url)`), an engine is made from the
configured URL. SQLite cannot ALTER most things in place, so its migrations run in batch mode
(copy the table, change it, swap it in).
"""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy.engine import Connection
from sqlmodel.sql.sqltypes import AutoString

from bot.edges.store.db import make_engine
from bot.edges.store.models import UTCDateTime, metadata

config = context.config


def _render_plain_types(type_: str, obj: Any, _autogen_context: AutogenContext) -> str | Literal[False]:
    """Autogenerate writes SQLAlchemy's own types, so revisions never import the models."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, AutoString):
        return "sa.String()"
    return False


def _run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_plain_types,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database to migrate: use bot.edges.store.db.migrate(url) or alembic_config(url)")
    engine = make_engine(url)
    try:
        with engine.connect() as new_connection:
            _run_with(new_connection)
    finally:
        engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
