"""Forget (issue 15 item 1): a turn, a thread, a scope, a fact, a document, with the pieces,
facts and recall-log rows derived from them. Run as the app login (`conn`); `admin_conn` only
looks under row-level security to prove the rows are gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from pgmem import forget_document, forget_fact, forget_scope, forget_thread, forget_turn
from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, remove_document
from pgmem.errors import DatabaseError, InputError, ScopeError
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.ingest import ingest_turns
from pgmem.recall import embed_query, recall, recall_vectors
from tests.security_helpers import READER_LOGIN, HashEmbedder, connect_as, hash_vector, make_turn

Conn = psycopg.Connection[tuple[object, ...]]
SECRET = "my locker code is ZEBRA and the spare key hides under the blue flowerpot"
EMB = HashEmbedder()


def _store(conn: Conn, scope: str = "s") -> None:
    turns = [
        make_turn(scope, "t", 0, "we planned the harbour trip for saturday"),
        make_turn(scope, "t", 1, SECRET, tool="locker registry says ZEBRA belongs to you"),
        make_turn(scope, "t", 2, "the ferry leaves at nine"),
        make_turn(scope, "u", 0, "another thread about invoices and ledgers"),
    ]
    report = ingest_turns(conn, turns, EMB)
    assert report.inserted == 4 and not report.failed
    add_facts(
        conn,
        scope,
        [
            Fact("the user's locker code is ZEBRA", "t", 1),
            Fact("the trip is on saturday", "t", 0),
            Fact("thread u is about invoices", "u"),
        ],
        EMB,
    )


def _rows(admin: Conn, scope: str = "s") -> dict[str, int]:
    """Row counts of every scoped table, seen by the superuser (no row-level security)."""
    out = {}
    for table in ("scope", "thread", "turn", "piece", "piece_word", "fact", "recall_log", "document", "chunk"):
        row = admin.execute(f"SELECT count(*) FROM pgmem.{table} WHERE scope_id = %s", (scope,)).fetchone()
        assert row is not None
        out[table] = int(str(row[0]))
    return out


def _secret_anywhere(admin: Conn) -> list[str]:
    """Tables whose rows still hold the forgotten text (any column, as text)."""
    found = []
    for table in ("turn", "piece", "piece_word", "fact", "recall_log"):
        row = admin.execute(
            # table names are fixed; ILIKE: piece_word holds the text's lexemes, lower-cased
            f"SELECT count(*) FROM pgmem.{table} x WHERE x::text ILIKE '%%ZEBRA%%'"
        ).fetchone()
        assert row is not None
        if int(str(row[0])):
            found.append(table)
    return found


def test_forgotten_turn_never_comes_back_from_any_recall_or_explain(conn: Conn, admin_conn: Conn) -> None:
    _store(conn)
    # Recalls that found the turn, logged (memory plane, and a fact-plane log written in SQL).
    logged = recall(conn, "s", SECRET, EMB, floor=-1, x=10, log=True)
    assert logged.recall_id is not None
    assert any(h.turn_index == 1 for g in logged.groups for h in g.hits)
    facts = fact_recall(conn, "s", "locker code", EMB, floor=-1)
    fact_ids = [h.piece_id for g in facts.groups for h in g.hits]
    q = embed_query("locker code", EMB)
    with scoped(conn, "s"):
        conn.execute(
            "SELECT pgmem.log_recall('s', 'fact', 'locker code', %s, %s::vector[], 5, -1, NULL, 'vector', %s::jsonb)",
            (q.texts, list(q.blended), json.dumps([{"part_no": 1, "hits": [{"fact_id": i} for i in fact_ids]}])),
        )
    # A logged recall that never saw the turn (thread u only) stays.
    other = recall_vectors(conn, "s", ["invoices"], EMB.embed(["invoices"]), thread="u", floor=-1, log=True)
    assert other.recall_id is not None
    explain_other = "SELECT * FROM pgmem.explain_logged_recall('s', %s)"
    with scoped(conn, "s"):
        other_explained = conn.execute(explain_other, (other.recall_id,)).fetchall()
    assert other_explained
    before = _rows(admin_conn)

    done = forget_turn(conn, "s", "t", 1)
    assert (done.turns, done.pieces, done.facts, done.threads) == (1, 2, 1, 0)
    assert done.recall_logs == 2  # the memory recall and the fact recall that returned it
    after = _rows(admin_conn)
    assert after["turn"] == before["turn"] - 1 and after["piece"] == before["piece"] - 2
    assert after["piece_word"] == after["piece"] == before["piece_word"] - 2
    assert after["recall_log"] == before["recall_log"] - 2 and after["thread"] == before["thread"]
    assert _secret_anywhere(admin_conn) == []

    # The exact vector of the forgotten user piece, and its words, find nothing of turn 1.
    exact = [hash_vector(p) for p in (SECRET,)]
    with scoped(conn, "s"):
        for mode in ("vector", "hybrid"):
            rows = conn.execute(
                """SELECT turn_index FROM pgmem.memory_recall('s', %s::vector[], %s, x => 1000, floor => -1,
                                                            mode => %s, exact => true)""",
                (exact, [SECRET], mode),
            ).fetchall()
            assert rows and all(r[0] != 1 for r in rows), mode
        rows = conn.execute(
            "SELECT label FROM pgmem.explain_recall('s', %s::vector[], %s, floor => -1, show => 1000)",
            (exact, [SECRET]),
        ).fetchall()
        assert rows and not any("Turn 1 " in str(r[0]) for r in rows)
        # The recall that never saw turn 1 is still explained, as before the forget.
        assert conn.execute(explain_other, (other.recall_id,)).fetchall() == other_explained
        # And replayed; the one that returned turn 1 is no longer in the log to replay.
        replayed = conn.execute(
            "SELECT piece_id, change FROM pgmem.replay_logged_recall('s', %s)", (other.recall_id,)
        ).fetchall()
        assert replayed == [(h.piece_id, "same") for g in other.groups for h in g.hits]
    # Neither explains nor replays the recall whose log row went with the turn: each says so.
    for query in (
        "SELECT * FROM pgmem.explain_logged_recall('s', %s)",
        "SELECT * FROM pgmem.replay_logged_recall('s', %s)",
    ):
        with pytest.raises(psycopg.errors.NoDataFound, match="is not in the recall log"), scoped(conn, "s"):
            conn.execute(query, (logged.recall_id,))
    with scoped(conn, "s"):
        rows = conn.execute(
            "SELECT body FROM pgmem.fact_recall('s', %s::vector[], x => 1000, floor => -1)",
            ([hash_vector("the user's locker code is ZEBRA")],),
        ).fetchall()
        assert rows and all("ZEBRA" not in str(r[0]) for r in rows)
    again = recall(conn, "s", SECRET, EMB, floor=-1, x=100, mode="hybrid")
    assert all(h.turn_index != 1 or h.thread_id != "t" for g in again.groups for h in g.hits)
    # Forgetting again is not an error and removes nothing.
    assert forget_turn(conn, "s", "t", 1).total == 0


def test_forgotten_turn_is_gone_from_the_ann_index_path(conn: Conn, admin_conn: Conn) -> None:
    _store(conn)
    ingest_turns(conn, [make_turn("s", "filler", i, f"filler turn {i}") for i in range(100)], EMB)
    admin_conn.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => 100)")
    with scoped(conn, "s"):
        row = conn.execute("SELECT pgmem.scope_ann_index('piece', 's')").fetchone()
    assert row is not None and row[0] is not None  # recall goes through the scope's HNSW index

    def found() -> set[tuple[str, int]]:
        with scoped(conn, "s"):
            rows = conn.execute(
                "SELECT turn_index, thread_id FROM pgmem.memory_recall('s', %s::vector[], x => 100, floor => -1)",
                ([hash_vector(SECRET)],),
            ).fetchall()
        return {(str(r[1]), int(str(r[0]))) for r in rows}

    assert ("t", 1) in found()  # the index path finds the turn before it is forgotten ...
    assert forget_turn(conn, "s", "t", 1).turns == 1
    after = found()
    assert after and ("t", 1) not in after  # ... and never after


def _log_filtered_to(conn: Conn, thread: str | None, results: str = "[]") -> None:
    """A logged memory recall filtered to `thread` (the log keeps its name and the message)."""
    with scoped(conn, "s"):
        conn.execute(
            "SELECT pgmem.log_recall('s', 'memory', 'where is the harbour', ARRAY['harbour'], ARRAY[%s::vector], 5,"
            " 0.99, %s, 'vector', %s::jsonb)",
            (hash_vector("harbour"), thread, results),
        )


def test_forget_thread_and_the_last_turn_of_a_thread(conn: Conn, admin_conn: Conn) -> None:
    _store(conn)
    recall_vectors(conn, "s", ["harbour"], EMB.embed(["harbour"]), thread="t", floor=-1, log=True)
    # A recall filtered to the thread that returned nothing goes with the thread too (its filter
    # names it), as does a hit naming one of its turns (here without a piece id); u's stays.
    _log_filtered_to(conn, "t")
    _log_filtered_to(conn, None, '[{"thread_id": "t", "turn_index": 2}]')
    _log_filtered_to(conn, "u")
    done = forget_thread(conn, "s", "t")
    assert (done.threads, done.turns, done.pieces, done.facts, done.recall_logs) == (1, 3, 4, 2, 3)
    rows = _rows(admin_conn)
    assert (rows["thread"], rows["turn"], rows["fact"], rows["recall_log"]) == (1, 1, 1, 1)
    assert admin_conn.execute("SELECT thread_id, results FROM pgmem.recall_log").fetchall() == [("u", [])]
    assert forget_thread(conn, "s", "t").total == 0
    # Thread u has one turn and one fact: its turn goes, the thread stays while its fact does.
    assert forget_turn(conn, "s", "u", 0).threads == 0
    assert _rows(admin_conn)["thread"] == 1
    assert forget_thread(conn, "s", "u").as_dict() == {
        "threads": 1, "turns": 0, "pieces": 0, "facts": 1, "documents": 0, "recall_logs": 1, "store_items": 0,
    }  # fmt: skip


def test_forget_scope_leaves_other_scopes_and_can_start_again(conn: Conn, admin_conn: Conn) -> None:
    _store(conn, "s")
    _store(conn, "other")
    add_documents(conn, "s", [Document("a.md", "# A\n\nabout harbours")], EMB)
    recall(conn, "s", "harbour", EMB, floor=-1, log=True)
    other_before = _rows(admin_conn, "other")
    done = forget_scope(conn, "s")
    assert (done.threads, done.turns, done.facts, done.documents, done.recall_logs) == (2, 4, 3, 1, 1)
    assert set(_rows(admin_conn, "s").values()) == {0}
    assert _rows(admin_conn, "other") == other_before
    assert ingest_turns(conn, [make_turn("s", "t", 0, "a fresh start")], EMB).inserted == 1


def test_forget_scope_takes_the_langgraph_store_items(conn: Conn, admin_conn: Conn) -> None:
    langgraph = pytest.importorskip("pgmem.integrations.langgraph", reason="the [langgraph] extra is not installed")
    store = langgraph.PgmemStore(conn, embedder=EMB)
    store.put(("s",), "prefs", {"theme": "dark"}, index=False)
    store.put(("s",), "m1", {"text": "Luna the dog hates baths"})
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = 's'").fetchone() == (1,)
    done = forget_scope(conn, "s")
    assert done.turns == 1
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_item").fetchone() == (0,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_namespace").fetchone() == (0,)
    assert store.get(("s",), "prefs") is None


def test_forget_scope_counts_store_items_without_a_turn(conn: Conn, admin_conn: Conn, db_url: str) -> None:
    """A namespace of plain key-value items (index=False, field vectors, blank texts) has no turn:
    forget_scope removed its items and reported zeros, so `pgmem forget scope` said "nothing to
    forget" and exited 1 after erasing them. forget_scope counts the store items it removes."""
    langgraph = pytest.importorskip("pgmem.integrations.langgraph", reason="the [langgraph] extra is not installed")
    store = langgraph.PgmemStore(conn, embedder=EMB)
    store.put(("kv",), "prefs", {"theme": "dark"}, index=False)
    store.put(("kv",), "blank", {"text": "   "})
    store.put(("mixed",), "prefs", {"theme": "light"}, index=False)
    store.put(("mixed",), "m1", {"text": "Luna the dog hates baths"})
    done = forget_scope(conn, "mixed")
    assert (done.turns, done.store_items) == (1, 2)
    cli = _cli(db_url, "scope", "--scope", "kv", "--yes", "--json")
    assert cli.returncode == 0 and "nothing to forget" not in cli.stderr, (cli.stdout, cli.stderr)
    assert json.loads(cli.stdout)["store_items"] == 2
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_item").fetchone() == (0,)
    again = _cli(db_url, "scope", "--scope", "kv", "--yes")
    assert again.returncode == 1 and "nothing to forget" in again.stderr
    assert forget_thread(conn, "kv", "t").as_dict() == {
        "threads": 0, "turns": 0, "pieces": 0, "facts": 0, "documents": 0, "recall_logs": 0, "store_items": 0,
    }  # fmt: skip


def test_forget_fact(conn: Conn, admin_conn: Conn) -> None:
    _store(conn)
    ids = add_facts(conn, "s", [Fact("a fact to drop")], EMB)
    # A fact-plane log that returned it goes with it; a fact id in another plane's log is not a
    # hit of that fact (a memory recall's results are pieces), and that log stays.
    q = embed_query("a fact", EMB)
    with scoped(conn, "s"):
        for plane in ("fact", "memory"):
            conn.execute(
                "SELECT pgmem.log_recall('s', %s, 'a fact', %s, %s::vector[], 5, -1, NULL, 'vector', %s::jsonb)",
                (plane, q.texts, list(q.blended), json.dumps([{"fact_id": ids[0], "body": "a fact to drop"}])),
            )
    done = forget_fact(conn, "s", ids[0])
    assert (done.facts, done.recall_logs) == (1, 1)
    assert admin_conn.execute("SELECT plane FROM pgmem.recall_log").fetchall() == [("memory",)]
    assert forget_fact(conn, "s", ids[0]).total == 0
    assert _rows(admin_conn)["fact"] == 3
    # A fact id or turn index held by numpy is an integer as any other (a Fact's turn is too).
    import numpy as np

    more = add_facts(conn, "s", [Fact("a fact whose id is read from an array")], EMB)
    assert forget_fact(conn, "s", np.int64(more[0])).facts == 1  # type: ignore[arg-type]
    assert forget_turn(conn, "s", "t", np.int32(1)).turns == 1  # type: ignore[arg-type]


def test_a_fact_recall_logged_as_python_returns_it_goes_with_its_fact(conn: Conn, admin_conn: Conn) -> None:
    # Python's fact_recall names a fact as a Hit's piece_id (as `pgmem facts search --json`
    # does): a fact-plane log of its groups kept a forgotten fact's body (rt74).
    add_facts(conn, "s", [Fact("the locker code is ZEBRA"), Fact("the ferry leaves at nine")], EMB)
    found = fact_recall(conn, "s", "locker code", EMB, floor=-1)
    hits = [h for g in found.groups for h in g.hits]
    zebra = next(h.piece_id for h in hits if "ZEBRA" in h.body)
    q = embed_query("locker code", EMB)
    log = "SELECT pgmem.log_recall('s', 'fact', 'locker code', %s, %s::vector[], 5, -1, NULL, 'vector', %s::jsonb)"
    with scoped(conn, "s"):
        conn.execute(log, (q.texts, list(q.blended), json.dumps(found.as_dict()["groups"])))
    done = forget_fact(conn, "s", zebra)
    assert (done.facts, done.recall_logs) == (1, 1)
    assert _secret_anywhere(admin_conn) == []
    # Logged after the forget (the recall ran before it): the forgotten fact's hit is dropped.
    with scoped(conn, "s"):
        conn.execute(log, (q.texts, list(q.blended), json.dumps(found.as_dict()["groups"])))
    assert _secret_anywhere(admin_conn) == []
    assert admin_conn.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (1,)


def test_a_thread_only_facts_named_goes_with_its_last_fact(conn: Conn, admin_conn: Conn) -> None:
    """add_facts creates the row of a thread its facts name; forget_fact and forget_document took
    the facts and left the row, whose name is the caller's data. A thread left with no turn and no
    fact now goes with its last fact, as it goes with its last turn (security.md: "the thread row
    once nothing of the thread remains"); a thread with a turn or a fact left stays."""
    _store(conn)  # threads t and u have turns
    facts = [
        Fact("a fact in a thread of its own", "only-facts"),
        Fact("and another one", "only-facts"),
        Fact("the guide names the harbour", "guide-thread", section="guide.md"),
        Fact("u reads the guide", "u", section="guide.md#intro"),
    ]
    ids = add_facts(conn, "s", facts, EMB)

    def threads() -> list[str]:
        rows = admin_conn.execute("SELECT thread_id FROM pgmem.thread WHERE scope_id = 's' ORDER BY 1").fetchall()
        return [str(r[0]) for r in rows]

    assert threads() == ["guide-thread", "only-facts", "t", "u"]
    assert forget_fact(conn, "s", ids[0]).threads == 0  # one fact of it is left
    assert forget_fact(conn, "s", ids[1]).as_dict() == {
        "threads": 1, "turns": 0, "pieces": 0, "facts": 1, "documents": 0, "recall_logs": 0, "store_items": 0,
    }  # fmt: skip
    assert threads() == ["guide-thread", "t", "u"]
    done = forget_document(conn, "s", "guide.md")
    assert (done.facts, done.threads) == (2, 1)
    assert threads() == ["t", "u"]  # u keeps its turn


def test_remove_document_takes_its_facts_and_logs(conn: Conn, admin_conn: Conn) -> None:
    add_documents(
        conn, "s", [Document("guide.md", "# Guide\n\nThe locker code is ZEBRA."), Document("b.md", "# B\n\nx")], EMB
    )
    add_facts(
        conn, "s", [Fact("guide says ZEBRA", section="guide.md"), Fact("anchored ZEBRA", section="guide.md#intro")], EMB
    )
    add_facts(conn, "s", [Fact("about b", section="b.md"), Fact("guide.mdx is another id", section="guide.mdx")], EMB)
    q = embed_query("locker", EMB)
    with scoped(conn, "s"):
        conn.execute(
            "SELECT pgmem.log_recall('s', 'document', 'locker', %s, %s::vector[], 5, -1, NULL, 'vector', %s::jsonb)",
            (q.texts, list(q.blended), json.dumps([{"hits": [{"document_id": "guide.md", "chunk_body": "ZEBRA"}]}])),
        )
    assert remove_document(conn, "s", "guide.md") is True
    assert _secret_anywhere(admin_conn) == []
    rows = _rows(admin_conn)
    assert (rows["document"], rows["fact"], rows["recall_log"]) == (1, 2, 0)
    assert forget_document(conn, "s", "b.md").as_dict() == {
        "threads": 0, "turns": 0, "pieces": 1, "facts": 1, "documents": 1, "recall_logs": 0, "store_items": 0,
    }  # fmt: skip
    assert remove_document(conn, "s", "guide.md") is False


def test_forget_document_leaves_the_facts_of_a_longer_id_that_holds_a_hash(conn: Conn, admin_conn: Conn) -> None:
    """A fact's section names a document, or a place in one as id#anchor. A document id may hold
    '#' itself: the facts of 'guide.md#v2' (and of 'guide.md#v2#intro') are that document's, not
    'guide.md''s, while it exists; forgetting 'guide.md' takes only its own and its anchors'."""
    docs = [Document("guide.md", "# Guide\n\nold"), Document("guide.md#v2", "# Guide v2\n\nnew")]
    add_documents(conn, "s", docs, EMB)
    facts = [
        Fact("of guide", section="guide.md"),
        Fact("of guide's intro", section="guide.md#intro"),
        Fact("of v2", section="guide.md#v2"),
        Fact("of v2's intro", section="guide.md#v2#intro"),
        Fact("of v2x, no such document: an anchor of guide.md", section="guide.md#v2x"),
    ]
    add_facts(conn, "s", facts, EMB)

    def sections() -> list[str]:
        rows = admin_conn.execute("SELECT section FROM pgmem.fact WHERE scope_id = 's' ORDER BY 1").fetchall()
        return [str(r[0]) for r in rows]

    done = forget_document(conn, "s", "guide.md")
    assert (done.documents, done.facts) == (1, 3)
    assert sections() == ["guide.md#v2", "guide.md#v2#intro"]
    done = forget_document(conn, "s", "guide.md#v2")
    assert (done.documents, done.facts) == (1, 2)
    assert sections() == []


def test_forget_document_reads_its_chunks_and_units_once_on_statistics_of_empty_tables(
    conn: Conn, admin_conn: Conn
) -> None:
    """forget_document deleted the units with a join of piece and chunk, planned on whatever
    statistics the tables had. Planned on statistics older than the document (ANALYZE last saw
    the tables empty, or never ran), the join read the chunks once a unit, or the scope's units
    once a chunk (a nested loop): a document of 8,000 units was forgotten in 33.6 s against
    0.17 s (docs/bench/doc-removal-0058.txt). It deletes them by their chunks' ids now, one index
    scan: the rows of pgmem.chunk and pgmem.piece its transaction reads stay a few times the
    document's (7,685 chunk rows for 61 chunks before), and exactly the document's rows go. Not
    asserted: pgmem.piece_word, whose rows the foreign key's cascade still looks up one unit at a
    time on such statistics (docs/documents.md, "Removing a document right after writing it")."""
    part = "## Part {0}\n\nwords of part {0}\n\n```\ncode of part {0}\n```\n\n- a list item of {0}\n- another\n\n"
    body = "# Big\n\n" + "".join(part.format(i) for i in range(60))
    add_documents(conn, "s", [Document("big.md", body)], EMB)
    forget_document(conn, "s", "big.md")
    # The statistics of tables that hold only dead rows: the planner takes them for empty.
    admin_conn.execute("ANALYZE pgmem.piece, pgmem.chunk, pgmem.piece_word, pgmem.document")
    _store(conn)
    add_documents(conn, "s", [Document("big.md", body), Document("kept.md", "# Kept\n\nstays")], EMB)
    rows = admin_conn.execute(
        "SELECT count(DISTINCT c.chunk_id), count(*) FROM pgmem.chunk c JOIN pgmem.piece p USING (scope_id, chunk_id)"
        " WHERE c.scope_id = 's' AND c.document_id = 'big.md'"
    ).fetchone()
    assert rows is not None
    chunks, units = int(str(rows[0])), int(str(rows[1]))
    assert chunks > 60 and units > 2 * chunks
    before = _rows(admin_conn)

    def rows_read() -> dict[str, int]:
        # This backend's counts not yet reported; read twice in one transaction, the difference
        # is what came between (they are reported only while no transaction is open).
        got = conn.execute(
            "SELECT relname, seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'pgmem' AND relname IN ('chunk', 'piece')"
        ).fetchall()
        return {str(k): int(str(v)) for k, v in got}

    with conn.transaction():
        start = rows_read()
        assert forget_document(conn, "s", "big.md").pieces == units
        read = {k: v - start[k] for k, v in rows_read().items()}
    assert read["chunk"] <= 3 * chunks and read["piece"] <= 3 * units, (read, chunks, units)
    after = _rows(admin_conn)
    assert after == {**before, "document": 1, "chunk": before["chunk"] - chunks, "piece": before["piece"] - units,
                     "piece_word": before["piece_word"] - units}  # fmt: skip


def test_forget_is_bound_to_the_transactions_scope(conn: Conn, admin_conn: Conn) -> None:
    _store(conn, "victim")
    before = _rows(admin_conn, "victim")
    calls = [
        ("SELECT * FROM pgmem.forget_turn('victim', 't', 1)", ()),
        ("SELECT * FROM pgmem.forget_thread('victim', 't')", ()),
        ("SELECT * FROM pgmem.forget_fact('victim', 1)", ()),
        ("SELECT * FROM pgmem.forget_document('victim', 'a.md')", ()),
        ("SELECT * FROM pgmem.forget_scope('victim')", ()),
    ]
    for call, args in calls:
        for scope in ("attacker", None):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                if scope:
                    conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
                conn.execute(call, args)
    # Under its own scope, the attacker's forget reaches none of the victim's rows.
    assert forget_scope(conn, "attacker").total == 0
    assert _rows(admin_conn, "victim") == before
    # No table privilege: only the functions delete.
    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'victim', true)")
        conn.execute("DELETE FROM pgmem.turn")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda c: forget_turn(c, "s", "t\x00x", 1), "NUL"),
        (lambda c: forget_turn(c, "s", "t\udcff", 1), "lone surrogate"),
        (lambda c: forget_turn(c, "s", "t", -1), "turn_index"),
        (lambda c: forget_turn(c, "s", "t", True), "turn_index"),
        (lambda c: forget_turn(c, "s", "t", 2**31), "turn_index"),
        (lambda c: forget_turn(c, "s", "t", "1"), "turn_index"),  # type: ignore[arg-type]
        (lambda c: forget_thread(c, "s", ["t"]), "thread"),  # type: ignore[arg-type]
        (lambda c: forget_thread(c, "s", "t" * 10_000), "at most 200"),
        (lambda c: forget_fact(c, "s", 1.5), "fact_id"),  # type: ignore[arg-type]
        (lambda c: forget_scope(c, ""), "scope"),
        (lambda c: forget_document(c, "s", {"id": 1}), "document_id"),  # type: ignore[arg-type]
    ],
)
def test_hostile_forget_arguments_are_input_errors(conn: Conn, admin_conn: Conn, call: object, match: str) -> None:
    _store(conn)
    before = _rows(admin_conn)
    with pytest.raises(InputError, match=match):
        call(conn)  # type: ignore[operator]
    assert _rows(admin_conn) == before


def test_database_refusal_is_a_pgmem_error(conn: Conn, admin_conn: Conn, db_url: str) -> None:
    # A NULL from SQL, not Python: the function's own refusal.
    with pytest.raises(psycopg.errors.NullValueNotAllowed), scoped(conn, "s"):
        conn.execute("SELECT * FROM pgmem.forget_turn('s', NULL, 1)")
    # A role without pgmem_app membership cannot run them: through the Python API, the
    # database's refusal is a PgmemError keeping its SQLSTATE, and nothing is removed.
    _store(conn)
    before = _rows(admin_conn)
    reader = connect_as(db_url, READER_LOGIN)
    try:
        with pytest.raises(ScopeError) as err:
            forget_turn(reader, "s", "t", 1)
    finally:
        reader.close()
    assert isinstance(err.value, DatabaseError) and err.value.sqlstate == "42501", err.value
    assert "forget_turn" in str(err.value)
    assert _rows(admin_conn) == before


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    from tests.security_helpers import APP_LOGIN, role_url

    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN)}
    return subprocess.run(
        [sys.executable, "-m", "pgmem", "forget", *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.long
def test_cli_forget(conn: Conn, admin_conn: Conn, db_url: str) -> None:
    _store(conn)
    done = _cli(db_url, "turn", "--scope", "s", "t", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["turns"] == 1
    again = _cli(db_url, "turn", "--scope", "s", "t", "1")
    assert again.returncode == 1 and "nothing to forget" in again.stderr
    thread = _cli(db_url, "thread", "--scope", "s", "u")
    assert thread.returncode == 0 and thread.stdout.startswith("1 threads, 1 turns")
    refused = _cli(db_url, "scope", "--scope", "s")
    assert refused.returncode == 2 and "--yes" in refused.stderr and refused.stderr.count("\n") == 1
    bad = _cli(db_url, "thread", "--scope", "s", "bad\udcffname")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert _cli(db_url, "scope", "--scope", "s", "--yes").returncode == 0
    assert set(_rows(admin_conn).values()) == {0}


def test_forgetting_a_turn_never_takes_a_turn_written_meanwhile(conn: Conn, admin_conn: Conn, app_url: str) -> None:
    """A turn of the same thread stored while forget_turn runs survives it: forgetting the thread's
    last turn removes the thread row only when no other turn of it exists once the writer is done
    (the thread's delete would otherwise cascade to the new turn)."""
    import threading

    from pgmem.db import connect

    ingest_turns(conn, [make_turn("s", "t", 0, "the only turn so far")], EMB)
    writer = connect(app_url, autocommit=False)
    try:
        writer.execute("SELECT set_config('pgmem.scope', 's', true)")
        writer.execute(
            """SELECT pgmem.put_turn('s', 't', 1, NULL, '[]'::jsonb, '\\x01', 'test:hash', ARRAY['user'], ARRAY[0],
                                     ARRAY['[Turn 1 · User]'], ARRAY['written meanwhile'], %s::vector[])""",
            ([hash_vector("written meanwhile")],),
            binary=True,
        )
        result: list[object] = []
        forgetter = threading.Thread(target=lambda: result.append(forget_turn(conn, "s", "t", 0)))
        forgetter.start()
        forgetter.join(0.5)
        writer.commit()
        forgetter.join(30)
        assert not forgetter.is_alive()
    finally:
        writer.close()
    assert result and result[0].turns == 1  # type: ignore[attr-defined]
    assert admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall() == [("t", 1)]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (1,)
    assert admin_conn.execute("SELECT thread_id FROM pgmem.thread").fetchall() == [("t",)]


def test_a_thread_gone_with_its_last_turn_takes_the_recalls_filtered_to_it(conn: Conn, admin_conn: Conn) -> None:
    """forget_thread takes the logged recalls filtered to the thread; a forget_turn of its last
    turn, or retention removing it, took the thread row but left those recalls, which hold the
    thread's name and their messages (a recall that found nothing named no piece to match)."""
    from tests.test_retention import _set

    ingest_turns(conn, [make_turn("s", "t", 0, "the ferry leaves at nine"), make_turn("s", "u", 0, "invoices")], EMB)
    ingest_turns(conn, [make_turn("s", "v", 0, "ledgers"), make_turn("s", "v", 1, "receipts")], EMB)
    for thread in ("t", "u", "v"):
        recall(conn, "s", "what did I say about the ferry", EMB, thread=thread, floor=0.999, log=True)

    def logged() -> list[object]:
        rows = admin_conn.execute("SELECT thread_id FROM pgmem.recall_log WHERE scope_id = 's' ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    assert logged() == ["t", "u", "v"]
    done = forget_turn(conn, "s", "t", 0)
    assert (done.threads, done.turns, done.recall_logs) == (1, 1, 1)
    assert logged() == ["u", "v"]
    assert forget_turn(conn, "s", "v", 0).recall_logs == 0  # thread v keeps turn 1: its recalls stay
    assert logged() == ["u", "v"]
    admin_conn.execute("UPDATE pgmem.turn SET turn_time = now() - interval '40 days' WHERE scope_id = 's'")
    _set(conn, "s", keep_days=30)
    rows = admin_conn.execute("SELECT turns, threads, recall_logs FROM pgmem.apply_retention()").fetchall()
    assert rows == [(2, 2, 2)]
    assert logged() == []
