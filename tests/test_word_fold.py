"""The word side's folded postings (pgmem.word_fold, migration 0033): index maintenance folds a
scope's postings, one row a lexeme in more than 128 of its pieces with their ids (a row of
pgmem.scope_index_plan, running pgmem.refresh_word_fold); scope-wide, the word side reads those
rows and the pieces written since (the tail) instead of one heap row a piece through the word
index. A forget of a folded piece deletes the fold at once. The words and pieces are the same
either way (setting pgmem.word_fold = off reads the index)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.ingest import ingest_turns
from tests.conftest import MAINTENANCE_LOGIN
from tests.security_helpers import (
    APP_LOGIN,
    Conn,
    HashEmbedder,
    app_conn,
    connect_as,
    graded_texts,
    make_turn,
)

__all__ = ["app_conn"]

MODEL = "test:hash"
BIG = "folded"
SMALL = "unfolded"
VOCAB = [f"f{i:03d}q" for i in range(80)]
PLAN = "SELECT scope_id, action, ddl FROM pgmem.scope_index_plan() WHERE plane = 'words' AND action = 'postings'"


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    # Words read through the index (in 128 pieces or fewer), folded with their ids, and folded
    # with their count only (above the cap).
    return graded_texts(rng, VOCAB, n)


def _message(rng: np.random.Generator) -> list[str]:
    return [" ".join(rng.choice(VOCAB[:30], size=10, replace=False)) for _ in range(4)]


def _add(conn: Conn, scope: str, thread: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    turns = [make_turn(scope, thread, i, t) for i, t in enumerate(_texts(rng, n))]
    assert not ingest_turns(conn, turns, HashEmbedder(model_id=MODEL)).failed


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    """BIG: 2,000 memory pieces in 5 threads (one piece a turn); SMALL: 40."""
    rng = np.random.default_rng(33)
    turns = [make_turn(BIG, f"t{i % 5}", i // 5, t) for i, t in enumerate(_texts(rng, 2000))]
    turns += [make_turn(SMALL, "t", i, t) for i, t in enumerate(_texts(rng, 40))]
    assert not ingest_turns(app_conn, turns, HashEmbedder(model_id=MODEL), bulk=True).failed
    return app_conn


def _words(
    conn: Conn, scope: str, messages: list[list[str]], *, fold: bool = True, share: float = 0.1
) -> list[list[tuple[object, ...]]]:
    """_word_postings and word_candidates of each message, with each word's pieces sorted; with
    fold False, as pgmem.word_fold = off (through the index); share: the word side's share."""
    out = []
    with scoped(conn, scope):
        conn.execute("SELECT set_config('pgmem.word_fold', %s, true)", ("on" if fold else "off",))
        for m in messages:
            out.append(
                conn.execute(
                    "SELECT part_no, lexeme, pieces, weight, ARRAY(SELECT unnest(piece_ids) ORDER BY 1)"
                    " FROM pgmem._word_postings(%s, %s, NULL, %s) ORDER BY 1, 2",
                    (scope, m, share),
                ).fetchall()
            )
            out.append(
                conn.execute("SELECT * FROM pgmem.word_candidates(%s, %s, 10, NULL, %s)", (scope, m, share)).fetchall()
            )
    return out


def _fold_reads(conn: Conn, scope: str, messages: list[list[str]], *, fold: bool = True, share: float = 0.1) -> int:
    """How often the word side read pgmem.word_fold for these messages (the transaction's counts
    before and after)."""
    with scoped(conn, scope):
        conn.execute("SELECT set_config('pgmem.word_fold', %s, true)", ("on" if fold else "off",))
        before = _fold_scans(conn)
        for m in messages:
            conn.execute("SELECT count(*) FROM pgmem.word_candidates(%s, %s, 10, NULL, %s)", (scope, m, share))
        return _fold_scans(conn) - before


def _fold_scans(conn: Conn) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(coalesce(idx_scan, 0) + seq_scan), 0) FROM pg_stat_xact_user_tables"
        " WHERE relid = 'pgmem.word_fold'::regclass"
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def _run_plan(owner: Conn) -> list[str]:
    done = []
    for scope, _action, ddl in owner.execute(PLAN).fetchall():
        owner.execute(str(ddl))
        done.append(str(scope))
    return done


def _heads(admin_conn: Conn) -> list[tuple[object, ...]]:
    return admin_conn.execute(
        "SELECT scope_id, kind, through, pieces, cap FROM pgmem.word_fold_head ORDER BY 1, 2"
    ).fetchall()


def _expected_fold(admin_conn: Conn, scope: str, through: int, cap: int) -> dict[str, tuple[int, list[int] | None]]:
    """What the fold should hold, from pgmem.piece_word in Python."""
    postings: dict[str, list[int]] = {}
    for piece_id, lexemes in admin_conn.execute(
        "SELECT piece_id, lexemes FROM pgmem.piece_word WHERE scope_id = %s AND kind = 'memory' AND piece_id <= %s",
        (scope, through),
    ).fetchall():
        for lx in str(lexemes).split(" "):
            postings.setdefault(lx, []).append(int(str(piece_id)))
    return {lx: (len(ids), sorted(ids) if len(ids) <= cap else None) for lx, ids in postings.items() if len(ids) > 128}


def _stored_fold(admin_conn: Conn, scope: str) -> dict[str, tuple[int, list[int] | None]]:
    return {
        str(lx): (int(str(n)), ids)  # type: ignore[misc]
        for lx, n, ids in admin_conn.execute(
            "SELECT lexeme, pieces, ids FROM pgmem.word_fold WHERE scope_id = %s AND kind = 'memory'", (scope,)
        ).fetchall()
    }


def test_the_plan_folds_the_postings_and_the_word_side_reads_them(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(1)
    messages = [_message(rng) for _ in range(6)]
    indexed = _words(store, BIG, messages)
    assert [(s, a) for s, a, _ in owner.execute(PLAN).fetchall()] == [(BIG, "postings")]  # SMALL: 40 pieces
    assert _run_plan(owner) == [BIG]
    assert owner.execute(PLAN).fetchall() == []
    # What is stored: every lexeme in more than 128 of the pieces, with their ids up to the cap.
    ((scope, kind, through, pieces, cap),) = _heads(admin_conn)
    assert (scope, kind, pieces, cap) == (BIG, "memory", 2000, 210)
    expected = _expected_fold(admin_conn, BIG, int(str(through)), 210)
    assert _stored_fold(admin_conn, BIG) == expected
    assert any(ids is None for _, ids in expected.values()) and any(ids for _, ids in expected.values())
    # The word side reads it, as the service's login, and finds the same words and pieces.
    assert _words(store, BIG, messages) == indexed
    assert _fold_reads(store, BIG, messages) > 0
    assert _fold_reads(store, BIG, messages, fold=False) == 0
    # In a thread, and in another scope, the fold is not read; only its own scope's rows are visible.
    with scoped(store, BIG):
        before = _fold_scans(store)
        store.execute("SELECT count(*) FROM pgmem.word_candidates(%s, %s, 10, 't1')", (BIG, messages[0]))
        assert _fold_scans(store) == before
    with scoped(store, SMALL):
        assert store.execute("SELECT count(*) FROM pgmem.word_fold").fetchone() == (0,)
        assert store.execute("SELECT count(*) FROM pgmem.word_fold_head").fetchone() == (0,)
    # A share above the default needs words the fold has the count of only: the index is read.
    assert _fold_reads(store, BIG, messages, share=0.5) == 0
    assert _words(store, BIG, messages, share=0.5) == _words(store, BIG, messages, fold=False, share=0.5)


def test_the_tail_is_read_beside_the_fold_and_the_plan_folds_it_in(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(2)
    messages = [_message(rng) for _ in range(6)]
    _run_plan(owner)
    # 30 pieces since: read directly beside the fold (at most 100 are), the same words and pieces.
    _add(store, BIG, "w1", 30, seed=3)
    assert _fold_reads(store, BIG, messages) > 0
    assert _words(store, BIG, messages) == _words(store, BIG, messages, fold=False)
    assert owner.execute(PLAN).fetchall() == []
    # 60: half of what is read directly, so the plan folds again; past 100 the index is read.
    _add(store, BIG, "w2", 30, seed=4)
    assert [s for s, _, _ in owner.execute(PLAN).fetchall()] == [BIG]
    _add(store, BIG, "w3", 50, seed=5)
    assert _fold_reads(store, BIG, messages) == 0
    assert _words(store, BIG, messages) == _words(store, BIG, messages, fold=False)
    assert _run_plan(owner) == [BIG]
    ((_, _, through, pieces, _),) = _heads(admin_conn)
    assert pieces == 2110 and _stored_fold(admin_conn, BIG) == _expected_fold(admin_conn, BIG, int(str(through)), 221)
    assert _words(store, BIG, messages) == _words(store, BIG, messages, fold=False)


def test_a_forget_of_a_folded_piece_deletes_the_fold_at_once(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(6)
    messages = [_message(rng) for _ in range(6)]
    _add(store, BIG, "late", 5, seed=7)
    _run_plan(owner)
    _add(store, BIG, "tail", 5, seed=8)
    # A piece of the tail goes: the fold stays, and is still read.
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_thread(%s, 'tail')", (BIG,))
    assert [h[0] for h in _heads(admin_conn)] == [BIG]
    assert _words(store, BIG, messages) == _words(store, BIG, messages, fold=False)
    # A folded piece goes: its fold and every row of it go in the same transaction.
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_turn(%s, 'late', 4)", (BIG,))
        assert store.execute("SELECT count(*) FROM pgmem.word_fold").fetchone() == (0,)
    assert _heads(admin_conn) == []
    assert admin_conn.execute("SELECT count(*) FROM pgmem.word_fold").fetchone() == (0,)
    assert _words(store, BIG, messages) == _words(store, BIG, messages, fold=False)
    assert _run_plan(owner) == [BIG]
    # A turn written again (its pieces replaced) is a delete of folded pieces too.
    rng2 = np.random.default_rng(9)
    again = [make_turn(BIG, "t0", 0, "f010q f011q replaced " + _texts(rng2, 1)[0])]
    assert not ingest_turns(store, again, HashEmbedder(model_id=MODEL)).failed
    assert _heads(admin_conn) == []
    # Forgetting the scope takes everything with it; the plan then has nothing to fold.
    _run_plan(owner)
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_scope(%s)", (BIG,))
    assert _heads(admin_conn) == [] and admin_conn.execute("SELECT count(*) FROM pgmem.word_fold").fetchone() == (0,)
    assert owner.execute(PLAN).fetchall() == []


def test_a_forget_under_repeatable_read_never_misses_a_later_fold(
    store: Conn, owner: Conn, admin_conn: Conn, db_url: str
) -> None:
    """A fold committed after a REPEATABLE READ transaction's snapshot is invisible to it: its
    forget of a folded piece is refused (25000, every forget under REPEATABLE READ since 0113; a
    serialization failure, 40001, before), never a fold left holding the piece; at READ
    COMMITTED the fold is deleted."""
    with connect_as(db_url, APP_LOGIN) as rr:
        rr.execute("SET default_transaction_isolation = 'repeatable read'")
        with scoped(rr, BIG):
            rr.execute("SELECT count(*) FROM pgmem.piece")  # the snapshot
            _run_plan(owner)
            with pytest.raises(psycopg.errors.InvalidTransactionState) as e:
                rr.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', 1)", (BIG,))
            assert "\n" not in (e.value.diag.message_primary or "")
        rr.rollback()
        assert [h[0] for h in _heads(admin_conn)] == [BIG]
        rr.execute("SET default_transaction_isolation = 'read committed'")
        with scoped(rr, BIG):
            rr.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', 1)", (BIG,))
        assert _heads(admin_conn) == []
        # A forget with no fold to meet leaves none behind, and a scope can be forgotten whole.
        with scoped(rr, BIG):
            rr.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', 2)", (BIG,))
        assert _heads(admin_conn) == []
        _run_plan(owner)
        with scoped(rr, BIG):
            rr.execute("SELECT * FROM pgmem.forget_scope(%s)", (BIG,))
        assert _heads(admin_conn) == []
        assert admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = %s", (BIG,)).fetchone() == (0,)


def test_refresh_is_maintenance_and_refuses_bad_arguments_in_one_line(
    store: Conn, owner: Conn, admin_conn: Conn
) -> None:
    with scoped(store, BIG), pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        store.execute("SELECT pgmem.refresh_word_fold(%s)", (BIG,))
    primary = e.value.diag.message_primary or ""
    assert "index maintenance" in primary and "\n" not in primary
    for args, code in (
        ((None, "memory"), psycopg.errors.NullValueNotAllowed),
        ((BIG, "facts"), psycopg.errors.InvalidParameterValue),
        ((BIG, None), psycopg.errors.InvalidParameterValue),
        ((BIG, "memory\x01"), psycopg.errors.InvalidParameterValue),
    ):
        with pytest.raises(code) as err:
            owner.execute("SELECT pgmem.refresh_word_fold(%s, %s)", args)
        assert err.value.diag.message_primary and "\n" not in err.value.diag.message_primary
    with pytest.raises(psycopg.DataError):
        owner.execute("SELECT pgmem.refresh_word_fold(%s, 'memory')", ("bad\x00scope",))
    with pytest.raises(psycopg.errors.UndefinedFunction):
        owner.execute("SELECT pgmem.refresh_word_fold(%s)", (5,))
    assert owner.execute("SELECT pgmem.refresh_word_fold(%s)", ("x" * 1_000_000,)).fetchone() == (0,)
    # A set of 1,000 pieces or fewer has no fold; a scope that does not exist has none either.
    for scope, kind in ((SMALL, "memory"), ("nobody", "memory"), (BIG, "document")):
        assert owner.execute("SELECT pgmem.refresh_word_fold(%s, %s)", (scope, kind)).fetchone() == (0,)
    assert _heads(admin_conn) == []
    # The maintenance login's scope setting is left as it was.
    assert owner.execute("SELECT pgmem.refresh_word_fold(%s)", (BIG,)).fetchone() != (0,)
    assert owner.execute("SELECT coalesce(current_setting('pgmem.scope', true), '')").fetchone() == ("",)


@pytest.mark.long
def test_refresh_beside_writers_and_forgets(store: Conn, owner: Conn, admin_conn: Conn, db_url: str) -> None:
    """Writers add turns (two connections), a forgetter forgets folded turns and the refresh
    runs again and again, side by side: no error, no wait in a cycle, and a fold left at the end
    holds exactly the scope's pieces up to its last id, read with the same words and pieces."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = np.random.default_rng(seed)
            with connect_as(db_url, APP_LOGIN) as c:
                for i in range(30):
                    turns = [make_turn(BIG, f"w{seed}", i, t) for t in _texts(rng, 1)]
                    if ingest_turns(c, turns, HashEmbedder(model_id=MODEL)).failed:
                        errors.append(RuntimeError("write failed"))

        return run

    def forgetter() -> None:
        with connect_as(db_url, APP_LOGIN) as c:
            for i in range(1, 25):
                with scoped(c, BIG):
                    c.execute("SELECT * FROM pgmem.forget_turn(%s, %s, %s)", (BIG, f"t{i % 5}", i // 5))

    def refresher() -> None:
        with connect_as(db_url, MAINTENANCE_LOGIN) as c:
            while not stop.is_set():
                c.execute("SELECT pgmem.refresh_word_fold(%s)", (BIG,))

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guard(f)) for f in (writer(11), writer(12), forgetter)]
    refresh = threading.Thread(target=guard(refresher))
    for t in (*threads, refresh):
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    refresh.join(60)
    assert not errors, errors
    rng = np.random.default_rng(4)
    messages = [_message(rng) for _ in range(4)]
    for _ in range(2):  # as left by the threads, then folded once more
        heads = _heads(admin_conn)
        if heads:
            ((_, _, through, pieces, cap),) = heads
            stored = _stored_fold(admin_conn, BIG)
            assert stored == _expected_fold(admin_conn, BIG, int(str(through)), int(str(cap)))
            counted = admin_conn.execute(
                "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'memory' AND piece_id <= %s",
                (BIG, through),
            ).fetchone()
            assert counted == (pieces,)
        assert _words(store, BIG, messages) == _words(store, BIG, messages, fold=False)
        _run_plan(owner)
    assert _heads(admin_conn)
