"""pgmem's async calls cancelled once, as `asyncio.wait_for` and `asyncio.timeout` cancel them
(tests/test_interruptions.py has the cancellation repeated while a call cleans up, Ctrl-C, and
the server's cancel of one bulk ingest): an ingest of several turns, a recall, a forget, and an
AsyncPgmemStore batch of puts and deletes, each on an AsyncConnection (autocommit, or inside the
caller's transaction) and on an AsyncConnectionPool; and the server cancelling the statement
(statement_timeout) on the async paths.

Each call is blocked in the server when it is cancelled: a trigger waits for an advisory lock the
test's superuser connection holds (the ingest's second turn, the batch's second put, the forget's
delete), or the superuser holds a lock on the table the recall reads. The bar: the cancellation
propagates unchanged; what the call stored is whole turns and items only (a turn with all of its
pieces and their words, or nothing of it; a batch all or nothing); the connection is idle, with
nothing pending, and the next call on it (or the pool's next connection) works and commits only
its own work."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgmem.aio
from pgmem.errors import CanceledError
from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, make_turn
from tests.test_interruptions import LOCK, OURS, cancel_until_done, count, until_blocked

EMB = HashEmbedder()
NS = ("users", "u1")
TURNS = [make_turn("s", "t", i, f"turn {i}: the freezer log is exported at two") for i in range(3)]
IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture
def gate(admin_conn: Conn) -> Iterator[Conn]:
    """Triggers that wait for advisory lock LOCK (held by the returned superuser connection until
    the test ends) on inserting the pieces of turn 1, inserting store item 'k2', and deleting a
    turn of thread 'gone'."""
    admin_conn.execute(
        "CREATE FUNCTION pgmem.test_gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " PERFORM pg_advisory_xact_lock(4242); RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END; END$$"
    )
    for table, event, when in (
        ("piece", "INSERT", "NEW.turn_index = 1"),
        ("store_item", "INSERT", "NEW.item_key = 'k2'"),
        ("turn", "DELETE", "OLD.thread_id = 'gone'"),
    ):
        admin_conn.execute(
            sql.SQL(
                "CREATE TRIGGER test_gate BEFORE {} ON pgmem.{} FOR EACH ROW WHEN ({})"
                " EXECUTE FUNCTION pgmem.test_gate()"
            ).format(sql.SQL(event), sql.Identifier(table), sql.SQL(when))
        )
    admin_conn.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
    yield admin_conn
    admin_conn.execute("SELECT pg_advisory_unlock_all()")


def whole(admin: Conn) -> tuple[int, int]:
    """(turns, items) stored, asserting every turn has its pieces and every piece its words."""
    assert not count(
        admin,
        "SELECT count(*) FROM pgmem.turn t WHERE NOT EXISTS (SELECT FROM pgmem.piece p"
        " WHERE (p.scope_id, p.thread_id, p.turn_index) = (t.scope_id, t.thread_id, t.turn_index))",
    )
    assert not count(
        admin,
        "SELECT count(*) FROM pgmem.piece p WHERE p.kind = 'memory' AND (p.scope_id, p.thread_id, p.turn_index)"
        " NOT IN (SELECT scope_id, thread_id, turn_index FROM pgmem.turn)",
    )
    assert not count(
        admin,
        "SELECT count(*) FROM pgmem.piece p WHERE NOT EXISTS"
        " (SELECT FROM pgmem.piece_word w WHERE (w.scope_id, w.piece_id) = (p.scope_id, p.piece_id))",
    )
    return count(admin, "SELECT count(*) FROM pgmem.turn"), count(admin, "SELECT count(*) FROM pgmem.store_item")


def backends_idle(admin: Conn) -> None:
    """No backend of the app login is still running the cancelled statement, or is left in a
    transaction."""
    assert not count(
        admin,
        f"SELECT count(*) FROM pg_stat_activity WHERE {OURS} AND state <> 'idle'",
        (APP_LOGIN,),
    )


async def cancelled(make: Callable[[], Awaitable[Any]], *, wait: Callable[[], Awaitable[None]]) -> None:
    """Run `make()` until it is blocked (`wait`), cancel it once, and assert the cancellation came out."""
    task = asyncio.ensure_future(make())
    waiting = asyncio.ensure_future(wait())
    await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
    if task.done():  # it was never blocked: say why
        waiting.cancel()
        task.result()
        raise AssertionError("the call was never blocked")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def usable(conn: psycopg.AsyncConnection[Any]) -> None:
    assert not conn.closed and not conn.broken
    assert conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF


async def check_after(admin: Conn, db: Any) -> None:
    """The next calls on `db` work: the blocked turn's ingest, a recall, a forget."""
    admin.execute("SELECT pg_advisory_unlock_all()")
    report = await pgmem.aio.ingest_turns(db, TURNS, EMB)
    assert report.inserted + report.unchanged == len(TURNS) and not report.failed, report
    assert (await pgmem.aio.recall(db, "s", "freezer log", EMB)).groups
    admin.execute("SELECT pg_advisory_lock(%s)", (LOCK,))


@pytest.mark.parametrize("where", ["autocommit", "caller_transaction", "pool"])
def test_cancelled_ingest_recall_forget(app_url: str, gate: Conn, where: str) -> None:
    async def on(db: Any, conn: psycopg.AsyncConnection[Any] | None) -> None:
        # An ingest of three turns, blocked on the second.
        await cancelled(lambda: pgmem.aio.ingest_turns(db, TURNS, EMB), wait=lambda: until_blocked(gate))
        turns, _ = whole(gate)
        assert turns == (0 if where == "caller_transaction" else 1), turns
        if conn is not None:
            usable(conn)
            if where == "autocommit":
                assert conn.info.transaction_status == IDLE
        if where == "caller_transaction":
            # Turn 0 is the caller's, in its transaction still open (the caller rolls it back).
            assert conn is not None and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            return
        backends_idle(gate)
        await check_after(gate, db)
        # A recall blocked on a lock of the table it reads.
        gate.execute("BEGIN")
        gate.execute("LOCK pgmem.piece IN ACCESS EXCLUSIVE MODE")
        try:
            await cancelled(lambda: pgmem.aio.recall(db, "s", "freezer log", EMB), wait=lambda: until_blocked(gate))
        finally:
            gate.execute("COMMIT")
        if conn is not None:
            usable(conn)
            assert conn.info.transaction_status == IDLE
        backends_idle(gate)
        await check_after(gate, db)
        # A forget blocked deleting the thread's turns.
        gone = [make_turn("s", "gone", i, f"gone {i}: the boiler was serviced") for i in range(2)]
        gate.execute("SELECT pg_advisory_unlock_all()")
        await pgmem.aio.ingest_turns(db, gone, EMB)
        gate.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
        await cancelled(lambda: pgmem.aio.forget_thread(db, "s", "gone"), wait=lambda: until_blocked(gate))
        assert whole(gate)[0] == len(TURNS) + 2
        if conn is not None:
            usable(conn)
            assert conn.info.transaction_status == IDLE
        backends_idle(gate)
        await check_after(gate, db)

    async def main() -> None:
        if where == "pool":
            async with AsyncConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
                await on(pool, None)
            return
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            if where == "autocommit":
                await on(aconn, aconn)
                return
            with pytest.raises(asyncio.CancelledError):
                async with aconn.transaction():
                    await on(aconn, aconn)
                    raise asyncio.CancelledError  # as the cancelled call's caller lets it out
            assert aconn.info.transaction_status == IDLE
            await check_after(gate, aconn)

    asyncio.run(main())


@pytest.mark.parametrize("pool", [False, True])
def test_cancelled_store_batch(app_url: str, gate: Conn, pool: bool) -> None:
    """A batch deleting k0 and putting k1 and k2, cancelled while k2's insert waits: k0 is kept,
    neither put is stored, and the next batch works."""

    async def on(db: Any, conn: psycopg.AsyncConnection[Any] | None) -> None:
        store = AsyncPgmemStore(db, embedder=EMB)
        await store.aput(NS, "k0", {"text": "the cat likes boxes"})
        ops = [
            PutOp(NS, "k0", None),
            PutOp(NS, "k1", {"text": "the dog hates baths"}),
            PutOp(NS, "k2", {"text": "the bird sings at dawn"}),
        ]
        await cancelled(lambda: store.abatch(ops), wait=lambda: until_blocked(gate))
        assert whole(gate)[1] == 1 and await store.aget(NS, "k0") is not None
        if conn is not None:
            usable(conn)
            assert conn.info.transaction_status == IDLE
        backends_idle(gate)
        gate.execute("SELECT pg_advisory_unlock_all()")
        await store.abatch(ops)
        assert [await store.aget(NS, k) is not None for k in ("k0", "k1", "k2")] == [False, True, True]

    async def main() -> None:
        if pool:
            async with AsyncConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as p:
                await on(p, None)
            return
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            await on(aconn, aconn)

    asyncio.run(main())


def test_a_cancelled_aput_of_the_sync_store_stops_its_thread(app_url: str, gate: Conn) -> None:
    """PgmemStore.aput runs its batch in a worker thread (as PostgresStore's does). Cancelled while
    its insert of k2 waits in the server, the cancellation came out at once, and the thread went
    on: once the lock was released it stored k2 (the pool's one connection, the next aget's,
    came back only after that commit). Now the statement is cancelled in the server and the
    thread has stopped before the CancelledError comes out: k2 is never stored."""

    async def main() -> None:
        with ConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as p:
            store = PgmemStore(p, embedder=EMB)
            try:
                put = store.aput(NS, "k2", {"text": "the bird sings"})
                await cancelled(lambda: put, wait=lambda: until_blocked(gate))
                busy = count(
                    gate, f"SELECT count(*) FROM pg_stat_activity WHERE {OURS} AND state <> 'idle'", (APP_LOGIN,)
                )
            finally:  # released whatever happened: asyncio.run waits for the worker thread
                gate.execute("SELECT pg_advisory_unlock_all()")
            assert not busy, "the cancelled put's statement still runs"
            assert await store.aget(NS, "k2") is None
            assert whole(gate) == (0, 0)
            await store.aput(NS, "k2", {"text": "the bird sings"})
            assert whole(gate) == (1, 1)

    asyncio.run(main())


def test_cancelled_aputs_of_the_sync_store_stop_with_the_loop_s_executor_full(app_url: str, gate: Conn) -> None:
    """Two aputs of PgmemStore blocked in the server fill a loop executor of two threads, and both
    are cancelled: each one's cancel reaches the server from a thread of its own. Sent through
    the loop's executor (asyncio.to_thread), it queued behind the blocked batches themselves
    and no cancellation came out until the lock went."""
    waiting = f"SELECT count(*) FROM pg_stat_activity WHERE {OURS} AND wait_event_type = 'Lock'"

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        with ConnectionPool(app_url, min_size=2, max_size=2, kwargs={"autocommit": True}) as p:
            store = PgmemStore(p, embedder=EMB)
            try:
                puts = [asyncio.ensure_future(store.aput(NS, "k2", {"text": f"bird {i}"})) for i in range(2)]
                while count(gate, waiting, (APP_LOGIN,)) < 2:
                    await asyncio.sleep(0.005)
                for put in puts:
                    put.cancel()
                done, _ = await asyncio.wait(puts, timeout=3)
            finally:  # released whatever happened: asyncio.run waits for the worker threads
                gate.execute("SELECT pg_advisory_unlock_all()")
            assert len(done) == 2 and all(put.cancelled() for put in puts)
            assert await store.aget(NS, "k2") is None

    asyncio.run(main())


def test_a_cancelled_aput_of_the_sync_store_never_writes_over_a_later_put(app_url: str) -> None:
    """Field vectors are embedded before any row is locked: an aput of PgmemStore cancelled while
    its text was embedded went on in its thread and, on a pool, committed its value after a put
    of the same key made since (the later value lost for good). Now the cancellation waits for
    the thread, which stops before its next statement: the later put stands."""
    started = threading.Event()

    def embed(texts: list[str]) -> list[list[float]]:
        if any("stale" in t for t in texts):
            started.set()
            time.sleep(0.3)
        return [[1.0, float(len(t))] for t in texts]

    async def main() -> None:
        with ConnectionPool(app_url, min_size=2, max_size=2, kwargs={"autocommit": True}) as p:
            store = PgmemStore(p, index={"embed": embed, "dims": 2})

            async def embedding() -> None:
                while not started.is_set():
                    await asyncio.sleep(0.005)

            await cancelled(lambda: store.aput(NS, "k", {"text": "stale value"}), wait=embedding)
            assert await store.aget(NS, "k") is None
            await store.aput(NS, "k", {"text": "fresh value"})
            await asyncio.sleep(0.4)  # past the cancelled put's embedding
            item = await store.aget(NS, "k")
            assert item is not None and item.value == {"text": "fresh value"}

    asyncio.run(main())


def test_async_statement_timeout_is_one_line(app_url: str, gate: Conn) -> None:
    """statement_timeout on an async connection: the ingest (blocked on its second turn) and the
    store's batch each raise one CanceledError (57014), store nothing half, and the connection
    works for the next call."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            await aconn.execute("SET statement_timeout = '100ms'")
            with pytest.raises(CanceledError) as err:
                await pgmem.aio.ingest_turns(aconn, TURNS, EMB)
            assert err.value.sqlstate == "57014" and "\n" not in str(err.value)
            assert whole(gate)[0] == 1
            usable(aconn)
            assert aconn.info.transaction_status == IDLE
            store = AsyncPgmemStore(aconn, embedder=EMB)
            with pytest.raises(CanceledError) as err:
                await store.abatch([PutOp(NS, "k1", {"text": "a"}), PutOp(NS, "k2", {"text": "b"})])
            assert err.value.sqlstate == "57014" and "\n" not in str(err.value)
            assert whole(gate)[1] == 0
            usable(aconn)
            assert aconn.info.transaction_status == IDLE
            await aconn.execute("SET statement_timeout = 0")
            await check_after(gate, aconn)

    asyncio.run(main())


@pytest.mark.parametrize("where", ["autocommit", "caller_transaction", "not_autocommit", "pool"])
def test_cancelled_again_while_cleaning_up(app_url: str, gate: Conn, where: str) -> None:
    """An ingest cancelled at every turn of the loop while it cleans up (a task group, anyio):
    psycopg closes the connection (its state is unknown), the cancellation propagates, not "the
    connection is closed" from pgmem's rollback of it; the pool replaces the closed connection."""

    async def main() -> None:
        if where == "pool":
            async with AsyncConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
                task = asyncio.ensure_future(pgmem.aio.ingest_turns(pool, TURNS, EMB))
                await until_blocked(gate)
                await cancel_until_done(task)
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert whole(gate)[0] == 1
                await check_after(gate, pool)
            return
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=where != "not_autocommit") as aconn:
            if where == "caller_transaction":
                await aconn.execute("BEGIN")
            task = asyncio.ensure_future(pgmem.aio.ingest_turns(aconn, TURNS, EMB))
            await until_blocked(gate)
            await cancel_until_done(task)
            with pytest.raises(asyncio.CancelledError):
                await task
            assert aconn.closed
        assert whole(gate)[0] == (0 if where == "caller_transaction" else 1)

    asyncio.run(main())


def test_cancelled_on_a_connection_in_pipeline_mode(app_url: str, gate: Conn) -> None:
    """The caller's connection in pipeline mode (AsyncPgmemStore's `pipeline=True`): a cancelled
    ingest and a cancelled store batch leave it idle and still in pipeline mode, and the next
    calls work."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn, aconn.pipeline():
            await cancelled(lambda: pgmem.aio.ingest_turns(aconn, TURNS, EMB), wait=lambda: until_blocked(gate))
            assert aconn.info.transaction_status == IDLE and not aconn.closed and whole(gate)[0] == 1
            await check_after(gate, aconn)
            store = AsyncPgmemStore(aconn, embedder=EMB)
            ops = [PutOp(NS, "k1", {"text": "the dog hates baths"}), PutOp(NS, "k2", {"text": "the bird sings"})]
            await cancelled(lambda: store.abatch(ops), wait=lambda: until_blocked(gate))
            assert aconn.info.transaction_status == IDLE and not aconn.closed and whole(gate)[1] == 0
            assert aconn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
            gate.execute("SELECT pg_advisory_unlock_all()")
            await store.abatch(ops)
            assert whole(gate)[1] == 2

    asyncio.run(main())


def test_wait_for_and_a_default_pool(app_url: str, gate: Conn) -> None:
    """`asyncio.wait_for` timing out an ingest (TimeoutError out, the connection idle), and a
    cancelled ingest on a pool of psycopg's default connections (not autocommit: each step in
    its own BEGIN/COMMIT): the pool's connection is handed out again and works."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pgmem.aio.ingest_turns(aconn, TURNS, EMB), 0.5)
            assert aconn.info.transaction_status == IDLE and whole(gate)[0] == 1
            await check_after(gate, aconn)
        async with AsyncConnectionPool(app_url, min_size=1, max_size=1) as pool:
            await pgmem.aio.forget_scope(pool, "s")
            await cancelled(lambda: pgmem.aio.ingest_turns(pool, TURNS, EMB), wait=lambda: until_blocked(gate))
            assert whole(gate)[0] == 1
            backends_idle(gate)
            await check_after(gate, pool)

    asyncio.run(main())


def test_async_statement_timeout_in_the_callers_transaction(app_url: str, gate: Conn) -> None:
    """statement_timeout inside the caller's open transaction, async: one CanceledError; the
    statement's savepoint is rolled back, the caller's transaction open and usable (the next
    ingest in it commits with it, whole)."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            async with aconn.transaction():
                await aconn.execute("SET LOCAL statement_timeout = '100ms'")
                with pytest.raises(CanceledError) as err:
                    await pgmem.aio.ingest_turns(aconn, TURNS, EMB)
                assert err.value.sqlstate == "57014" and "\n" not in str(err.value)
                assert aconn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
                await aconn.execute("SET LOCAL statement_timeout = 0")
                gate.execute("SELECT pg_advisory_unlock_all()")
                report = await pgmem.aio.ingest_turns(aconn, TURNS, EMB)
                assert report.inserted + report.unchanged == len(TURNS) and not report.failed
            assert whole(gate)[0] == len(TURNS)

    asyncio.run(main())
