"""pgmem's calls interrupted as production services interrupt them: an asyncio task cancelled
(once, as `asyncio.wait_for` does, or again and again while it cleans up, as a task group or
anyio's cancel scopes do), a Ctrl-C raised from inside an embedder, a backend terminated.

Each test orders the interruption with a lock, not a sleep: a trigger on the table the call
writes takes an advisory lock a superuser connection holds, so the call is blocked in the
server when the test interrupts it. The bar: the interruption the caller asked for propagates
(never swallowed, never replaced by another error), nothing of the call is stored, and the next
call works (on a new connection when the old one is closed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp
from psycopg import sql

import pgmem
import pgmem.aio
from pgmem.cli import main
from pgmem.db import connect
from pgmem.embedders.base import FloatArray
from pgmem.errors import CanceledError, DatabaseError
from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, make_turn

#: The advisory lock the blocking trigger waits for.
LOCK = 4242
NS = ("users", "u1")
EMB = HashEmbedder()


@pytest.fixture
def blocking(admin_conn: Conn) -> Iterator[Conn]:
    """A trigger that makes every insert into pgmem.piece and pgmem.store_item wait for advisory
    lock LOCK, held by the returned superuser connection until the test ends."""
    admin_conn.execute(
        "CREATE FUNCTION pgmem.test_block() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END$$"
    )
    for table in ("piece", "store_item"):
        admin_conn.execute(
            sql.SQL(
                "CREATE TRIGGER test_block BEFORE INSERT ON pgmem.{} FOR EACH ROW EXECUTE FUNCTION pgmem.test_block()"
            ).format(sql.Identifier(table))
        )
    admin_conn.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
    yield admin_conn
    admin_conn.execute("SELECT pg_advisory_unlock_all()")


#: The app login's backends of this test's database: tests of other databases run beside it
#: (`make test` runs two pytest workers on one server).
OURS = "datname = current_database() AND usename = %s"


async def until_blocked(admin: Conn) -> None:
    """Return once the app login's backend waits for a lock (polled in pg_stat_activity: the
    call cannot finish before the test releases the lock, so this orders, it does not race)."""
    waiting = f"SELECT count(*) FROM pg_stat_activity WHERE {OURS} AND wait_event_type = 'Lock'"
    while not count(admin, waiting, (APP_LOGIN,)):
        await asyncio.sleep(0.005)


async def cancel_until_done(task: asyncio.Task[Any]) -> None:
    """Cancel `task` at every turn of the loop until it ends, as a task group or an anyio cancel
    scope does while the task cleans up."""
    while not task.done():
        task.cancel()
        await asyncio.sleep(0)


def count(admin: Conn, query: str, params: Sequence[object] = ()) -> int:
    row = admin.execute(query, params).fetchone()
    return int(str(row[0])) if row else 0


def stored_items(admin: Conn) -> int:
    return count(admin, "SELECT count(*) FROM pgmem.store_item")


def test_async_store_cancelled_during_cleanup_raises_cancelled(app_url: str, blocking: Conn) -> None:
    """A batch cancelled again while it rolls back: psycopg closes the connection (its state is
    unknown), and the store's own rollback of the closed connection replaced the cancellation
    with `DatabaseError: the connection is closed`. The cancellation propagates."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            store = AsyncPgmemStore(aconn, embedder=HashEmbedder())
            task = asyncio.ensure_future(store.abatch([PutOp(NS, "k", {"text": "the dog hates baths"})]))
            await until_blocked(blocking)
            await cancel_until_done(task)
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    blocking.execute("SELECT pg_advisory_unlock_all()")
    assert stored_items(blocking) == 0


class InterruptedEmbedder(HashEmbedder):
    """An embedder during whose call the connection is lost (the backend terminated), and then
    Ctrl-C is pressed: KeyboardInterrupt out of embed()."""

    def __init__(self, admin: Conn) -> None:
        super().__init__()
        self.admin = admin

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.admin.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {OURS}",
            (APP_LOGIN,),
        )
        raise KeyboardInterrupt


def test_store_keyboard_interrupt_on_a_lost_connection_propagates(app_url: str, admin_conn: Conn) -> None:
    """Ctrl-C in the embedder of a store batch whose connection was lost meanwhile: the store's
    rollback of the dead connection replaced the KeyboardInterrupt with a DatabaseError. It
    propagates, and nothing is stored."""
    conn = connect(app_url)
    try:
        with pytest.raises(KeyboardInterrupt):
            PgmemStore(conn, embedder=InterruptedEmbedder(admin_conn)).put(NS, "k", {"text": "the dog hates baths"})
    finally:
        conn.close()
    assert stored_items(admin_conn) == 0
    with connect(app_url) as fresh:
        PgmemStore(fresh, embedder=HashEmbedder()).put(NS, "k", {"text": "the dog hates baths"})
    assert stored_items(admin_conn) == 1


def stored_turns(admin: Conn) -> int:
    return count(admin, "SELECT count(*) FROM pgmem.turn")


TURNS = [make_turn("s", "t", i, f"turn {i}: the freezer log is exported at two") for i in range(2)]


def _one_line_cancel(exc: BaseException, sqlstate: str) -> None:
    assert isinstance(exc, CanceledError) and exc.sqlstate == sqlstate
    assert "\n" not in str(exc) and exc.__cause__ is None and exc.__suppress_context__


@pytest.mark.parametrize("setting", ["statement_timeout", "lock_timeout"])
def test_a_server_timeout_is_one_pgmem_error(
    app_url: str, blocking: Conn, setting: str, caplog: pytest.LogCaptureFixture
) -> None:
    """statement_timeout (57014) or lock_timeout (55P03) during an ingest: psycopg's QueryCanceled
    / LockNotAvailable came through raw, its message some thirty lines of pgmem's SQL (CONTEXT).
    It is a CanceledError of one line with the SQLSTATE, as the LangGraph store's; nothing of the
    turn is stored, and the connection (autocommit, or the caller's open transaction) works for
    the next call."""
    sqlstate = "57014" if setting == "statement_timeout" else "55P03"
    for autocommit in (True, False):
        conn = connect(app_url, autocommit=autocommit)
        try:
            conn.execute(sql.SQL("SET {} = '50ms'").format(sql.Identifier(setting)))
            with pytest.raises(CanceledError) as err:
                pgmem.ingest_turns(conn, TURNS, EMB)
            _one_line_cancel(err.value, sqlstate)
            expected = psycopg.pq.TransactionStatus.IDLE if autocommit else psycopg.pq.TransactionStatus.INTRANS
            assert conn.info.transaction_status == expected
            # The next call works, given the time: a first recall on a loaded machine took more
            # than 50 ms (a clean-clone CI run with benchmarks beside it).
            conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(setting)))
            assert pgmem.recall(conn, "s", "freezer log", EMB).nothing_searched
            conn.execute(sql.SQL("SET {} = '50ms'").format(sql.Identifier(setting)))
            if autocommit:
                with pytest.raises(CanceledError) as err:
                    PgmemStore(conn, embedder=EMB).put(NS, "k", {"text": "the dog hates baths"})
                _one_line_cancel(err.value, sqlstate)
        finally:
            conn.close()
    assert stored_turns(blocking) == 0 and stored_items(blocking) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_pg_cancel_backend_of_an_async_call_is_one_pgmem_error(app_url: str, blocking: Conn) -> None:
    """pg_cancel_backend of an async bulk ingest's backend: one CanceledError (57014), nothing
    stored, the connection usable."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            task = asyncio.ensure_future(pgmem.aio.ingest_turns(aconn, TURNS, EMB, bulk=True))
            await until_blocked(blocking)
            blocking.execute(
                f"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE {OURS}",
                (APP_LOGIN,),
            )
            with pytest.raises(CanceledError) as err:
                await task
            _one_line_cancel(err.value, "57014")
            assert (await pgmem.aio.recall(aconn, "s", "freezer log", EMB)).nothing_searched

    asyncio.run(main())
    assert stored_turns(blocking) == 0


TERMINATE = f"SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE {OURS}"


def terminate(admin: Conn) -> None:
    """End the app login's backends; returns once they have exited (the timeout form waits)."""
    admin.execute(TERMINATE, (APP_LOGIN,))


@contextlib.contextmanager
def terminated_when_blocked(admin: Conn) -> Iterator[None]:
    """Terminate the app login's backend from another thread once it waits for a lock: the
    block's call is then blocked in the server, mid-call (at most 30 s later all the same, so a
    call that fails before it blocks does not leave the test waiting)."""

    def kill() -> None:
        with contextlib.suppress(TimeoutError):
            asyncio.run(asyncio.wait_for(until_blocked(admin), 30))
        terminate(admin)

    thread = threading.Thread(target=kill)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def _one_line_lost(message: str) -> None:
    """A lost connection's message: its first line, the server's (terminating connection due to
    administrator command) or libpq's (server closed the connection unexpectedly), without
    libpq's two lines of guesses or the QUERY and CONTEXT of the statement it interrupted."""
    assert "\n" not in message and "probably means" not in message and "QUERY" not in message, message
    assert "administrator command" in message or "closed the connection unexpectedly" in message, message


def test_a_terminated_backend_is_one_line_from_the_api(app_url: str, blocking: Conn) -> None:
    """pg_terminate_backend of a connection pgmem calls on, idle or mid-call, sync or async: the
    error stays psycopg's OperationalError (docs/python.md: for the caller's retry logic), but
    its message ran to three lines ("server closed the connection unexpectedly", then libpq's
    "This probably means the server terminated abnormally / before or while processing the
    request"), or, in the caller's transaction, the server's line and some hundred of pgmem's
    SQL (QUERY, CONTEXT). It is one line; the SQLSTATE stays on the error."""
    for autocommit in (True, False):
        conn = connect(app_url, autocommit=autocommit)
        try:
            pgmem.recall(conn, "s", "freezer log", EMB)
            terminate(blocking)
            with pytest.raises(psycopg.OperationalError) as err:
                pgmem.recall(conn, "s", "freezer log", EMB)
            _one_line_lost(str(err.value))
        finally:
            conn.close()
        conn = connect(app_url, autocommit=autocommit)
        try:
            with terminated_when_blocked(blocking), pytest.raises(psycopg.OperationalError) as err:
                pgmem.ingest_turns(conn, TURNS, EMB)
            _one_line_lost(str(err.value))
            if not autocommit:
                assert err.value.sqlstate == "57P01" and err.value.diag.context, err.value
        finally:
            conn.close()

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            await pgmem.aio.recall(aconn, "s", "freezer log", EMB)
            terminate(blocking)
            with pytest.raises(psycopg.OperationalError) as err:
                await pgmem.aio.recall(aconn, "s", "freezer log", EMB)
            _one_line_lost(str(err.value))
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            task = asyncio.ensure_future(pgmem.aio.ingest_turns(aconn, TURNS, EMB))
            await until_blocked(blocking)
            terminate(blocking)
            with pytest.raises(psycopg.OperationalError) as err:
                await task
            _one_line_lost(str(err.value))

    asyncio.run(main())
    assert stored_turns(blocking) == 0


def test_a_terminated_backend_is_one_line_from_the_store(app_url: str, blocking: Conn) -> None:
    """The LangGraph store's DatabaseError for a terminated backend, idle or mid-batch: it was
    one line, but libpq's three joined ("... This probably means the server terminated
    abnormally before or while processing the request."). It is the first."""
    conn = connect(app_url)
    try:
        store = PgmemStore(conn, embedder=EMB)
        store.get(NS, "k")
        terminate(blocking)
        with pytest.raises(DatabaseError) as err:
            store.get(NS, "k")
        _one_line_lost(str(err.value))
    finally:
        conn.close()
    conn = connect(app_url)
    try:
        with terminated_when_blocked(blocking), pytest.raises(DatabaseError) as err:
            PgmemStore(conn, embedder=EMB).put(NS, "k", {"text": "the dog hates baths"})
        _one_line_lost(str(err.value))
    finally:
        conn.close()
    assert stored_items(blocking) == 0


def test_a_terminated_backend_is_one_line_from_the_cli(
    app_url: str, db_url: str, admin_conn: Conn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pgmem stats` whose backend is terminated while it waits for a lock: "pgmem: error: " and
    the first line, not libpq's three joined."""
    monkeypatch.setenv("DATABASE_URL", app_url)
    with psycopg.connect(db_url) as locker:  # a transaction holding the lock until the end
        locker.execute("LOCK pgmem.turn IN ACCESS EXCLUSIVE MODE")
        with terminated_when_blocked(admin_conn):
            assert main(["stats", "--scope", "s"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgmem: error: "), lines
    _one_line_lost(lines[0])
