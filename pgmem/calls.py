"""One implementation of every library call, for any psycopg 3 connection, sync or async.

A call is written once, as a generator that does no I/O itself: it yields `Query` steps (one
statement in its own scoped transaction), `Embed` steps (one embedding request) and `Work`
steps (local work that may take long, such as reading a message's dates) and is sent each
step's result. `run` drives a call on a `psycopg.Connection` or a
`psycopg_pool.ConnectionPool`; `pgmem.aio.run` drives the same call on an `AsyncConnection`
or `AsyncConnectionPool`. So the SQL, the validation and the result handling exist once.

The caller's connection is used as it is: pgmem reads rows through its own tuple-row cursor,
registers the pgvector types on that cursor only (the caller's adapters are untouched), and
scopes each statement with `pgmem.scope` for its own transaction (a savepoint inside a
transaction the caller has open, putting the previous scope back). A database error that a
call does not handle is raised as a `PgmemError` that keeps its SQLSTATE (`DatabaseError`);
errors of the connection itself (the server went away) stay psycopg's, for the caller's
retry logic, with a message of one line. A statement in its own transaction that loses a race
with a concurrent writer (deadlock, serialization failure) is run again (RETRY_ATTEMPTS);
inside the caller's transaction it raises `ConflictError` for the caller to run the
transaction again."""

from __future__ import annotations

import functools
import random
import threading
import time
import weakref
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

import psycopg

# At import, in the importing thread: imported inside register_types, the first calls of an
# application's threads raced another thread's import of pgvector.psycopg, the two module locks
# taken in opposite orders (Python's _DeadlockError; tests/test_api_connections.py).
from pgvector.psycopg.halfvec import register_halfvec_info
from pgvector.psycopg.vector import register_vector_info
from psycopg.rows import tuple_row
from psycopg.sql import Composed, Identifier
from psycopg.types import TypeInfo

from pgmem.embedders.base import Embedder, FloatArray, Side, embed_side
from pgmem.errors import DatabaseError, InputError, SchemaError, database_error, is_refusal
from pgmem.text import check_name

T = TypeVar("T")
P = ParamSpec("P")

#: The statements that scope a transaction; the first also returns the scope it had before.
SET_SCOPE = "SELECT current_setting('pgmem.scope', true), set_config('pgmem.scope', %s, true)"
SCOPE_LOCAL = "SELECT set_config('pgmem.scope', %s, true)"
#: pgvector's types, registered on pgmem's own cursors.
VECTOR_TYPES = ("vector", "halfvec")
#: A deadlock (40P01) or serialization failure (40001) rolls the statement's transaction back
#: whole: it lost a race with a concurrent writer, and running it again is safe. A statement in
#: its own transaction is run again, up to this many attempts in all; inside a transaction the
#: caller has open, the error goes to the caller, who owns the transaction (and its earlier
#: locks, which a retry of one statement could not release).
RETRY_ATTEMPTS = 8


def lost_race(exc: BaseException) -> bool:
    """Whether a driver error is a deadlock or serialization failure (safe to run again)."""
    return getattr(exc, "sqlstate", None) in ("40P01", "40001")


def retry_delay(attempt: int) -> float:
    """Seconds to wait before attempt `attempt + 1`: jittered, doubling from 10 ms, at most 1 s."""
    return random.uniform(0.5, 1.0) * min(1.0, 0.01 * (1 << attempt))


@dataclass(frozen=True)
class Query:
    """One statement, run in its own transaction with `pgmem.scope` set to `scope` (None: no
    scope is set, for a call that sees what the login sees without one, like `stats`). The
    reply is the list of rows (tuples), or the one row (or None) when `one` is set.

    `wait=False`: the call reads no reply (it is sent None). A driver that runs a whole call in
    one transaction (the LangGraph store's) then sends the statement without waiting for it; an
    error of the statement ends the transaction at the next statement waited for, or at COMMIT.

    `read_committed=True` (the forgets and reembed's flip): run in its own transaction, it runs at
    READ COMMITTED whatever the login's default_transaction_isolation, because it must see the rows
    a writer committed while it waited for its locks, and SQL refuses it under REPEATABLE READ or
    SERIALIZABLE (25000). It is then an explicit transaction (BEGIN, the setting, the scope, the
    statement, COMMIT), not one pipelined round trip. Inside the caller's transaction it runs at
    the caller's level."""

    scope: str | None
    sql: str | Composed
    params: Sequence[object] = ()
    one: bool = False
    wait: bool = True
    read_committed: bool = False


#: The first statement of a `read_committed` query's own transaction.
READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"


@dataclass(frozen=True)
class Embed:
    """Embed `texts` with `embedder` on one `side` (what is stored, or what is searched with);
    the reply is the float32 matrix (the async driver runs it in a worker thread, so the event
    loop is never blocked by the model)."""

    embedder: Embedder
    texts: Sequence[str] = field(default_factory=list)
    side: Side = "passage"

    def run(self) -> FloatArray:
        """Run the step: the drivers call this (the async ones in a worker thread)."""
        return embed_side(self.embedder, self.texts, self.side)


@dataclass(frozen=True)
class Work:
    """Work of a call done here, not in the database, that may take long (reading a message's
    dates: up to seconds for a long text dense with them); the reply is `fn()`. The async
    drivers run it in a worker thread, as they run an `Embed`, so the event loop is never
    blocked by it."""

    fn: Callable[[], object]

    def run(self) -> object:
        return self.fn()


@dataclass(frozen=True)
class _Raised:
    error: InputError


def work(fn: Callable[[], T]) -> Call[T]:
    """`fn()` as a Work step (a worker thread's, on the async drivers), its InputError raised
    here, in the call, which may report it (a turn or document that cannot be split): raised by
    the step, it would leave the driver and end the whole call."""

    def run() -> object:
        try:
            return fn()
        except InputError as exc:
            return _Raised(exc)

    out = yield Work(run)
    if isinstance(out, _Raised):
        raise out.error
    return out  # type: ignore[no-any-return]


#: What a driver runs here rather than in the database.
Local = Embed | Work
Step = Query | Embed | Work
Call = Generator[Step, Any, T]


class Pool(Protocol):
    def connection(self) -> Any: ...


Db = psycopg.Connection[Any] | Pool

_TYPES: weakref.WeakKeyDictionary[object, list[TypeInfo]] = weakref.WeakKeyDictionary()


def sync(fn: Callable[P, Call[T]]) -> Callable[Concatenate[Db, P], T]:
    """The sync API function of a call: `recall = sync(recall_call)` takes a connection or
    pool first, then the call's own arguments (`pgmem.aio.asynchronous` is the async twin)."""

    @functools.wraps(fn)
    def api(db: Db, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run(db, fn(*args, **kwargs))

    api.__name__ = api.__qualname__ = fn.__name__.removesuffix("_call")
    return api


_LOCKS: weakref.WeakKeyDictionary[object, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_MADE = threading.Lock()


def connection_lock(conn: psycopg.Connection[Any]) -> threading.RLock:
    """The one lock of a sync connection that pgmem's calls on it hold while they run (this
    module's, PgmemStore's): calls made on one connection from several threads run one after
    the other, as `pgmem.aio.connection_lock` makes them on an async one. Interleaved, one
    call's savepoints and pipelines ran inside the other's and psycopg failed both with a
    traceback (`OutOfOrderTransactionNesting`), not a PgmemError. Reentrant: a progress
    callback may call pgmem on the same connection."""
    with _LOCKS_MADE:
        lock = _LOCKS.get(conn)
        if lock is None:
            lock = _LOCKS[conn] = threading.RLock()
    return lock


def run(db: Db, call: Call[T]) -> T:
    """Drive `call` on a connection (used as it is, one call at a time: `connection_lock`) or a
    pool (one connection for the call)."""
    if isinstance(db, psycopg.Connection):
        with connection_lock(db):
            return _drive(db, call)
    lease = pool_lease(db)
    if not hasattr(lease, "__enter__"):
        other = isinstance(db, psycopg.AsyncConnection) or hasattr(lease, "__aenter__")
        raise TypeError(
            f"expected a psycopg Connection or ConnectionPool, got {type(db).__name__}"
            + (": an async one goes to pgmem.aio" if other else "")
        )
    with lease as conn:
        return _drive(conn, call)


def pool_lease(db: object) -> Any:
    """`db.connection()` of a pool, sync or async (not entered), or None for anything else:
    the drivers check which kind it is before using it."""
    if isinstance(db, psycopg.Connection | psycopg.AsyncConnection):
        return None
    connection = getattr(db, "connection", None)
    return connection() if callable(connection) else None


@dataclass(frozen=True)
class Finished(Generic[T]):
    """What `advance` returns when the call has returned."""

    value: T


def advance(call: Call[T], reply: object, error: psycopg.Error | None) -> Step | Finished[T]:
    """The call's next step, sent the last reply (or thrown the last step's error, which the
    call may handle); a refusal the call lets through becomes a PgmemError. Both drivers use it."""
    try:
        return call.throw(error) if error is not None else call.send(reply)
    except StopIteration as stop:
        return Finished(stop.value)
    except psycopg.Error as exc:
        if is_refusal(exc) or lost_race(exc):
            raise database_error(exc) from None
        # The connection's failure stays psycopg's (its class, sqlstate and diag), in one line:
        # a lost connection's ran to three, or to a hundred with the interrupted SQL's CONTEXT.
        exc.args = (str(DatabaseError.from_driver(exc)),)
        raise


def check_usable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """A connection whose transaction an earlier statement aborted runs nothing until it is
    rolled back: one line saying so (25P02), before pgmem's savepoint fails on it and psycopg
    logs the failed rollback of that savepoint to stderr."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
        raise DatabaseError(
            "the connection's transaction is aborted by an earlier statement: roll it back "
            "(conn.rollback()) before calling pgmem",
            sqlstate="25P02",
        )


def _drive(conn: psycopg.Connection[Any], call: Call[T]) -> T:
    check_usable(conn)
    reply: object = None
    error: psycopg.Error | None = None
    # Each step in its own transaction, or all inside the caller's (see _execute).
    own = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    while True:
        step = advance(call, reply, error)
        if isinstance(step, Finished):
            return step.value
        reply, error = None, None
        if isinstance(step, Local):
            reply = step.run()
            continue
        try:
            reply = _execute(conn, step, own)
        except psycopg.Error as exc:
            if not own and lost_race(exc):
                # The caller's transaction lost the race: it is the caller's to run again.
                raise database_error(exc) from None
            error = exc  # the call may handle it (a turn the database refused is reported)


def _execute(conn: psycopg.Connection[Any], q: Query, own: bool) -> object:
    attempt = 1
    while True:
        try:
            return _execute_once(conn, q)
        except psycopg.Error as exc:
            if not (own and lost_race(exc) and attempt < RETRY_ATTEMPTS):
                raise
        time.sleep(retry_delay(attempt))
        attempt += 1


def one_round_trip(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a scoped statement runs as one round trip on `conn`: an autocommit connection
    with no transaction open and not in pipeline mode already. The scope's setting and the
    statement are then sent together in pipeline mode, ended by one Sync: the server runs them
    as one implicit transaction (committed at the Sync, or rolled back whole on an error), so
    the scope is local to it as in `scoped`, without BEGIN and COMMIT taking two round trips
    more and the setting a third."""
    return (
        conn.autocommit
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        and conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        and psycopg.Pipeline.is_supported()
    )


def _execute_once(conn: psycopg.Connection[Any], q: Query) -> object:
    if q.read_committed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        with conn.transaction():
            conn.execute(READ_COMMITTED)
            return _execute_once(conn, replace(q, read_committed=False))
    if q.scope is not None and one_round_trip(conn):
        check_name(q.scope, "scope")
        # The types first: fetching them is a statement of its own, in its own transaction.
        infos = type_infos(conn)
        with conn.cursor(row_factory=tuple_row) as cur:
            register_types(cur, infos)
            with conn.cursor() as setting, conn.pipeline():
                setting.execute(SCOPE_LOCAL, (q.scope,))
                cur.execute(q.sql, q.params, binary=True)
            return cur.fetchone() if q.one else cur.fetchall()
    block = scoped(conn, q.scope) if q.scope is not None else conn.transaction()
    with block, conn.cursor(row_factory=tuple_row) as cur:
        register_types(cur, type_infos(conn))
        cur.execute(q.sql, q.params, binary=True)
        return cur.fetchone() if q.one else cur.fetchall()


@contextmanager
def scoped(conn: psycopg.Connection[Any], scope: str) -> Generator[None, None, None]:
    """A transaction (or, inside the caller's open transaction, a savepoint) with the
    row-level-security scope set locally; the scope never outlives the block.

    On an autocommit connection the transaction ends with the block, and the local setting
    with it. Inside an open transaction a savepoint does not end the transaction, so the
    value the transaction had before (none, or the caller's own scope) is put back on the
    way out; when the block fails, rolling back to the savepoint undoes the setting too."""
    check_name(scope, "scope")
    nested = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(SET_SCOPE, (scope,)).fetchone()
        yield
        if nested:
            # Functions called in the block may set the scope too (set_config(..., true)).
            cur.execute(SCOPE_LOCAL, ((row[0] if row else None) or "",))


#: Where pgvector is installed, when its type is not found by name (read only then).
VECTOR_SCHEMA_SQL = (
    "SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace"
    " WHERE e.extname = 'vector'"
)


def vector_type_missing(schema: object) -> SchemaError:
    """The one line for a connection that does not find pgvector's `vector` type by name: it is
    not installed, or its schema (PGMEM_VECTOR_SCHEMA) is not on the login's search_path, which
    pgmem's statements name the type through. Without a word on the latter, a call failed with
    psycopg's `cannot adapt type 'ndarray'`, or was told to install pgvector."""
    if schema is None:
        return SchemaError("pgvector is not installed in this database: run `pgmem migrate`")
    name = Identifier(str(schema)).as_string(None)
    return SchemaError(
        f"pgvector is installed in schema {schema!s:.80}, which is not on this login's search_path: "
        f'ALTER ROLE <login> IN DATABASE <database> SET search_path = "$user", {name}, public '
        "(pgmem roles create --vector-schema does it for its logins), then reconnect"
    )


def type_infos(conn: psycopg.Connection[Any]) -> list[TypeInfo]:
    """pgvector's types on this connection, fetched once (a query of its own); the store's
    driver reads them here too."""
    infos = _TYPES.get(conn)
    if infos is None:
        infos = [i for i in (TypeInfo.fetch(conn, name) for name in VECTOR_TYPES) if i is not None]
        if not any(i.name == "vector" for i in infos):
            with conn.cursor(row_factory=tuple_row) as cur:
                row = cur.execute(VECTOR_SCHEMA_SQL).fetchone()
            raise vector_type_missing(row[0] if row else None)
        _TYPES[conn] = infos
    return infos


def register_types(cur: Any, infos: Sequence[TypeInfo]) -> None:
    """pgvector's dumpers and loaders on one cursor (numpy arrays in, numpy arrays out)."""
    for info in infos:
        (register_vector_info if info.name == "vector" else register_halfvec_info)(cur, info)
