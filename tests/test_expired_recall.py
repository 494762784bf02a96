"""An expired LangGraph store item is recalled nowhere, swept or not (rt62).

The store hid an expired item from its own `get` and `search` before the sweep (the rule of
0072), but the item's turn and pieces stay in the namespace's scope until the sweeper removes
them, and that scope is an ordinary pgmem scope: `pgmem.memory_recall` (SQL), `pgmem.recall`
(Python) and the MCP server's `recall` (`pgmem mcp --scope`) returned the expired item's text,
and it took a place among the x hits of its part. The rule is now memory_recall's (SQL, the one
source of truth): the pieces of an item expired by the clock are left out before the ranking,
as if the sweep had removed them.

Real Postgres as the application login, the local model, the MCP SDK's own client over stdio."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from pgmem import recall
from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.integrations.langgraph import PgmemStore, namespace_scope

Conn = psycopg.Connection[tuple[object, ...]]

NS = ("u1",)
SCOPE = namespace_scope(NS)
DOG = {"text": "Luna the dog hates baths and hides under the bed when the tub fills."}
GARDEN = {"text": "The tomatoes in the garden need water every morning in July."}
QUESTION = "What does the dog hate?"


def _expire(admin_conn: Conn, key: str) -> None:
    """Move an item's expiry into the past (the clock, without waiting for it)."""
    admin_conn.execute(
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' WHERE scope_id = %s AND item_key = %s",
        (SCOPE, key),
    )


def _dog_expired(conn: Conn, admin_conn: Conn, embedder: Embedder) -> PgmemStore:
    store = PgmemStore(conn, embedder=embedder, ttl={"default_ttl": 60})
    store.put(NS, "dog", DOG)
    store.put(NS, "garden", GARDEN, ttl=None)
    # Before it expires every path finds it first.
    assert recall(conn, SCOPE, QUESTION, embedder, x=1, floor=-1).groups[0].hits[0].thread_id == "item:dog"
    _expire(admin_conn, "dog")
    assert store.get(NS, "dog") is None
    assert [i.key for i in store.search(NS, query=QUESTION)] == ["garden"]
    return store


def test_memory_recall_leaves_out_an_expired_item_before_the_sweep(
    conn: Conn, admin_conn: Conn, embedder: Embedder
) -> None:
    _dog_expired(conn, admin_conn, embedder)
    # pgmem.recall (Python): the one hit of x=1 is the live item, not a short group.
    for mode in ("hybrid", "vector"):
        got = recall(conn, SCOPE, QUESTION, embedder, x=1, floor=-1, mode=mode)
        assert [h.thread_id for g in got.groups for h in g.hits] == ["item:garden"], mode
        wide = recall(conn, SCOPE, QUESTION, embedder, x=10, floor=-1, mode=mode)
        assert all(h.thread_id != "item:dog" for g in wide.groups for h in g.hits), mode
    # Scoped to the expired item's own thread: nothing, as after the sweep.
    assert recall(conn, SCOPE, QUESTION, embedder, floor=-1, thread="item:dog").groups[0].hits == []
    # Raw SQL, exact and not, with a time window (pgmem._window_candidates) and bounds.
    vec = embedder.embed([QUESTION])[0]
    with scoped(conn, SCOPE):
        for args in (
            "exact => true",
            "exact => false",
            "time_from => now() - interval '1 day'",
            "since => now() - interval '1 day'",
        ):
            rows = conn.execute(
                f"""SELECT thread_id FROM pgmem.memory_recall(%s, ARRAY[%s::vector], ARRAY[%s], x => 10,
                                                              floor => -1, {args})""",
                (SCOPE, str(vec.tolist()), QUESTION),
            ).fetchall()
            assert rows and all(r[0] != "item:dog" for r in rows), args
        # explain_recall (psql's view of the same recall) leaves it out too: before 0105 it
        # called the expired item kept and the hit memory_recall returned cut beyond x.
        explained = conn.execute(
            """SELECT p.thread_id, e.verdict FROM pgmem.explain_recall(%s, ARRAY[%s::vector], x => 1, floor => -1) e
                 JOIN pgmem.piece p ON p.scope_id = %s AND p.piece_id = e.piece_id ORDER BY e.candidate""",
            (SCOPE, str(vec.tolist()), SCOPE),
        ).fetchall()
        assert explained[0] == ("item:garden", "kept") and all(t != "item:dog" for t, _ in explained), explained
    # A logged recall does not hold it either.
    logged = recall(conn, SCOPE, QUESTION, embedder, x=10, floor=-1, log=True)
    assert logged.recall_id is not None
    held = admin_conn.execute(
        "SELECT results::text FROM pgmem.recall_log WHERE scope_id = %s AND recall_id = %s", (SCOPE, logged.recall_id)
    ).fetchone()
    assert held is not None and "item:garden" in str(held[0]) and "item:dog" not in str(held[0])


def test_the_mcp_server_does_not_recall_an_expired_item(
    conn: Conn, admin_conn: Conn, embedder: Embedder, db_url: str, tmp_path: Path
) -> None:
    from tests.test_mcp_server import _data, _params, _session

    _dog_expired(conn, admin_conn, embedder)

    async def body(client: Any) -> dict[str, Any]:
        out = _data(await client.call_tool("recall", {"query": QUESTION, "x": 1, "floor": -1}))
        listing = (await client.read_resource("pgmem://threads")).contents[0]
        return {**out, "threads": json.loads(listing.text)}

    out = _session(_params(db_url, SCOPE, tmp_path), body)
    assert [h["thread"] for g in out["groups"] for h in g["hits"]] == ["item:garden"]
    # Nor does its threads resource list the expired item's thread (its key is in the name).
    assert [t["thread"] for t in out["threads"]["threads"]] == ["item:garden"]


CALLS = (
    "mode => 'vector', exact => true",
    "mode => 'vector', exact => false",
    "mode => 'vector', x => 3, candidates => 3",
    "mode => 'hybrid', exact => true",
    "mode => 'hybrid', exact => false",
    "mode => 'vector', time_from => now() - interval '1 day', exact => true",
    "mode => 'vector', since => now() - interval '1 day', until => now() + interval '1 day'",
)


def _recall_rows(conn: Conn, scope: str, vecs: list[str], texts: list[str], call: str) -> list[tuple[object, ...]]:
    with scoped(conn, scope):
        return conn.execute(
            f"""SELECT part_no, rank, piece_id FROM pgmem.memory_recall(%s, %s::vector[], %s, floor => -1,
                                                                       {call}) ORDER BY 1, 2""",
            (scope, vecs, texts),
        ).fetchall()


@pytest.mark.parametrize("indexed", [False, True])
def test_a_recall_before_the_sweep_answers_what_it_answers_after_it(
    conn: Conn, admin_conn: Conn, owner: Conn, indexed: bool
) -> None:
    """Half the items of a namespace expired: each part's x hits are exactly those of the same
    recall once the sweep removed them, no fewer: exact, through the scope's HNSW index (with and
    without a write tail), in a time window, within bounds, hybrid (the word side's weights count
    the expired items' words until the sweep, so there only the places are compared)."""
    import numpy as np

    from tests.security_helpers import HashEmbedder, hash_vector

    store = PgmemStore(conn, embedder=HashEmbedder(), ttl={"default_ttl": 60})
    ns = ("many",)
    scope = namespace_scope(ns)
    for i in range(120):
        store.put(ns, f"k{i:02d}", {"text": f"item number {i}"}, ttl=60 if i % 2 else None)
    if indexed:
        owner.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => 100)")
        for i in range(120, 140):  # a write tail, half of it expiring too
            store.put(ns, f"k{i:02d}", {"text": f"item number {i}"}, ttl=60 if i % 2 else None)
    admin_conn.execute(
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second'"
        " WHERE scope_id = %s AND ttl_minutes IS NOT NULL",
        (scope,),
    )
    rng = np.random.default_rng(7)
    vecs = [str(hash_vector(f"q{i}").tolist()) for i in range(4)] + [
        str(np.round(rng.standard_normal(384), 5).tolist())
    ]
    texts = ["item number", "number 3", "item 17", "five", "item"]
    before = {call: _recall_rows(conn, scope, vecs, texts, call) for call in CALLS}
    expired = {
        int(str(r[0]))
        for r in admin_conn.execute(
            """SELECT p.piece_id FROM pgmem.piece p JOIN pgmem.store_item i
                 ON i.scope_id = p.scope_id AND i.thread_id = p.thread_id
                WHERE p.scope_id = %s AND i.ttl_minutes IS NOT NULL""",
            (scope,),
        ).fetchall()
    }
    assert len(expired) >= 60
    assert store.sweep_ttl() >= 60
    for call in CALLS:
        after = _recall_rows(conn, scope, vecs, texts, call)
        assert not {int(str(r[2])) for r in before[call]} & expired, call
        if "hybrid" in call:
            assert [r[:2] for r in before[call]] == [r[:2] for r in after], call
        else:
            assert before[call] == after, call


def _logged_texts(admin_conn: Conn, scope: str) -> list[str]:
    return [str(r[0]) for r in admin_conn.execute(
        "SELECT results::text FROM pgmem.recall_log WHERE scope_id = %s ORDER BY recall_id", (scope,)
    ).fetchall()]  # fmt: skip


def test_an_expired_item_put_again_without_an_index_takes_its_recall_log_rows(
    conn: Conn, admin_conn: Conn, embedder: Embedder
) -> None:
    """An expired item put again with index=False loses its turn (forget_thread), and with it the
    recall-log rows that returned the expired value; a live item put again keeps them (an edit).
    (Put again indexed, before the sweep, the rows stay until the log's retention: forgetting
    them at the put (0102) took the scope's log lock mid-batch and deadlocked, 0105.)"""
    store = PgmemStore(conn, embedder=embedder, ttl={"default_ttl": 60})
    ns = ("u9",)
    scope = namespace_scope(ns)
    store.put(ns, "note", {"text": "The door code is 4812 until Friday."})
    store.put(ns, "other", {"text": "The door code of the garage is 1234."})
    recall(conn, scope, "what is the door code?", embedder, floor=-1, log=True)
    recall(conn, scope, "what is the door code?", embedder, floor=-1, log=True, thread="item:note")
    store.put(ns, "other", {"text": "The garage has no code now."})  # live: an edit keeps its log rows
    assert len(_logged_texts(admin_conn, scope)) == 2
    admin_conn.execute(
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second'"
        " WHERE scope_id = %s AND item_key = 'note'",
        (scope,),
    )
    store.put(ns, "note", {"text": "Lunch is at noon."}, index=False)
    assert not any("4812" in t for t in _logged_texts(admin_conn, scope))
    assert store.get(ns, "note") is not None and store.get(ns, "other") is not None


def test_the_async_store_and_pgmem_aio_leave_out_an_expired_item_and_refresh_by_the_same_rule(
    app_url: str, admin_conn: Conn, embedder: Embedder
) -> None:
    """AsyncPgmemStore (aput, aget, asearch with and without refresh, sweep_ttl, a put again after
    the sweep) and pgmem.aio.recall on one AsyncConnection: the expired item is invisible to
    each, before the sweep, and a refresh never brings it back."""
    import asyncio

    import pgmem.aio
    from pgmem.integrations.langgraph import AsyncPgmemStore

    def expiry(key: str) -> object:
        row = admin_conn.execute(
            "SELECT expires_at FROM pgmem.store_item WHERE scope_id = %s AND item_key = %s", (SCOPE, key)
        ).fetchone()
        return None if row is None else row[0]

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            store = AsyncPgmemStore(aconn, embedder=embedder, ttl={"default_ttl": 60, "refresh_on_read": True})
            await store.aput(NS, "dog", DOG)
            await store.aput(NS, "garden", GARDEN, ttl=None)
            await store.aput(NS, "plain", {"text": "a plain row about the dog"}, index=False, ttl=5)
            before = expiry("plain")
            assert await store.aget(NS, "plain", refresh_ttl=False) is not None and expiry("plain") == before
            assert await store.aget(NS, "plain") is not None and expiry("plain") != before  # refreshed
            _expire(admin_conn, "dog")
            _expire(admin_conn, "plain")
            for refresh in (True, False):
                assert await store.aget(NS, "dog", refresh_ttl=refresh) is None
                assert await store.aget(NS, "plain", refresh_ttl=refresh) is None
                found = await store.asearch(NS, query=QUESTION, refresh_ttl=refresh)
                assert [i.key for i in found] == ["garden"]
                assert [i.key for i in await store.asearch(NS, refresh_ttl=refresh)] == ["garden"]
            got = await pgmem.aio.recall(aconn, SCOPE, QUESTION, embedder, x=1, floor=-1)
            assert [h.thread_id for g in got.groups for h in g.hits] == ["item:garden"]
            assert await store.sweep_ttl() == 2
            await store.aput(NS, "dog", DOG)  # a new item, found again
            got = await pgmem.aio.recall(aconn, SCOPE, QUESTION, embedder, x=1, floor=-1)
            assert [h.thread_id for g in got.groups for h in g.hits] == ["item:dog"]

    asyncio.run(main())


def test_two_transactions_putting_expired_keys_again_in_opposite_orders_do_not_deadlock(
    app_url: str, admin_conn: Conn
) -> None:
    """0102 forgot an expired item's recall-log rows at its put again, taking the scope's log lock
    there: A put expired a (holding the log lock), B put expired b (holding b, waiting for the
    log lock), A put b: 40P01 (rt65's review). Since 0105 the put takes no log lock, and B waits
    for nothing A holds."""
    import threading

    from tests.security_helpers import APP_LOGIN, connect_as

    put = "SELECT written FROM pgmem.put_item('nsx', ARRAY['nsx'], %s, %s::jsonb, thread => %s, ttl_minutes => 1)"
    a, b = connect_as(app_url, APP_LOGIN, autocommit=False), connect_as(app_url, APP_LOGIN, autocommit=False)
    try:
        for c in (a, b):
            c.execute("SELECT set_config('pgmem.scope', 'nsx', false), set_config('pgmem.store_directory', 'd', false)")
            c.commit()
        for key in ("a", "b"):
            a.execute(put, (key, '{"text": "old"}', f"item:{key}"))
        a.commit()
        admin_conn.execute(
            "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' WHERE scope_id = 'nsx'"
        )
        got: dict[str, object] = {}
        a.execute(put, ("a", '{"text": "new a"}', "item:a"))  # A holds a

        def put_b_then_nothing() -> None:
            try:
                got["b"] = b.execute(put, ("b", '{"text": "new b"}', "item:b")).fetchall()
                b.execute("SELECT pg_sleep(1.5)")  # B holds b while A asks for it
                b.commit()
            except psycopg.Error as exc:
                b.rollback()
                got["b"] = exc

        t = threading.Thread(target=put_b_then_nothing)
        t.start()
        t.join(0.5)
        try:
            got["a"] = a.execute(put, ("b", '{"text": "new b by a"}', "item:b")).fetchall()
            a.commit()
        except psycopg.Error as exc:
            a.rollback()
            got["a"] = exc
        t.join(30)
        assert not isinstance(got.get("a"), psycopg.Error) and not isinstance(got.get("b"), psycopg.Error), got
    finally:
        a.close()
        b.close()
