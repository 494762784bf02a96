"""The sync API and its async twin (`pgmem.aio`) side by side: the same calls, the same results,
the same errors, on a connection and on a pool of each kind; and what sharing one connection
between threads (sync) or tasks (async) does."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgmem
import pgmem.aio
import pgmem.documents
from pgmem.db import connect, scoped
from pgmem.documents import Document, add_documents, remove_document, search_documents, search_vectors
from pgmem.facts import Fact
from pgmem.integrations.langgraph import PgmemStore
from pgmem.recall import recall_vectors
from pgmem.turns import Turn
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


T0 = datetime(2026, 1, 1, tzinfo=UTC)
ONES = np.ones((1, 384), dtype=np.float32)
Args = tuple[tuple[Any, ...], dict[str, Any]]


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": "x"}
    for _ in range(levels):
        value = {"a": value}
    return value


def _table(s: str) -> list[tuple[str, str, Callable[[dict[str, Any]], Args]]]:
    """(row, call, its arguments after the connection: a function of the earlier rows' results)."""
    doc = Document("d1", "# Freezer\n\nThe freezer log is exported every night at two.\n")
    return [
        (
            "ingest",
            "ingest_turns",
            lambda _: (([make_turn(s, "t", 0, "cats purr"), make_turn(s, "t", 1, "x")], EMB), {}),
        ),
        ("ingest again", "ingest_turns", lambda _: (([make_turn(s, "t", 0, "cats purr")], EMB), {})),
        ("ingest NUL", "ingest_turns", lambda _: (([make_turn(s, "t", 2, "a\x00b")], EMB), {})),
        ("ingest surrogate", "ingest_turns", lambda _: (([make_turn(s, "t", 3, "a\ud800b")], EMB), {})),
        ("ingest twice", "ingest_turns", lambda _: (([make_turn(s, "t", 4, "a"), make_turn(s, "t", 4, "b")], EMB), {})),
        ("ingest one turn", "ingest_turns", lambda _: ((make_turn(s, "t", 5, "x"), EMB), {})),
        ("ingest bulk", "ingest_turns", lambda _: (([make_turn(s, "u", 0, "birds sing")], EMB), {"bulk": True})),
        ("recall", "recall", lambda _: ((s, "cats purr", EMB), {"floor": -1.0, "log": True})),
        ("recall NUL", "recall", lambda _: ((s, "c\x00", EMB), {})),
        ("recall surrogate", "recall", lambda _: ((s, "c\udfff", EMB), {})),
        ("recall bytes", "recall", lambda _: ((s, b"cats", EMB), {})),
        ("recall x", "recall", lambda _: ((s, "cats", EMB), {"x": "5"})),
        ("recall floor", "recall", lambda _: ((s, "cats", EMB), {"floor": float("nan")})),
        ("recall filter", "recall", lambda _: ((s, "cats", EMB), {"metadata_filter": _deep(70)})),
        ("recall window", "recall", lambda _: ((s, "cats", EMB), {"since": T0, "until": T0})),
        ("recall scope", "recall", lambda _: (("a" * 201, "cats", EMB), {})),
        ("recall no scope", "recall", lambda _: ((f"{s}-none", "cats", EMB), {})),
        ("recall_vectors", "recall_vectors", lambda _: ((s, ["cats"], ONES), {"floor": -1.0})),
        ("recall_vectors dims", "recall_vectors", lambda _: ((s, ["cats"], ONES[:, :3]), {})),
        ("facts", "add_facts", lambda _: ((s, [Fact("cats purr", "t", 0), Fact("dogs")], EMB), {})),
        ("facts again", "add_facts", lambda _: ((s, [Fact("cats purr", "t", 0)], EMB), {})),
        ("facts NUL", "add_facts", lambda _: ((s, [Fact("a\x00")], EMB), {})),
        ("fact_recall", "fact_recall", lambda _: ((s, "purr", EMB), {"floor": -1.0})),
        ("documents", "add_documents", lambda _: ((s, [doc, Document("d2", "a\x00"), doc], EMB), {})),
        ("documents prune", "add_documents", lambda _: ((s, [], EMB), {"prune": True})),
        ("search_documents", "search_documents", lambda _: ((s, "freezer log", EMB), {"floor": -1.0})),
        ("search_vectors", "search_vectors", lambda _: ((s, ["freezer"], ONES), {"floor": -1.0})),
        ("search_vectors NUL", "search_vectors", lambda _: ((s, ["a\x00"], ONES), {})),
        ("remove_document", "remove_document", lambda _: ((s, "d1"), {})),
        ("remove_document none", "remove_document", lambda _: ((s, "d1"), {})),
        ("forget_turn", "forget_turn", lambda _: ((s, "t", 1), {})),
        ("forget_turn index", "forget_turn", lambda _: ((s, "t", -1), {})),
        ("forget_thread", "forget_thread", lambda _: ((s, "u"), {})),
        ("forget_fact", "forget_fact", lambda done: ((s, done["facts"][1]), {})),
        ("forget_fact id", "forget_fact", lambda _: ((s, "1"), {})),
        ("forget_document", "forget_document", lambda _: ((s, "d1"), {})),
        ("stats", "stats", lambda _: ((s,), {})),
        ("stats NUL", "stats", lambda _: (("a\x00",), {})),
        ("forget_scope", "forget_scope", lambda _: ((s,), {})),
    ]


SYNC: dict[str, Callable[..., Any]] = {
    "ingest_turns": pgmem.ingest_turns,
    "recall": pgmem.recall,
    "recall_vectors": recall_vectors,
    "add_facts": pgmem.add_facts,
    "fact_recall": pgmem.fact_recall,
    "add_documents": add_documents,
    "search_documents": search_documents,
    "search_vectors": search_vectors,
    "remove_document": remove_document,
    "forget_turn": pgmem.forget_turn,
    "forget_thread": pgmem.forget_thread,
    "forget_fact": pgmem.forget_fact,
    "forget_document": pgmem.forget_document,
    "forget_scope": pgmem.forget_scope,
    "stats": pgmem.stats,
}


def _shown(outcome: object, scope: str) -> str:
    """An outcome as compared: its repr without what differs by run (the scope's name, ids, times)."""
    if isinstance(outcome, list) and all(isinstance(i, int) for i in outcome):
        return f"{len(outcome)} ids"  # add_facts' (each database numbers its own)
    text = repr(outcome).replace(scope, "S")
    text = re.sub(r"(piece_id|chunk_id|recall_id)=\d+", r"\1=N", text)
    text = re.sub(r"datetime\.datetime\([^)]*\)", "T", text)
    return text


def _status(db: object) -> str:
    if isinstance(db, psycopg.Connection | psycopg.AsyncConnection):
        return db.info.transaction_status.name
    return "pool"


def _sync_run(db: Any, scope: str) -> dict[str, str]:
    out: dict[str, str] = {}
    done: dict[str, Any] = {}
    for row, call, make in _table(scope):
        args, kwargs = make(done)
        try:
            done[row] = SYNC[call](db, *args, **kwargs)
            shown = f"ok {_shown(done[row], scope)}"
        except Exception as exc:
            shown = f"{type(exc).__name__}: {str(exc).replace(scope, 'S')}"
        out[row] = f"{shown} [{_status(db)}]"
    return out


async def _async_run(db: Any, scope: str) -> dict[str, str]:
    out: dict[str, str] = {}
    done: dict[str, Any] = {}
    for row, call, make in _table(scope):
        args, kwargs = make(done)
        try:
            done[row] = await getattr(pgmem.aio, call)(db, *args, **kwargs)
            shown = f"ok {_shown(done[row], scope)}"
        except Exception as exc:
            shown = f"{type(exc).__name__}: {str(exc).replace(scope, 'S')}"
        out[row] = f"{shown} [{_status(db)}]"
    return out


def test_every_sync_call_has_an_async_twin() -> None:
    """`pgmem.documents.search_vectors` had none: an async service searching documents with its
    own vectors had to block its loop on a sync connection."""
    public = [getattr(pgmem, n) for n in pgmem.__all__] + [getattr(pgmem.documents, n) for n in pgmem.documents.__all__]
    calls = {f.__name__ for f in public if getattr(getattr(f, "__wrapped__", None), "__name__", "").endswith("_call")}
    assert "search_vectors" in calls and "recall" in calls
    assert sorted(c for c in calls if not hasattr(pgmem.aio, c)) == []


def test_a_table_of_calls_gives_the_same_outcome_sync_and_async_on_connections_and_pools(app_url: str) -> None:
    """Every call of the API, with good and hostile arguments (NUL, lone surrogates, bytes, a wrong
    type, nesting, a bad window, a scope too long, a dimension the schema does not have), run in
    order on a sync connection, a ConnectionPool, an AsyncConnection and an AsyncConnectionPool:
    the same results and the same errors (class and one-line message), each call committing its
    own transactions (a connection left idle)."""
    found: dict[str, dict[str, str]] = {}
    with psycopg.connect(app_url) as conn:  # not autocommit: each call commits its own
        found["sync"] = _sync_run(conn, "par-sync")
    with ConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        found["pool"] = _sync_run(pool, "par-pool")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url) as aconn:
            found["async"] = await _async_run(aconn, "par-async")
        async with AsyncConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False) as ap:
            found["async pool"] = await _async_run(ap, "par-apool")

    asyncio.run(main())
    rows = [row for row, _, _ in _table("")]
    for row in rows:
        shown = {kind: out[row].replace("[IDLE]", "[pool]") for kind, out in found.items()}
        assert len(set(shown.values())) == 1, (row, shown)
    outcome = found["sync"]
    assert outcome["ingest NUL"].startswith("ok IngestReport(inserted=0") and "NUL character" in outcome["ingest NUL"]
    assert outcome["recall bytes"].startswith("InputError: message must be a string")
    assert outcome["recall window"].startswith("ArgumentError:")
    assert outcome["search_vectors"].startswith("ok DocSearch") and "freezer" in outcome["search_vectors"]
    assert outcome["forget_fact"].startswith("ok Forgotten(threads=0, turns=0, pieces=0, facts=1")


def test_a_turn_time_without_a_zone_is_utc_whatever_the_sessions_time_zone(app_url: str) -> None:
    """A Turn built in Python with a naive time was sent as it was and read by the server in the
    session's TimeZone: through a connection set to Asia/Tokyo, 12:00 was stored as 03:00 UTC, and
    through a UTC one (or read from a JSONL line, where no zone is UTC) as 12:00, the same turn
    hashed and stored differently by connection. It is UTC now, on every path."""
    naive = datetime(2026, 1, 1, 12, 0)

    def turn(index: int) -> Turn:
        return Turn("tz", "t", index, naive, ({"role": "user", "content": f"note {index}"},))

    with psycopg.connect(app_url, autocommit=True, options="-c TimeZone=Asia/Tokyo") as tokyo:
        pgmem.ingest_turns(tokyo, [turn(0)], EMB)
        pgmem.ingest_turns(tokyo, [turn(1)], EMB, bulk=True)

    async def main() -> pgmem.IngestReport:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as utc:
            await pgmem.aio.ingest_turns(utc, [turn(2)], EMB)
            return await pgmem.aio.ingest_turns(utc, [turn(0), turn(1)], EMB)

    assert asyncio.run(main()).unchanged == 2
    with (
        psycopg.connect(app_url, autocommit=True, options="-c TimeZone=America/New_York") as check,
        scoped(check, "tz"),
    ):
        rows = check.execute("SELECT turn_time FROM pgmem.turn ORDER BY turn_index").fetchall()
    assert [r[0] for r in rows] == [naive.replace(tzinfo=UTC)] * 3


class SlowTokenizer(HashEmbedder):
    """HashEmbedder whose first token count takes 0.6 s, as a local model's tokenizer takes on a
    turn or document of a few hundred KB (on this machine 1.1 s for a 300 KB turn)."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = True

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if self.slow:
            self.slow = False
            time.sleep(0.6)
        return super().count_tokens(texts)


def test_splitting_and_token_counting_run_off_the_event_loop(app_url: str) -> None:
    """pgmem.aio ran the model in a worker thread but split, packed and counted the tokens of a turn
    (and a document) in the event loop's thread: a turn of 300 KB held every other task of the loop
    for over a second. Both run in a worker thread now, as the model does."""

    async def main() -> list[float]:
        stalls: list[float] = []
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as conn:
            for write in (
                lambda emb: pgmem.aio.ingest_turns(conn, [make_turn("loop", "t", 0, "a note on the pallets")], emb),
                lambda emb: pgmem.aio.add_documents(conn, "loop", [Document("d", "# Pallets\n\nA note.")], emb),
            ):
                done = asyncio.create_task(write(SlowTokenizer()))
                worst, last = 0.0, time.perf_counter()
                while not done.done():
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    worst, last = max(worst, now - last), now
                await done
                stalls.append(worst)
        return stalls

    assert max(asyncio.run(main())) < 0.4
