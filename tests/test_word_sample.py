"""The word side's sample, stored with the fold (migration 0036): index maintenance's fold of a
set of more than 1,000 pieces (pgmem.refresh_word_fold, a row of pgmem.scope_index_plan) stores
the lexeme counts of the set's first 1,000 pieces in its head (pgmem.word_fold_head), the word
side reads them whenever the head exists, and counts them itself otherwise. Either way it
searches the same words."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.ingest import ingest_turns
from pgmem.migrate import downgrade, upgrade
from pgmem.sqlfiles import InstallParams
from pgmem.turns import Turn
from tests.conftest import TEST_DIMS, scratch_database
from tests.security_helpers import (
    Conn,
    HashEmbedder,
    app_conn,
    graded_texts,
    make_turn,
)

__all__ = ["app_conn"]

MODEL = "test:hash"
BIG = "sampled"
SMALL = "unsampled"
#: A LOGIN member of pgmem_owner: the login that migrates pgmem and runs index maintenance.
VOCAB = [f"s{i:03d}q" for i in range(80)]
PLAN = "SELECT scope_id, action, ddl FROM pgmem.scope_index_plan() WHERE plane = 'words'"


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    return graded_texts(rng, VOCAB, n)


def _message(rng: np.random.Generator) -> list[str]:
    return [" ".join(rng.choice(VOCAB, size=12, replace=False)) for _ in range(4)]


def _turns(scope: str, n: int, seed: int, threads: int) -> list[Turn]:
    rng = np.random.default_rng(seed)
    if threads == 1:
        return [make_turn(scope, "t", i, t) for i, t in enumerate(_texts(rng, n))]
    return [make_turn(scope, f"t{i % threads}", i // threads, t) for i, t in enumerate(_texts(rng, n))]


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    """BIG: 1,150 memory pieces in 5 threads (one piece a turn); SMALL: 40."""
    turns = _turns(BIG, 1150, 26, 5) + _turns(SMALL, 40, 27, 1)
    assert not ingest_turns(app_conn, turns, HashEmbedder(model_id=MODEL), bulk=True).failed
    return app_conn


def _words(conn: Conn, scope: str, messages: list[list[str]]) -> list[list[tuple[object, ...]]]:
    out = []
    with scoped(conn, scope):
        for m in messages:
            out.append(conn.execute("SELECT * FROM pgmem.message_words(%s, %s)", (scope, m)).fetchall())
            out.append(conn.execute("SELECT * FROM pgmem.word_candidates(%s, %s, 10)", (scope, m)).fetchall())
    return out


def _run_plan(owner: Conn) -> list[str]:
    done = []
    for scope, _action, ddl in owner.execute(PLAN).fetchall():
        owner.execute(str(ddl))
        done.append(str(scope))
    return done


def _counted(conn: Conn, scope: str, kind: str = "memory") -> dict[str, int]:
    """The sample as the word side counts it, in Python: the lexemes in more than 3 of the set's
    first 1,000 pieces by id, with their counts."""
    counts: dict[str, int] = {}
    for (lexemes,) in conn.execute(
        "SELECT lexemes FROM pgmem.piece_word WHERE scope_id = %s AND kind = %s ORDER BY piece_id LIMIT 1000",
        (scope, kind),
    ).fetchall():
        for lx in str(lexemes).split(" "):
            counts[lx] = counts.get(lx, 0) + 1
    return {k: v for k, v in counts.items() if v > 3}


def _stored(conn: Conn, scope: str, kind: str = "memory") -> dict[str, int] | None:
    row = conn.execute(
        "SELECT sample FROM pgmem.word_fold_head WHERE scope_id = %s AND kind = %s", (scope, kind)
    ).fetchone()
    return None if row is None else dict(row[0])  # type: ignore[call-overload]


def test_the_fold_stores_the_sample_and_the_word_side_reads_it(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(1)
    messages = [_message(rng) for _ in range(6)]
    counted = _words(store, BIG, messages)
    # One maintenance row a set of more than 1,000 pieces: SMALL has 40, no fold and no sample.
    assert [(s, a) for s, a, _ in owner.execute(PLAN).fetchall()] == [(BIG, "postings")]
    assert _run_plan(owner) == [BIG]
    assert owner.execute(PLAN).fetchall() == []
    assert _stored(admin_conn, BIG) == _counted(admin_conn, BIG) != {}
    # The service's login reads it and finds the same words and pieces; only its own scope's
    # heads are visible to it.
    assert _words(store, BIG, messages) == counted
    with scoped(store, SMALL):
        assert store.execute("SELECT count(*) FROM pgmem.word_fold_head").fetchone() == (0,)
    # The stored counts are what the word side reads: a word stored as common in the sample is
    # dropped unread (set by hand here, as nothing else writes the head).
    word = messages[0][0].split(" ")[0]
    with scoped(store, BIG):
        before = {str(r[1]) for r in store.execute("SELECT * FROM pgmem.message_words(%s, %s)", (BIG, [word]))}
    assert before == {word}
    admin_conn.execute(
        "UPDATE pgmem.word_fold_head SET sample = jsonb_build_object(%s::text, 1000)"
        " WHERE scope_id = %s AND kind = 'memory'",
        (word, BIG),
    )
    with scoped(store, BIG):
        assert store.execute("SELECT * FROM pgmem.message_words(%s, %s)", (BIG, [word])).fetchall() == []
    owner.execute("SELECT pgmem.refresh_word_fold(%s)", (BIG,))
    assert _words(store, BIG, messages) == counted


def test_a_forgotten_piece_of_the_sample_takes_the_fold_with_it(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(2)
    messages = [_message(rng) for _ in range(6)]
    _run_plan(owner)
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', 0)", (BIG,))
    # No head: the word side counts the sample itself (the first 1,000 pieces now end one
    # later), and the plan folds it again; the words are the same before and after.
    assert _stored(admin_conn, BIG) is None
    counted = _words(store, BIG, messages)
    assert _run_plan(owner) == [BIG]
    assert _stored(admin_conn, BIG) == _counted(admin_conn, BIG)
    assert _words(store, BIG, messages) == counted
    # Later pieces do not change the first 1,000: the head and its sample stay, and a tail this
    # short asks for no fold.
    more = [make_turn(BIG, "t9", i, t) for i, t in enumerate(_texts(np.random.default_rng(3), 30))]
    assert not ingest_turns(store, more, HashEmbedder(model_id=MODEL)).failed
    assert owner.execute(PLAN).fetchall() == []
    assert _stored(admin_conn, BIG) == _counted(admin_conn, BIG)
    # Forgetting the scope takes its head with it.
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_scope(%s)", (BIG,))
    assert admin_conn.execute("SELECT count(*) FROM pgmem.word_fold_head").fetchone() == (0,)


def test_the_word_side_never_scans_the_word_table(store: Conn) -> None:
    """Each word is read through the word index, whatever the planner expects of the table: a
    word's read stops after share of the searched pieces, and for a small scope the planner
    found a scan cheaper, then computed every row's word keys for every word (3.5 s a question
    on a 120-piece scope among 690 evaluation scopes). Counted in the call's own transaction."""
    rng = np.random.default_rng(5)
    for scope, thread in ((SMALL, None), (SMALL, "t"), (BIG, None), (BIG, "t1")):
        with scoped(store, scope):
            hits = store.execute(
                "SELECT count(*) FROM pgmem.word_candidates(%s, %s, 10, %s)", (scope, _message(rng), thread)
            ).fetchone()
            scans = store.execute(
                "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'pgmem.piece_word'::regclass"
            ).fetchone()
        assert hits is not None and int(str(hits[0])) > 0, (scope, thread)
        assert scans == (0,), (scope, thread)


def test_each_kind_has_its_own_sample(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    # BIG's 1,150 memory pieces come first by id, then a document's 1,100 units: each kind's
    # sample is its own first 1,000, and document search finds the same words with it.
    from pgmem.documents.store import Document, add_documents

    sections = "\n\n".join(
        f"## Part {i}\n\nThe {VOCAB[i % 80]} crate {i} sits by the {VOCAB[i * 7 % 80]}." for i in range(1100)
    )
    add_documents(store, BIG, [Document("a.md", sections)], HashEmbedder(model_id=MODEL))
    rng = np.random.default_rng(6)
    messages = [_message(rng) for _ in range(4)]

    def doc_words() -> list[list[tuple[object, ...]]]:
        with scoped(store, BIG):
            return [
                store.execute("SELECT * FROM pgmem.message_words(%s, %s, NULL, 0.1, 'document')", (BIG, m)).fetchall()
                for m in messages
            ]

    counted = doc_words()
    assert sorted(_run_plan(owner)) == [BIG, BIG]
    for kind in ("memory", "document"):
        assert _stored(admin_conn, BIG, kind) == _counted(admin_conn, BIG, kind) != {}
    assert _stored(admin_conn, BIG, "document") != _stored(admin_conn, BIG, "memory")
    assert doc_words() == counted


@pytest.mark.long
def test_the_upgrade_stores_the_samples_of_existing_folds(admin_conn: Conn) -> None:
    """Migration 0036 moves the sample into the fold's head: the heads already folded get the
    counts index maintenance would store, so no fold is lost and no set is counted again."""
    with scratch_database(admin_conn, "sample") as url:
        params = InstallParams(TEST_DIMS, TEST_DIMS)
        upgrade(url, params=params)
        with psycopg.connect(url, autocommit=True) as c:
            turns = _turns(BIG, 1150, 26, 5) + _turns(SMALL, 40, 27, 1)
            assert not ingest_turns(c, turns, HashEmbedder(model_id=MODEL), bulk=True).failed
            c.execute("SELECT pgmem.refresh_word_fold(%s)", (BIG,))
            folded = _stored(c, BIG)
            assert folded == _counted(c, BIG) != {}
        downgrade(url, "0035", params=params)
        with psycopg.connect(url, autocommit=True) as c:
            assert c.execute("SELECT count(*) FROM pgmem.word_fold_head").fetchone() == (1,)
        upgrade(url, params=params)
        with psycopg.connect(url, autocommit=True) as c:
            assert _stored(c, BIG) == folded
            assert c.execute("SELECT to_regclass('pgmem.word_sample')").fetchone() == (None,)
