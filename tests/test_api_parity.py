"""The sync API and its async twin (`pgmem.aio`) side by side: the same calls, the same results,
the same errors, on a connection and on a pool of each kind; and what sharing one connection
between threads (sync) or tasks (async) does."""

from __future__ import annotations

import threading

import psycopg

import pgmem
from pgmem.db import connect, scoped
from pgmem.integrations.langgraph import PgmemStore
from tests.security_helpers import HashEmbedder, make_turn

EMB = HashEmbedder()


def test_calls_from_threads_sharing_one_connection_run_one_after_the_other(app_url: str) -> None:
    """psycopg's connections are thread-safe, and the async twin runs calls gathered on one
    connection one after the other (pgmem.aio.connection_lock). The sync calls did not: two
    threads' calls on one connection interleaved their savepoints and pipelines, and psycopg
    failed them with a traceback (`OutOfOrderTransactionNesting: transaction commit at the wrong
    nesting level`), not a PgmemError, the turn not stored. A PgmemStore on that connection
    shares its lock."""
    conn = connect(app_url)
    store = PgmemStore(conn, embedder=EMB)
    errors: list[str] = []
    start = threading.Barrier(3)

    def client(n: int) -> None:
        start.wait()
        try:
            for i in range(4):
                pgmem.ingest_turns(conn, [make_turn("shared", f"t{n}", i, f"note {i} of thread {n}")], EMB)
                pgmem.recall(conn, "shared", f"note {i}", EMB)
                store.put(("shared-store",), f"k{n}-{i}", {"text": f"item {i}"})
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    threads = [threading.Thread(target=client, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with scoped(conn, "shared"):
        assert conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (12,)
    assert len(store.search(("shared-store",), limit=20)) == 12
    conn.close()
