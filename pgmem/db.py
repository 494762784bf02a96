"""Connections: DATABASE_URL or the embedded server; pgvector types; schema checks."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import tuple_row

from pgmem.calls import VECTOR_SCHEMA_SQL, vector_type_missing
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


# The password of a URI: up to the last `@` before the path, or, when a `/` comes first (a
# password written unescaped, which libpq cannot parse: the URL is broken, the secret is still
# one), up to the last `@` before the query. Until rt60 it ended at the first `@` or `/`:
# `pgmem db url` printed such a URL whole, and the rest of a password holding `@`. The scheme
# is optional: `user:secret@host/db` (a URL without its `postgresql://`, which libpq reads as
# key=value and refuses) was printed whole, password and all, by every command until rt71; a URL
# with a scheme is never read as one without (the scheme is no user name).
_URI_PASSWORD = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://|(?![^:]*://))[^:@/?#=\s]*:)([^/]*|[^?#]*)@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)")
_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)")


def _passwords(url: str) -> re.Pattern[str]:
    return _QUERY_PASSWORD if _URI_PASSWORD.match(url) or "://" in url else _KV_PASSWORD


def redact(url: str) -> str:
    """The connection string with its password (URI or key=value form) replaced by ***."""
    return _passwords(url).sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", url))


def redact_secrets(text: str, url: str | None) -> str:
    """`text` without the password of `url`, as written and percent-decoded (libpq quotes a
    connection string it cannot parse, and the token of a percent-escape it cannot decode)."""
    if not url:
        return text
    found = [m.group(2) for m in (_URI_PASSWORD.match(url),) if m]
    found += [m.group(2).strip("'") for m in _passwords(url).finditer(url)]
    text = text.replace(url, redact(url))
    for secret in found:
        for form in {secret, unquote(secret)}:
            if len(form) >= 2:
                text = text.replace(form, "***")
    return text


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
    except psycopg.ProgrammingError:
        # Not installed, or installed in a schema off this login's search_path: which, in one line.
        try:
            row = conn.cursor(row_factory=tuple_row).execute(VECTOR_SCHEMA_SQL).fetchone()
        finally:
            conn.close()
        raise vector_type_missing(row[0] if row else None) from None
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
