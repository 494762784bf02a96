"""PgmemStore, LangGraph's BaseStore on pgmem, driven through LangGraph itself (a compiled
StateGraph whose nodes use `runtime.store` and `get_store()`) and through the BaseStore API.

Real Postgres (the app login, under row-level security), the real local model where retrieval
is asserted, LangGraph from PyPI (the [langgraph] extra)."""

from __future__ import annotations

import asyncio
import json
import logging
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgmem import calls
from pgmem.calls import Query
from pgmem.embedders.base import Embedder
from pgmem.errors import ArgumentError, ConflictError, DatabaseError, InputError, PgmemError, SchemaError
from pgmem.ingest import ingest_turns
from pgmem.integrations import langgraph
from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore, item_thread, namespace_scope
from tests.helpers import sent
from tests.security_helpers import HashEmbedder, make_turn

Conn = psycopg.Connection[tuple[object, ...]]

DOG = "My dog Luna hates baths and hides under the bed when she hears the shower."
TRAIN = "I take the 7:40 train to Utrecht every Tuesday for the planning meeting."
TEA = "I stopped drinking coffee; now it is green tea with no sugar in the morning."


@pytest.fixture
def store(conn: Conn, embedder: Embedder) -> PgmemStore:
    return PgmemStore(conn, embedder=embedder)


@pytest.fixture
def hstore(conn: Conn) -> PgmemStore:
    """A store with the fast hash embedder, for tests where retrieval quality is not asserted."""
    return PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0)


# -- through LangGraph -------------------------------------------------------------------------


class State(TypedDict, total=False):
    user: str
    remember: list[str]
    question: str
    found: list[str]
    scores: list[float]


def _graph(store: PgmemStore) -> Any:
    def remember(state: State, runtime: Runtime[None]) -> State:
        assert runtime.store is not None
        for i, text in enumerate(state.get("remember", [])):
            runtime.store.put(("users", state["user"], "memories"), f"m{i}", {"text": text})
        return {}

    def recall(state: State) -> State:
        items = get_store().search(("users", state["user"], "memories"), query=state["question"], limit=3)
        return {"found": [str(i.value["text"]) for i in items], "scores": [float(i.score or 0) for i in items]}

    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    g.add_edge("recall", END)
    return g.compile(store=store)


def test_a_graph_node_writes_and_searches_memories_through_the_store(store: PgmemStore, admin_conn: Conn) -> None:
    app = _graph(store)
    out = app.invoke({"user": "ada", "remember": [DOG, TRAIN, TEA], "question": "what does my dog dislike?"})
    assert out["found"][0] == DOG
    assert out["scores"][0] > 0.3
    assert len(out["found"]) == len(set(out["found"]))
    # Stored the pgmem way: one turn per item in the namespace's scope, pieces labelled.
    rows = admin_conn.execute(
        "SELECT thread_id, turn_index, label FROM pgmem.piece WHERE scope_id = 'users/ada/memories' ORDER BY thread_id"
    ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [("item:m0", 0), ("item:m1", 0), ("item:m2", 0)]
    assert all(str(r[2]).startswith("[Turn 0 · Memory · ") for r in rows)  # index "$": the value as JSON
    # Another user's graph run sees nothing of ada's.
    other = app.invoke({"user": "bob", "remember": [], "question": "what does my dog dislike?"})
    assert other["found"] == []


def test_an_async_graph_uses_the_async_store_api(store: PgmemStore) -> None:
    async def remember(state: State, runtime: Runtime[None]) -> State:
        assert runtime.store is not None
        for i, text in enumerate(state.get("remember", [])):
            await runtime.store.aput(("users", state["user"]), f"k{i}", {"text": text})
        return {}

    async def recall(state: State, runtime: Runtime[None]) -> State:
        assert runtime.store is not None
        items = await runtime.store.asearch(("users", state["user"]), query=state["question"], limit=2)
        return {"found": [str(i.value["text"]) for i in items]}

    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    app = g.compile(store=store)
    out = asyncio.run(app.ainvoke({"user": "cy", "remember": [DOG, TRAIN, TEA], "question": "Which train do I take?"}))
    assert out["found"][0] == TRAIN


# -- the BaseStore API -------------------------------------------------------------------------


def test_put_get_update_delete(hstore: PgmemStore) -> None:
    ns = ("users", "u1")
    assert hstore.get(ns, "a") is None
    hstore.put(ns, "a", {"text": "first", "n": 1})
    item = hstore.get(ns, "a")
    assert item is not None and item.value == {"text": "first", "n": 1} and item.namespace == ns and item.key == "a"
    hstore.put(ns, "a", {"text": "second"})
    again = hstore.get(ns, "a")
    assert again is not None and again.value == {"text": "second"}
    assert again.created_at == item.created_at and again.updated_at >= item.updated_at
    hstore.delete(ns, "a")
    assert hstore.get(ns, "a") is None
    hstore.delete(ns, "a")  # deleting a missing item is not an error
    assert hstore.batch([GetOp(ns, "a"), GetOp(("nobody",), "x")]) == [None, None]


#: Five words no piece label (which holds a time, "3:26 AM") holds.
WORDS = ("apples", "bicycles", "canoes", "dolphins", "elephants")


def test_a_batch_without_reads_opens_one_transaction(hstore: PgmemStore, conn: Conn, tmp_path: Path) -> None:
    """A put (or a batch of puts and deletes) is one transaction, its writes'; a batch that also
    reads opens a second one for its reads first. On the store's autocommit connection each is
    one pipeline ended by one Sync: BEGIN and the settings go with the first statement, COMMIT
    with the Sync. Counted on the wire (libpq's trace): the client's
    waits (each Flush, Sync or simple Query) are 4 for a put, 4 for a put and a delete, 1 for a
    delete, 6 for a get and a put, and 4 for a batch of five puts: the puts and the delete are
    not waited for (Query.wait), the items' times are read once, their stored hashes once, and
    their turns written by one put_turns (7, 8, 5 and 14 before pipelining; 4, 5, 2, 6 and 13
    before)."""
    ns = ("round", "trips")
    hstore.put(ns, "warm", {"text": "the connection's types are read once, before"})
    trace = tmp_path / "libpq.trace"
    waits: list[int] = []
    with trace.open("w") as f:
        conn.pgconn.trace(f.fileno())
        try:
            for op in (
                lambda: hstore.put(ns, "a", {"text": "one"}),
                lambda: hstore.batch([PutOp(ns, "b", {"text": "two"}), PutOp(ns, "a", None)]),
                lambda: hstore.delete(ns, "b"),
                lambda: hstore.batch([GetOp(ns, "c"), PutOp(ns, "c", {"text": "three"})]),
                lambda: hstore.batch([PutOp(ns, f"m{i}", {"text": f"memory of {w}"}) for i, w in enumerate(WORDS)]),
            ):
                before = sent(trace, "Sync", "Flush", "Query")
                syncs = sent(trace, "Sync")
                op()
                waits.append(sent(trace, "Sync", "Flush", "Query") - before)
                waits.append(sent(trace, "Sync") - syncs)
        finally:
            conn.pgconn.untrace()
    # (waits, transactions) of: a put, a batch of a put and a delete, a delete, a get and a put.
    assert list(zip(waits[::2], waits[1::2], strict=True))[:3] == [(4, 1), (4, 1), (1, 1)]
    assert waits[6:] == [6, 2, 4, 1] and sent(trace, "Query") == 0  # BEGIN and COMMIT were pipelined too
    assert hstore.get(ns, "a") is None and hstore.get(ns, "b") is None
    item = hstore.get(ns, "c")
    assert item is not None and item.value == {"text": "three"}
    # A word, not a number: a piece's label holds its time ("3:26 AM"), so in the 3 o'clock hour
    # "3" was in every piece and no longer singled m3 out.
    found = hstore.search(ns, query="memory of dolphins", limit=1)
    assert [i.key for i in found] == ["m3"] and found[0].created_at == hstore.get(ns, "m3").created_at  # type: ignore[union-attr]


def test_a_search_by_query_waits_once_a_namespace(conn: Conn, tmp_path: Path) -> None:
    """A search with a query through pieces waits for the namespaces under its prefix, then once
    a namespace (the recall and the items of its hits are one statement), then its COMMIT:
    3 waits for one namespace, 4 for two, counted on the wire. Before, the items were a second
    statement a namespace: 4 waits for one namespace, 6 for two."""
    found_all = PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0)
    none_above = PgmemStore(conn, embedder=HashEmbedder(), floor=0.99)
    found_all.put(("waits", "a"), "z", {"text": "the zeppelin charter is booked for spring"})
    found_all.put(("waits", "b"), "i", {"text": "the invoice is overdue"})
    found_all.search(("waits",), query="warm the connection")
    trace = tmp_path / "libpq.trace"
    waits = []
    with trace.open("w") as f:
        conn.pgconn.trace(f.fileno())
        try:
            for store, prefix in ((found_all, ("waits", "a")), (none_above, ("waits", "a")), (found_all, ("waits",))):
                before = sent(trace, "Sync", "Flush", "Query")
                hits = store.search(prefix, query="zeppelin charter")
                waits.append((len(hits), sent(trace, "Sync", "Flush", "Query") - before))
        finally:
            conn.pgconn.untrace()
    assert waits == [(1, 3), (0, 3), (2, 4)]


def test_a_statement_the_server_refuses_mid_batch_rolls_back_the_batch(
    hstore: PgmemStore, conn: Conn, admin_conn: Conn, app_url: str
) -> None:
    """The server refuses a batch's second put (a trigger raises): the batch is one error, the
    first put is rolled back with it, and the connection is idle again for the next batch, sync
    and async (the pipelined transaction's refused statement is rolled back after its Sync)."""
    admin_conn.execute(
        "CREATE FUNCTION pgmem.test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$BEGIN IF NEW.item_key = 'boom' THEN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '23514';"
        " END IF; RETURN NEW; END$$"
    )
    admin_conn.execute(
        "CREATE TRIGGER test_refuse BEFORE INSERT ON pgmem.store_item FOR EACH ROW EXECUTE FUNCTION pgmem.test_refuse()"
    )
    ns = ("refused",)
    with pytest.raises(PgmemError, match="refused by the test"):
        hstore.batch([PutOp(ns, "first", {"text": "one"}), PutOp(ns, "boom", {"text": "two"})])
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert hstore.get(ns, "first") is None
    hstore.put(ns, "after", {"text": "three"})
    assert hstore.get(ns, "after") is not None

    async def main() -> tuple[object, object, object]:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            astore = AsyncPgmemStore(aconn, embedder=HashEmbedder(), floor=-1.0)
            with pytest.raises(PgmemError, match="refused by the test"):
                await astore.abatch([PutOp(ns, "afirst", {"text": "one"}), PutOp(ns, "boom", {"text": "two"})])
            status = aconn.info.transaction_status
            await astore.aput(ns, "aafter", {"text": "four"})
            return status, await astore.aget(ns, "afirst"), await astore.aget(ns, "aafter")

    status, gone, kept = asyncio.run(main())
    assert status == psycopg.pq.TransactionStatus.IDLE and gone is None and kept is not None


def test_a_connection_not_in_autocommit_mode_commits_each_batch(app_url: str, hstore: PgmemStore) -> None:
    """Not pipelined there (psycopg's own transaction, as before): each batch still commits,
    and the connection is idle between batches."""
    with psycopg.connect(app_url) as c:
        store = PgmemStore(c, embedder=HashEmbedder(), floor=-1.0)
        store.put(("plain",), "k", {"text": "stored without autocommit"})
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert store.get(("plain",), "k") is not None
    item = hstore.get(("plain",), "k")  # another connection sees it: it was committed
    assert item is not None and item.value == {"text": "stored without autocommit"}


def test_a_delete_removes_the_item_turn_and_pieces(hstore: PgmemStore, admin_conn: Conn) -> None:
    hstore.put(("n",), "k", {"text": "something to forget"})
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'n'").fetchone() == (1,)
    hstore.batch([PutOp(("n",), "k", None)])  # a PutOp with value None is a delete
    for table in ("piece", "turn", "thread", "store_item"):
        assert admin_conn.execute(f"SELECT count(*) FROM pgmem.{table} WHERE scope_id = 'n'").fetchone() == (0,)
    assert hstore.list_namespaces() == []


def test_search_returns_each_item_once_with_its_best_piece_cosine(store: PgmemStore, admin_conn: Conn) -> None:
    ns = ("u", "long")
    # A value long enough to be packed into several pieces: still one result.
    long_text = " ".join(f"Sentence {i} is about gardening and tomatoes in the greenhouse." for i in range(60))
    store.put(ns, "garden", {"text": long_text})
    store.put(ns, "dog", {"text": DOG})
    n = admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'u/long' AND thread_id = 'item:garden'")
    assert int(str((n.fetchone() or (0,))[0])) > 1
    found = store.search(ns, query="tomatoes in my greenhouse", limit=10)
    keys = [i.key for i in found]
    assert keys[0] == "garden" and len(keys) == len(set(keys))
    assert found[0].score is not None and 0.3 < found[0].score <= 1.0


def test_a_multi_part_query_gets_each_subject_in_the_first_places(store: PgmemStore) -> None:
    ns = ("u", "multi")
    for key, text in [("dog", DOG), ("train", TRAIN), ("tea", TEA)]:
        store.put(ns, key, {"text": text})
    for i in range(8):  # many near-duplicates of one subject would crowd out the other in one list
        store.put(ns, f"dog{i}", {"text": f"Luna the dog {i} hates baths and the shower, she hides under the bed."})
    query = "Does my dog like baths?\nAnd which train do I take to Utrecht on Tuesdays?"
    found = store.search(ns, query=query, limit=2)
    assert {i.key for i in found} & {"train"}, [i.key for i in found]
    assert any(i.key.startswith("dog") for i in found)


def test_items_without_index_are_plain_key_value_rows(store: PgmemStore, admin_conn: Conn) -> None:
    ns = ("kv",)
    store.put(ns, "prefs", {"theme": "dark", "text": DOG}, index=False)
    store.put(ns, "dog", {"text": DOG})
    assert store.get(ns, "prefs") is not None
    assert {i.key for i in store.search(ns)} == {"prefs", "dog"}
    assert [i.key for i in store.search(ns, query="my dog hates baths")] == ["dog"]
    assert [i.key for i in store.search(ns, filter={"theme": "dark"})] == ["prefs"]
    # An indexed item put again without index loses its searchable copy.
    store.put(ns, "dog", {"text": DOG}, index=False)
    assert store.search(ns, query="my dog hates baths") == []
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'kv'").fetchone() == (0,)


def test_index_paths_choose_the_text_and_chat_messages_are_a_turn(store: PgmemStore, admin_conn: Conn) -> None:
    ns = ("paths",)
    store.put(ns, "a", {"title": "Luna", "body": DOG, "secret": "zebra crossing"}, index=["body"])
    store.put(ns, "t", {"messages": [{"role": "user", "content": TRAIN}, {"role": "assistant", "content": "Noted."}]},
              index=["messages"])  # fmt: skip
    labels = [str(r[0]) for r in admin_conn.execute(
        "SELECT label FROM pgmem.piece WHERE scope_id = 'paths' ORDER BY thread_id, piece_id")]  # fmt: skip
    assert labels[0].startswith("[Turn 0 · Memory body · ")
    assert labels[1].startswith("[Turn 0 · User · ") and labels[2].startswith("[Turn 0 · Assistant step 1 · ")
    assert "zebra" not in " ".join(str(r[0]) for r in admin_conn.execute("SELECT body FROM pgmem.piece"))
    assert store.search(ns, query="which train to Utrecht?", limit=1)[0].key == "t"
    # A store-wide default of index fields.
    fielded = PgmemStore(store._conn, embedder=store.embedder, index={"fields": ["title"]})
    fielded.put(("f",), "x", {"title": "the bath-hating dog", "body": "unrelated words"})
    assert "unrelated" not in str(admin_conn.execute("SELECT string_agg(body, ' ') FROM pgmem.piece "
                                                     "WHERE scope_id = 'f'").fetchone())  # fmt: skip


def test_filters_on_the_value(hstore: PgmemStore) -> None:
    ns = ("f",)
    hstore.put(ns, "a", {"kind": "note", "meta": {"lang": "en", "tags": ["x"]}, "n": 1})
    hstore.put(ns, "b", {"kind": "task", "meta": {"lang": "nl"}, "n": 2})
    assert [i.key for i in hstore.search(ns, filter={"kind": "note"})] == ["a"]
    assert [i.key for i in hstore.search(ns, filter={"kind": {"$eq": "task"}})] == ["b"]
    assert [i.key for i in hstore.search(ns, filter={"meta": {"lang": "nl"}})] == ["b"]
    assert [i.key for i in hstore.search(ns, filter={"n": 1}, query="anything")] == ["a"]
    assert hstore.search(ns, filter={"kind": "none"}) == []
    assert [i.key for i in hstore.search(ns, filter={"n": {"$gt": 1}})] == ["b"]
    assert [i.key for i in hstore.search(ns, filter={"kind": {"$ne": "note"}})] == ["b"]
    with pytest.raises(InputError, match="not one of"):
        hstore.search(ns, filter={"n": {"$in": [1]}})


def test_search_without_query_pages_newest_first(hstore: PgmemStore) -> None:
    for i in range(5):
        hstore.put(("p",), f"k{i}", {"i": i}, index=False)
    keys = [i.key for i in hstore.search(("p",), limit=10)]
    assert keys == ["k4", "k3", "k2", "k1", "k0"]
    assert [i.key for i in hstore.search(("p",), limit=2, offset=1)] == ["k3", "k2"]


def test_list_namespaces_and_prefix_search(store: PgmemStore) -> None:
    store.put(("users", "a", "memories"), "1", {"text": DOG})
    store.put(("users", "b", "memories"), "1", {"text": TRAIN})
    store.put(("users", "b", "prefs"), "1", {"text": TEA}, index=False)
    store.put(("docs", "v1"), "1", {"text": "x"}, index=False)
    assert store.list_namespaces() == [("docs", "v1"), ("users", "a", "memories"), ("users", "b", "memories"),
                                       ("users", "b", "prefs")]  # fmt: skip
    assert store.list_namespaces(prefix=("users", "b")) == [("users", "b", "memories"), ("users", "b", "prefs")]
    assert store.list_namespaces(suffix=("memories",)) == [("users", "a", "memories"), ("users", "b", "memories")]
    assert store.list_namespaces(prefix=("users", "*", "prefs")) == [("users", "b", "prefs")]
    assert store.list_namespaces(max_depth=2) == [("docs", "v1"), ("users", "a"), ("users", "b")]
    assert store.list_namespaces(limit=1, offset=1) == [("users", "a", "memories")]
    # A prefix search reaches every namespace under it, each in its own scope.
    found = store.search(("users",), query="which train do I take on Tuesday?", limit=5)
    assert found[0].namespace == ("users", "b", "memories")
    assert {i.namespace for i in found} <= {("users", "a", "memories"), ("users", "b", "memories")}
    assert {i.namespace for i in store.search(("users",))} == {
        ("users", "a", "memories"), ("users", "b", "memories"), ("users", "b", "prefs")}  # fmt: skip
    store.delete(("docs", "v1"), "1")
    assert ("docs", "v1") not in store.list_namespaces()


def test_namespaces_map_to_escaped_scopes(hstore: PgmemStore, conn: Conn) -> None:
    cases = [("a", "b"), ("a/b",), ("a\\", "b"), ("a\\/b",), ("ü", "👋")]
    scopes = [namespace_scope(ns) for ns in cases]
    assert len(set(scopes)) == len(cases)
    assert scopes[:2] == ["a/b", "a\\/b"]
    for ns, scope in zip(cases, scopes, strict=True):
        assert conn.execute("SELECT pgmem.store_scope(%s)", (list(ns),)).fetchone() == (scope,)
        hstore.put(ns, "k", {"ns": list(ns)}, index=False)
    for ns in cases:
        item = hstore.get(ns, "k")
        assert item is not None and item.value == {"ns": list(ns)} and item.namespace == ns
    with pytest.raises(InputError, match="at most 200"):
        hstore.put(("x" * 150, "y" * 60), "k", {})
    assert item_thread("k") == "item:k" and item_thread("k" * 300).startswith("item-sha256:")
    hstore.put(("long",), "k" * 300, {"text": "a long key"})
    assert hstore.get(("long",), "k" * 300) is not None


def test_async_api(hstore: PgmemStore) -> None:
    async def run() -> None:
        await hstore.aput(("as",), "k", {"text": "async"})
        item = await hstore.aget(("as",), "k")
        assert item is not None and item.value == {"text": "async"}
        assert [i.key for i in await hstore.asearch(("as",), query="async")] == ["k"]
        assert await hstore.alist_namespaces() == [("as",)]
        await hstore.adelete(("as",), "k")
        assert await hstore.aget(("as",), "k") is None

    asyncio.run(run())


def test_from_conn_string_setup_and_a_pool(db_url: str, app_url: str, admin_conn: Conn) -> None:
    emb = HashEmbedder()
    PgmemStore(admin_conn, embedder=emb).setup()  # the URL rebuilt from the connection's own parameters
    with PgmemStore.from_conn_string(db_url, embedder=emb) as admin_store:
        admin_store.setup()  # already migrated: a no-op
    with PgmemStore.from_conn_string(app_url, embedder=emb) as app_store:
        app_store.setup()  # at head: a no-op, even for the application login (no CREATE on the database)
        app_store.put(("s",), "k", {"text": "hello"})
        assert app_store.get(("s",), "k") is not None
    with PgmemStore.from_conn_string(app_url, embedder=emb, pool_config={"max_size": 3}, floor=-1.0) as pooled:
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(5):
                    pooled.put(("pool", str(n)), f"k{i}", {"text": f"worker {n} item {i}"})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(pooled.search(("pool",), limit=100)) == 15


# -- hostile input: a clear error, nothing stored lost ---------------------------------------


def _deep(n: int) -> dict[str, Any]:
    v: dict[str, Any] = {}
    for _ in range(n):
        v = {"d": v}
    return v


BAD_PUTS: list[tuple[str, tuple[Any, ...], str]] = [
    ("NUL in a value", (("h",), "k", {"text": "a\x00b"}), "NUL"),
    ("lone surrogate in a value", (("h",), "k", {"text": "a\udcffb"}), "invalid UTF-8"),
    ("lone surrogate in a key", (("h",), "k\ud800", {"text": "x"}), "key"),
    ("NUL in a namespace", (("h\x00",), "k", {"text": "x"}), "namespace"),
    ("value not a dict", (("h",), "k", ["a"]), "JSON object"),
    ("non-string key in the value", (("h",), "k", {1: "a"}), "key of type int"),
    ("NaN", (("h",), "k", {"x": float("nan")}), "NaN"),
    ("a set", (("h",), "k", {"x": {1, 2}}), "JSON types only"),
    ("nested 200 deep", (("h",), "k", _deep(200)), "nests deeper"),
    ("huge", (("h",), "k", {"text": "x" * 5_000_000}), "at most"),
    ("huge integer", (("h",), "k", {"n": 10**5000}), "an integer of more than 4,300 digits"),
    ("key too long", (("h",), "k" * 1001, {"text": "x"}), "at most 1000"),
    ("namespace not a tuple", ("h", "k", {"text": "x"}), "tuple"),
]


@pytest.mark.parametrize("args,expect", [(a, e) for _, a, e in BAD_PUTS], ids=[n for n, _, _ in BAD_PUTS])
def test_hostile_puts_are_refused_and_nothing_is_lost(hstore: PgmemStore, args: tuple[Any, ...], expect: str) -> None:
    hstore.put(("h",), "kept", {"text": "stored before"})
    ns, key, value = args
    with pytest.raises(PgmemError, match=expect):
        hstore.batch([PutOp(ns, key, value), PutOp(("h",), "also", {"text": "in the same batch"})])
    assert hstore.get(("h",), "also") is None  # the batch stored nothing
    kept = hstore.get(("h",), "kept")
    assert kept is not None and kept.value == {"text": "stored before"}


def test_a_turn_the_pipeline_refuses_rolls_back_the_whole_batch(hstore: PgmemStore) -> None:
    # A role so long that its label leaves no room in a piece. (A content of 5 was refused here
    # before: messages pgmem does not read are now indexed as text, as PostgresStore stores them.)
    bad_messages = {"messages": [{"role": "user", "content": "ok"}, {"role": "r" * 2000, "content": "x"}]}
    with pytest.raises(InputError, match="leaves no room"):
        hstore.batch([PutOp(("r",), "good", {"text": "fine"}), PutOp(("r",), "bad", bad_messages, index=["messages"])])
    assert hstore.get(("r",), "good") is None and hstore.list_namespaces() == []


@pytest.mark.parametrize(
    "op,expect",
    [
        (SearchOp(("h",), query="a\x00b"), "query"),
        (SearchOp(("h",), query="x", filter=["a"]), "filter"),  # type: ignore[arg-type]
        (SearchOp(("h",), query="x", filter={"a": "\udcff"}), "invalid UTF-8"),
        (SearchOp(("h",), limit=-1), "limit"),
        (SearchOp(("h",), limit=5000), "at most"),
        (SearchOp(("h\ud800",)), "namespace_prefix"),
        (GetOp(("h",), 5), "key must be a string"),  # type: ignore[arg-type]
        (ListNamespacesOp(max_depth=0), "max_depth"),
        (
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)), MatchCondition("prefix", ("b",)))),
            "at most one prefix",
        ),
        (PutOp(("h",), "k", {"a": 1}, index="text"), "index"),  # type: ignore[arg-type]
        (PutOp(("h",), "k", {"a": 1}, ttl=-5.0), "ttl must be above 0"),
        (SearchOp(("h",), filter={"a": {"$where": 1}}), "not one of"),
        ("not an op", "not a store operation"),
    ],
)
def test_hostile_reads_and_ops_get_one_line_errors(hstore: PgmemStore, op: Any, expect: str) -> None:
    hstore.put(("h",), "kept", {"text": "stored before"})
    with pytest.raises(PgmemError, match=expect) as err:
        hstore.batch([op])
    assert "\n" not in str(err.value)
    assert hstore.get(("h",), "kept") is not None


def test_the_app_login_stays_in_its_scope(hstore: PgmemStore, conn: Conn) -> None:
    hstore.put(("t", "a"), "k", {"text": "a's secret"})
    # Without a scope the app sees no item rows and no namespace names (test_langgraph_directory.py).
    assert conn.execute("SELECT count(*) FROM pgmem.store_item").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgmem.store_namespace").fetchone() == (0,)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("INSERT INTO pgmem.store_namespace (directory, namespace, scope_name) VALUES ('d', '{x}', 'x')")
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 't/b', true)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pgmem.delete_item('t/a', 'k')")
    assert hstore.get(("t", "a"), "k") is not None


# -- an optional extra: the core never imports it ----------------------------------------------

_CORE_PROBE = """
import importlib, json, pkgutil, sys
todo = ["pgmem"]
while todo:
    package = importlib.import_module(todo.pop())
    for m in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if m.name in ("pgmem.lab", "pgmem.__main__", "pgmem.integrations", "pgmem.migrations", "pgmem.sql"):
            continue
        if m.ispkg:
            todo.append(m.name)
        else:
            importlib.import_module(m.name)
from pgmem.cli import build_parser
build_parser().parse_args(["recall", "--scope", "s", "hello"])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("langgraph", "psycopg_pool")
                        or m.startswith("pgmem.integrations"))))
"""


def test_the_core_never_imports_the_langgraph_integration() -> None:
    out = subprocess.run([sys.executable, "-c", _CORE_PROBE], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_without_the_extra_the_import_names_it() -> None:
    probe = (
        "import sys; sys.modules['langgraph'] = None\n"
        "try:\n    import pgmem.integrations.langgraph\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ConfigError ") and "pip install 'pgmem[langgraph]'" in out and out.count("\n") == 1


# -- `pgmem eval langgraph`: the side-by-side measurement on a tiny fixture ---------------------


def test_eval_langgraph_runs_both_stores_through_the_cli(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main
    from pgmem.embedders.local import LocalEmbedder
    from pgmem.lab.evaluation.common import CachedEmbedder
    from pgmem.lab.evaluation.longmemeval import load_dir
    from tests.test_eval_suites import write_lme

    home = tmp_path / "home"
    monkeypatch.setenv("PGMEM_HOME", str(home))
    monkeypatch.setenv("DATABASE_URL", db_url)
    for var in ("PGMEM_EMBEDDER", "PGMEM_PIECE_DIMS", "PGMEM_FACT_DIMS"):
        monkeypatch.delenv(var, raising=False)
    data = write_lme(tmp_path / "lme")
    # Another suite has embedded every message's text (as `pgmem eval longmemeval` does).
    texts = [str(m.get("content") or "") for q in load_dir(data) for t in q.turns for m in t.messages]
    warm = CachedEmbedder(LocalEmbedder(), home / "cache")
    warm.embed(texts)
    assert main(["eval", "langgraph", str(data), "--json", "-o", "k=5", "-o", "latency_questions=2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["questions"] == 3 and result["k"] == 5  # the _abs question is left out
    assert result["latency_questions"] == 2 and result["postgres_fields"] == "content"
    assert set(result["results"]) == {"PostgresStore", "PgmemStore"}
    pg, lg = result["results"]["PgmemStore"], result["results"]["PostgresStore"]
    assert pg["items"] == 7 and lg["items"] == 13  # a turn per item vs a message per item
    assert pg["top1"] == 1.0 and pg["top1_ci_low"] <= pg["top1"] <= pg["top1_ci_high"]
    # The PostgresStore's embed function is the shared cache's: no message text is embedded again.
    assert lg["texts_embedded"] == 0 and lg["texts_cached"] == 13
    assert pg["texts_embedded"] > 0  # pieces carry the put time in their labels: new texts
    for r in (pg, lg):
        assert 0.0 <= r["mrr"] <= 1.0 and 0 < r["put_p50_ms"] <= r["put_p95_ms"]
        assert 0 < r["search_p50_ms"] <= r["search_p95_ms"] and r["searches_timed"] == 2
    assert pg["puts_timed"] < lg["puts_timed"]  # the subset's turns vs its messages
    diff = result["pgmem_minus_postgres"]
    for metric in ("top1", "mrr"):
        assert diff[metric]["won"] + diff[metric]["lost"] + diff[metric]["tied"] == 3
        assert diff[metric]["diff_low"] <= diff[metric]["diff"] <= diff[metric]["diff_high"]
    assert main(["eval", "langgraph", str(data), "-o", "latency_questions=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "option latency_questions must be an integer" in err[-1] and err[-1].startswith("pgmem: error:")


def test_turn_ranking_and_scores() -> None:
    from pgmem.lab.evaluation.langgraph_stores import percentile, score, turn_ranking

    assert turn_ranking([4, 4, 2, 4, 7]) == [4, 2, 7]
    assert score([4, 2, 7], frozenset({2})) == (0.0, 0.5)
    assert score([2], frozenset({2})) == (1.0, 1.0) and score([], frozenset({2})) == (0.0, 0.0)
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0 and percentile([], 95) == 0.0


def test_setup_as_the_app_login_below_head_is_one_line(app_url: str, admin_conn: Conn) -> None:
    """Not at head, a login that may not migrate gets one line naming the role, not a traceback."""
    from urllib.parse import urlsplit, urlunsplit

    from psycopg import sql

    name = f"{admin_conn.info.dbname}_empty"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(app_url)
        empty_url = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
        with (
            PgmemStore.from_conn_string(empty_url, embedder=HashEmbedder()) as store,
            pytest.raises(SchemaError) as err,
        ):
            store.setup()
        assert "\n" not in str(err.value) and "pgmem_owner" in str(err.value) and "not installed" in str(err.value)
        cli = subprocess.run(
            [sys.executable, "-m", "pgmem", "migrate"],
            env={**__import__("os").environ, "DATABASE_URL": empty_url},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert cli.returncode != 0 and "Traceback" not in cli.stderr and "pgmem_owner" in cli.stderr
        assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_refused_batch_is_one_error_and_nothing_on_stderr(
    hstore: PgmemStore, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A statement the server refuses inside a batch (a $since after $until, checked in SQL) is
    one PgmemError; the batch's pipeline ends quietly (psycopg used to log "error ignored
    terminating <psycopg.Pipeline ...>: pipeline aborted" to stderr beside it). Bounds of
    list_namespaces beyond a Postgres integer are an InputError naming them, not a 42883."""
    hstore.put(("quiet", "u1"), "k", {"text": "the ferry leaves at nine"})
    with pytest.raises(PgmemError, match="since"):
        hstore.search(("quiet",), query="ferry", filter={"$since": "2021-01-01", "$until": "2020-01-01"})
    for kw in ({"limit": 2**31}, {"offset": 2**31}, {"max_depth": 2**31}, {"limit": -1}):
        with pytest.raises(InputError, match="2,147,483,647"):
            hstore.list_namespaces(**kw)  # type: ignore[arg-type]
    assert hstore.list_namespaces(prefix=("quiet",), limit=2**31 - 1) == [("quiet", "u1")]
    assert hstore.search(("quiet",), query="ferry")[0].key == "k"  # the store still works
    err = capfd.readouterr().err
    assert "pipeline" not in err and "Traceback" not in err, err[-2000:]
    # Without a logging handler (a plain script) a warning goes to stderr: none is logged.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_refusal_read_with_the_commit_ends_the_pipeline_quietly(
    conn: Conn, admin_conn: Conn, app_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put the server refuses (22023), or that loses a race each time (40001, run again) is one
    PgmemError of one line, the same class as ever, and its pipeline ends quietly: psycopg used
    to log "error ignored terminating <psycopg.AsyncPipeline ...>: pipeline aborted" whenever the
    refusal reached the client in time to be read with the COMMIT (COMMIT was sent outside the
    pipeline's error path). That depends on timing, so here the client waits, after sending the
    refused put, until the refusal has arrived (a slow client): it is then read with the
    batch's next statement or with its COMMIT, every time. Sync and async, on a connection and a
    pool: each stays usable and keeps what it stored."""
    admin_conn.execute(
        "CREATE FUNCTION pgmem.test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN"
        " IF NEW.item_key = 'boom' THEN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '22023'; END IF;"
        " IF NEW.item_key = 'race' THEN RAISE EXCEPTION 'a race lost by the test' USING ERRCODE = '40001'; END IF;"
        " RETURN NEW; END$$"
    )
    admin_conn.execute(
        "CREATE TRIGGER test_refuse BEFORE INSERT ON pgmem.store_item FOR EACH ROW EXECUTE FUNCTION pgmem.test_refuse()"
    )
    monkeypatch.setattr(langgraph, "RETRY_ATTEMPTS", 2)  # a lost race is run again once
    socket: list[int] = []  # the store's connection's
    waited: list[bool] = []
    sent_refused: list[bool] = []
    advance = calls.advance  # what the store's drivers call for each step

    def slow_advance(call: Any, reply: object, error: Any) -> Any:
        if sent_refused:
            sent_refused.clear()
            waited.append(bool(select.select(socket, [], [], 10)[0]))
        step = advance(call, reply, error)
        if isinstance(step, Query) and "put_item" in str(step.sql) and step.params[2] in ("boom", "race"):
            sent_refused.append(True)
        return step

    monkeypatch.setattr(langgraph, "advance", slow_advance)
    caplog.set_level(logging.WARNING, logger="psycopg")
    ns = ("quiet",)
    refused = [
        ([PutOp(ns, "boom", {"text": "refused"}, index=False)], ArgumentError),  # read with COMMIT
        ([PutOp(ns, "race", {"text": "lost"}, index=False)], ConflictError),
        ([PutOp(ns, "boom", {"text": "refused"}), PutOp(ns, "also", {"text": "same batch"})], ArgumentError),
    ]

    def check(err: pytest.ExceptionInfo[DatabaseError], cls: type[DatabaseError]) -> None:
        assert type(err.value) is cls and "\n" not in str(err.value)
        assert err.value.sqlstate == ("22023" if cls is ArgumentError else "40001")

    def sync_store(store: PgmemStore) -> None:
        store.put(ns, "kept", {"text": "stored before"})
        for ops, cls in refused:
            with pytest.raises(cls, match="by the test") as err:
                store.batch(ops)
            check(err, cls)
        store.put(ns, "after", {"text": "stored after"})
        kept, also, after = store.get(ns, "kept"), store.get(ns, "also"), store.get(ns, "after")
        assert kept is not None and kept.value == {"text": "stored before"} and also is None and after is not None
        store.delete(ns, "kept")
        store.delete(ns, "after")

    socket[:] = [conn.fileno()]
    sync_store(PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0))
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with ConnectionPool(app_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        with pool.connection() as c:
            socket[:] = [c.fileno()]
        sync_store(PgmemStore(pool, embedder=HashEmbedder(), floor=-1.0))
        with pool.connection() as c:
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    async def async_store(store: AsyncPgmemStore) -> None:
        await store.aput(ns, "kept", {"text": "stored before"})
        for ops, cls in refused:
            with pytest.raises(cls, match="by the test") as err:
                await store.abatch(ops)
            check(err, cls)
        await store.aput(ns, "after", {"text": "stored after"})
        kept, also, after = await store.aget(ns, "kept"), await store.aget(ns, "also"), await store.aget(ns, "after")
        assert kept is not None and kept.value == {"text": "stored before"} and also is None and after is not None
        await store.adelete(ns, "kept")
        await store.adelete(ns, "after")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            socket[:] = [aconn.fileno()]
            await async_store(AsyncPgmemStore(aconn, embedder=HashEmbedder(), floor=-1.0))
            assert aconn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        async with AsyncConnectionPool(
            app_url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
        ) as apool:
            async with apool.connection() as ac:
                socket[:] = [ac.fileno()]
            await async_store(AsyncPgmemStore(apool, embedder=HashEmbedder(), floor=-1.0))
            async with apool.connection() as ac:
                assert ac.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    asyncio.run(main())
    # Each refused put's answer was waited for (a lost race twice: it is run again once).
    assert waited == [True] * 16
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []


def test_listing_pages_of_items_put_in_one_batch_never_repeat(hstore: PgmemStore) -> None:
    """Items put in one batch share their updated_at. Pages of a listing used to repeat the first
    of them (the merge re-sorted tied keys descending, against each namespace's ascending order):
    limit 1 at offsets 0, 1, 2 gave a, a, a. Now the pages are a, b, c, in the full listing's order,
    across namespaces too."""
    hstore.batch([PutOp(("pages", "n1"), k, {"v": k}) for k in "abc"] + [PutOp(("pages", "n2"), "d", {"v": "d"})])
    whole = [(i.namespace, i.key) for i in hstore.search(("pages",), limit=10)]
    assert sorted(whole) == [
        (("pages", "n1"), "a"),
        (("pages", "n1"), "b"),
        (("pages", "n1"), "c"),
        (("pages", "n2"), "d"),
    ]
    pages = [[(i.namespace, i.key) for i in hstore.search(("pages",), limit=1, offset=o)] for o in range(4)]
    assert [p[0] for p in pages] == whole
    assert [(i.namespace, i.key) for i in hstore.search(("pages",), limit=2, offset=1)] == whole[1:3]


def test_a_star_in_a_search_prefix_is_a_label_not_a_wildcard(hstore: PgmemStore) -> None:
    """list_namespaces reads "*" as any label (LangGraph's match conditions); a search's prefix is
    literal, as in PostgresStore: an app that builds ("users", uid) from a user's id of "*" must
    not search every user's items."""
    hstore.put(("users", "alice"), "k", {"text": "alice's"})
    hstore.put(("users", "bob"), "k", {"text": "bob's"})
    assert hstore.search(("users", "*")) == []
    assert hstore.search(("*",)) == []
    hstore.put(("users", "*"), "k", {"text": "a user called star"})
    assert [i.namespace for i in hstore.search(("users", "*"))] == [("users", "*")]
    assert len(hstore.list_namespaces(prefix=("users", "*"))) == 3  # the wildcard where LangGraph has one


def test_ttl_config_omit_expired_and_an_empty_match_condition(conn: Conn) -> None:
    """LangGraph's TTLConfig key omit_expired is accepted when True (what pgmem always does) and
    refused in one line when False; an empty match-condition path matches every namespace, as
    PostgresStore skips it."""
    from langgraph.store.base import ListNamespacesOp, MatchCondition

    from pgmem.errors import ConfigError

    store = PgmemStore(conn, embedder=HashEmbedder(), ttl={"default_ttl": 60, "omit_expired": True})
    store.put(("ttl", "a"), "k", {"text": "x"})
    with pytest.raises(ConfigError, match="omit_expired"):
        PgmemStore(conn, embedder=HashEmbedder(), ttl={"omit_expired": False})
    (listed,) = store.batch([ListNamespacesOp(match_conditions=(MatchCondition("prefix", ()),))])
    assert isinstance(listed, list) and ("ttl", "a") in listed


def test_a_match_condition_that_is_no_path_is_one_line_before_anything_runs(conn: Conn) -> None:
    """A list_namespaces op whose match condition's path is None or a number, or whose
    match_conditions is no tuple, is one InputError naming the op, checked before any op of the
    batch runs (it was a TypeError from deep in the read: 'NoneType' object is not iterable);
    the batch's put is not stored. A string path is its characters, as in PostgresStore."""
    from langgraph.store.base import ListNamespacesOp, MatchCondition

    store = PgmemStore(conn, embedder=HashEmbedder())
    store.put(("a", "b"), "k", {"text": "x"})
    for op in (
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", None),)),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", 5),)),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=5),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a", "b\x00")),)),
    ):
        with pytest.raises(InputError, match="op 1: match") as err:
            store.batch([PutOp(("a", "c"), "k", {"text": "y"}), op])
        assert "\n" not in str(err.value)
    assert store.get(("a", "c"), "k") is None
    assert store.list_namespaces(prefix="ab") == [("a", "b")]  # type: ignore[arg-type]


def test_a_put_into_a_namespace_moved_to_another_model_is_a_model_refusal(conn: Conn) -> None:
    """A namespace's scope moved to another model (`pgmem.reembed`) refuses a store still on the
    old one as every other write does: ModelRefusedError (a ModelMismatchError, 22000), so a
    service that switches its embedder on a model refusal switches here too. It was an
    InputError carrying the refusal's text (found by tests/test_mixed_writers.py)."""
    from pgmem.errors import ModelMismatchError, ModelRefusedError
    from pgmem.lab.bench.reembed import Rotated
    from pgmem.reembed import reembed

    old = HashEmbedder()
    new = Rotated(old)
    PgmemStore(conn, embedder=old).put(("moved",), "k1", {"text": "the pallets are in the harbour"})
    assert reembed(conn, "moved", new).flipped
    with pytest.raises(ModelRefusedError, match=r"refusing model test:hash \(") as refused:
        PgmemStore(conn, embedder=old).put(("moved",), "k2", {"text": "the freezer is in the depot"})
    assert isinstance(refused.value, ModelMismatchError) and refused.value.sqlstate == "22000"
    assert "22000: " not in str(refused.value)
    # The new model's store writes, and the refused put stored nothing.
    PgmemStore(conn, embedder=new).put(("moved",), "k3", {"text": "the ledger is at the courier"})
    keys = [it.key for it in PgmemStore(conn, embedder=new).search(("moved",), limit=10)]
    assert sorted(keys) == ["k1", "k3"]


def _axis_embed(texts: list[str]) -> list[list[float]]:
    """A caller's embed: "ferry" texts on one axis, "zzz" (a text it has no words for) the zero
    vector, anything else another axis."""
    return [
        [1.0, 0.0, 0.0, 0.0] if "ferry" in t else [0.0, 0.0, 0.0, 0.0] if "zzz" in t else [0.0, 1.0, 0.0, 0.0]
        for t in texts
    ]


def test_an_item_with_a_zero_field_vector_does_not_top_every_cosine_search(conn: Conn) -> None:
    """The caller's embed may return a zero vector (a text it has no words for). Its cosine
    distance is NaN in pgvector, and NaN sorts above every number: such an item came first in
    every cosine search, with score NaN, above the exact match, and an item with one such field
    scored NaN whatever its other fields. A zero vector's cosine similarity is 0 now."""
    store = PgmemStore(conn, index={"dims": 4, "embed": _axis_embed, "fields": ["text", "note"]})
    ns = ("zero-vectors",)
    store.put(ns, "ferry", {"text": "the ferry leaves at nine"})
    store.put(ns, "apples", {"text": "apples"})
    store.put(ns, "blank", {"text": "zzz"})
    store.put(ns, "both", {"text": "zzz", "note": "a ferry note"})
    got = [(i.key, i.score) for i in store.search(ns, query="ferry", limit=4)]
    assert got == [("both", 1.0), ("ferry", 1.0), ("apples", 0.0), ("blank", 0.0)]
    # A zero query scores every item 0: ties by key.
    assert [(i.key, i.score) for i in store.search(ns, query="zzz", limit=4)] == [
        ("apples", 0.0), ("blank", 0.0), ("both", 0.0), ("ferry", 0.0)
    ]  # fmt: skip


# -- an item's thread and a conversation's (review rt54) ----------------------------------------


def _conversation(admin_conn: Conn) -> list[tuple[object, ...]]:
    return admin_conn.execute(
        "SELECT thread_id, turn_index, body FROM pgmem.piece WHERE scope_id = 'u1' AND thread_id = 'item:k' "
        "ORDER BY turn_index"
    ).fetchall()


def test_an_item_never_takes_over_a_conversation_thread_of_its_name(conn: Conn, admin_conn: Conn) -> None:
    """An indexed item's turn is thread `item:<key>` of its namespace's scope, and a scope is any
    pgmem scope: an application may hold a conversation (put_turn) named `item:k` in scope `u1`.
    put_item attached the item to it: the item's turn replaced the conversation's turn 0, a
    search for the conversation's words returned the item, and delete() forgot the whole
    conversation with the item. The item takes another thread now, and the conversation is
    left as it was, through every put, search and delete."""
    emb = HashEmbedder()
    ingest_turns(conn, [make_turn("u1", "item:k", i, f"conversation turn {i} about ferries") for i in range(3)], emb)
    before = _conversation(admin_conn)
    assert len(before) == 3
    store = PgmemStore(conn, embedder=emb, floor=-1.0)
    store.put(("u1",), "k", {"text": "an item about cats"})
    assert _conversation(admin_conn) == before
    thread = admin_conn.execute(
        "SELECT thread_id FROM pgmem.store_item WHERE scope_id = 'u1' AND item_key = 'k'"
    ).fetchone()
    assert thread is not None and thread[0] != "item:k" and str(thread[0]).startswith("item-sha256:")
    # The item is searchable through its own turn; the conversation's turns name no item.
    assert [i.key for i in store.search(("u1",), query="an item about cats")] == ["k"]
    assert all(i.value == {"text": "an item about cats"} for i in store.search(("u1",), query="ferries"))
    # Put again (same value, another): it keeps its thread, the conversation stays.
    store.put(("u1",), "k", {"text": "an item about cats"})
    store.put(("u1",), "k", {"text": "an item about dogs"})
    assert (
        admin_conn.execute("SELECT thread_id FROM pgmem.store_item WHERE scope_id = 'u1' AND item_key = 'k'").fetchone()
        == thread
    )
    assert _conversation(admin_conn) == before
    store.delete(("u1",), "k")
    assert _conversation(admin_conn) == before
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'u1'").fetchone() == (3,)


def test_put_item_takes_no_conversation_thread_in_sql_either(conn: Conn, admin_conn: Conn) -> None:
    """pgmem.put_item itself: a thread that a conversation holds (a thread row no item owns) is
    not the item's; it is given `item-sha256:<hex of the key>` (a thread that is taken too gets
    `:1`, `:2`...), which the caller reads from the item's row for its turn."""
    ingest_turns(conn, [make_turn("u1", "item:k", 0, "a conversation")], HashEmbedder())
    ingest_turns(conn, [make_turn("u1", "t2", 0, "another conversation")], HashEmbedder())
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        conn.execute("SELECT set_config('pgmem.scope', 'u1', true)")
        conn.execute("SELECT pgmem.put_item('u1', '{u1}', 'k', '{\"a\": 1}', thread => 'item:k')")
        conn.execute("SELECT pgmem.put_item('u1', '{u1}', 'k2', '{\"a\": 1}', thread => 't2')")
        got = conn.execute(
            "SELECT item_key, thread_id FROM pgmem.store_item WHERE scope_id = 'u1' ORDER BY 1"
        ).fetchall()
    hexes = {k: __import__("hashlib").sha256(k.encode()).hexdigest() for k in ("k", "k2")}
    assert got == [("k", f"item-sha256:{hexes['k']}"), ("k2", f"item-sha256:{hexes['k2']}")]


def test_a_thread_clash_between_two_items_is_one_clear_line(conn: Conn) -> None:
    """Two items naming one thread (a caller of pgmem.put_item naming threads itself): refused,
    on a new key and on a key stored already, with a line naming the thread and the item that
    holds it, never the raw unique violation of store_item's constraint."""

    def put(key: str, thread: str) -> None:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
            conn.execute("SELECT set_config('pgmem.scope', 'u1', true)")
            conn.execute("SELECT pgmem.put_item('u1', '{u1}', %s, '{\"a\": 1}', thread => %s)", (key, thread))

    put("a", "shared")
    put("b", "own")
    for key in ("c", "b"):  # a new key (the insert), a stored one (the update)
        with pytest.raises(psycopg.errors.UniqueViolation) as exc:
            put(key, "shared")
        assert "store_item_scope_id_thread_id_key" not in str(exc.value)
        assert "thread shared" in str(exc.value) and "item a" in str(exc.value)
        assert exc.value.diag.constraint_name is None


def test_the_store_functions_answer_null_negative_and_huge_pages_alike(conn: Conn) -> None:
    """store_list, store_namespaces and store_search page as PostgresStore's LIMIT %s OFFSET %s
    does: lim NULL is every row (LIMIT NULL), off NULL is 0 (OFFSET NULL), and a negative one is
    refused, in one line naming the function (PostgresStore: Postgres's 'LIMIT must not be
    negative'). Before: store_list(lim => NULL) and a negative lim returned nothing, silently,
    while store_namespaces(lim => NULL) returned every namespace; store_namespaces' negative
    lim was Postgres's bare error and its negative off was taken as 0; store_search refused NULL;
    lim + off near 2^31 overflowed."""
    store = PgmemStore(conn, index={"dims": 4, "embed": _axis_embed, "fields": ["text"]})
    for i in range(3):
        store.put(("pages",), f"k{i}", {"text": f"ferry {i}"})

    def run(sql: str, *args: object) -> list[tuple[object, ...]]:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
            conn.execute("SELECT set_config('pgmem.scope', 'pages', true)")
            return conn.execute(sql, args).fetchall()

    calls = {
        "store_list": "SELECT item_key FROM pgmem.store_list('pages', NULL, lim => %s, off => %s)",
        "store_namespaces": "SELECT pgmem.store_namespaces('default', lim => %s, off => %s)",
        "store_search": "SELECT item_key FROM pgmem.store_search('pages', '[1,0,0,0]', %s, lim => %s, off => %s)",
    }
    model = store.field_embedder.model_id if store.field_embedder is not None else None

    def page(name: str, lim: object, off: object) -> list[tuple[object, ...]]:
        args = (model, lim, off) if name == "store_search" else (lim, off)
        return run(calls[name], *args)

    for name in calls:
        every = len(page(name, 100, 0))
        assert len(page(name, None, 0)) == every, name
        assert len(page(name, None, None)) == every, name
        assert len(page(name, 1, None)) == 1, name
        for lim, off in ((-1, 0), (1, -1)):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"^{name}: lim and off must be"):
                page(name, lim, off)
        if name == "store_search":  # its window is capped: said, not an integer overflow
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="at most 10000"):
                page(name, 2**31 - 1, 2**31 - 1)
        else:
            assert page(name, 2**31 - 1, 2**31 - 1) == []


def test_hostile_ops_answer_one_line_and_lose_nothing_stored(conn: Conn) -> None:
    """LangGraph's store conformance ideas against PgmemStore (review rt54): hostile namespaces
    and keys (NUL, lone surrogates, huge, empty labels, dots, '*'), wrong types, duplicated ops
    in one batch. Each bad call is one line, a PgmemError or LangGraph's own
    InvalidNamespaceError (raised by BaseStore before any store sees the call, as for
    PostgresStore), and nothing stored is lost: a batch with one bad op writes none of its ops."""
    from langgraph.store.base import InvalidNamespaceError

    store = PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0)
    store.put(("safe",), "k", {"text": "keep me"})

    def wrong(x: object) -> Any:  # an argument of the wrong type, past the type checker
        return x

    calls: list[Any] = []
    for ns in [("a\x00",), ("\ud800",), ("x" * 201,), ("",), ("a.b",), (1,), ("a", ("b",)), "abc", (" ",)]:
        calls += [lambda ns=ns: store.put(ns, "k", {"a": 1}), lambda ns=ns: store.get(ns, "k"),
                  lambda ns=ns: store.delete(ns, "k")]  # fmt: skip
    for key in ["a\x00", "\ud800", "k" * 1001]:
        calls += [lambda key=key: store.put(("safe",), key, {"a": 1}), lambda key=key: store.get(("safe",), key)]
    for value in [[1], "s", {"a": "\x00"}, {"\ud800": 1}, {"a": float("nan")}, {"a": {1, 2}}, {1: 2}, {"a": 10**5000}]:
        calls.append(lambda value=value: store.put(("safe",), "k", value))
    calls += [
        lambda: store.put(("safe",), "k", {"a": 1}, ttl=wrong("5")),
        lambda: store.put(("safe",), "k", {"a": 1}, index=wrong("yes")),
        lambda: store.search(("safe",), filter=wrong([1])),
        lambda: store.search(("safe",), query=wrong(5)),
        lambda: store.search(("safe",), limit=wrong("5")),
        lambda: store.search(("safe",), limit=wrong(None)),
        lambda: store.list_namespaces(limit=-1),
        lambda: store.list_namespaces(max_depth=0),
        lambda: store.batch([1]),  # type: ignore[list-item]
        lambda: store.batch(None),  # type: ignore[arg-type]
        lambda: asyncio.run(store.abatch(None)),  # type: ignore[arg-type]
        lambda: store.batch([PutOp(("safe",), "k", {"v": 6}), PutOp(("safe",), "\x00", {"v": 1})]),
    ]
    for i, call in enumerate(calls):
        with pytest.raises((PgmemError, InvalidNamespaceError)) as exc:
            call()
        assert "\n" not in str(exc.value) and len(str(exc.value)) < 400, (i, str(exc.value))
    got = store.get(("safe",), "k")
    assert got is not None and got.value == {"text": "keep me"}
    # Duplicated ops in one batch: the last put of a key wins, reads see the batch's start (both
    # as in PostgresStore), a put then a delete deletes, a delete then a put stores.
    assert store.batch([PutOp(("dup",), "k", {"v": 1}), PutOp(("dup",), "k", {"v": 2})]) == [None, None]
    out = store.batch([GetOp(("dup",), "k"), PutOp(("dup",), "k", {"v": 3}), GetOp(("dup",), "k")])
    assert [wrong(r).value for r in out if r is not None] == [{"v": 2}, {"v": 2}]
    store.batch([PutOp(("dup",), "k", {"v": 4}), PutOp(("dup",), "k", None)])
    assert store.get(("dup",), "k") is None
    store.batch([PutOp(("dup",), "k", None), PutOp(("dup",), "k", {"v": 5}), PutOp(("dup",), "gone", None)] * 2)
    assert (it := store.get(("dup",), "k")) is not None and it.value == {"v": 5}
    # '*' and '/' are labels like any other: stored, found, never another namespace's.
    store.put(("*",), "k", {"v": "star"})
    store.put(("a/b",), "k", {"v": "slash"})
    store.put(("a", "b"), "k", {"v": "pair"})
    assert [i.value["v"] for i in store.search(("*",))] == ["star"]
    for ns, v in ((("a/b",), "slash"), (("a", "b"), "pair")):
        got = store.get(ns, "k")
        assert got is not None and got.value == {"v": v}
