"""Index maintenance and the structures recall relies on, checked against what recall must
return: a scope's partial ANN index with its write tail (pieces after pgmem.ann_index_through,
searched exactly beside the index) must give what exact search gives, and the word side's
folded postings (pgmem.word_fold, its tail and the trigger that deletes a fold holding a
forgotten piece) must give what the word index gives (pgmem.word_fold = off). Each test here
fails on a mutation of 060_indexes.sql or 030_recall.sql that the other tests let through."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents
from pgmem.ingest import ingest_turns
from tests.conftest import TEST_DIMS
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, app_conn, connect_as, make_turn
from tests.test_write_tail import META, _put_turn, _stored, _unit, indexed
from tests.test_write_tail import SCOPE as WIDE

__all__ = ["app_conn", "indexed"]

MODEL = "test:hash"
SCOPE = "ixfold"
OTHER = "ixfold-other"
N = 1500
#: Words in 136 or 137 of the 1,500 pieces: folded with their ids (more than 128, at most the
#: fold's cap of 160) and searched at the default share (at most 150 pieces).
FOLDED = [f"k{j:02d}q" for j in range(11)]


def _text(p: int) -> str:
    return f"{FOLDED[p % 11]} r{p % 50:02d}q u{p:05d}q"


def _embedder() -> HashEmbedder:
    return HashEmbedder(model_id=MODEL)


def _add(conn: Conn, scope: str, thread: str, texts: list[str], first: int = 0) -> None:
    turns = [make_turn(scope, thread, first + i, t) for i, t in enumerate(texts)]
    assert not ingest_turns(conn, turns, _embedder()).failed


@pytest.fixture
def folded(app_conn: Conn, admin_conn: Conn) -> int:
    """SCOPE: 1,500 memory pieces (one a turn, 3 threads) with its piece index (a cheap graph)
    and its word fold; OTHER: 20 pieces. Returns the index's last piece id."""
    turns = [make_turn(SCOPE, f"t{p % 3}", p // 3, _text(p)) for p in range(N)]
    turns += [make_turn(OTHER, "t", i, _text(i)) for i in range(20)]
    assert not ingest_turns(app_conn, turns, _embedder(), bulk=True).failed
    admin_conn.execute("ANALYZE pgmem.piece")
    made = admin_conn.execute(
        "SELECT plane, action FROM pgmem.index_large_scopes(min_pieces => 1000, m => 16, ef_construction => 64)"
    ).fetchall()
    assert made == [("piece", "create"), ("words", "postings")]
    row = admin_conn.execute("SELECT pgmem.ann_index_through(pgmem.scope_ann_index('piece', %s))", (SCOPE,)).fetchone()
    assert row is not None and row[0] is not None
    return int(str(row[0]))


def _recall(conn: Conn, queries: list[object], x: int, *, exact: bool) -> list[tuple[int, int]]:
    with scoped(conn, SCOPE):
        rows = conn.execute(
            "SELECT part_no, piece_id FROM pgmem.memory_recall(scope => %s, part_vectors => %s::vector[], x => %s,"
            " floor => -1, ef_search => 400, exact => %s) ORDER BY part_no, rank",
            (SCOPE, queries, x, exact),
            binary=True,
        ).fetchall()
    return [(int(str(p)), int(str(i))) for p, i in rows]


def _index_scans(conn: Conn) -> int:
    row = conn.execute("SELECT pg_stat_get_xact_numscans(pgmem.scope_ann_index('piece', %s))", (SCOPE,)).fetchone()
    return int(str(row[0])) if row else 0


def _embeddings(admin: Conn, where: str, args: tuple[object, ...]) -> list[tuple[int, object]]:
    rows = admin.execute(
        f"SELECT piece_id, embedding FROM pgmem.piece WHERE {where} ORDER BY piece_id", args, binary=True
    ).fetchall()
    return [(int(str(r[0])), r[1]) for r in rows]


def _words(conn: Conn, scope: str, messages: list[list[str]], *, fold: bool) -> list[list[tuple[object, ...]]]:
    """_word_postings and word_candidates of each message (each word's pieces sorted), with the
    fold read or not (pgmem.word_fold = off reads the word index)."""
    out = []
    with scoped(conn, scope):
        conn.execute("SELECT set_config('pgmem.word_fold', %s, true)", ("on" if fold else "off",))
        for m in messages:
            out.append(
                conn.execute(
                    "SELECT part_no, lexeme, pieces, weight, ARRAY(SELECT unnest(piece_ids) ORDER BY 1)"
                    " FROM pgmem._word_postings(%s, %s) ORDER BY 1, 2",
                    (scope, m),
                ).fetchall()
            )
            out.append(conn.execute("SELECT * FROM pgmem.word_candidates(%s, %s, 20)", (scope, m)).fetchall())
    return out


def _fold_read(conn: Conn, scope: str, message: list[str]) -> bool:
    with scoped(conn, scope):
        before = _fold_scans(conn)
        conn.execute("SELECT count(*) FROM pgmem.word_candidates(%s, %s, 20)", (scope, message))
        return _fold_scans(conn) > before


def _fold_scans(conn: Conn) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(coalesce(idx_scan, 0) + seq_scan), 0) FROM pg_stat_xact_user_tables"
        " WHERE relid = 'pgmem.word_fold'::regclass"
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


MESSAGES = [[" ".join(FOLDED[:6]), " ".join(FOLDED[6:])], [f"{FOLDED[3]} r07q", f"{FOLDED[9]} {FOLDED[10]}"]]


def _heads(admin: Conn) -> list[tuple[object, ...]]:
    return admin.execute("SELECT scope_id, kind FROM pgmem.word_fold_head ORDER BY 1, 2").fetchall()


# The piece index and its write tail ----------------------------------------------------------


def test_the_last_indexed_piece_and_the_tail_rank_as_in_exact_search(
    app_conn: Conn, admin_conn: Conn, folded: int
) -> None:
    """The piece the index was built through is in the graph only (the tail is piece_id >
    through), and a tail of several near pieces fills the top x as exact search does: no piece
    twice, none left out."""
    rng = np.random.default_rng(5)
    ((last, last_vec),) = _embeddings(admin_conn, "piece_id = %s", (folded,))
    q = rng.standard_normal(TEST_DIMS).astype(np.float32)
    q /= np.linalg.norm(q)
    near = [q + 0.05 * rng.standard_normal(TEST_DIMS).astype(np.float32) for _ in range(6)]
    near = [v / np.linalg.norm(v) for v in near]
    with scoped(app_conn, SCOPE):
        app_conn.execute(
            """SELECT pgmem.put_turn(scope => %s, thread => 'tail', turn_index => 0, turn_time => NULL,
                   messages => '[]'::jsonb, content_hash => '\\x01'::bytea, model_id => %s,
                   unit_kinds => %s, source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[])""",
            (SCOPE, MODEL, ["user"] * 6, list(range(6)), ["l"] * 6, [f"near{i}" for i in range(6)], near),
            binary=True,
        )
    tail = [i for i, _ in _embeddings(admin_conn, "scope_id = %s AND thread_id = 'tail'", (SCOPE,))]
    assert min(tail) > folded
    ((first, first_vec),) = _embeddings(admin_conn, "piece_id = %s", (min(tail),))
    queries = [last_vec, q, first_vec]
    with scoped(app_conn, SCOPE):
        got = _recall(app_conn, queries, 5, exact=False)
        assert _index_scans(app_conn) > 0  # through the index, with its tail
    assert got == _recall(app_conn, queries, 5, exact=True)
    assert len(set(got)) == len(got) == 15
    assert got[0] == (1, last) and got[10] == (3, first)
    assert {i for p, i in got if p == 2} <= set(tail)


def test_a_document_in_an_indexed_scope_is_never_a_memory_hit(app_conn: Conn, admin_conn: Conn, folded: int) -> None:
    """Document units written after the index are in the scope's tail range (piece_id >
    through) but are not memory: recall through the index never returns them."""
    body = "# Notes\n\n" + "".join(f"## Part {i}\n\nThe {FOLDED[i]} part, section {i}.\n\n" for i in range(6))
    add_documents(app_conn, SCOPE, [Document("notes.md", body)], _embedder())
    units = _embeddings(admin_conn, "scope_id = %s AND kind = 'document'", (SCOPE,))
    assert units and min(i for i, _ in units) > folded
    queries = [v for _, v in units[:4]]
    with scoped(app_conn, SCOPE):
        got = _recall(app_conn, queries, 3, exact=False)
        assert _index_scans(app_conn) > 0
    assert not {i for _, i in got} & {i for i, _ in units}
    assert got == _recall(app_conn, queries, 3, exact=True)


def test_another_scopes_later_pieces_are_never_hits_even_bypassing_row_security(
    app_conn: Conn, admin_conn: Conn, folded: int
) -> None:
    """Pieces of another scope written after the index have higher ids than it holds too: the
    tail is the scope's own, for a role that row-level security does not filter as well."""
    ((_, last_vec),) = _embeddings(admin_conn, "piece_id = %s", (folded,))
    vec = np.asarray(last_vec.to_numpy(), dtype=np.float32)  # type: ignore[attr-defined]
    with scoped(app_conn, OTHER):
        app_conn.execute(
            """SELECT pgmem.put_turn(scope => %s, thread => 'near', turn_index => 0, turn_time => NULL,
                   messages => '[]'::jsonb, content_hash => '\\x02'::bytea, model_id => %s,
                   unit_kinds => %s, source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[])""",
            (OTHER, MODEL, ["user"] * 3, [0, 1, 2], ["l"] * 3, ["a", "b", "c"], [vec] * 3),
            binary=True,
        )
    others = {i for i, _ in _embeddings(admin_conn, "scope_id = %s", (OTHER,))}
    got = _recall(admin_conn, [last_vec], 5, exact=False)
    assert not {i for _, i in got} & others
    assert got == _recall(admin_conn, [last_vec], 5, exact=True)


@pytest.mark.long
def test_a_broad_metadata_filter_through_the_index_keeps_the_whole_tail(
    conn: Conn, admin_conn: Conn, indexed: int
) -> None:
    """More than 5,000 pieces match: the filtered search goes through the index and the tail,
    and finds the tail's first piece and the index's last as exact search does."""
    rng = np.random.default_rng(7)
    _put_turn(conn, 100, _unit(rng, 10))
    ids, vecs = _stored(admin_conn, 100)
    assert min(ids) > indexed
    ((_, last_vec),) = _embeddings(admin_conn, "piece_id = %s", (indexed,))
    queries = [vecs[0], np.asarray(last_vec.to_numpy(), dtype=np.float32), vecs[9]]  # type: ignore[attr-defined]
    sql = (
        "SELECT part_no, rank, piece_id FROM pgmem.memory_recall(scope => %s, part_vectors => %s::vector[], x => 3,"
        " floor => -1, ef_search => 400, metadata_filter => %s::jsonb, exact => %s) ORDER BY part_no, rank"
    )
    with scoped(conn, WIDE):
        got = conn.execute(sql, (WIDE, queries, json.dumps(META), False), binary=True).fetchall()
        scans = conn.execute("SELECT pg_stat_get_xact_numscans(pgmem.scope_ann_index('piece', %s))", (WIDE,)).fetchone()
        assert scans is not None and int(str(scans[0])) > 0  # through the index
        exact = conn.execute(sql, (WIDE, queries, json.dumps(META), True), binary=True).fetchall()
    # Each part's nearest: the tail's first piece, the index's last, the tail's last.
    assert [(int(str(p)), int(str(i))) for p, r, i in got if r == 1] == [(1, ids[0]), (2, indexed), (3, ids[9])]
    assert got == exact


# The word fold: its tail, its kinds, its forgets, its writers -------------------------------------


def test_the_fold_and_its_tail_hold_only_the_scope_and_kind_searched(
    app_conn: Conn, owner: Conn, admin_conn: Conn, folded: int
) -> None:
    """Pieces written after the fold in another scope, and document units of the same scope
    (before the fold and after), carry the fold's words: the memory word side of the scope
    reads none of them, folded or through the index."""
    add_documents(app_conn, SCOPE, [Document("a.md", f"# A\n\n{' '.join(FOLDED)} first\n")], _embedder())
    assert owner.execute("SELECT pgmem.refresh_word_fold(%s)", (SCOPE,)).fetchone() != (0,)
    _add(app_conn, SCOPE, "late", [_text(p) for p in range(8)])
    _add(app_conn, OTHER, "late", [" ".join(FOLDED)] * 8, first=100)
    add_documents(app_conn, SCOPE, [Document("b.md", f"# B\n\n{' '.join(FOLDED)} second\n")], _embedder())
    assert _fold_read(app_conn, SCOPE, MESSAGES[0])
    assert _words(app_conn, SCOPE, MESSAGES, fold=True) == _words(app_conn, SCOPE, MESSAGES, fold=False)


def test_a_forget_across_the_folds_last_piece_deletes_the_fold(
    app_conn: Conn, owner: Conn, admin_conn: Conn, folded: int
) -> None:
    """One delete of pieces both in the fold and after it (a thread written on both sides of a
    refresh) deletes the fold: a forgotten piece is never a word hit."""
    _add(app_conn, SCOPE, "span", [_text(p) for p in range(3)])
    assert owner.execute("SELECT pgmem.refresh_word_fold(%s)", (SCOPE,)).fetchone() != (0,)
    _add(app_conn, SCOPE, "span", [_text(p) for p in range(3, 6)], first=3)
    assert _heads(admin_conn) == [(SCOPE, "memory")]
    with scoped(app_conn, SCOPE):
        app_conn.execute("SELECT * FROM pgmem.forget_thread(%s, 'span')", (SCOPE,))
    assert _heads(admin_conn) == []
    assert _words(app_conn, SCOPE, MESSAGES, fold=True) == _words(app_conn, SCOPE, MESSAGES, fold=False)


def test_the_refresh_waits_for_a_writer_that_holds_lower_ids(
    app_conn: Conn, owner: Conn, admin_conn: Conn, db_url: str, folded: int
) -> None:
    """A writer that took its piece ids before another writer committed higher ones is still in
    flight when the fold is refreshed: the refresh waits for it, so its pieces are in the fold
    (their ids are below the fold's last) and the word side finds them; a writer that commits
    while the refresh waits is the fold's tail, read once."""
    slow = [f"{FOLDED[i]} slow{i}q" for i in range(4)]
    with connect_as(db_url, APP_LOGIN) as first:
        with scoped(first, SCOPE):
            _add(first, SCOPE, "slow", slow)  # ids taken, not committed
            _add(app_conn, SCOPE, "fast", [_text(p) for p in range(4)])  # higher ids, committed
            pid = owner.execute("SELECT pg_backend_pid()").fetchone()
            errors: list[BaseException] = []

            def refresh() -> None:
                try:
                    owner.execute("SELECT pgmem.refresh_word_fold(%s)", (SCOPE,))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            t = threading.Thread(target=refresh)
            t.start()
            # Until the refresh waits on a lock (it must: the writer holds the scope row) or is done.
            for _ in range(600):
                row = admin_conn.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid[0] if pid else None,)
                ).fetchone()
                if not t.is_alive() or (row and row[0] == "Lock"):
                    break
                time.sleep(0.05)
            # A writer that comes while the refresh waits takes ids above the fold's last: the tail.
            _add(app_conn, SCOPE, "later", [f"{FOLDED[i]} later{i}q" for i in range(4)])
        t.join(60)
    assert not errors, errors
    ids = [i for i, _ in _embeddings(admin_conn, "scope_id = %s AND thread_id = 'slow'", (SCOPE,))]
    head = admin_conn.execute("SELECT through FROM pgmem.word_fold_head WHERE scope_id = %s", (SCOPE,)).fetchone()
    assert head is not None and max(ids) < int(str(head[0]))
    later = [i for i, _ in _embeddings(admin_conn, "scope_id = %s AND thread_id = 'later'", (SCOPE,))]
    assert min(later) > int(str(head[0]))
    message = [" ".join(f"{FOLDED[i]} slow{i}q" for i in range(4))]
    assert _fold_read(app_conn, SCOPE, message)
    assert _words(app_conn, SCOPE, [message], fold=True) == _words(app_conn, SCOPE, [message], fold=False)
    with scoped(app_conn, SCOPE):
        found = app_conn.execute(
            "SELECT DISTINCT unnest(piece_ids) FROM pgmem._word_postings(%s, %s) WHERE lexeme = %s",
            (SCOPE, message, FOLDED[0]),
        ).fetchall()
    assert min(ids) in {int(str(r[0])) for r in found}


def test_a_refresh_under_repeatable_read_is_refused_rather_than_missing_a_writer(
    app_conn: Conn, owner: Conn, admin_conn: Conn, db_url: str, folded: int
) -> None:
    """Under REPEATABLE READ (or SERIALIZABLE) the refresh's snapshot is taken before it waits for
    the writers in flight, so the pieces of one that then commits (ids below the fold's last) are
    not seen: the fold would hold its words without them. It is refused instead (25000), at once,
    and the fold left as it was; READ COMMITTED, the default, folds them in."""
    slow = [f"{FOLDED[i]} slow{i}q" for i in range(4)]
    message = [" ".join(slow)]
    with connect_as(db_url, APP_LOGIN) as first, scoped(first, SCOPE):
        _add(first, SCOPE, "slow", slow)  # ids taken, not committed
        _add(app_conn, SCOPE, "fast", [_text(p) for p in range(4)])  # higher ids, committed
        for level in ("REPEATABLE READ", "SERIALIZABLE"):
            with pytest.raises(psycopg.errors.InvalidTransactionState) as e, owner.transaction():
                owner.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
                # Refused at once; a refresh that waited for the writer would wait for this test.
                owner.execute("SET LOCAL lock_timeout = '20s'")
                owner.execute("SELECT pgmem.refresh_word_fold(%s)", (SCOPE,))
            assert "read committed" in (e.value.diag.message_primary or "").lower()
            assert "\n" not in (e.value.diag.message_primary or "")
    assert _heads(admin_conn) == [(SCOPE, "memory")]
    assert _words(app_conn, SCOPE, [message], fold=True) == _words(app_conn, SCOPE, [message], fold=False)
    assert owner.execute("SELECT pgmem.refresh_word_fold(%s)", (SCOPE,)).fetchone() != (0,)
    assert _fold_read(app_conn, SCOPE, message)
    assert _words(app_conn, SCOPE, [message], fold=True) == _words(app_conn, SCOPE, [message], fold=False)
