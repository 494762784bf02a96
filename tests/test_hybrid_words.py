"""Hybrid recall word-searches only the distinctive words of each part
(pgmem.distinctive_words): a word most searched pieces share ranks nothing apart, so it is left
out; a rare name, number or identifier is kept, and the rarer a word, the more it weighs. Run as
the app role."""

from __future__ import annotations

import json
import statistics
import time

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
    # Thread u: 41 pieces; "biscuit" is in 5 of them (over 10% of u, under 10% of the scope's 60).
    turns += [
        make_turn(SCOPE, "u", i, f"Museum log {i}: the museum was busy." + (" Biscuit came along." if i < 5 else ""))
        for i in range(40)
    ]
    turns.append(make_turn(SCOPE, "u", 40, "Another thread: the zeppelin museum and the zeppelin shop."))
    report = ingest_turns(app_conn, turns, HashEmbedder(model_id=MODEL))
    assert not report.failed
    return app_conn


def _words(conn: Conn, text: str, thread: str | None = None, share: float = 0.1) -> dict[str, tuple[int, float]]:
    """lexeme -> (pieces it is in, weight)"""
    with scoped(conn, SCOPE):
        rows = conn.execute(
            "SELECT lexeme, pieces, weight FROM pgmem.distinctive_words(%s, %s, %s, %s)", (SCOPE, text, thread, share)
        ).fetchall()
    return {str(lex): (int(str(pieces)), float(str(weight))) for lex, pieces, weight in rows}


def _query(conn: Conn, text: str, thread: str | None = None, share: float = 0.1) -> str:
    """The distinctive words as one string, e.g. "'biscuit' | 'zeppelin'"."""
    return " | ".join(f"'{lex}'" for lex in sorted(_words(conn, text, thread, share)))


def test_common_words_are_left_out_and_rare_ones_kept(store: Conn) -> None:
    assert _query(store, "What did the project plan say about the zeppelin?") == "'zeppelin'"
    # A word no searched piece has is left out too (it could match nothing).
    assert _query(store, "zeppelin quokka") == "'zeppelin'"
    # share 1: every word found in at least one piece is searched.
    assert set(_query(store, "project zeppelin", share=1.0).split(" | ")) == {"'project'", "'zeppelin'"}
    # Nothing distinctive: an empty query, and the group is the vector ranking alone.
    assert _query(store, "the project plan") == ""


def test_distinctiveness_is_counted_where_the_search_looks(store: Conn) -> None:
    # 60 pieces in the scope (limit 6), 41 in thread u (limit 4), 19 in thread t (limit 3).
    assert _query(store, "biscuit") == "'biscuit'"
    assert _query(store, "biscuit", thread="u") == ""
    assert _query(store, "museum zeppelin", thread="t") == "'zeppelin'"  # no museum in t
    # A small set keeps words found in up to 3 pieces (10% of 19 would keep only words found once).
    assert _query(store, "zeppelin museum busy", thread="u", share=0.01) == "'zeppelin'"
    assert _query(store, "biscuit", thread="u", share=0.1) == ""


def test_a_rarer_word_weighs_more(store: Conn) -> None:
    # 60 pieces: zeppelin is in 2 of them, biscuit in 5; BM25's inverse document frequency.
    words = _words(store, "biscuit zeppelin")
    assert {lex: pieces for lex, (pieces, _) in words.items()} == {"biscuit": 5, "zeppelin": 2}
    for pieces, weight in words.values():
        assert weight == pytest.approx(np.log(1 + (60 - pieces + 0.5) / (pieces + 0.5)))
    # The word side ranks the pieces with the rarer word first, however often the other repeats.
    vec = np.array([hash_vector("unrelated")], dtype=np.float32)
    result = recall_vectors(store, SCOPE, ["biscuit zeppelin"], vec, x=30, floor=-1.0, mode="hybrid", model_id=MODEL)
    by_word = sorted((h for h in result.groups[0].hits if h.word_rank is not None), key=lambda h: h.word_rank or 0)
    assert len(by_word) == 7
    assert all("zeppelin" in h.body for h in by_word[:2]) and all("Biscuit" in h.body for h in by_word[2:])


def test_hybrid_recall_ranks_the_rare_word_first(store: Conn) -> None:
    # The query vector is unrelated to every piece: the word side decides. Under plain RRF over
    # every word, the pieces repeating "project" outranked the zeppelin piece.
    vec = np.array([hash_vector("unrelated")], dtype=np.float32)
    result = recall_vectors(store, SCOPE, ["project zeppelin"], vec, x=10, floor=-1.0, mode="hybrid", model_id=MODEL)
    hits = result.groups[0].hits
    assert "zeppelin" in hits[0].body and hits[0].word_rank in (1, 2)
    # The two zeppelin pieces are word ranks 1 and 2; no piece without the word has a word rank.
    assert sorted(h.word_rank for h in hits if h.word_rank is not None) == [1, 2]
    assert all(("zeppelin" in h.body) == (h.word_rank is not None) for h in hits)


def test_sql_recall_searches_words_by_default_when_given_the_part_texts(store: Conn) -> None:
    # memory_recall's default mode is auto: a SQL caller who passes the parts' texts gets hybrid
    # (the measured default, as in Python), one who cannot gets vector search; explicit modes
    # are unchanged.
    sql = """SELECT part_no, rank, piece_id, word_rank FROM pgmem.memory_recall(%s, %s::vector[]{texts}, x => 10,
                                                                               floor => -1{mode})"""
    vec = [hash_vector("unrelated")]

    def rows(texts: bool, mode: str | None) -> list[tuple[object, ...]]:
        q = sql.format(texts=", part_texts => %s" if texts else "", mode=", mode => %s" if mode else "")
        args = (SCOPE, vec, *([["project zeppelin"]] if texts else []), *([mode] if mode else []))
        with scoped(store, SCOPE):
            return [tuple(r) for r in store.execute(q, args, binary=True).fetchall()]

    hybrid, vector = rows(True, "hybrid"), rows(True, "vector")
    assert hybrid != vector and any(r[3] is not None for r in hybrid) and all(r[3] is None for r in vector)
    assert rows(True, None) == rows(True, "auto") == hybrid
    assert rows(False, None) == rows(False, "auto") == rows(False, "vector") == vector
    with pytest.raises(psycopg.Error) as err:
        rows(False, "hybrid")
    assert err.value.sqlstate == "22004"
    with pytest.raises(psycopg.Error) as err:
        rows(True, "bm25")
    assert err.value.sqlstate == "22023" and err.value.diag.message_hint and "auto" in err.value.diag.message_hint
    # The recall log keeps the mode that ran, never auto.
    with pytest.raises(psycopg.Error) as err, scoped(store, SCOPE):
        store.execute(
            "SELECT pgmem.log_recall(%s, 'memory', 'm', %s, %s::vector[], 5, 0.2, NULL, 'auto', '[]'::jsonb)",
            (SCOPE, ["project zeppelin"], vec),
            binary=True,
        )
    assert err.value.sqlstate == "22023"


def test_hostile_words_and_arguments(store: Conn) -> None:
    # Quotes, backslashes and tsquery operators in the text are words, never syntax.
    for text in ("o'brien \\ zeppelin & | ! <-> :*", "'''' \\\\ ''", "\u00e9\u20ac zeppelin " * 2000):
        assert _query(store, text) in ("'zeppelin'", "")
    for share in (0.0, -1.0, 1.5, float("nan")):
        with pytest.raises(psycopg.Error) as err, scoped(store, SCOPE):
            store.execute("SELECT * FROM pgmem.distinctive_words(%s, 'x', NULL, %s)", (SCOPE, share)).fetchall()
        assert err.value.sqlstate == "22023"
    # Another scope than the transaction's: refused, never an empty answer.
    with pytest.raises(psycopg.Error) as err, scoped(store, "other"):
        store.execute("SELECT * FROM pgmem.distinctive_words(%s, 'zeppelin')", (SCOPE,)).fetchall()
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


def test_hybrid_recall_on_a_scope_the_planner_has_no_statistics_for_stays_fast(
    app_conn: Conn, admin_conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    # A scope written since the last ANALYZE is estimated at one row. The planner then ran the
    # word search once per piece of the scope (47 s instead of 0.06 s for a question on an
    # 804-piece scope). Side by side: the same recall before and after ANALYZE.
    admin_conn.execute("ALTER TABLE pgmem.piece SET (autovacuum_enabled = false)")
    embedder = HashEmbedder(model_id=MODEL)
    known = [make_turn("known", "t", i, f"Known log {i}: the garden was quiet.") for i in range(200)]
    assert not ingest_turns(app_conn, known, embedder).failed
    admin_conn.execute("ANALYZE pgmem.piece")
    # Each word in 40 of the 600 pieces: distinctive (under 10%).
    words = "biscuit zeppelin quokka harbour saffron lantern walrus pepper ember violin cobalt tundra maple falcon opal"
    fresh = [
        make_turn("fresh", f"t{i % 3}", i // 3, f"Museum log {i}: the museum was busy with the {w}.")
        for i, w in enumerate(words.split() * 40)
    ]
    assert not ingest_turns(app_conn, fresh, embedder).failed
    parts = ["Where did the biscuit and the zeppelin go?", "And the quokka, the saffron and the lantern?"]
    vecs = np.stack([hash_vector(p) for p in parts])

    def timed() -> float:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            got = recall_vectors(app_conn, "fresh", parts, vecs, x=30, floor=-1.0, mode="hybrid", model_id=MODEL)
            runs.append(time.perf_counter() - t0)
            assert [len(g.hits) for g in got.groups] == [30, 30]
            assert all(sum(h.word_rank is not None for h in g.hits) >= 10 for g in got.groups)
        return statistics.median(runs)

    unknown = timed()
    admin_conn.execute("ANALYZE pgmem.piece")
    analyzed = timed()
    assert unknown < 10 * analyzed + 0.05, (unknown, analyzed)


@pytest.mark.long
def test_a_large_scopes_word_sample_does_not_follow_the_table_layout(
    app_conn: Conn, admin_conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    # Over 1,000 pieces, distinctive_words counts words first in a sample of 1,000 and drops a
    # word common there without an exact count. The sample is the first 1,000 pieces by id, so
    # it is the same whatever order the table or the plan reads them in. "quokka" is in the
    # 150 oldest pieces (thread z) of 2,000: common in the sample, so not searched, even after
    # CLUSTER puts thread a first on disk, where an unordered sample would miss thread z.
    embedder = HashEmbedder(model_id=MODEL)
    turns = [make_turn("layout", "z", i, f"Garden log {i}: a quokka visited the garden.") for i in range(150)]
    turns += [make_turn("layout", "a", i, f"Garden log {i}: the garden was quiet.") for i in range(1850)]
    assert not ingest_turns(app_conn, turns, embedder).failed

    def words() -> set[str]:
        with scoped(app_conn, "layout"):
            rows = app_conn.execute(
                "SELECT lexeme FROM pgmem.distinctive_words('layout', 'Did the quokka come to the garden?')"
            ).fetchall()
        return {str(r[0]) for r in rows}

    before = words()
    admin_conn.execute("CLUSTER pgmem.piece USING piece_scope_cover_idx")
    admin_conn.execute("ANALYZE pgmem.piece")
    assert words() == before
    assert "quokka" not in before


def test_pieces_with_the_same_words_rank_by_age_whatever_the_plan(
    app_conn: Conn, admin_conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    # Twelve pieces hold the same twelve rare words, so they tie on their word score and rank
    # oldest first. The score used to be a float sum whose last bit followed the order the
    # plan added the words in, so which tied piece ranked first moved with the plan (and with
    # the other scopes in the table). Before ANALYZE (a scope the planner does not know) and
    # after it, the order is the same: by piece id.
    admin_conn.execute("ALTER TABLE pgmem.piece SET (autovacuum_enabled = false)")
    embedder = HashEmbedder(model_id=MODEL)
    words = [
        "zeppelin",
        "biscuit",
        "quokka",
        "saffron",
        "lantern",
        "walrus",
        "cobalt",
        "tundra",
        "maple",
        "falcon",
        "opal",
        "violin",
    ]
    rare = " ".join(words)
    turns = [make_turn("ties", "t", i, f"Entry {i}: {' '.join(words[i:] + words[:i])}.") for i in range(12)]
    # Word k is also in k of the other pieces, so the twelve words weigh twelve different amounts
    # (each is in at most 23 of 312 pieces: distinctive).
    turns += [
        make_turn("ties", "t", 12 + i, f"Entry {12 + i}: the garden was quiet. " + " ".join(words[i + 1 :]))
        for i in range(300)
    ]
    assert not ingest_turns(app_conn, turns, embedder).failed
    vec = np.array([hash_vector("unrelated")], dtype=np.float32)

    def tied() -> list[tuple[int | None, int]]:
        got = recall_vectors(
            app_conn, "ties", [f"Where is the {rare}?"], vec, x=30, floor=-1.0, mode="hybrid", model_id=MODEL
        )
        return sorted((h.word_rank, h.piece_id) for h in got.groups[0].hits if "zeppelin" in h.body)

    unknown = tied()
    assert [rank for rank, _ in unknown] == list(range(1, 13))
    assert [pid for _, pid in unknown] == sorted(pid for _, pid in unknown)
    admin_conn.execute("ANALYZE pgmem.piece")
    assert tied() == unknown


def test_a_piece_only_the_word_side_found_does_not_outrank_the_vector_sides_first(app_conn: Conn) -> None:
    # The query vector is one garden piece's own; "zeppelin" is in one other piece, far from the
    # query and outside the vector side's candidates. At word weight 2 for every piece, the
    # zeppelin piece's word rank 1 (2 / 61) beat the garden piece's vector rank 1 (1 / 61). A
    # piece only the word side found now counts its word rank at most once: the nearest piece
    # leads, the zeppelin piece is still in the group. When the vector side finds the zeppelin
    # piece too, the full word weight applies and it leads.
    embedder = HashEmbedder(model_id=MODEL)
    turns = [make_turn("fusion", "t", i, f"Garden log {i}: the garden was quiet.") for i in range(300)]
    turns.append(make_turn("fusion", "t", 300, "We booked the zeppelin charter."))
    assert not ingest_turns(app_conn, turns, embedder).failed
    with scoped(app_conn, "fusion"):
        rows = app_conn.execute(
            "SELECT body, embedding::text FROM pgmem.piece WHERE scope_id = 'fusion' AND body IN (%s, %s)",
            ("Garden log 7: the garden was quiet.", "We booked the zeppelin charter."),
        ).fetchall()
    vec = {str(body): np.array(json.loads(str(e)), dtype=np.float32) for body, e in rows}
    garden, zeppelin = vec["Garden log 7: the garden was quiet."], vec["We booked the zeppelin charter."]

    def hits(query: np.ndarray) -> list[tuple[str, int | None]]:
        got = recall_vectors(
            app_conn, "fusion", ["the zeppelin?"], query[None, :], x=30, floor=-1.0, mode="hybrid", model_id=MODEL
        )
        return [(h.body, h.word_rank) for h in got.groups[0].hits]

    # The precondition: the vector side's 20 candidates do not hold the zeppelin piece.
    candidates = recall_vectors(app_conn, "fusion", ["x"], garden[None, :], x=20, floor=-1.0, mode="vector")
    assert all("zeppelin" not in h.body for h in candidates.groups[0].hits)
    far = hits(garden)
    assert far[0] == ("Garden log 7: the garden was quiet.", None)
    assert ("We booked the zeppelin charter.", 1) in far
    # Between the two: both sides find the zeppelin piece, and it leads.
    both = garden + zeppelin
    near = hits(both / np.linalg.norm(both))
    assert near[0] == ("We booked the zeppelin charter.", 1)


def test_a_message_counts_its_words_once_for_all_parts(store: Conn) -> None:
    """message_words gives each part the words distinctive_words gives it alone, and
    word_candidates ranks each part's pieces by the summed weights of its words."""
    parts = ["zeppelin biscuit", "the project plan", "biscuit museum", None, "zeppelin"]
    with scoped(store, SCOPE):
        rows = store.execute(
            "SELECT part_no, lexeme, pieces, weight FROM pgmem.message_words(%s, %s)", (SCOPE, parts)
        ).fetchall()
        got: dict[int, dict[str, tuple[int, float]]] = {}
        for part_no, lex, pieces, weight in rows:
            got.setdefault(int(str(part_no)), {})[str(lex)] = (int(str(pieces)), float(str(weight)))
    for i, text in enumerate(parts, start=1):
        assert got.get(i, {}) == (_words(store, text) if text else {}), text
    assert set(got) == {1, 3, 5}  # part 2 has no distinctive word, part 4 no text

    with scoped(store, SCOPE):
        hits = store.execute(
            "SELECT part_no, piece_id, score, word_rank FROM pgmem.word_candidates(%s, %s, 3)", (SCOPE, parts)
        ).fetchall()
        bodies: dict[object, object] = {
            pid: body
            for pid, body in store.execute("SELECT piece_id, body FROM pgmem.piece WHERE scope_id = %s", (SCOPE,))
        }
    first = [(int(str(p)), str(bodies[pid])) for p, pid, _, r in hits if r == 1]
    # Part 1's best piece holds both words; part 5's first holds zeppelin (the older piece first).
    assert [p for p, _ in first] == [1, 3, 5]
    assert "zeppelin" in first[0][1].lower() and "zeppelin" in first[2][1].lower()
    assert "biscuit" in first[1][1].lower()
    by_part: dict[int, list[tuple[float, int]]] = {}
    for p, _, score, r in hits:
        by_part.setdefault(int(str(p)), []).append((float(str(score)), int(str(r))))
    for ranks in by_part.values():
        assert [r for _, r in ranks] == list(range(1, len(ranks) + 1)) and len(ranks) <= 3
        assert [s for s, _ in ranks] == sorted((s for s, _ in ranks), reverse=True)


def test_the_word_side_functions_refuse_bad_arguments_in_one_line(store: Conn) -> None:
    cases = [
        ("SELECT * FROM pgmem.message_words(%s, %s::text[])", (SCOPE, ["x"] * 65), "22023", "at most 64 part texts"),
        ("SELECT * FROM pgmem.word_candidates(%s, ARRAY['x'], 0)", (SCOPE,), "22023", "k must be between 1 and 1000"),
        (
            "SELECT * FROM pgmem.word_candidates(%s, ARRAY['x'], 5, metadata_filter => '[1]')",
            (SCOPE,),
            "22023",
            "metadata_filter must be a JSON object",
        ),
        ("SELECT * FROM pgmem._word_postings(%s, ARRAY['zeppelin'])", ("other",), "42501", ""),
        (
            "SELECT * FROM pgmem.message_words(%s, ARRAY[E'bad \\x01 text', 'zeppelin'], share => 0)",
            (SCOPE,),
            "22023",
            "share must be in (0, 1]",
        ),
    ]
    for sql, args, code, words in cases:
        with scoped(store, SCOPE), pytest.raises(psycopg.Error) as err:
            store.execute(sql, args).fetchall()
        assert err.value.sqlstate == code, sql
        assert words in str(err.value).splitlines()[0]
        store.rollback()
    for cap in ("2", "-5", "lots"):
        with scoped(store, SCOPE), pytest.raises(psycopg.Error) as err:
            store.execute("SELECT set_config('pgmem.word_postings_cap', %s, true)", (cap,))
            store.execute("SELECT * FROM pgmem.message_words(%s, ARRAY['zeppelin'])", (SCOPE,)).fetchall()
        assert err.value.sqlstate in ("22023", "22P02") and len(str(err.value).splitlines()[0]) < 120
        store.rollback()
    # Nothing stored was lost, and hostile text is just text.
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = %s", (SCOPE,)).fetchone() == (60,)
        rows = store.execute(
            "SELECT lexeme FROM pgmem.message_words(%s, ARRAY[repeat('zeppelin ', 5000), '', NULL])", (SCOPE,)
        ).fetchall()
    assert rows == [("zeppelin",)]


def test_the_word_side_reads_only_its_own_scopes_postings(store: Conn) -> None:
    """The word index is keyed by scope (pgmem.scope_lexemes): another scope's pieces holding the
    same word change neither the count nor the pieces; the lexeme-only index is gone."""
    before = _words(store, "zeppelin")
    other = [make_turn("words-other", "t", i, f"Zeppelin hangar note {i}: the zeppelin is in.") for i in range(30)]
    assert not ingest_turns(store, other, HashEmbedder(model_id=MODEL)).failed
    assert _words(store, "zeppelin") == before == {"zeppelin": (2, before["zeppelin"][1])}
    with scoped(store, SCOPE):
        assert store.execute(
            "SELECT pgmem.scope_lexemes(w.scope_no, w.kind, w.lexemes)"
            "       @> ARRAY[pgmem.scope_no(%s)::text || 'm/zeppelin']"
            "  FROM pgmem.piece p JOIN pgmem.piece_word w USING (scope_id, piece_id)"
            " WHERE p.scope_id = %s AND p.body LIKE '%%zeppelin charter%%'",
            (SCOPE, SCOPE),
        ).fetchone() == (True,)
        hits = store.execute(
            "SELECT piece_id FROM pgmem.word_candidates(%s, ARRAY['zeppelin', 'biscuit'], 50)", (SCOPE,)
        ).fetchall()
        scopes = store.execute(
            "SELECT DISTINCT scope_id FROM pgmem.piece WHERE piece_id = ANY(%s)", ([h[0] for h in hits],)
        ).fetchall()
    assert scopes == [(SCOPE,)] and len(hits) == 2 + 5
    assert store.execute(
        "SELECT to_regclass('pgmem.piece_tsv_idx'), to_regclass('pgmem.piece_scope_words_idx')"
    ).fetchone() == (None, None)


VOCAB = [f"w{i:03d}x" for i in range(60)]


@pytest.mark.parametrize(
    ("pieces", "cap", "stored", "thread"),
    [
        (400, None, False, None),
        (1_300, None, False, None),
        (1_300, None, True, None),
        (1_300, 40, True, None),
        # In a thread: 29 pieces of a 400-piece scope (its pieces' words read once), and 93 of a
        # 1,300-piece scope (each word through the word index).
        (400, None, False, "t3"),
        (1_300, None, False, "t3"),
    ],
)
@pytest.mark.long
def test_word_candidates_equal_the_rule_computed_from_the_pieces(
    app_conn: Conn, admin_conn: Conn, pieces: int, cap: int | None, stored: bool, thread: str | None
) -> None:
    """word_candidates against the rule recomputed here from every piece's lexemes: the searched
    set's size n (the scope's, or the thread's), lim = max(3, share * n) (or the cap), the sample
    of the first 1,000 pieces by id above 1,000 pieces (counted by the word side, or stored by
    index maintenance), exact counts, BM25 weights, summed scores, ties by age."""
    rng = np.random.default_rng(pieces)
    # Word i is in about 0.3% + i / 80 of the pieces: rare, borderline (near 10%) and common words.
    texts = [
        " ".join(w for i, w in enumerate(VOCAB) if rng.random() < 0.003 + i / 80) or VOCAB[0] for _ in range(pieces)
    ]
    scope = f"rule{pieces}-{cap}-{stored}-{thread}"
    threads = 14 if thread else 7
    turns = [make_turn(scope, f"t{i % threads}", i // threads, t) for i, t in enumerate(texts)]
    assert not ingest_turns(app_conn, turns, HashEmbedder(model_id=MODEL)).failed
    if stored:
        admin_conn.execute("SELECT pgmem.refresh_word_fold(%s)", (scope,))
        head = admin_conn.execute("SELECT sample FROM pgmem.word_fold_head WHERE scope_id = %s", (scope,))
        assert head.fetchone() not in (None, ({},))
    parts = [
        " ".join([*rng.choice(VOCAB[:10], size=2, replace=False), *rng.choice(VOCAB[10:], size=4, replace=False)])
        for _ in range(5)
    ] + [VOCAB[59]]
    with scoped(app_conn, scope):
        if cap is not None:
            app_conn.execute("SELECT set_config('pgmem.word_postings_cap', %s, true)", (str(cap),))
        rows = app_conn.execute(
            "SELECT piece_id, string_to_array(lexemes, ' ') FROM pgmem.piece_word"
            " WHERE scope_id = %s AND kind = 'memory'"
            " AND (%s::text IS NULL OR thread_id = %s) ORDER BY piece_id",
            (scope, thread, thread),
        ).fetchall()
        part_lex = [set(_as_list(app_conn.execute("SELECT pgmem.word_lexemes(%s)", (p,)).fetchone())) for p in parts]
        got = app_conn.execute(
            "SELECT part_no, piece_id, score, word_rank FROM pgmem.word_candidates(%s, %s, 10, %s)",
            (scope, parts, thread),
        ).fetchall()
    if thread is not None:
        # The thread's words read once when it holds at most 2 + (scope pieces) / 3,600 pieces a
        # word of the message, else each word through the word index: one case takes each path.
        searched = len(set().union(*part_lex))
        assert (len(rows) <= searched * (2 + pieces / 3600)) == (pieces == 400), (len(rows), searched)
    lexemes = [(int(str(pid)), set(_as_list((lx,)))) for pid, lx in rows]
    n = len(lexemes)
    lim = max(3, int(0.1 * n))
    sample_lim = max(3, int(0.1 * min(n, 1000)))
    if cap is not None and lim > cap:
        lim, sample_lim = cap, max(3, cap * min(n, 1000) // n)
    sample = lexemes[:1000]
    want: list[tuple[int, int, float, int]] = []
    for part_no, words in enumerate(part_lex, start=1):
        weights = {}
        for w in words:
            if n > 1000 and sum(w in lx for _, lx in sample) > sample_lim:
                continue
            df = sum(w in lx for _, lx in lexemes)
            if 1 <= df <= lim:
                weights[w] = np.log(1 + (n - df + 0.5) / (df + 0.5))
        scores = [(sum(weights[w] for w in lx if w in weights), pid) for pid, lx in lexemes]
        ranked = sorted(((s, pid) for s, pid in scores if s > 0), key=lambda x: (-round(x[0], 9), x[1]))[:10]
        want += [(part_no, pid, s, r) for r, (s, pid) in enumerate(ranked, start=1)]
    assert [(int(str(p)), int(str(pid)), int(str(r))) for p, pid, _, r in got] == [(p, pid, r) for p, pid, _, r in want]
    assert [float(str(s)) for _, _, s, _ in got] == pytest.approx([s for _, _, s, _ in want], abs=1e-6)
    assert len({p for p, *_ in want}) >= 2  # the rule kept words in several parts


def _as_list(row: object) -> list[str]:
    assert isinstance(row, tuple | list)
    value = row[0]
    assert isinstance(value, list)
    return [str(v) for v in value]


def _word_index_scans(admin: Conn) -> int:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'pgmem.piece_word_words_idx'::regclass"
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_the_service_role_reads_the_word_index(store: Conn, admin_conn: Conn) -> None:
    """Row-level security applies its policy before any condition whose operator is not leakproof,
    and no GIN operator is: on pgmem.piece the word index could not be used by the app's login,
    and each word read the scope's every piece. The words live in pgmem.piece_word, read through
    pgmem._word_postings (SECURITY DEFINER): the app's word search reads the index once a word,
    the words the app sees are the superuser's, and the app still reads its own scope only."""
    text = ["zeppelin biscuit museum", "project charter offsite"]
    before = _word_index_scans(admin_conn)
    with scoped(store, SCOPE):
        words = store.execute(
            "SELECT count(DISTINCT lexeme) FROM pgmem.message_words(%s, %s)", (SCOPE, text)
        ).fetchone()
        app_hits = store.execute("SELECT * FROM pgmem.word_candidates(%s, %s)", (SCOPE, text)).fetchall()
        store.execute("SELECT pg_stat_force_next_flush()")
    store.execute("SELECT 1")  # idle between statements: the backend reports its counts
    assert words is not None and int(str(words[0])) >= 3
    deadline = time.monotonic() + 10
    while _word_index_scans(admin_conn) - before < int(str(words[0])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _word_index_scans(admin_conn) - before >= int(str(words[0]))
    admin_hits = admin_conn.execute("SELECT * FROM pgmem.word_candidates(%s, %s)", (SCOPE, text)).fetchall()
    assert app_hits == admin_hits and app_hits
    # Read directly, the table is filtered like every other: inside the scope only its rows,
    # with no scope none.
    with scoped(store, SCOPE):
        assert store.execute("SELECT DISTINCT scope_id FROM pgmem.piece_word").fetchall() == [(SCOPE,)]
    assert store.execute("SELECT count(*) FROM pgmem.piece_word").fetchone() == (0,)
    forced = admin_conn.execute(
        "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = 'pgmem.piece_word'::regclass"
    ).fetchone()
    assert forced == (True, False)
