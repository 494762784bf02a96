"""The async twin of pgmem's public API, over `psycopg.AsyncConnection` or
`psycopg_pool.AsyncConnectionPool`.

Every function here runs the same call as its sync namesake (pgmem.calls: the same SQL, the
same validation, the same results); only the driver differs. Embedding runs in a worker
thread, so a local model never blocks the event loop.

    import pgmem.aio
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        report = await pgmem.aio.ingest_turns(conn, turns, embedder)
        result = await pgmem.aio.recall(conn, "demo", "Is anything stuck?", embedder)
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row
from psycopg.types import TypeInfo

from pgmem.calls import RESTORE_SCOPE, SET_SCOPE, VECTOR_TYPES, Call, Embed, Query, register_types
from pgmem.documents.store import (
    DocSearch,
    Document,
    DocumentReport,
    add_documents_call,
    remove_document_call,
    search_documents_call,
)
from pgmem.embedders.base import Embedder
from pgmem.errors import database_error, is_refusal
from pgmem.facts import Fact, add_facts_call, fact_recall_call
from pgmem.forget import (
    Forgotten,
    forget_document_call,
    forget_fact_call,
    forget_scope_call,
    forget_thread_call,
    forget_turn_call,
)
from pgmem.ingest import IngestReport, ingest_turns_call
from pgmem.recall import Recall, recall_call
from pgmem.text import check_name
from pgmem.turns import Turn

T = TypeVar("T")

AsyncDb = psycopg.AsyncConnection[Any] | Any  # an AsyncConnection, or an AsyncConnectionPool

_TYPES: weakref.WeakKeyDictionary[object, list[TypeInfo]] = weakref.WeakKeyDictionary()


async def run(db: AsyncDb, call: Call[T]) -> T:
    """Drive `call` on an async connection (used as it is) or pool (one connection for the call)."""
    if isinstance(db, psycopg.AsyncConnection):
        return await _drive(db, call)
    if not hasattr(db, "connection"):
        raise TypeError(f"expected a psycopg AsyncConnection or AsyncConnectionPool, got {type(db).__name__}")
    async with db.connection() as conn:
        return await _drive(conn, call)


async def _drive(conn: psycopg.AsyncConnection[Any], call: Call[T]) -> T:
    reply: object = None
    error: psycopg.Error | None = None
    while True:
        try:
            step = call.throw(error) if error is not None else call.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        except psycopg.Error as exc:
            if is_refusal(exc):
                raise database_error(exc) from None
            raise
        reply, error = None, None
        if isinstance(step, Embed):
            reply = await asyncio.to_thread(step.embedder.embed, step.texts)
            continue
        try:
            reply = await _execute(conn, step)
        except psycopg.Error as exc:
            error = exc


async def _execute(conn: psycopg.AsyncConnection[Any], q: Query) -> object:
    async with scoped(conn, q.scope), conn.cursor(row_factory=tuple_row) as cur:
        infos = _TYPES.get(conn)
        if infos is None:
            fetched = [await TypeInfo.fetch(conn, name) for name in VECTOR_TYPES]
            infos = _TYPES[conn] = [i for i in fetched if i is not None]
        register_types(cur, infos)
        await cur.execute(q.sql, q.params, binary=True)
        return await cur.fetchone() if q.one else await cur.fetchall()


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
            await cur.execute(RESTORE_SCOPE, ((row[0] if row else None) or "",))


async def ingest_turns(db: AsyncDb, turns: Iterable[Turn], embedder: Embedder, **options: Any) -> IngestReport:
    """`pgmem.ingest_turns`, awaited (same options)."""
    return await run(db, ingest_turns_call(turns, embedder, **options))


async def recall(db: AsyncDb, scope: str, message: str, embedder: Embedder, **options: Any) -> Recall:
    """`pgmem.recall`, awaited (same options: x, floor, thread, mode, weight, rules, log, metadata_filter)."""
    return await run(db, recall_call(scope, message, embedder, **options))


async def add_facts(db: AsyncDb, scope: str, facts: Sequence[Fact], embedder: Embedder) -> list[int]:
    """`pgmem.add_facts`, awaited."""
    return await run(db, add_facts_call(scope, facts, embedder))


async def fact_recall(db: AsyncDb, scope: str, message: str, embedder: Embedder, **options: Any) -> Recall:
    """`pgmem.fact_recall`, awaited (same options)."""
    return await run(db, fact_recall_call(scope, message, embedder, **options))


async def add_documents(
    db: AsyncDb, scope: str, docs: Iterable[Document], embedder: Embedder, **options: Any
) -> DocumentReport:
    """`pgmem.documents.store.add_documents`, awaited (same options)."""
    return await run(db, add_documents_call(scope, docs, embedder, **options))


async def search_documents(db: AsyncDb, scope: str, message: str, embedder: Embedder, **options: Any) -> DocSearch:
    """`pgmem.documents.store.search_documents`, awaited (same options)."""
    return await run(db, search_documents_call(scope, message, embedder, **options))


async def remove_document(db: AsyncDb, scope: str, document_id: str) -> bool:
    """`pgmem.documents.store.remove_document`, awaited."""
    return await run(db, remove_document_call(scope, document_id))


async def forget_turn(db: AsyncDb, scope: str, thread: str, turn_index: int) -> Forgotten:
    """`pgmem.forget_turn`, awaited."""
    return await run(db, forget_turn_call(scope, thread, turn_index))


async def forget_thread(db: AsyncDb, scope: str, thread: str) -> Forgotten:
    """`pgmem.forget_thread`, awaited."""
    return await run(db, forget_thread_call(scope, thread))


async def forget_fact(db: AsyncDb, scope: str, fact_id: int) -> Forgotten:
    """`pgmem.forget_fact`, awaited."""
    return await run(db, forget_fact_call(scope, fact_id))


async def forget_document(db: AsyncDb, scope: str, document_id: str) -> Forgotten:
    """`pgmem.forget_document`, awaited."""
    return await run(db, forget_document_call(scope, document_id))


async def forget_scope(db: AsyncDb, scope: str) -> Forgotten:
    """`pgmem.forget_scope`, awaited."""
    return await run(db, forget_scope_call(scope))


__all__ = [
    "add_documents",
    "add_facts",
    "fact_recall",
    "forget_document",
    "forget_fact",
    "forget_scope",
    "forget_thread",
    "forget_turn",
    "ingest_turns",
    "recall",
    "remove_document",
    "run",
    "scoped",
    "search_documents",
]
