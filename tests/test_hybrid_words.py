"""Hybrid recall word-searches only the distinctive words of each part
(pgmem.distinctive_word_query): a word most searched pieces share ranks nothing apart, so it
is left out; a rare name, number or identifier is kept. Run as the app role."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.errors import ArgumentError
from pgmem.ingest import ingest_turns
from pgmem.recall import recall_vectors
from tests.security_helpers import Conn, HashEmbedder, app_conn, hash_vector, make_turn

__all__ = ["app_conn"]

SCOPE = "words"
MODEL = "test:hash"


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    turns = [
        make_turn(SCOPE, "t", i, f"Project status {i}: the project review of the project plan went fine.")
        for i in range(18)
    ]
    turns.append(make_turn(SCOPE, "t", 18, "We booked the zeppelin charter for the offsite."))
    turns.append(make_turn(SCOPE, "u", 0, "Another thread: the zeppelin museum and the zeppelin shop."))
    turns.append(make_turn(SCOPE, "u", 1, "Another thread, nothing else."))
    report = ingest_turns(app_conn, turns, HashEmbedder(model_id=MODEL))
    assert not report.failed
    return app_conn


def _query(conn: Conn, text: str, thread: str | None = None, share: float = 0.1) -> str:
    with scoped(conn, SCOPE):
        row = conn.execute(
            "SELECT pgmem.distinctive_word_query(%s, %s, %s, %s)::text", (SCOPE, text, thread, share)
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_common_words_are_left_out_and_rare_ones_kept(store: Conn) -> None:
    assert _query(store, "What did the project plan say about the zeppelin?") == "'zeppelin'"
    # A word no searched piece has is left out too (it could match nothing).
    assert _query(store, "zeppelin quokka") == "'zeppelin'"
    # share 1: every word found in at least one piece is searched.
    assert set(_query(store, "project zeppelin", share=1.0).split(" | ")) == {"'project'", "'zeppelin'"}
    # Nothing distinctive: an empty query, and the group is the vector ranking alone.
    assert _query(store, "the project plan") == ""


def test_distinctiveness_is_counted_where_the_search_looks(store: Conn) -> None:
    # Thread u has 2 pieces: at share 0.1 one piece is the limit, and "zeppelin" is in one
    # of them; "thread" is in both.
    assert _query(store, "zeppelin thread", thread="u") == "'zeppelin'"
    assert _query(store, "another thread", thread="u", share=1.0) != ""
    assert _query(store, "another thread", thread="u") == ""


def test_hybrid_recall_ranks_the_rare_word_first(store: Conn) -> None:
    # The query vector is unrelated to every piece: the word side decides. Under plain RRF over
    # every word, the pieces repeating "project" outranked the zeppelin piece.
    vec = np.array([hash_vector("unrelated")], dtype=np.float32)
    result = recall_vectors(store, SCOPE, ["project zeppelin"], vec, x=3, floor=-1.0, mode="hybrid", model_id=MODEL)
    first, second = result.groups[0].hits[:2]
    assert "zeppelin" in first.body and "zeppelin" in second.body
    assert (first.word_rank, second.word_rank) == (1, 2)


def test_hostile_words_and_arguments(store: Conn) -> None:
    # Quotes, backslashes and tsquery operators in the text are words, never syntax.
    for text in ("o'brien \\ zeppelin & | ! <-> :*", "'''' \\\\ ''", "\u00e9\u20ac zeppelin " * 2000):
        assert _query(store, text) in ("'zeppelin'", "")
    for share in (0.0, -1.0, 1.5, float("nan")):
        with pytest.raises(psycopg.Error) as err, scoped(store, SCOPE):
            store.execute("SELECT pgmem.distinctive_word_query(%s, 'x', NULL, %s)", (SCOPE, share)).fetchone()
        assert err.value.sqlstate == "22023"
    # Another scope than the transaction's: refused, never an empty answer.
    with pytest.raises(psycopg.Error) as err, scoped(store, "other"):
        store.execute("SELECT pgmem.distinctive_word_query(%s, 'zeppelin')", (SCOPE,)).fetchone()
    assert err.value.sqlstate == "42501"


def test_settings_tune_the_word_side(store: Conn) -> None:
    vec = np.array([hash_vector("unrelated")], dtype=np.float32)

    def ranked(**settings: str) -> list[int]:
        for name, value in settings.items():
            store.execute("SELECT set_config(%s, %s, false)", (f"pgmem.{name}", value))
        try:
            result = recall_vectors(
                store, SCOPE, ["project zeppelin"], vec, x=5, floor=-1.0, mode="hybrid", model_id=MODEL
            )
        finally:
            for name in settings:
                store.execute("SELECT set_config(%s, '', false)", (f"pgmem.{name}",))
        return [h.piece_id for h in result.groups[0].hits]

    vector_only = [
        h.piece_id
        for h in recall_vectors(store, SCOPE, ["x"], vec, x=5, floor=-1.0, mode="vector", model_id=MODEL).groups[0].hits
    ]
    assert ranked(word_weight="0") == vector_only  # no weight: the vector ranking
    assert ranked() != vector_only
    # A share of 1 searches "project" too, which every project piece repeats.
    with_common = ranked(word_share="1")
    assert ranked() != with_common
    for name, value in (("word_weight", "-1"), ("word_weight", "101"), ("word_share", "0"), ("word_share", "2")):
        with pytest.raises(ArgumentError) as refused:
            ranked(**{name: value})
        assert refused.value.sqlstate == "22023", (name, value)
