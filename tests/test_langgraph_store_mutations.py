"""Behaviours of PgmemStore a mutation review of the store found untested (sql/idempotent/080_store.sql,
081_store_search.sql, pgmem/integrations/langgraph.py): each test here failed with one of the
mutations named in its docstring, and passes without it.

Real Postgres, as the application login (the `conn` fixture); the item's expiry is read as the
owner, as tests/test_langgraph_ttl_filters.py reads it."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from pgmem.integrations.langgraph import PgmemStore, namespace_scope
from tests.security_helpers import HashEmbedder

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture
def hstore(conn: Conn) -> PgmemStore:
    return PgmemStore(conn, embedder=HashEmbedder(), ttl={"default_ttl": 60, "refresh_on_read": True})


def _lifetime(admin_conn: Conn, ns: tuple[str, ...], key: str) -> tuple[object, object]:
    """An item's expiry counted from its last write, and from now."""
    row = admin_conn.execute(
        "SELECT expires_at - updated_at, expires_at - now() FROM pgmem.store_item"
        " WHERE scope_id = %s AND item_key = %s",
        (namespace_scope(ns), key),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_ttl_is_minutes_on_a_put_a_re_put_and_a_refresh(hstore: PgmemStore, admin_conn: Conn) -> None:
    """LangGraph's ttl is minutes: an item put with ttl=60 expires 60 minutes after the put, a
    re-put with another ttl takes that one (for its expiry and for later refreshes), and a read
    that refreshes moves the expiry to now + the ttl. Caught mutations: the expiry computed in
    seconds on an insert, on an update or on a refresh; a re-put that kept the old ttl."""
    ns = ("ttl", "minutes")
    hstore.put(ns, "a", {"text": "first"}, ttl=60, index=False)
    assert _lifetime(admin_conn, ns, "a")[0] == timedelta(minutes=60)
    hstore.put(ns, "a", {"text": "second"}, ttl=30, index=False)
    assert _lifetime(admin_conn, ns, "a")[0] == timedelta(minutes=30)
    hstore.put(ns, "b", {"text": "never"}, ttl=None, index=False)
    hstore.put(ns, "b", {"text": "now in 20 minutes"}, ttl=20, index=False)
    for key in ("a", "b"):  # nearly expired: a refresh must move them a whole ttl ahead
        admin_conn.execute(
            "UPDATE pgmem.store_item SET expires_at = now() + interval '5 seconds' WHERE scope_id = %s"
            " AND item_key = %s",
            (namespace_scope(ns), key),
        )
    assert hstore.get(ns, "a") is not None
    assert [i.key for i in hstore.search(ns, filter={"text": "now in 20 minutes"})] == ["b"]
    left_a, left_b = _lifetime(admin_conn, ns, "a")[1], _lifetime(admin_conn, ns, "b")[1]
    assert timedelta(minutes=29) < left_a <= timedelta(minutes=30)  # type: ignore[operator]
    assert timedelta(minutes=19) < left_b <= timedelta(minutes=20)  # type: ignore[operator]


def test_an_expired_item_put_again_is_a_new_item(hstore: PgmemStore, admin_conn: Conn) -> None:
    """PostgresStore's sweep removes an expired item, so a put of its key afterwards creates it:
    created_at is the new put's. pgmem keeps the row until its sweep, and must say the same.
    Caught mutation: the re-put of an expired row kept the old created_at."""
    ns = ("ttl", "reborn")
    hstore.put(ns, "a", {"text": "first life"}, ttl=60, index=False)
    first = hstore.get(ns, "a")
    assert first is not None
    admin_conn.execute(
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' WHERE scope_id = %s AND item_key = 'a'",
        (namespace_scope(ns),),
    )
    assert hstore.get(ns, "a") is None
    hstore.put(ns, "a", {"text": "second life"}, ttl=60, index=False)
    second = hstore.get(ns, "a")
    assert second is not None and second.value == {"text": "second life"}
    assert second.created_at == second.updated_at and second.created_at > first.created_at


def test_a_filter_on_a_field_an_item_lacks_never_matches_it(hstore: PgmemStore) -> None:
    """PostgresStore compares value->field, which is NULL for a missing field: neither equality
    nor $ne matches an item without the field (a JSON null is a value and is compared). Caught
    mutations: $ne matching a missing field; a plain value matching a missing field."""
    ns = ("filters", "missing")
    hstore.put(ns, "with", {"kind": "note", "n": 1}, index=False)
    hstore.put(ns, "other", {"kind": "todo", "n": 2}, index=False)
    hstore.put(ns, "null", {"kind": None, "n": 3}, index=False)
    hstore.put(ns, "without", {"n": 4}, index=False)

    def keys(flt: dict[str, object]) -> list[str]:
        return sorted(i.key for i in hstore.search(ns, filter=flt))

    assert keys({"kind": {"$ne": "note"}}) == ["null", "other"]
    assert keys({"kind": {"$eq": None}}) == ["null"]
    assert keys({"kind": None}) == ["null"]
    assert keys({"kind": "note"}) == ["with"]
    assert keys({"n": {"$gte": 1}}) == ["null", "other", "with", "without"]


def test_a_query_search_under_a_prefix_merges_every_namespace_s_hits(conn: Conn) -> None:
    """A search by query under a prefix runs one recall a namespace and merges them: the last
    namespace's hits are in the answer as the first's are. Caught mutation: the merge skipped the
    last namespace."""
    store = PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0)
    store.put(("merge", "a"), "k", {"text": "the red apple"})
    store.put(("merge", "b"), "k", {"text": "the red apple"})
    found = store.search(("merge",), query="the red apple", limit=10)
    assert sorted(i.namespace for i in found) == [("merge", "a"), ("merge", "b")]


def test_the_last_put_of_a_key_in_a_batch_wins(hstore: PgmemStore) -> None:
    """PostgresStore deduplicates a batch's puts of one key and keeps the last, a delete
    included. Caught mutation: the first put of a key won."""
    from langgraph.store.base import PutOp

    ns = ("batch", "dedupe")
    hstore.batch([PutOp(ns, "k", {"v": 1}, index=False), PutOp(ns, "k", {"v": 2}, index=False)])
    item = hstore.get(ns, "k")
    assert item is not None and item.value == {"v": 2}
    hstore.batch([PutOp(ns, "k", {"v": 3}, index=False), PutOp(ns, "k", None)])
    assert hstore.get(ns, "k") is None
    hstore.batch([PutOp(ns, "k", None), PutOp(ns, "k", {"v": 4}, index=False)])
    item = hstore.get(ns, "k")
    assert item is not None and item.value == {"v": 4}


def test_vector_search_pages_across_namespaces_are_the_whole_ranking_cut(app_url: str) -> None:
    """With an embed, each namespace is searched for its first offset + limit items and the merge
    cuts the page: pages across namespaces follow the whole ranking. Caught mutations: each
    namespace asked for only `limit` items; the page cut one place late."""
    from langgraph.store.base import PutOp

    from tests.test_langgraph_parity import WordEmbeddings

    emb = WordEmbeddings()
    index = {"dims": 64, "embed": emb, "distance_type": "cosine", "fields": ["text"]}
    words = ["apple", "apple pie", "apple tree red", "red car", "blue car", "apple apple pie"]
    with PgmemStore.from_conn_string(app_url, index=index) as store:
        store.batch([PutOp(("pv", "a" if i % 2 else "b"), f"k{i}", {"text": t}) for i, t in enumerate(words)])
        whole = [(i.namespace, i.key) for i in store.search(("pv",), query="apple pie", limit=10)]
        assert len(whole) == len(words)
        pages = [
            [(i.namespace, i.key) for i in store.search(("pv",), query="apple pie", limit=2, offset=o)]
            for o in (0, 2, 4)
        ]
        assert [x for p in pages for x in p] == whole


def test_an_expired_item_is_no_vector_search_hit(app_url: str, admin_conn: Conn) -> None:
    """With an embed, a search by query reads field vectors (pgmem.store_search): an expired item
    is invisible there as in get and a listing, before the sweep removes it. Caught mutation:
    store_search returned expired items."""
    from tests.test_langgraph_parity import WordEmbeddings

    index = {"dims": 64, "embed": WordEmbeddings(), "distance_type": "cosine", "fields": ["text"]}
    ns = ("vttl",)
    with PgmemStore.from_conn_string(app_url, index=index, ttl={"default_ttl": 60}) as store:
        store.put(ns, "old", {"text": "apple pie"})
        store.put(ns, "new", {"text": "apple tart"})
        admin_conn.execute(
            "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' WHERE scope_id = %s"
            " AND item_key = 'old'",
            (namespace_scope(ns),),
        )
        assert [i.key for i in store.search(ns, query="apple pie", limit=10)] == ["new"]
        assert [i.key for i in store.search(ns, query="apple pie", limit=10, offset=0, refresh_ttl=False)] == ["new"]


def test_a_prefix_over_max_search_namespaces_is_refused_not_cut(conn: Conn) -> None:
    """A search runs one query a namespace, at most max_search_namespaces of them: a prefix with
    more is an InputError, never a search of the first ones only (items silently missing); one
    with exactly that many is searched whole. Caught mutation: the directory read asked for
    max_search_namespaces rows, not one more, so the excess was never seen."""
    from pgmem.errors import InputError

    store = PgmemStore(conn, embedder=HashEmbedder(), max_search_namespaces=2)
    for label in ("a", "b"):
        store.put(("few", label), "k", {"v": label}, index=False)
        store.put(("many", label), "k", {"v": label}, index=False)
    store.put(("many", "c"), "k", {"v": "c"}, index=False)
    assert sorted(i.value["v"] for i in store.search(("few",))) == ["a", "b"]
    with pytest.raises(InputError, match="more than 2 namespaces"):
        store.search(("many",))


def test_a_star_in_a_list_namespaces_suffix_is_any_label(hstore: PgmemStore) -> None:
    """LangGraph's match conditions read "*" as any label in a suffix as in a prefix
    (PostgresStore's _namespace_match_pattern). Caught mutation: "*" compared literally in a
    suffix."""
    for ns in (("docs", "a", "public"), ("docs", "b", "private"), ("public",)):
        hstore.put(ns, "k", {"v": 1}, index=False)
    assert hstore.list_namespaces(suffix=("*", "public")) == [("docs", "a", "public")]
    assert hstore.list_namespaces(prefix=("docs",), suffix=("*", "*")) == [
        ("docs", "a", "public"),
        ("docs", "b", "private"),
    ]
