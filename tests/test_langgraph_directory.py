"""The LangGraph store's namespace directory does not leak across tenants (issue 16).

`pgmem.store_namespace` is under row-level security: a row is visible to a transaction that
asked for its directory (`pgmem.store_directory`, set by the store that wrote it) or that is
inside the namespace's own scope. Run as the app login and as the reader login, on a real
Postgres; the namespaces stored before migration 0006 stay listable by a store without a
directory name."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from pgmem.errors import ConfigError
from pgmem.integrations.langgraph import PgmemStore
from pgmem.migrate import downgrade, upgrade
from pgmem.sqlfiles import InstallParams
from tests.conftest import TEST_DIMS, scratch_database
from tests.security_helpers import APP_LOGIN, READER_LOGIN, HashEmbedder, connect_as, ensure_login_roles

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

Conn = psycopg.Connection[tuple[object, ...]]


def _store(conn: Conn, directory: str | None = None) -> PgmemStore:
    extra = {} if directory is None else {"directory": directory}
    return PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0, **extra)  # type: ignore[arg-type]


@pytest.fixture
def tenants(conn: Conn) -> tuple[PgmemStore, PgmemStore]:
    """Two services on the app login: tenant A's store (directory tenant-a) and tenant B's."""
    a, b = _store(conn, "tenant-a"), _store(conn, "tenant-b")
    a.put(("t", "a"), "k", {"text": "alpha keeps the blue notebook"})
    a.put(("t", "a", "notes"), "n", {"text": "alpha notes"})
    b.put(("t", "b"), "k", {"text": "beta hides the red key"})
    return a, b


@pytest.fixture
def reader_conn(db_url: str, admin_conn: Conn) -> Iterator[Conn]:
    ensure_login_roles(admin_conn)
    c = connect_as(db_url, READER_LOGIN)
    yield c
    c.close()


def _visible(conn: Conn, *, scope: str | None = None, directory: str | None = None) -> list[list[str]]:
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope or "",))
        conn.execute("SELECT set_config('pgmem.store_directory', %s, true)", (directory or "",))
        rows = conn.execute("SELECT namespace FROM pgmem.store_namespace ORDER BY namespace").fetchall()
    return [[str(x) for x in r[0]] for r in rows]  # type: ignore[attr-defined]


@pytest.mark.parametrize("role", ["app", "reader"])
def test_a_service_bound_to_one_scope_sees_no_other_tenants_namespaces(
    tenants: tuple[PgmemStore, PgmemStore], conn: Conn, reader_conn: Conn, role: str
) -> None:
    c = conn if role == "app" else reader_conn
    assert _visible(c) == []  # no scope, no directory: nothing
    assert _visible(c, scope="t/a") == [["t", "a"]]  # its own namespace, nothing of B's
    assert _visible(c, scope="t/b") == [["t", "b"]]
    assert _visible(c, scope="nobody") == []
    # Asking for a directory deliberately shows that directory's names, and only those.
    assert _visible(c, directory="tenant-a") == [["t", "a"], ["t", "a", "notes"]]
    assert _visible(c, directory="tenant-b") == [["t", "b"]]
    # The listing function checks its directory like check_scope checks a scope.
    for directory in (None, "tenant-a"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="store directory") as err, c.transaction():
            c.execute("SELECT set_config('pgmem.scope', 't/a', true)")
            c.execute("SELECT set_config('pgmem.store_directory', %s, true)", (directory or "",))
            c.execute("SELECT pgmem.store_namespaces('tenant-b')")
        assert "pgmem.store_directory" in (err.value.diag.message_hint or "")


def test_each_store_lists_and_prefix_searches_its_own_directory(tenants: tuple[PgmemStore, PgmemStore]) -> None:
    a, b = tenants
    assert a.list_namespaces() == [("t", "a"), ("t", "a", "notes")]
    assert a.list_namespaces(prefix=("t",), max_depth=2) == [("t", "a")]
    assert b.list_namespaces() == [("t", "b")]
    assert {i.key for i in a.search(("t",))} == {"k", "n"}
    # A query searches every namespace of its own directory (floor -1: every item), none of B's.
    assert {(tuple(i.namespace), i.key) for i in a.search(("t",), query="who hides the red key?")} == {
        (("t", "a"), "k"),
        (("t", "a", "notes"), "n"),
    }
    assert [tuple(i.namespace) for i in b.search(("t",), query="who hides the red key?")] == [("t", "b")]
    assert _store(a._conn).list_namespaces() == []  # the default directory lists neither


def test_a_namespace_written_by_two_directories_is_listed_in_both_until_its_last_item_goes(
    tenants: tuple[PgmemStore, PgmemStore],
) -> None:
    a, b = tenants
    b.put(("t", "a"), "from-b", {"text": "written by b"})
    assert ("t", "a") in b.list_namespaces()
    a.delete(("t", "a"), "k")
    assert ("t", "a") in a.list_namespaces()  # from-b is still there
    b.delete(("t", "a"), "from-b")
    assert a.list_namespaces() == [("t", "a", "notes")] and b.list_namespaces() == [("t", "b")]


def test_writing_needs_a_directory_and_bad_directory_names_are_refused(conn: Conn, admin_conn: Conn) -> None:
    for c in (conn, admin_conn):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="no store directory") as err, c.transaction():
            c.execute("SELECT set_config('pgmem.scope', 'x', true)")
            c.execute("SELECT * FROM pgmem.put_item('x', '{x}', 'k', '{}'::jsonb)")
        assert "SET LOCAL pgmem.store_directory" in (err.value.diag.message_hint or "")
    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'x', true)")
        conn.execute("SELECT set_config('pgmem.store_directory', 'mine', true)")
        conn.execute("INSERT INTO pgmem.store_namespace (directory, namespace, scope_name) VALUES ('mine', '{x}', 'x')")
    with pytest.raises(psycopg.errors.NullValueNotAllowed):
        conn.execute("SELECT pgmem.check_store_directory(NULL)")
    for bad in ("", "d" * 201, "bad\x00", "lone\udcff", 7):
        with pytest.raises(ConfigError, match="directory"):
            _store(conn, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "namespace",
    ["{a,NULL,b}", "{{a,b}}", "[2:3]={a,b}", '{a,"",b}'],
    ids=["null label", "matrix", "lower bound 2", "empty label"],
)
def test_put_item_refuses_a_namespace_no_store_can_read_back(conn: Conn, admin_conn: Conn, namespace: str) -> None:
    """In SQL, as the app login: store_scope skips a NULL label and flattens a matrix, so these
    passed as the scope of ('a', 'b') and were stored and listed (until 0047). Now 22023 in one
    line, and the item already there, and the directory, are as they were."""
    store = _store(conn, "d")
    store.put(("a", "b"), "k", {"text": "kept"})
    refused = pytest.raises(psycopg.errors.InvalidParameterValue, match="one-dimensional list of non-empty labels")
    with refused as err, conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'a/b', true)")
        conn.execute("SELECT set_config('pgmem.store_directory', 'd', true)")
        conn.execute(
            "SELECT * FROM pgmem.put_item('a/b', %s::text[], 'k', '{\"text\": \"lost\"}'::jsonb)", (namespace,)
        )
    assert "\n" not in str(err.value.diag.message_primary)
    assert admin_conn.execute("SELECT namespace, value FROM pgmem.store_item WHERE scope_id = 'a/b'").fetchall() == [
        (["a", "b"], {"text": "kept"})
    ]
    assert store.list_namespaces() == [("a", "b")]


@pytest.mark.long
def test_namespaces_stored_before_0006_stay_listable_by_a_store_without_a_directory(admin_conn: Conn) -> None:
    with scratch_database(admin_conn, "dir") as url:
        params = InstallParams(TEST_DIMS, TEST_DIMS)
        # The tables as revision 0005 left them (its functions are this checkout's: rows go in
        # directly, as the 0005 put_item wrote them), then the upgrade.
        upgrade(url, params=params)
        downgrade(url, "0005", params=params)
        with psycopg.connect(url, autocommit=True) as old:
            old.execute("INSERT INTO pgmem.scope (scope_id) VALUES ('users/u1')")
            old.execute(
                """INSERT INTO pgmem.store_item (scope_id, item_key, namespace, value)
                   VALUES ('users/u1', 'k', '{users,u1}', '{"v": 1}')"""
            )
            old.execute("INSERT INTO pgmem.store_namespace (namespace, scope_name) VALUES ('{users,u1}', 'users/u1')")
        upgrade(url, params=params)
        ensure_login_roles(admin_conn)
        with connect_as(url, APP_LOGIN) as app:
            assert _visible(app) == []
            assert _store(app).list_namespaces() == [("users", "u1")]
            assert _store(app, "elsewhere").list_namespaces() == []
            item = _store(app).search(("users",))
            assert [(i.key, i.value) for i in item] == [("k", {"v": 1})]


def test_the_reader_login_gets_lists_and_searches_through_the_store(
    tenants: tuple[PgmemStore, PgmemStore], conn: Conn, reader_conn: Conn, admin_conn: Conn
) -> None:
    """A read-only login (pgmem_reader: a dashboard, someone debugging) reads through the store
    with LangGraph's defaults: a get or search refreshes TTLs by default, which is a write, and
    items without a TTL need none. An item with a TTL is refreshed only by a login that may write:
    the reader gets it unchanged, with no error."""
    reader = _store(reader_conn, "tenant-a")
    item = reader.get(("t", "a"), "k")
    assert item is not None and item.value == {"text": "alpha keeps the blue notebook"}
    assert {i.key for i in reader.search(("t", "a"))} == {"k", "n"}
    assert "k" in {i.key for i in reader.search(("t", "a"), query="who keeps the blue notebook?")}
    assert reader.list_namespaces() == [("t", "a"), ("t", "a", "notes")]
    writer = PgmemStore(conn, embedder=HashEmbedder(), floor=-1.0, directory="tenant-a", ttl={"default_ttl": 60})
    writer.put(("t", "a"), "ttl", {"text": "alpha's short-lived note"})
    expires = admin_conn.execute("SELECT expires_at FROM pgmem.store_item WHERE item_key = 'ttl'").fetchone()
    assert expires is not None and expires[0] is not None
    got = reader.get(("t", "a"), "ttl")
    assert got is not None and got.value == {"text": "alpha's short-lived note"}
    assert {i.key for i in reader.search(("t", "a"))} == {"k", "n", "ttl"}
    assert admin_conn.execute("SELECT expires_at FROM pgmem.store_item WHERE item_key = 'ttl'").fetchone() == expires
    # The same read by the writer moves the expiry.
    writer.get(("t", "a"), "ttl")
    moved = admin_conn.execute("SELECT expires_at FROM pgmem.store_item WHERE item_key = 'ttl'").fetchone()
    assert moved is not None and moved[0] > expires[0]  # type: ignore[operator]


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_a_namespace_emptied_in_one_transaction_leaves_the_directory_with_its_last_item_in_any_order(
    conn: Conn, order: str
) -> None:
    """One transaction deleting a namespace's items one by one: the namespace stays listed while
    an item is left, and goes with the last, in whatever key order they go. The look for an item
    left starts at the key just deleted (0080: from the scope's first key it stepped over every
    item the transaction had deleted); would catch a look that stops there, such as one missing
    the smaller keys left when the largest goes first."""
    import random

    store = _store(conn, "tenant-order")
    ns = ("t", "order", order)
    keys = [f"k{i:02d}" for i in range(12)]
    for k in keys:
        store.put(ns, k, {"text": f"item {k}"})
    ordered = {"ascending": keys, "descending": keys[::-1], "shuffled": random.Random(5).sample(keys, len(keys))}
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", ("t/order/" + order,))
        conn.execute("SELECT set_config('pgmem.store_directory', 'tenant-order', true)")
        for n, k in enumerate(ordered[order], 1):
            assert conn.execute("SELECT pgmem.delete_item(%s, %s)", ("t/order/" + order, k)).fetchone() == (True,)
            listed = conn.execute(
                "SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = %s", ("t/order/" + order,)
            )
            assert listed.fetchone() == ((0,) if n == len(keys) else (1,)), (order, n, k)
    assert store.list_namespaces() == []


def test_two_first_puts_into_a_namespace_without_an_entry_do_not_deadlock(app_url: str, admin_conn: Conn) -> None:
    """The namespace's directory entry was written last in put_item: B put k0 into a namespace
    whose entry its last delete had removed (B's entry, uncommitted); A put k1 and waited for
    B's entry; B put k1 and waited for A's item row: a deadlock (40P01, the concurrent store
    test in CI at ef5b205). put_item writes the entry before the item row now (0093), so A waits
    holding no item and B goes on. A conditional put that writes nothing leaves no entry."""
    import threading

    put = "SELECT written FROM pgmem.put_item('nsd', ARRAY['nsd'], %s, '{\"a\": 1}'::jsonb, thread => %s)"
    a, b = connect_as(app_url, APP_LOGIN, autocommit=False), connect_as(app_url, APP_LOGIN, autocommit=False)
    try:
        for c in (a, b):
            c.execute("SELECT set_config('pgmem.scope', 'nsd', false), set_config('pgmem.store_directory', 'd', false)")
            c.commit()
        b.execute(put, ("k9", "item:k9"))
        b.commit()
        b.execute("SELECT pgmem.delete_item('nsd', 'k9')")
        b.commit()
        assert admin_conn.execute("SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = 'nsd'").fetchone() == (
            0,
        )
        b.execute(put, ("k0", "item:k0"))  # B's entry, uncommitted
        got: dict[str, object] = {}

        def put_a() -> None:
            try:
                got["a"] = a.execute(put, ("k1", "item:k1")).fetchall()
                a.commit()
            except psycopg.Error as exc:
                a.rollback()
                got["a"] = exc

        t = threading.Thread(target=put_a)
        t.start()
        t.join(1.0)  # A waits (for B's entry)
        try:
            got["b"] = b.execute(put, ("k1", "item:k1")).fetchall()
            b.commit()
        except psycopg.Error as exc:
            b.rollback()
            got["b"] = exc
        t.join(30)
        assert not isinstance(got.get("a"), psycopg.Error) and not isinstance(got.get("b"), psycopg.Error), got
        listed = admin_conn.execute("SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = 'nsd'").fetchone()
        assert listed == (1,)
        # A conditional put of a deleted key into a namespace without an entry writes nothing,
        # and leaves no entry.
        b.execute("SELECT pgmem.delete_item('nsd', 'k0')")
        b.execute("SELECT pgmem.delete_item('nsd', 'k1')")
        b.commit()
        assert admin_conn.execute("SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = 'nsd'").fetchone() == (
            0,
        )
        row = b.execute(
            "SELECT written FROM pgmem.put_item('nsd', ARRAY['nsd'], 'k0', '{\"a\": 2}'::jsonb, "
            "unless_newer_than => now() - interval '1 hour')"
        ).fetchone()
        b.commit()
        assert row == (False,)
        assert admin_conn.execute("SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = 'nsd'").fetchone() == (
            0,
        )
    finally:
        a.close()
        b.close()


def test_a_store_call_inside_the_callers_transaction_leaves_no_scope_or_directory_set(app_url: str, conn: Conn) -> None:
    """A store given a connection with a transaction open (psycopg's default, not autocommit,
    after any statement; or inside the caller's `with conn.transaction()`) runs its call in a
    savepoint, whose transaction-local settings outlive it. Until rt60 the namespace's scope and
    the store's directory stayed set after the call: the caller's next unscoped query in that
    transaction read the namespace's items and the directory's entries (pgmem.db.scoped puts
    the caller's previous scope back since the same defect in recall)."""
    import asyncio

    from pgmem.integrations.langgraph import AsyncPgmemStore

    _store(conn, "tenant-a").put(("acme", "u1"), "k1", {"text": "acme keeps the plans in the red safe"})
    leaked = "SELECT current_setting('pgmem.scope', true), current_setting('pgmem.store_directory', true)"
    seen = "SELECT (SELECT count(*) FROM pgmem.store_item), (SELECT count(*) FROM pgmem.store_namespace)"
    with psycopg.connect(app_url) as c:  # not autocommit: the first statement opens a transaction
        c.execute("SELECT set_config('pgmem.scope', 'mine', true)")  # the caller's own scope
        store = _store(c, "tenant-a")
        got = store.get(("acme", "u1"), "k1")
        assert got is not None and got.value["text"].startswith("acme")
        assert [i.key for i in store.search(("acme",), query="red safe")] == ["k1"]
        store.put(("acme", "u1"), "k2", {"text": "a second note"})
        assert c.execute(leaked).fetchone() == ("mine", "")
        assert c.execute(seen).fetchone() == (0, 0)
        c.rollback()
    with psycopg.connect(app_url, autocommit=True) as c, c.transaction():
        assert [n for n in _store(c, "tenant-a").list_namespaces()] == [("acme", "u1")]
        assert c.execute(leaked).fetchone() in ((None, None), ("", ""))
        assert c.execute(seen).fetchone() == (0, 0)

    async def main() -> tuple[object, ...]:
        async with await psycopg.AsyncConnection.connect(app_url) as ac:
            await ac.execute("SELECT 1")
            astore = AsyncPgmemStore(ac, embedder=HashEmbedder(), floor=-1.0, directory="tenant-a")
            assert await astore.aget(("acme", "u1"), "k1") is not None
            row = await (await ac.execute(leaked)).fetchone()
            count = await (await ac.execute(seen)).fetchone()
            assert row is not None and count is not None
            return (*row, *count)

    assert asyncio.run(main()) in ((None, None, 0, 0), ("", "", 0, 0))
