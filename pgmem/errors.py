"""One error hierarchy for pgmem. Every error names what was wrong."""

from __future__ import annotations


class PgmemError(Exception):
    """Base class of every error pgmem raises on purpose."""


class ConfigError(PgmemError):
    """A setting (environment variable or argument) is missing or has an invalid value."""


class ModelFileError(PgmemError):
    """A local model file is missing or its sha256 differs from the pinned one."""


class ModelMismatchError(PgmemError):
    """The configured embedding model or dimension differs from the installed schema or scope."""


class EmbeddingError(PgmemError):
    """The embedding endpoint failed, refused a request, or returned an unusable response."""


class InputError(PgmemError):
    """Input (a turn, a message, a document) is malformed; the message names the field."""


class SchemaError(PgmemError):
    """The database has no pgmem schema, or an older one: run `pgmem migrate`."""


class ServerError(PgmemError):
    """The embedded Postgres server could not be started, found or stopped."""


class DatabaseError(PgmemError):
    """The database refused a call: the message is the server's, `sqlstate` its code (e.g.
    22023 for a bad argument, 42501 for a scope or privilege refusal), `hint` its hint."""

    def __init__(self, message: str, *, sqlstate: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.hint = hint

    def __str__(self) -> str:
        text = super().__str__()
        if self.sqlstate:
            text += f" (SQLSTATE {self.sqlstate})"
        if self.hint:
            text += f"; hint: {self.hint}"
        return text

    @classmethod
    def from_driver(cls, exc: Exception) -> DatabaseError:
        """One line from a driver exception (psycopg's `diag` when it has one)."""
        diag = getattr(exc, "diag", None)
        primary = getattr(diag, "message_primary", None)
        message = primary or " ".join(str(exc).split()) or type(exc).__name__
        return cls(message, sqlstate=getattr(exc, "sqlstate", None), hint=getattr(diag, "message_hint", None))
