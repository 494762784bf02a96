"""Reads that say why they are empty (issue 15 item 5): a read function called with a scope
other than the transaction's pgmem.scope, or with none set, raises 42501 with a hint naming
SET LOCAL pgmem.scope, instead of returning nothing. Run as the app login; pgmem_reader still
recalls (the check is SECURITY INVOKER code it may run); a superuser with no scope still reads."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.lifecycle_helpers import Conn, in_scope, put_turn, vec
from tests.security_helpers import READER_LOGIN, connect_as, ensure_login_roles

Q = vec("query")

#: Every read function of the SQL API, called for scope 'a' (SQL, parameters).
READS: dict[str, tuple[str, tuple[object, ...]]] = {
    "memory_recall": ("SELECT * FROM pgmem.memory_recall('a', ARRAY[%s::vector], floor => -1)", (Q,)),
    "memory_recall hybrid": (
        "SELECT * FROM pgmem.memory_recall('a', ARRAY[%s::vector], ARRAY['hello'], mode => 'hybrid', floor => -1)",
        (Q,),
    ),
    "fact_recall": ("SELECT * FROM pgmem.fact_recall('a', ARRAY[%s::vector], floor => -1)", (Q,)),
    "explain_recall": ("SELECT * FROM pgmem.explain_recall('a', ARRAY[%s::vector], floor => -1)", (Q,)),
    "document_search": ("SELECT * FROM pgmem.document_search('a', ARRAY[%s::vector], floor => -1)", (Q,)),
    "explain_logged_recall": ("SELECT * FROM pgmem.explain_logged_recall('a', 1)", ()),
    "replay_logged_recall": ("SELECT * FROM pgmem.replay_logged_recall('a', 1)", ()),
    "turn_hashes": ("SELECT * FROM pgmem.turn_hashes('a', 't', ARRAY[0])", ()),
    "stored_turn_hashes": ("SELECT * FROM pgmem.stored_turn_hashes('a', ARRAY['t'], ARRAY[0])", ()),
    "pending_turns": ("SELECT * FROM pgmem.pending_turns('a', now())", ()),
    "document_hashes": ("SELECT * FROM pgmem.document_hashes('a', ARRAY['d'])", ()),
    "document_titles": ("SELECT * FROM pgmem.document_titles('a')", ()),
    "get_retention": ("SELECT * FROM pgmem.get_retention('a')", ()),
}


@pytest.fixture
def stored(conn: Conn) -> Conn:
    """Scope 'a' with one turn, a fact and a logged recall; scope 'b' with one turn."""
    with conn.transaction():
        in_scope(conn, "a")
        put_turn(conn, "a", "t", 0, ["hello from scope a"])
        conn.execute("SELECT pgmem.add_facts('a', 'test:hash', ARRAY['a fact'], ARRAY[%s::vector])", (vec("a fact"),))
        conn.execute(
            """SELECT pgmem.log_recall('a', 'memory', 'hello', ARRAY['hello'], ARRAY[%s::vector], 5, -1, NULL,
                   'vector', '[]'::jsonb)""",
            (Q,),
        )
    with conn.transaction():
        in_scope(conn, "b")
        put_turn(conn, "b", "t", 0, ["hello from scope b"])
    return conn


def _raises_42501(conn: Conn, query: str, params: tuple[object, ...], scope: str | None) -> psycopg.Error:
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as err, conn.transaction():
        if scope is not None:
            in_scope(conn, scope)
        conn.execute(query, params)
    assert err.value.sqlstate == "42501"
    hint = err.value.diag.message_hint or ""
    assert "SET LOCAL pgmem.scope" in hint, hint
    return err.value


@pytest.mark.parametrize("name", list(READS))
def test_read_with_no_scope_set_raises_42501(stored: Conn, name: str) -> None:
    query, params = READS[name]
    e = _raises_42501(stored, query, params, None)
    assert "no scope is set for this transaction (reading scope a)" in str(e)


@pytest.mark.parametrize("name", list(READS))
def test_read_in_another_scope_raises_42501(stored: Conn, name: str) -> None:
    query, params = READS[name]
    e = _raises_42501(stored, query, params, "b")
    assert "cannot read scope a: this transaction's scope is b" in str(e)


@pytest.mark.parametrize("name", list(READS))
def test_read_in_its_own_scope_works(stored: Conn, name: str) -> None:
    query, params = READS[name]
    with stored.transaction():
        in_scope(stored, "a")
        rows = stored.execute(query, params).fetchall()
    if name in (
        "memory_recall",
        "memory_recall hybrid",
        "fact_recall",
        "explain_recall",
        "replay_logged_recall",
        "turn_hashes",
        "stored_turn_hashes",
    ):
        assert rows, name


def test_an_empty_scope_setting_counts_as_none(stored: Conn) -> None:
    """After RESET (or set_config to ''), pgmem.scope reads as '': no scope."""
    query, params = READS["memory_recall"]
    _raises_42501(stored, query, params, "")


def test_writes_keep_their_own_messages(stored: Conn) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot write into scope a"), stored.transaction():
        in_scope(stored, "b")
        put_turn(stored, "a", "t", 1, ["x"])
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"no scope is set .*writing into scope a"):
        put_turn(stored, "a", "t", 1, ["x"])


@pytest.fixture
def reader(stored: Conn, admin_conn: Conn, db_url: str) -> Iterator[Conn]:
    ensure_login_roles(admin_conn)
    c = connect_as(db_url, READER_LOGIN)
    yield c
    c.close()


def test_reader_recalls_in_its_scope_and_is_told_when_it_has_none(reader: Conn) -> None:
    """pgmem_reader runs no definer code but the word side's read: the check is invoker code it may execute."""
    query, params = READS["memory_recall"]
    _raises_42501(reader, query, params, None)
    reader.execute("SET pgmem.scope = 'a'")  # a psql session's way: for the session
    rows = reader.execute(query, params).fetchall()
    assert [r[6] for r in rows] == ["hello from scope a"]
    assert reader.execute(*READS["explain_recall"]).fetchall()
    reader.execute("SET pgmem.scope = 'b'")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot read scope a"):
        reader.execute(query, params)


def test_superuser_without_scope_still_reads(stored: Conn, admin_conn: Conn) -> None:
    """As the write guard allows: a superuser session is not confined by row-level security."""
    rows = admin_conn.execute(*READS["memory_recall"]).fetchall()
    assert [r[6] for r in rows] == ["hello from scope a"]
    # ... but a superuser who set another scope is told, as anyone is.
    with pytest.raises(psycopg.errors.InsufficientPrivilege), admin_conn.transaction():
        in_scope(admin_conn, "b")
        admin_conn.execute(*READS["memory_recall"])


def test_check_scope_is_public_and_rls_stays_underneath(stored: Conn) -> None:
    """The guard is a convenience; row-level security still hides other scopes' rows from a
    plain SELECT, which no function guards."""
    with stored.transaction():
        in_scope(stored, "b")
        assert stored.execute("SELECT pgmem.check_scope('b')").fetchone() == ("b",)
        assert stored.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'a'").fetchone() == (0,)


def test_hostile_scope_names_get_a_clear_error(stored: Conn) -> None:
    for bad in ("a\x00b",):
        with pytest.raises(psycopg.DataError):
            stored.execute("SELECT pgmem.check_scope(%s)", (bad,))
    with pytest.raises(psycopg.errors.NullValueNotAllowed):
        stored.execute("SELECT * FROM pgmem.memory_recall(NULL, ARRAY[%s::vector])", (Q,))
    huge = "a" * 1_000_000
    with pytest.raises(psycopg.errors.InsufficientPrivilege), stored.transaction():
        in_scope(stored, "a")
        stored.execute("SELECT * FROM pgmem.memory_recall(%s, ARRAY[%s::vector])", (huge, Q))
