"""A store item's thread is the item's alone (0094), the other way round from 0092.

0092 kept an item out of a conversation's thread. Its converse was open: a conversation writer
(put_turn, put_turns, `pgmem ingest`) naming the thread an item holds (`item:<key>`) replaced the
item's indexed turn 0 with its own text, searches for the conversation's words returned the
item, and deleting the item forgot the conversation's turns with it. add_facts into that thread
tied facts that the item's delete forgot. Both are refused now, each turn or call with one line
naming the item; the store's own writes of the item's turn (turn 0 at the item's created_at), a
re-put and a rebuild of it are not.

Real Postgres, the app login, the hash embedder (no retrieval quality is asserted)."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from pgmem import Fact, add_facts, ingest_turns
from pgmem.db import connect
from pgmem.errors import ArgumentError, DatabaseError
from pgmem.integrations.langgraph import PgmemStore
from pgmem.rebuild import rebuild
from pgmem.turns import Turn
from tests.security_helpers import HashEmbedder, make_turn

Conn = psycopg.Connection[tuple[object, ...]]
EMB = HashEmbedder()


def _pieces(admin_conn: Conn, thread: str) -> list[tuple[object, ...]]:
    return admin_conn.execute(
        "SELECT turn_index, body FROM pgmem.piece WHERE scope_id = 'u1' AND thread_id = %s ORDER BY 1, 2", (thread,)
    ).fetchall()


def test_a_conversation_cannot_write_into_an_items_thread(conn: Conn, admin_conn: Conn) -> None:
    """Before 0094: both turns were stored, turn 0 replacing the item's text, the store's search
    for "ferries" returned the item, and delete() forgot both conversation turns."""
    store = PgmemStore(conn, embedder=EMB, floor=-1.0)
    store.put(("u1",), "k", {"text": "an item about cats"})
    item = _pieces(admin_conn, "item:k")
    assert item == [(0, '{"text": "an item about cats"}')]
    turns = [make_turn("u1", "item:k", i, f"conversation turn {i} about ferries") for i in range(2)]
    turns.append(make_turn("u1", "ferries", 0, "a conversation about ferries in its own thread"))
    report = ingest_turns(conn, turns, EMB)
    # Each turn into the item's thread refused on its own line; the other turn stored.
    assert len(report.failed) == 2 and report.inserted == 1
    for _, err in report.failed:
        assert err.startswith("23505: ") and "\n" not in err
        assert "thread item:k of scope u1 is store item k's" in err
    assert _pieces(admin_conn, "item:k") == item
    assert [i.key for i in store.search(("u1",), query="ferries")] == ["k"]  # the only item; its value:
    assert store.get(("u1",), "k").value == {"text": "an item about cats"}  # type: ignore[union-attr]
    store.delete(("u1",), "k")
    assert _pieces(admin_conn, "ferries") == [(0, "a conversation about ferries in its own thread")]


def test_put_turn_and_add_facts_refuse_an_items_thread_in_one_line(conn: Conn, admin_conn: Conn) -> None:
    store = PgmemStore(conn, embedder=EMB, floor=-1.0)
    store.put(("u1",), "k", {"text": "an item about cats"})
    dims = admin_conn.execute("SELECT pgmem.column_dims('piece.embedding')").fetchone()
    assert dims is not None
    vec = "[" + ",".join(["0.1"] * int(str(dims[0]))) + "]"
    # SQL put_turn: the error of its one turn, raised.
    with pytest.raises(psycopg.errors.UniqueViolation) as raised, conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'u1', true)")
        conn.execute(
            """SELECT pgmem.put_turn('u1', 'item:k', 3, now(), '[{"role": "user", "content": "hi"}]', '\\x01',
                   %s, ARRAY['user'], ARRAY[0], ARRAY['user'], ARRAY['hi'], ARRAY[%s::vector])""",
            (EMB.model_id, vec),
        )
    primary = raised.value.diag.message_primary or ""
    assert "thread item:k of scope u1 is store item k's" in primary and "\n" not in primary
    # add_facts: the whole call (its facts are one insert), a DatabaseError of one line.
    with pytest.raises(ArgumentError) as facts_raised:
        add_facts(conn, "u1", [Fact("a fact", thread="t1"), Fact("a fact about the item", thread="item:k")], EMB)
    assert "thread_ids[2] (item:k) is store item k's thread" in str(facts_raised.value)
    assert "\n" not in str(facts_raised.value)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.fact WHERE scope_id = 'u1'").fetchone() == (0,)
    # A fact in no thread, or in another, is stored as before.
    assert len(add_facts(conn, "u1", [Fact("a fact"), Fact("a fact", thread="t1")], EMB)) == 2
    assert _pieces(admin_conn, "item:k") == [(0, '{"text": "an item about cats"}')]


def test_the_store_still_writes_re_puts_and_rebuilds_its_items_turn(
    conn: Conn, admin_conn: Conn, tmp_path: Path
) -> None:
    store = PgmemStore(conn, embedder=EMB, floor=-1.0)
    store.put(("u1",), "k", {"text": "an item about cats"})
    store.put(("u1",), "k", {"text": "an item about dogs"})
    assert _pieces(admin_conn, "item:k") == [(0, '{"text": "an item about dogs"}')]
    before = admin_conn.execute(
        "SELECT piece_id FROM pgmem.piece WHERE scope_id = 'u1' AND thread_id = 'item:k'"
    ).fetchall()
    result = rebuild(conn, EMB, tmp_path / "state.json", scope="u1")
    assert not result.report.failed
    after = admin_conn.execute(
        "SELECT piece_id FROM pgmem.piece WHERE scope_id = 'u1' AND thread_id = 'item:k'"
    ).fetchall()
    assert after != before  # rewritten by the rebuild, the same text
    assert _pieces(admin_conn, "item:k") == [(0, '{"text": "an item about dogs"}')]
    store.delete(("u1",), "k")
    assert _pieces(admin_conn, "item:k") == []
    # The item gone, the thread is free for a conversation.
    assert ingest_turns(conn, [make_turn("u1", "item:k", 0, "now a conversation")], EMB).inserted == 1


def test_a_conversation_and_an_items_first_put_racing_never_share_a_thread(app_url: str, admin_conn: Conn) -> None:
    """Two clients, released together, eight rounds: a conversation writer putting turns 0 and 1
    into `item:k<n>` and the store's first put of item k<n>. Whichever commits first, the item's
    turn holds the item's text only, the conversation's turns are all stored (in `item:k<n>` when
    it came first, the item then in its item-sha256 thread) or all refused (when the item came
    first), and deleting the item leaves the conversation's turns."""
    rounds = 8
    outcomes: dict[int, tuple[int, list[str]]] = {}

    def converse(n: int, barrier: threading.Barrier) -> None:
        with connect(app_url) as c:
            barrier.wait()
            turns = [make_turn("u1", f"item:k{n}", i, f"conversation {n} turn {i} about ferries") for i in range(2)]
            report = ingest_turns(c, turns, EMB)
            outcomes[n] = (report.inserted, [err for _, err in report.failed])

    def put(n: int, barrier: threading.Barrier) -> None:
        with connect(app_url) as c:
            store = PgmemStore(c, embedder=EMB, floor=-1.0)
            barrier.wait()
            store.put(("u1",), f"k{n}", {"text": f"item {n} about cats"})

    for n in range(rounds):
        barrier = threading.Barrier(2)
        workers = [threading.Thread(target=f, args=(n, barrier)) for f in (converse, put)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        stored, failed = outcomes[n]
        thread = admin_conn.execute(
            "SELECT thread_id FROM pgmem.store_item WHERE scope_id = 'u1' AND item_key = %s", (f"k{n}",)
        ).fetchone()
        assert thread is not None
        assert _pieces(admin_conn, str(thread[0])) == [(0, f'{{"text": "item {n} about cats"}}')]
        conversation = [(i, f"conversation {n} turn {i} about ferries") for i in range(2)]
        if stored == 2:
            assert not failed and thread[0] != f"item:k{n}"
            assert _pieces(admin_conn, f"item:k{n}") == conversation
        else:
            assert stored == 0 and len(failed) == 2 and all(f"is store item k{n}'s" in e for e in failed)
            assert thread[0] == f"item:k{n}"
        PgmemStore(connect(app_url), embedder=EMB, floor=-1.0).delete(("u1",), f"k{n}")
        assert _pieces(admin_conn, f"item:k{n}") == (conversation if stored == 2 else [])


def test_a_turn_of_an_items_thread_at_another_time_is_refused_even_as_turn_0(conn: Conn, admin_conn: Conn) -> None:
    """The item's own turn is turn 0 at the item's created_at (the store writes it so); a
    conversation's turn 0 at any other time (or none) is not the item's."""
    store = PgmemStore(conn, embedder=EMB, floor=-1.0)
    store.put(("u1",), "k", {"text": "an item about cats"})
    row = admin_conn.execute(
        "SELECT created_at FROM pgmem.store_item WHERE scope_id = 'u1' AND item_key = 'k'"
    ).fetchone()
    assert row is not None and isinstance(row[0], datetime)
    created = row[0]
    for when in (None, created.replace(microsecond=(created.microsecond + 1) % 1_000_000)):
        turn = Turn("u1", "item:k", 0, when, ({"role": "user", "content": "not the item"},))
        report = ingest_turns(conn, [turn], EMB)
        assert report.inserted == 0 and len(report.failed) == 1, when
    assert _pieces(admin_conn, "item:k") == [(0, '{"text": "an item about cats"}')]
    with pytest.raises(DatabaseError):
        add_facts(conn, "u1", [Fact("x", thread="item:k", turn_index=0)], EMB)


def test_the_documented_query_finds_threads_an_item_shares_with_a_conversation(conn: Conn, admin_conn: Conn) -> None:
    """docs/langgraph.md's query for a store written before 0092: an item's thread that holds a
    conversation's later turns too (set up here by the superuser, as 0094 refuses the write)."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "langgraph.md").read_text(encoding="utf-8")
    query = docs.split("a superuser finds\n  them with:\n\n  ```sql\n", 1)[1].split("```", 1)[0]
    store = PgmemStore(conn, embedder=EMB, floor=-1.0)
    store.put(("u1",), "k", {"text": "an item about cats"})
    store.put(("u1",), "k2", {"text": "an item about dogs"})
    assert admin_conn.execute(query).fetchall() == []
    admin_conn.execute(
        """INSERT INTO pgmem.turn (scope_id, thread_id, turn_index, messages, content_hash, context, blend_weight,
                                   model_key)
           SELECT scope_id, thread_id, 1, '[{"role": "user", "content": "a conversation"}]', '\\x01', context,
                  blend_weight, model_key
             FROM pgmem.turn WHERE scope_id = 'u1' AND thread_id = 'item:k'"""
    )
    assert admin_conn.execute(query).fetchall() == [("u1", "k", "item:k", 1)]
