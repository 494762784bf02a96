"""The async twin of pgmem's public API, over `psycopg.AsyncConnection` or
`psycopg_pool.AsyncConnectionPool`.

Every function here runs the same call as its sync namesake (pgmem.calls: the same SQL, the
same validation, the same results); only the driver differs. Embedding, and the splitting,
packing and token counting of turns and documents (pgmem.calls.work), run in a worker thread,
so a local model never blocks the event loop (an embedder with an `aembed` coroutine is
awaited instead).

    import pgmem.aio
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        report = await pgmem.aio.ingest_turns(conn, turns, embedder)
        result = await pgmem.aio.recall(conn, "demo", "Is anything stuck?", embedder)
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg.rows import tuple_row
from psycopg.types import TypeInfo

from pgmem.calls import (
    READ_COMMITTED,
    RETRY_ATTEMPTS,
    SCOPE_LOCAL,
    SET_SCOPE,
    VECTOR_SCHEMA_SQL,
    VECTOR_TYPES,
    Call,
    Embed,
    Finished,
    Local,
    Query,
    advance,
    check_usable,
    lost_race,
    one_round_trip,
    pool_lease,
    register_types,
    retry_delay,
    vector_type_missing,
)
from pgmem.documents.store import (
    add_documents_call,
    remove_document_call,
    search_documents_call,
    search_vectors_call,
)
from pgmem.embedders.base import spread
from pgmem.errors import database_error
from pgmem.facts import add_facts_call, fact_recall_call
from pgmem.forget import (
    forget_document_call,
    forget_fact_call,
    forget_scope_call,
    forget_thread_call,
    forget_turn_call,
)
from pgmem.ingest import ingest_turns_call
from pgmem.recall import recall_call, recall_vectors_call
from pgmem.reembed import reembed_call
from pgmem.stats import stats_call
from pgmem.text import check_name

T = TypeVar("T")
P = ParamSpec("P")

AsyncDb = psycopg.AsyncConnection[Any] | Any  # an AsyncConnection, or an AsyncConnectionPool

_TYPES: weakref.WeakKeyDictionary[object, list[TypeInfo]] = weakref.WeakKeyDictionary()
_LOCKS: weakref.WeakKeyDictionary[object, asyncio.Lock] = weakref.WeakKeyDictionary()


def connection_lock(conn: psycopg.AsyncConnection[Any]) -> asyncio.Lock:
    """The one lock of an async connection that pgmem's calls on it hold while they run (this
    module's, AsyncPgmemStore's): calls gathered on one connection run one after the other.
    Interleaved, one call's statements ran inside the other's transaction and pipeline, and
    psycopg failed both (a bare AssertionError, `PQsendQuery not allowed in pipeline mode`)."""
    lock = _LOCKS.get(conn)
    if lock is None:
        lock = _LOCKS[conn] = asyncio.Lock()
    return lock


async def run(db: AsyncDb, call: Call[T]) -> T:
    """Drive `call` on an async connection (used as it is, one call at a time: `connection_lock`)
    or pool (one connection for the call)."""
    if isinstance(db, psycopg.AsyncConnection):
        async with connection_lock(db):
            return await _drive(db, call)
    lease = pool_lease(db)
    if not hasattr(lease, "__aenter__"):
        other = isinstance(db, psycopg.Connection) or hasattr(lease, "__enter__")
        raise TypeError(
            f"expected a psycopg AsyncConnection or AsyncConnectionPool, got {type(db).__name__}"
            + (": a sync one goes to the sync API (pgmem.recall, ...)" if other else "")
        )
    async with lease as conn:
        return await _drive(conn, call)


async def _drive(conn: psycopg.AsyncConnection[Any], call: Call[T]) -> T:
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
            reply = await local_step(step)
            continue
        try:
            reply = await _execute(conn, step, own)
        except psycopg.Error as exc:
            if not own and lost_race(exc):
                # The caller's transaction lost the race: it is the caller's to run again.
                raise database_error(exc) from None
            error = exc


async def local_step(step: Local) -> object:
    """Run an Embed or Work step without blocking the loop: an embedder with its own coroutine
    (`aembed`: the LangGraph store's LangChain embeddings) is awaited; anything else runs in a
    worker thread."""
    if isinstance(step, Embed):
        aembed = getattr(step.embedder, "aembed", None)
        if aembed is not None and step.side == "passage":
            # Each distinct text once, as embed_side sends them to `embed` (until rt68 the async
            # store sent an item's copies of a text each, and a provider could give them two vectors).
            distinct = list(dict.fromkeys(step.texts))
            vectors = await aembed(distinct)
            if len(distinct) == len(step.texts):
                return vectors
            return spread(vectors, distinct, step.texts, step.embedder.model_id)
    return await asyncio.to_thread(step.run)


async def _execute(conn: psycopg.AsyncConnection[Any], q: Query, own: bool) -> object:
    attempt = 1
    while True:
        try:
            return await _execute_once(conn, q)
        except psycopg.Error as exc:
            if not (own and lost_race(exc) and attempt < RETRY_ATTEMPTS):
                raise
        await asyncio.sleep(retry_delay(attempt))
        attempt += 1


async def _execute_once(conn: psycopg.AsyncConnection[Any], q: Query) -> object:
    if q.read_committed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # pgmem.calls._execute_once: a forget runs at READ COMMITTED in its own transaction.
        async with conn.transaction():
            await conn.execute(READ_COMMITTED)
            return await _execute_once(conn, replace(q, read_committed=False))
    if q.scope is not None and one_round_trip(conn):
        # pgmem.calls._execute_once: the scope's setting and the statement in one round trip.
        check_name(q.scope, "scope")
        infos = await type_infos(conn)
        async with conn.cursor(row_factory=tuple_row) as cur:
            register_types(cur, infos)
            async with conn.cursor() as setting, conn.pipeline():
                await setting.execute(SCOPE_LOCAL, (q.scope,))
                await cur.execute(q.sql, q.params, binary=True)
            return await cur.fetchone() if q.one else await cur.fetchall()
    block = scoped(conn, q.scope) if q.scope is not None else conn.transaction()
    async with block, conn.cursor(row_factory=tuple_row) as cur:
        register_types(cur, await type_infos(conn))
        await cur.execute(q.sql, q.params, binary=True)
        return await cur.fetchone() if q.one else await cur.fetchall()


async def type_infos(conn: psycopg.AsyncConnection[Any]) -> list[TypeInfo]:
    """`pgmem.calls.type_infos` on an async connection."""
    infos = _TYPES.get(conn)
    if infos is None:
        fetched = [await TypeInfo.fetch(conn, name) for name in VECTOR_TYPES]
        if not any(i is not None and i.name == "vector" for i in fetched):
            async with conn.cursor(row_factory=tuple_row) as cur:
                row = await (await cur.execute(VECTOR_SCHEMA_SQL)).fetchone()
            raise vector_type_missing(row[0] if row else None)
        infos = _TYPES[conn] = [i for i in fetched if i is not None]
    return infos


@asynccontextmanager
async def scoped(conn: psycopg.AsyncConnection[Any], scope: str) -> AsyncIterator[None]:
    """`pgmem.db.scoped` for an async connection: the scope is set for the block's own
    transaction (or savepoint, putting the previous scope back) and never outlives it."""
    check_name(scope, "scope")
    nested = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        row = await (await cur.execute(SET_SCOPE, (scope,))).fetchone()
        yield
        if nested:
            await cur.execute(SCOPE_LOCAL, ((row[0] if row else None) or "",))


def asynchronous(fn: Callable[P, Call[T]]) -> Callable[Concatenate[AsyncDb, P], Coroutine[Any, Any, T]]:
    """The async API function of a call: `recall = asynchronous(recall_call)` takes an async
    connection or pool first, then the call's own arguments (the twin of `pgmem.calls.sync`)."""

    @functools.wraps(fn)
    async def api(db: AsyncDb, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run(db, fn(*args, **kwargs))

    api.__name__ = api.__qualname__ = fn.__name__.removesuffix("_call")
    return api


ingest_turns = asynchronous(ingest_turns_call)
recall = asynchronous(recall_call)
recall_vectors = asynchronous(recall_vectors_call)
reembed = asynchronous(reembed_call)
add_facts = asynchronous(add_facts_call)
fact_recall = asynchronous(fact_recall_call)
add_documents = asynchronous(add_documents_call)
search_documents = asynchronous(search_documents_call)
search_vectors = asynchronous(search_vectors_call)
remove_document = asynchronous(remove_document_call)
forget_turn = asynchronous(forget_turn_call)
forget_thread = asynchronous(forget_thread_call)
forget_fact = asynchronous(forget_fact_call)
forget_document = asynchronous(forget_document_call)
forget_scope = asynchronous(forget_scope_call)
stats = asynchronous(stats_call)

__all__ = [
    "add_documents",
    "add_facts",
    "asynchronous",
    "connection_lock",
    "fact_recall",
    "forget_document",
    "forget_fact",
    "forget_scope",
    "forget_thread",
    "forget_turn",
    "ingest_turns",
    "local_step",
    "recall",
    "recall_vectors",
    "reembed",
    "remove_document",
    "run",
    "scoped",
    "search_documents",
    "search_vectors",
    "stats",
]
