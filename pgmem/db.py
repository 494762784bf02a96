"""Connections: DATABASE_URL or the embedded server; pgvector types; schema checks."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
from pgvector.psycopg import register_vector

from pgmem.calls import scoped as scoped  # re-exported: the public home of scoped()
from pgmem.config import Settings
from pgmem.errors import ModelMismatchError, SchemaError


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
