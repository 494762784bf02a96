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


class InputError(PgmemError, ValueError):
    """Input (a turn, a message, a document, an argument) is malformed; the message names the
    field. A ValueError too, so code that caught the ValueError of a bad argument still does."""


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
        # A server's message or hint may run over lines (btree's 54000 hint does): one line.
        primary = " ".join((getattr(diag, "message_primary", None) or "").split())
        # Without one, libpq's first line: the rest are its guesses ("server closed the
        # connection unexpectedly" goes on "This probably means the server terminated abnormally").
        first = next((" ".join(line.split()) for line in str(exc).splitlines() if line.strip()), "")
        message = primary or first or type(exc).__name__
        state = getattr(exc, "sqlstate", None)
        hint = " ".join((getattr(diag, "message_hint", None) or "").split()) or None
        if _schema_missing(state, message):
            hint = hint or MIGRATE_HINT
        elif state == "42501" and message.startswith(
            ("permission denied for function ", "permission denied for schema ")
        ):
            # The login is in no pgmem role that may call it (pgmem_reader only reads), or in none.
            hint = hint or PRIVILEGE_HINT
        return cls(message, sqlstate=state, hint=hint)


#: The hint of a pgmem function (or schema) the login may not use: a read-only login (pgmem_reader)
#: calling a write, forget or rebuild, or a login in no pgmem role (docs/security.md's roles table).
PRIVILEGE_HINT = (
    "This login is not a member of a pgmem role that may call it: writes, forgets and rebuilds need a member "
    "of pgmem_app (pgmem_reader only reads); `pgmem roles create` makes the roles (docs/security.md)."
)


class ArgumentError(DatabaseError, InputError):
    """The database refused an argument (SQLSTATE class 22, 23 or 54: out of range, wrong
    dimension, NaN, too large, a duplicate)."""


class SchemaMissingError(DatabaseError, SchemaError):
    """The database has no schema pgmem (3F000), or a pgmem function or table this pgmem calls
    (42883, 42P01: an older schema); the hint says to run `pgmem migrate`."""


MIGRATE_HINT = "the pgmem schema is not installed here, or is older than this pgmem: run `pgmem migrate`"


def _schema_missing(state: str | None, message: str) -> bool:
    return state == "3F000" or (state in ("42883", "42P01") and "pgmem." in message)


class ScopeError(DatabaseError):
    """The call's scope is not the transaction's `pgmem.scope`, or none is set (42501)."""


class ModelRefusedError(DatabaseError, ModelMismatchError):
    """Vectors from a model other than the one the scope stores (22000, naming both)."""


class ConflictError(DatabaseError):
    """The transaction lost a race with a concurrent writer (a deadlock, 40P01, or a
    serialization failure, 40001) and was rolled back whole; running it again is safe. pgmem
    runs its own transactions again itself; this reaches the caller when the transaction was
    the caller's, or when every attempt lost."""


class CanceledError(DatabaseError):
    """The server canceled the statement before it finished: `statement_timeout` or
    `pg_cancel_backend` (57014), `lock_timeout` while another transaction held a lock the
    statement needed (55P03). The statement's transaction (or, inside the caller's transaction,
    its savepoint) was rolled back whole, and the connection is usable; running the call again
    is safe (what an ingest stored before, one transaction per turn, stays stored)."""


class NotFoundError(DatabaseError):
    """What the call names does not exist (42704, P0002): an unknown scope, say."""


#: SQLSTATE classes of a refusal of the caller's request, as opposed to a failure of the
#: connection or the server (08, 40, 53, 57, XX), which stay the driver's exceptions. Class 25
#: is a request its transaction cannot run: a forget or a flip in the caller's REPEATABLE READ
#: transaction (25000), a write in a read-only one (25006).
REFUSAL_CLASSES = frozenset({"22", "23", "25", "3F", "42", "54", "P0"})
#: A statement the server canceled on a connection that stays usable (CanceledError): a timeout
#: or pg_cancel_backend is not a failure of the connection, unlike the rest of class 57
#: (pg_terminate_backend, a shutdown: 57P01-57P03, the connection gone).
CANCELED_STATES = frozenset({"57014", "55P03"})


def is_refusal(exc: Exception) -> bool:
    """Whether a driver exception is the database refusing the request (see REFUSAL_CLASSES),
    or canceling it (CANCELED_STATES): either becomes a PgmemError."""
    state = getattr(exc, "sqlstate", None) or ""
    return state[:2] in REFUSAL_CLASSES or state in CANCELED_STATES


#: What the 22000 refusals of another model say: recall's and bind_scope_model's (" from model "),
#: the LangGraph store's, whose namespace holds one model's field vectors or pgmem's pieces
#: (pgmem.store_search, put_item_vectors, put_item), and a replay of a recall logged before a
#: model change (replay_logged_recall, explain_logged_recall: " was logged under model ", 0116).
#: Each is a ModelRefusedError, so also a ModelMismatchError, as docs/langgraph.md says a store
#: with another model gets.
_MODEL_REFUSALS = (" from model ", "items are embedded with ", " is indexed with ", " was logged under model ")


def database_error(exc: Exception) -> DatabaseError:
    """The PgmemError for a refusal, keeping its SQLSTATE and hint."""
    state = getattr(exc, "sqlstate", None) or ""
    err = DatabaseError.from_driver(exc)
    if _schema_missing(state, str(err)):
        cls: type[DatabaseError] = SchemaMissingError
    elif state == "42501":
        cls = ScopeError
    elif state == "22000" and any(s in str(err) for s in _MODEL_REFUSALS):
        cls = ModelRefusedError
    elif state in ("42704", "P0002"):
        cls = NotFoundError
    elif state in ("40P01", "40001"):
        cls = ConflictError
    elif state in CANCELED_STATES:
        cls = CanceledError
    elif state[:2] in ("22", "23", "54"):
        cls = ArgumentError
    else:
        cls = DatabaseError
    return cls(Exception.__str__(err), sqlstate=err.sqlstate, hint=err.hint)
