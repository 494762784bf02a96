"""Issue 28, the parts of PostgresStore's behaviour PgmemStore now has: TTL (per-put, default,
refresh on read, the sweeper and the SQL sweep a DBA schedules), filter operators compared in
SQL (numbers as numbers), results sorted by score with no floor, `index_config`.

Real Postgres, as the application login (the `conn` fixture) except where a DBA's call is tested."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from langgraph.store.base import PutOp

from pgmem.embedders.base import Embedder
from pgmem.errors import ConfigError, InputError, PgmemError
from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore, namespace_scope
from tests.security_helpers import HashEmbedder

Conn = psycopg.Connection[tuple[object, ...]]

SECOND = 1 / 60  # a TTL of one second, in LangGraph's minutes


def _expire_now(admin_conn: Conn, ns: tuple[str, ...], key: str) -> None:
    """Move an item's expiry into the past (the clock, without waiting for it)."""
    admin_conn.execute(
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' WHERE scope_id = %s AND item_key = %s",
        (namespace_scope(ns), key),
    )


@pytest.fixture
def hstore(conn: Conn) -> PgmemStore:
    return PgmemStore(conn, embedder=HashEmbedder(), ttl={"default_ttl": 60, "refresh_on_read": True})


def test_ttl_items_are_invisible_once_expired_and_the_sweep_removes_them(hstore: PgmemStore, admin_conn: Conn) -> None:
    ns = ("ttl", "u1")
    hstore.put(ns, "a", {"text": "the red apple"})
    hstore.put(ns, "b", {"text": "the blue car"}, ttl=None)  # no expiry, although the store has a default
    row = admin_conn.execute(
        "SELECT item_key, ttl_minutes FROM pgmem.store_item WHERE scope_id = %s ORDER BY 1", (namespace_scope(ns),)
    ).fetchall()
    assert row == [("a", 60.0), ("b", None)]
    _expire_now(admin_conn, ns, "a")
    assert hstore.get(ns, "a") is None
    assert [i.key for i in hstore.search(ns)] == ["b"]
    assert [i.key for i in hstore.search(ns, query="red apple")] == ["b"]
    assert hstore.sweep_ttl() == 1
    left = admin_conn.execute(
        "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (namespace_scope(ns),)
    ).fetchone()
    assert left == (1,)
    # the expired item's turn and pieces went with it, as a delete takes them
    pieces = admin_conn.execute(
        "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND thread_id = 'item:a'", (namespace_scope(ns),)
    ).fetchone()
    assert pieces == (0,)


def test_an_item_that_expires_within_its_own_put_is_stored_with_its_time(hstore: PgmemStore, conn: Conn) -> None:
    """A TTL so short that the item expires inside its own transaction: the put stores it and its
    turn at the item's time (pgmem.store_item_times reads it, expired or not), and it is then
    invisible, as any expired item. The function reads only the transaction's scope."""
    ns = ("ttl", "instant")
    hstore.batch([PutOp(ns, "a", {"text": "gone at once"}, ttl=1e-12), PutOp(ns, "b", {"text": "kept a while"})])
    assert hstore.get(ns, "a") is None and hstore.get(ns, "b") is not None
    scope = namespace_scope(ns)
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        times = conn.execute(
            "SELECT item_key, created_at FROM pgmem.store_item_times(%s, ARRAY['a', 'b', 'a', 'zz']) ORDER BY 1",
            (scope,),
        ).fetchall()
        turns = conn.execute(
            "SELECT thread_id, turn_time FROM pgmem.turn WHERE scope_id = %s ORDER BY 1", (scope,)
        ).fetchall()
        assert conn.execute("SELECT count(*) FROM pgmem.store_item_times(%s, NULL)", (scope,)).fetchone() == (0,)
    assert [k for k, _ in times] == ["a", "b"] and [t for _, t in turns] == [t for _, t in times]
    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'another', true)")
        conn.execute("SELECT * FROM pgmem.store_item_times(%s, ARRAY['a'])", (scope,))


def test_refresh_on_read_moves_the_expiry(hstore: PgmemStore, admin_conn: Conn) -> None:
    ns = ("ttl", "u2")
    hstore.put(ns, "a", {"text": "green tea"}, ttl=1)

    def expiry() -> object:
        r = admin_conn.execute(
            "SELECT expires_at FROM pgmem.store_item WHERE scope_id = %s AND item_key = 'a'", (namespace_scope(ns),)
        ).fetchone()
        return r[0] if r else None

    first = expiry()
    time.sleep(0.05)
    assert hstore.get(ns, "a", refresh_ttl=False) is not None
    assert expiry() == first
    assert hstore.get(ns, "a") is not None  # refresh_on_read: True
    second = expiry()
    assert second > first  # type: ignore[operator]
    time.sleep(0.05)
    assert [i.key for i in hstore.search(ns, query="tea", refresh_ttl=True)] == ["a"]
    assert expiry() > second  # type: ignore[operator]


def test_the_sweeper_thread_sweeps_and_stops(conn: Conn, admin_conn: Conn) -> None:
    store = PgmemStore(conn, embedder=HashEmbedder(), ttl={"default_ttl": SECOND, "sweep_interval_minutes": SECOND / 4})
    ns = ("ttl", "u3")
    store.put(ns, "a", {"text": "short lived"}, index=False)
    done = store.start_ttl_sweeper()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        n = admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (namespace_scope(ns),))
        if n.fetchone() == (0,):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the sweeper did not remove the expired item")
    assert store.stop_ttl_sweeper(timeout=5)
    done.result(timeout=5)


def test_cancelling_the_sweepers_future_stops_it(conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """start_ttl_sweeper's Future, as PostgresStore's, stops the sweeper when cancelled, and a
    second start while it runs returns that Future. Cancelled, it left the sweeper sweeping, and
    the sweeper's end then set the cancelled Future's result: an InvalidStateError traceback from
    its thread; a second start returned a Future already resolved."""
    failed: list[object] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failed.append(args.exc_type))
    store = PgmemStore(conn, embedder=HashEmbedder(), ttl={"default_ttl": 1, "sweep_interval_minutes": 10})
    before = set(threading.enumerate())
    done = store.start_ttl_sweeper()
    (sweeper,) = [t for t in threading.enumerate() if t not in before and t.name == "pgmem-ttl-sweeper"]
    assert store.start_ttl_sweeper() is done and not done.done()
    assert done.cancel()
    sweeper.join(10)
    assert not sweeper.is_alive(), "the sweeper went on after its Future was cancelled"
    assert store.stop_ttl_sweeper(timeout=5)
    assert failed == []


@pytest.mark.parametrize("pool", [False, True])
def test_leaving_from_conn_string_stops_the_sweeper(app_url: str, pool: bool) -> None:
    """As the block closes the store's connection (or pool), its sweeper stops: it lived on, a
    daemon thread failing every sweep on the closed connection for the life of the process."""
    ttl = {"default_ttl": 1, "sweep_interval_minutes": 10}
    options: dict[str, Any] = {"pool_config": {"min_size": 1, "max_size": 1}} if pool else {}
    with PgmemStore.from_conn_string(app_url, embedder=HashEmbedder(), ttl=ttl, **options) as store:
        done = store.start_ttl_sweeper()
    assert done.result(timeout=5) is None


def test_the_async_store_is_an_async_context_manager_that_stops_its_sweeper(app_url: str) -> None:
    """`async with AsyncPostgresStore(conn) as store:` works, and its exit tells the sweeper to stop:
    AsyncPgmemStore had neither (TypeError: it does not support the asynchronous context manager
    protocol), and from_conn_string's block left the sweeper task running on a closed connection."""

    async def main() -> None:
        ttl = {"default_ttl": 1, "sweep_interval_minutes": 10}
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as conn:
            async with AsyncPgmemStore(conn, embedder=HashEmbedder(), ttl=ttl) as store:
                task = await store.start_ttl_sweeper()
                await store.aput(("ctx",), "k", {"text": "kept"})
            await asyncio.wait_for(task, 5)
        async with AsyncPgmemStore.from_conn_string(app_url, embedder=HashEmbedder(), ttl=ttl) as store:
            task = await store.start_ttl_sweeper()
            assert (await store.aget(("ctx",), "k")) is not None
        await asyncio.wait_for(task, 5)

    asyncio.run(main())


def _until(admin_conn: Conn, query: str, params: tuple[object, ...], want: tuple[object, ...], what: str) -> None:
    deadline = time.monotonic() + 30
    while admin_conn.execute(query, params).fetchone() != want:
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_sweeper_started_after_a_stop_that_timed_out_sweeps(
    conn: Conn, app_url: str, db_url: str, admin_conn: Conn, kind: str
) -> None:
    """A sweep waits for a table lock; stop_ttl_sweeper(timeout) gives up (False), the sweeper
    told to stop; start_ttl_sweeper then returned that stopping sweeper (its task, or a resolved
    Future), which ended after its sweep, and no sweeper ran. Now a new one starts: an item that
    expires afterwards is swept."""
    ns = ("ttl", f"restart-{kind}")
    ttl = {"default_ttl": 1, "sweep_interval_minutes": SECOND / 4}
    waiting = "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s"
    left = "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s"

    def swept() -> None:
        _expire_now(admin_conn, ns, "a")
        _until(admin_conn, left, (namespace_scope(ns),), (0,), "no sweeper swept the expired item")

    with psycopg.connect(db_url) as locker:
        locker.execute("LOCK TABLE pgmem.store_namespace IN ACCESS EXCLUSIVE MODE")
        if kind == "sync":
            store = PgmemStore(conn, embedder=HashEmbedder(), ttl=ttl)
            store.start_ttl_sweeper()
            try:
                _until(admin_conn, waiting, (conn.info.backend_pid,), ("Lock",), "the sweep did not wait")
                assert store.stop_ttl_sweeper(timeout=0.05) is False
                store.start_ttl_sweeper()
                locker.rollback()
                store.put(ns, "a", {"text": "short lived"}, index=False)
                swept()
            finally:
                locker.rollback()
                assert store.stop_ttl_sweeper(timeout=10)
            return

        async def main() -> None:
            async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
                store = AsyncPgmemStore(aconn, embedder=HashEmbedder(), ttl=ttl)
                await store.start_ttl_sweeper()
                try:
                    pid = (aconn.info.backend_pid,)
                    await asyncio.to_thread(_until, admin_conn, waiting, pid, ("Lock",), "the sweep did not wait")
                    assert await store.stop_ttl_sweeper(timeout=0.05) is False
                    await store.start_ttl_sweeper()
                    locker.rollback()
                    await store.aput(ns, "a", {"text": "short lived"}, index=False)
                    await asyncio.to_thread(swept)
                finally:
                    locker.rollback()
                    assert await store.stop_ttl_sweeper(timeout=10)

        asyncio.run(main())


def test_the_dba_sweep_covers_every_scope_and_the_app_may_not_run_it(
    hstore: PgmemStore, conn: Conn, admin_conn: Conn
) -> None:
    for ns in (("ttl", "x"), ("ttl", "y")):
        hstore.put(ns, "k", {"text": "gone soon"}, index=False)
        _expire_now(admin_conn, ns, "k")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM pgmem.sweep_expired_items()")
    swept = admin_conn.execute("SELECT * FROM pgmem.sweep_expired_items()").fetchall()
    assert sorted(swept) == [("ttl/x", 1), ("ttl/y", 1)]
    assert hstore.list_namespaces(prefix=("ttl",)) == []
    comment = admin_conn.execute(
        "SELECT obj_description('pgmem.sweep_expired_items(integer)'::regprocedure, 'pg_proc')"
    ).fetchone()
    assert comment and "pg_cron" in str(comment[0])


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "5", True, 10**12])
def test_bad_ttls_are_one_line_errors_and_nothing_is_lost(hstore: PgmemStore, ttl: object) -> None:
    ns = ("ttl", "bad")
    hstore.put(ns, "keep", {"text": "kept"}, index=False)
    with pytest.raises(InputError) as err:
        hstore.batch([PutOp(ns, "keep", {"text": "replaced"}, index=False, ttl=ttl)])  # type: ignore[arg-type]
    assert "\n" not in str(err.value) and "ttl" in str(err.value)
    item = hstore.get(ns, "keep")
    assert item is not None and item.value == {"text": "kept"}


def test_the_database_refuses_a_bad_ttl_itself(conn: Conn) -> None:
    with conn.transaction():
        conn.execute(
            "SELECT set_config('pgmem.scope', 'ttl/sql', true), set_config('pgmem.store_directory', 'd', true)"
        )
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SELECT * FROM pgmem.put_item('ttl/sql', '{ttl,sql}', 'k', '{}'::jsonb, NULL, 'NaN')")


@pytest.mark.parametrize(
    "ttl", [{"default_ttl": 0}, {"sweep_interval_minutes": "x"}, {"refresh_on_read": "yes"}, {"other": 1}, [1]]
)
def test_bad_ttl_configs_are_config_errors(conn: Conn, ttl: object) -> None:
    with pytest.raises(ConfigError):
        PgmemStore(conn, embedder=HashEmbedder(), ttl=ttl)  # type: ignore[arg-type]


def test_filters_compare_numbers_as_numbers_in_sql(hstore: PgmemStore) -> None:
    ns = ("filters", "n")
    for key, score in [("a", 2), ("b", 9), ("c", 10), ("d", 11), ("e", 9.5)]:
        hstore.put(ns, key, {"score": score, "name": f"n{key}"}, index=False)
    hstore.put(ns, "s", {"score": "10", "name": "string"}, index=False)

    def scores(flt: dict[str, object]) -> list[object]:
        return sorted(i.value["score"] for i in hstore.search(ns, filter=flt) if not isinstance(i.value["score"], str))

    assert scores({"score": {"$gte": 10}}) == [10, 11]
    assert scores({"score": {"$gt": 9}}) == [9.5, 10, 11]
    assert scores({"score": {"$lt": 10}}) == [2, 9, 9.5]
    assert scores({"score": {"$lte": 9}}) == [2, 9]
    assert scores({"score": {"$gt": 2, "$lt": 10}}) == [9, 9.5]
    assert scores({"score": {"$ne": 9}}) == [2, 9.5, 10, 11]
    assert scores({"score": {"$eq": 10}}) == [10]
    assert [i.key for i in hstore.search(ns, filter={"score": {"$gt": "1"}})] == ["s"]  # strings with strings
    assert [i.key for i in hstore.search(ns, filter={"name": "string"})] == ["s"]


@pytest.mark.parametrize(
    "flt", [{"score": {"$regex": "x"}}, {"score": {"$in": [1]}}, "score", {"score": {"$gt": float("nan")}}]
)
def test_bad_filters_are_one_line_errors(hstore: PgmemStore, flt: object) -> None:
    with pytest.raises(InputError) as err:
        hstore.search(("filters", "n"), filter=flt)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_sql_filter_refuses_unknown_operators(conn: Conn) -> None:
    assert conn.execute("""SELECT pgmem.store_filter_match('{"a": 10}', '{"a": {"$gt": 9}}')""").fetchone() == (True,)
    assert conn.execute("""SELECT pgmem.store_filter_match('{"a": "9"}', '{"a": {"$gt": 1}}')""").fetchone() == (False,)
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("""SELECT pgmem.store_filter_match('{"a": 1}', '{"a": {"$like": 1}}')""")


def test_search_returns_every_match_sorted_by_score_with_stable_pages(conn: Conn, embedder: Embedder) -> None:
    """The real model: a filtered search returns both matching items (no floor), best first."""
    store = PgmemStore(conn, embedder=embedder)
    ns = ("rank", "u")
    docs = {
        "doc1": {"text": "red apple", "color": "red"},
        "doc2": {"text": "red car", "color": "red"},
        "doc3": {"text": "green apple", "color": "green"},
        "doc4": {"text": "blue car", "color": "blue"},
    }
    store.batch([PutOp(ns, k, v) for k, v in docs.items()])
    found = store.search(ns, query="apple", filter={"color": "red"})
    assert [i.key for i in found] == ["doc1", "doc2"]
    every = store.search(ns, query="a fruit", limit=10)
    assert len(every) == 4
    scores = [i.score for i in every]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    pages = store.search(ns, query="a fruit", limit=2) + store.search(ns, query="a fruit", limit=2, offset=2)
    assert [i.key for i in pages] == [i.key for i in every]


def test_index_config_is_exposed(conn: Conn) -> None:
    store = PgmemStore(conn, embedder=HashEmbedder(), index={"fields": ["text"]})
    assert store.index_config == {"fields": ["text"]}
    assert PgmemStore(conn, embedder=HashEmbedder()).index_config is None
    assert store.supports_ttl


def test_puts_with_ttl_and_the_sweep_beside_forgets(conn: Conn, app_url: str, admin_conn: Conn) -> None:
    """Concurrent writers of one namespace: puts with a TTL, the sweep, and forgets of the items'
    threads. No deadlock, no error; whatever is left is consistent (no piece without its item)."""
    ns = ("ttl", "race")
    scope = namespace_scope(ns)
    errors: list[BaseException] = []

    def worker(fn: object) -> None:
        try:
            with psycopg.connect(app_url, autocommit=True) as c:
                fn(c)  # type: ignore[operator]
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    def putter(c: Conn) -> None:
        s = PgmemStore(c, embedder=HashEmbedder())
        for i in range(30):
            s.batch([PutOp(ns, f"k{j}", {"text": f"item {j} round {i}"}, ttl=SECOND / 10) for j in range(i % 5, 8)])

    def sweeper(c: Conn) -> None:
        s = PgmemStore(c, embedder=HashEmbedder())
        for _ in range(30):
            s.sweep_ttl()

    def forgetter(c: Conn) -> None:
        import pgmem

        for i in range(30):
            try:
                pgmem.forget_thread(c, scope, f"item:k{i % 8}")
            except PgmemError as exc:
                if "no thread" not in str(exc) and "not found" not in str(exc):
                    raise

    threads = [threading.Thread(target=worker, args=(f,)) for f in (putter, putter, sweeper, forgetter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    orphans = admin_conn.execute(
        """SELECT count(*) FROM pgmem.piece p WHERE p.scope_id = %s AND NOT EXISTS (
               SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = p.scope_id AND i.thread_id = p.thread_id)""",
        (scope,),
    ).fetchone()
    assert orphans == (0,)


@pytest.mark.parametrize(
    ("index", "expect"),
    [
        ({"dims": 1536, "embed": "openai:text-embedding-3-small"}, "langchain is not installed"),
        ({"dims": 1536}, "gives"),
        ({"distance_type": "l2"}, "cosine only"),
        ({"embed": 42}, "must be a LangChain Embeddings"),
        ({"distance_type": "hamming"}, "not one of cosine"),
        ({"ann_index_config": {"vector_type": "bit"}}, "vector or halfvec"),
        ({"fields": ["text"], "typo": 1}, "unknown setting"),
    ],
)
def test_index_configs_pgmem_cannot_honour_are_one_line_errors(conn: Conn, index: object, expect: str) -> None:
    """Never a silent substitution: an embed or dims the store would not use is refused."""
    with pytest.raises(ConfigError, match=expect) as err:
        PgmemStore(conn, index=index)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_an_index_naming_pgmem_s_model_is_used(conn: Conn) -> None:
    store = PgmemStore(conn, index={"dims": 384, "embed": "pgmem:minilm", "fields": ["text"]})
    assert store.embedder.dims == 384 and store.index_config is not None


def test_field_vectors_in_sql_score_as_postgres_store_does(conn: Conn) -> None:
    """pgmem.put_item_vectors and pgmem.store_search (the SQL a store with its own embed uses):
    cosine similarity, inner product and negated L2 distance, an item's best field, one model
    per namespace."""
    scope = "vec/sql"
    with conn.transaction():
        conn.execute(
            "SELECT set_config('pgmem.scope', %s, true), set_config('pgmem.store_directory', 'd', true)", (scope,)
        )
        for key, vecs in (("a", ["[1,0,0]", "[0,1,0]"]), ("b", ["[0,0,2]"])):
            conn.execute("SELECT * FROM pgmem.put_item(%s, '{vec,sql}', %s, '{}'::jsonb)", (scope, key))
            n = conn.execute(
                "SELECT pgmem.put_item_vectors(%s, %s, 'fake:3', %s, %s::vector[])",
                (scope, key, ["text"] * len(vecs), vecs),
            ).fetchone()
            assert n == (len(vecs),)

        def search(distance: str) -> list[tuple[object, ...]]:
            return conn.execute(
                "SELECT item_key, score FROM pgmem.store_search(%s, '[0,1,1]', 'fake:3', %s)", (scope, distance)
            ).fetchall()

        assert search("cosine") == [("a", pytest.approx(0.70711, abs=1e-4)), ("b", pytest.approx(0.70711, abs=1e-4))]
        assert search("inner_product") == [("b", pytest.approx(2.0)), ("a", pytest.approx(1.0))]
        assert search("l2")[0][0] == "a"  # -1.0 beats -sqrt(2)
        assert conn.execute("SELECT * FROM pgmem.store_vector_model(%s)", (scope,)).fetchone() == ("fake:3", 3)
        with pytest.raises(psycopg.errors.DataException), conn.transaction():
            conn.execute("SELECT * FROM pgmem.store_search(%s, '[0,1,1]', 'other', 'cosine')", (scope,))
        with pytest.raises(psycopg.errors.InvalidParameterValue), conn.transaction():
            conn.execute("SELECT * FROM pgmem.store_search(%s, '[0,1,1]', 'fake:3', 'hamming')", (scope,))
        with pytest.raises(psycopg.errors.DataException), conn.transaction():
            conn.execute("SELECT pgmem.put_item_vectors(%s, 'a', 'other', '{t}', ARRAY['[1,0,0]']::vector[])", (scope,))


def test_the_sweep_reads_the_recall_log_once_a_scope(hstore: PgmemStore, conn: Conn, admin_conn: Conn) -> None:
    """expire_items removed each expired item through delete_item, whose last step read the
    scope's whole recall log: the sweep cost its items times the log's rows. The log is now read
    once a scope, and the same rows go: those naming an expired item's piece, turn or thread."""
    from pgmem.db import scoped
    from tests.lifecycle_helpers import vec

    ns = ("ttl", "big")
    scope = namespace_scope(ns)
    for i in range(30):
        hstore.put(ns, f"k{i}", {"text": f"note number {i} about the sweep"})
    with scoped(conn, scope):
        piece = conn.execute(
            "SELECT piece_id FROM pgmem.piece WHERE scope_id = %s AND thread_id = 'item:k2' LIMIT 1", (scope,)
        ).fetchone()
        assert piece is not None
        named = [
            (None, f'[{{"piece_id": {piece[0]}, "thread_id": "item:k2", "turn_index": 0}}]'),  # an expired item's hit
            (None, '[{"thread_id": "item:k3", "turn_index": 0}]'),  # an expired item's turn
            ("item:k4", "[]"),  # a recall filtered to an expired item's thread
            (None, '[{"thread_id": "item:k25", "turn_index": 0}]'),  # a kept item: stays
        ]
        for thread, results in named + [(None, "[]")] * 40:
            conn.execute(
                "SELECT pgmem.log_recall(%s, 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, %s, 'vector',"
                " %s::jsonb)",
                (scope, vec("q"), thread, results),
            )
    for i in range(20):
        _expire_now(admin_conn, ns, f"k{i}")
    with admin_conn.transaction():
        admin_conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        swept = admin_conn.execute("SELECT pgmem.expire_items(%s)", (scope,)).fetchone()
        read = admin_conn.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE relid = 'pgmem.recall_log'::regclass"
        ).fetchone()
        left = admin_conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE results::text LIKE '%%item:k25%%') FROM pgmem.recall_log"
            " WHERE scope_id = %s",
            (scope,),
        ).fetchone()
        items = admin_conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE item_key = 'k25') FROM pgmem.store_item WHERE scope_id = %s",
            (scope,),
        ).fetchone()
    assert swept == (20,)
    assert left == (41, 1) and items == (10, 1)
    # 44 log rows: read once (and once more by the delete), not once for each of the 20 items.
    assert read is not None and int(str(read[0])) <= 4 * 44, read


def test_expire_items_takes_at_most_max_items_in_key_order_and_nothing_unexpired(
    hstore: PgmemStore, conn: Conn, admin_conn: Conn
) -> None:
    """expire_items(scope, max_items) removes exactly max_items of the expired items (key order)
    while more are left, and never an item that has not expired or has no ttl."""
    ns = ("ttl", "budget")
    scope = namespace_scope(ns)
    for key in ("a", "b", "c"):
        hstore.put(ns, key, {"text": f"expired note {key}"})
        _expire_now(admin_conn, ns, key)
    hstore.put(ns, "d", {"text": "still fresh"})
    hstore.put(ns, "e", {"text": "never expires"}, ttl=None)

    def keys() -> list[str]:
        rows = admin_conn.execute("SELECT item_key FROM pgmem.store_item WHERE scope_id = %s ORDER BY 1", (scope,))
        return [str(r[0]) for r in rows.fetchall()]

    for max_items, gone, left in (
        (1, 1, ["b", "c", "d", "e"]),
        (1, 1, ["c", "d", "e"]),
        (5, 1, ["d", "e"]),
        (5, 0, ["d", "e"]),
    ):
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            row = conn.execute("SELECT pgmem.expire_items(%s, %s)", (scope, max_items)).fetchone()
        assert (row, keys()) == ((gone,), left), max_items


def test_a_put_in_a_transaction_begun_before_the_item_expired_treats_it_as_expired(
    hstore: PgmemStore, conn: Conn, admin_conn: Conn
) -> None:
    """Reads judge expiry by the clock (0072); puts judged it by their transaction's start. An item
    that expired after a transaction began, and that the transaction's own read no longer finds,
    was still alive for its put: an import's conditional put kept it instead of writing its copy
    (the expired item then vanished with the copy), and a plain put kept its old created_at."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("ttl", "clock")
    scope = namespace_scope(ns)
    hstore.batch([PutOp(ns, "cond", {"text": "the old value"}), PutOp(ns, "plain", {"text": "the old value"})])
    before = hstore.get(ns, "plain")
    assert before is not None
    put = """SELECT created_at, written FROM pgmem.put_item(
                 scope => %s, namespace => %s, item_key => %s, value => '{"text": "the imported copy"}',
                 unless_newer_than => %s)"""
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        conn.execute("SELECT set_config('pgmem.store_directory', %s, true)", (DEFAULT_DIRECTORY,))
        started = conn.execute("SELECT now()").fetchone()
        assert started is not None
        admin_conn.execute(  # both expire now, after the transaction began
            "UPDATE pgmem.store_item SET ttl_minutes = 1, expires_at = clock_timestamp() WHERE scope_id = %s", (scope,)
        )
        for key in ("cond", "plain"):  # the transaction's reads no longer find them
            assert conn.execute("SELECT count(*) FROM pgmem.store_get(%s, %s)", (scope, key)).fetchone() == (0,)
        cond = conn.execute(put, (scope, list(ns), "cond", before.updated_at - timedelta(days=1))).fetchone()
        plain = conn.execute(put, (scope, list(ns), "plain", None)).fetchone()
    # Not kept (created_at is not the item's): the item had expired, by the clock. And not written
    # either since 0092: it expired after the copy was written, which is a delete after it.
    assert cond is not None and cond == (None, False)
    assert hstore.get(ns, "cond") is None
    assert plain is not None and plain == (started[0], True)  # a new item: created now
    item = hstore.get(ns, "plain")
    assert item is not None and item.value == {"text": "the imported copy"}


def test_an_expired_item_is_not_brought_back_by_a_copy_older_than_its_expiry(
    hstore: PgmemStore, conn: Conn, admin_conn: Conn
) -> None:
    """An expiry is a delete at expires_at (review rt54, 0092). delete_item remembers the key
    (pgmem.store_tombstone), so an import's conditional put of a copy written before the delete
    does not write it again; expire_items and sweep_expired_items left no record, and a copy older
    than the expiry came back once the sweep had run (before it, put_item wrote it over the expired
    row too). Now: a copy written before the expiry is not written, swept or not (created_at NULL:
    the import counts it deleted); one written after it is."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("ttl", "gone")
    scope = namespace_scope(ns)
    keys = ("old-unswept", "new-unswept", "old-swept", "new-swept")
    hstore.batch([PutOp(ns, k, {"text": f"the app's value of {k}"}, ttl=60) for k in keys])
    for k in keys:
        _expire_now(admin_conn, ns, k)
    rows = admin_conn.execute("SELECT item_key, expires_at FROM pgmem.store_item WHERE scope_id = %s", (scope,))
    ends: dict[str, datetime] = {str(r[0]): r[1] for r in rows.fetchall() if isinstance(r[1], datetime)}
    put = """SELECT created_at IS NOT NULL, written FROM pgmem.put_item(
                 scope => %s, namespace => %s, item_key => %s, value => '{"text": "the imported copy"}',
                 unless_newer_than => %s)"""

    def cond_put(key: str, copy_time: object) -> tuple[object, ...] | None:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            conn.execute("SELECT set_config('pgmem.store_directory', %s, true)", (DEFAULT_DIRECTORY,))
            return conn.execute(put, (scope, list(ns), key, copy_time)).fetchone()

    # Not swept yet: the expired rows are there.
    assert cond_put("old-unswept", ends["old-unswept"] - timedelta(hours=1)) == (False, False)
    assert cond_put("new-unswept", ends["new-unswept"] + timedelta(milliseconds=100)) == (True, True)
    # Swept: the rows are gone, their expiry remembered (at expires_at).
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        assert conn.execute("SELECT pgmem.expire_items(%s)", (scope,)).fetchone() == (3,)
    assert admin_conn.execute(
        "SELECT count(*) FROM pgmem.store_tombstone WHERE scope_id = %s AND deleted_at = %s",
        (scope, ends["old-swept"]),
    ).fetchone() == (1,)
    assert cond_put("old-swept", ends["old-swept"] - timedelta(hours=1)) == (False, False)
    assert cond_put("new-swept", ends["new-swept"] + timedelta(milliseconds=100)) == (True, True)
    got = {k: (it.value["text"] if (it := hstore.get(ns, k)) else None) for k in keys}
    assert got == {
        "old-unswept": None, "new-unswept": "the imported copy", "old-swept": None, "new-swept": "the imported copy"
    }  # fmt: skip


def test_a_store_whose_items_only_expire_keeps_their_records_30_days(hstore: PgmemStore, admin_conn: Conn) -> None:
    """Since 0092 the sweep remembers each expired key (pgmem.store_tombstone), but only a
    delete removed the records older than 30 days: a store whose items only expire (a session
    cache, new keys every time) kept every record for ever (review rt57). The sweep prunes them
    too now (0093), its own scope's only."""
    ns, other = ("ttl", "cache"), ("ttl", "other")
    hstore.put(other, "kept", {"text": "another scope's old record stays"})
    hstore.delete(other, "kept")
    for key in ("s1", "s2"):
        hstore.put(ns, key, {"text": f"session {key}"})
        _expire_now(admin_conn, ns, key)
    assert hstore.sweep_ttl() == 2
    admin_conn.execute("UPDATE pgmem.store_tombstone SET deleted_at = now() - interval '31 days'")
    hstore.put(ns, "s3", {"text": "session s3"})
    _expire_now(admin_conn, ns, "s3")
    assert hstore.sweep_ttl() == 1
    rows = admin_conn.execute("SELECT scope_id, key_hash FROM pgmem.store_tombstone ORDER BY 1").fetchall()
    assert rows == [
        (namespace_scope(ns), hashlib.sha256(b"s3").digest()),
        (namespace_scope(other), hashlib.sha256(b"kept").digest()),
    ]
