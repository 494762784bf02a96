"""Connections: DATABASE_URL or the embedded server; pgvector types; schema checks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
from pgvector.psycopg import register_vector

from pgmem.config import Settings
from pgmem.errors import ModelMismatchError, SchemaError
from pgmem.text import check_name


def database_url(settings: Settings | None = None) -> str:
    """DATABASE_URL if set, else the embedded server's URL (starting it if needed)."""
    settings = settings or Settings.from_env()
    if settings.database_url:
        return settings.database_url
    from pgmem import server

    return server.start(settings.pgdata)


def with_database(url: str, dbname: str) -> str:
    """The same server URL naming another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def sqlalchemy_url(url: str | None) -> str:
    url = url or database_url()
    parts = urlsplit(url)
    scheme = "postgresql+psycopg"
    return urlunsplit((scheme, *parts[1:]))


def connect(url: str, *, autocommit: bool = True) -> psycopg.Connection[tuple[object, ...]]:
    """A connection with pgvector's types registered (the schema must be installed)."""
    conn = psycopg.connect(url, autocommit=autocommit)
    try:
        register_vector(conn)
    except psycopg.ProgrammingError as exc:
        conn.close()
        raise SchemaError(f"pgvector is not installed in this database: run `pgmem migrate` ({exc})") from None
    return conn


def installed_dims(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, int]:
    """Dimensions of the vector columns as installed, e.g. {'piece.embedding': 384}."""
    try:
        rows = conn.execute("SELECT column_name, dims FROM pgmem.vector_column").fetchall()
    except psycopg.errors.UndefinedTable:
        if not conn.autocommit:
            conn.rollback()
        raise SchemaError("the pgmem schema is not installed here: run `pgmem migrate`") from None
    return {str(name): int(str(dims)) for name, dims in rows}


def check_model(conn: psycopg.Connection[tuple[object, ...]], *, plane: str, model_id: str, dims: int) -> None:
    """Fail clearly when the configured embedder does not fit the installed schema."""
    column = f"{plane}.embedding"
    installed = installed_dims(conn).get(column)
    if installed is None:
        raise SchemaError(f"no vector column {column} is installed: run `pgmem migrate`")
    if installed != dims:
        raise ModelMismatchError(
            f"the configured model {model_id} gives {dims}-dimensional vectors but {column} "
            f"was installed with {installed} dimensions; configure the installed model or "
            f"install into a new database"
        )


@contextmanager
def scoped(conn: psycopg.Connection[tuple[object, ...]], scope: str) -> Iterator[None]:
    """A transaction (or, inside the caller's open transaction, a savepoint) with the
    row-level-security scope set locally; the scope never outlives the block.

    On an autocommit connection the transaction ends with the block, and the local setting
    with it. Inside an open transaction a savepoint does not end the transaction, so the
    value the transaction had before (none, or the caller's own scope) is put back on the
    way out; when the block fails, rolling back to the savepoint undoes the setting too."""
    check_name(scope, "scope")
    nested = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    with conn.transaction():
        row = conn.execute(
            "SELECT current_setting('pgmem.scope', true), set_config('pgmem.scope', %s, true)", (scope,)
        ).fetchone()
        yield
        if nested:
            # Put back what the transaction had; functions called in the block may have set
            # the scope too (set_config(..., true)), so this runs whatever they did.
            before = row[0] if row else None
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (before or "",))
