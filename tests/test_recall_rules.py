"""The recall rules of pgmem.memory_recall and pgmem.document_search, each on a scope built for
it: one piece per turn (for documents, one chunk per unit unless a test needs two), its vector
placed at a chosen cosine to the query (axis 0), so every rank, cosine and word hit is known.
Run as the app login, under row-level security. Each test names the rule it holds; a mutation
review of the recall SQL found these rules untested (a change breaking them passed the suite)."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.embedders import local
from tests.conftest import TEST_DIMS

Conn = psycopg.Connection[tuple[object, ...]]
MINILM = local.MODEL_ID


def _axis(i: int) -> np.ndarray:
    v = np.zeros(TEST_DIMS, dtype=np.float32)
    v[i] = 1.0
    return v


def _at(c: float, other: int = 1) -> np.ndarray:
    """A unit vector at cosine c to axis 0, the rest along axis `other`."""
    v: np.ndarray = (c * _axis(0) + np.sqrt(1 - c * c) * _axis(other)).astype(np.float32)
    return v


def _put(
    conn: Conn,
    scope: str,
    turn: int,
    body: str,
    vector: np.ndarray,
    *,
    thread: str = "t",
    time: str | None = None,
    metadata: dict[str, str] | None = None,
) -> None:
    """One turn of one piece: its stored vector is `vector` itself."""
    with scoped(conn, scope):
        conn.execute(
            """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => %s::timestamptz,
                   messages => '[]'::jsonb, content_hash => %s, model_id => %s, unit_kinds => ARRAY['user'],
                   source_indexes => ARRAY[0], labels => ARRAY[%s], bodies => ARRAY[%s], vectors => ARRAY[%s::vector],
                   metadata => %s::jsonb)""",
            (
                scope,
                thread,
                turn,
                time,
                hashlib.sha256(f"{scope}/{thread}/{turn}".encode()).digest(),
                MINILM,
                body,
                body,
                vector,
                json.dumps(metadata or {}),
            ),
        )


Hit = tuple[int, int, str, float, int | None]


def _recall(
    conn: Conn,
    scope: str,
    vectors: list[np.ndarray],
    texts: list[str] | None = None,
    settings: dict[str, str] | None = None,
    **kw: object,
) -> list[Hit]:
    """memory_recall's hits as (part_no, rank, body, cosine, word_rank), in its order, with
    these pgmem.* settings for its transaction."""
    named = "".join(f", {k} => %s" for k in kw)
    with scoped(conn, scope):
        for name, value in (settings or {}).items():
            conn.execute("SELECT set_config(%s, %s, true)", (f"pgmem.{name}", value))
        rows = conn.execute(
            f"""SELECT part_no, rank, body, cosine, word_rank
                  FROM pgmem.memory_recall(%s, %s::vector[], %s::text[]{named})""",
            (scope, vectors, texts, *kw.values()),
        ).fetchall()
    return [
        (int(str(p)), int(str(r)), str(b), float(str(c)), None if w is None else int(str(w))) for p, r, b, c, w in rows
    ]


def _bodies(hits: list[Hit], part: int = 1) -> list[str]:
    return [b for p, _r, b, _c, _w in hits if p == part]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_hit_exactly_at_the_floor_is_kept(conn: Conn, mode: str) -> None:
    """The floor is cosine >= floor (docs/sql.md), in the vector query and the fused one alike."""
    _put(conn, "floor", 0, "near", _at(0.9))
    _put(conn, "floor", 1, "middle", _at(0.6))
    _put(conn, "floor", 2, "far", _at(0.3))
    texts = None if mode == "vector" else ["nothing shared"]
    loose = _recall(conn, "floor", [_axis(0)], texts, floor=-1.0, mode=mode)
    assert _bodies(loose) == ["near", "middle", "far"]
    at = {b: c for _p, _r, b, c, _w in loose}["middle"]
    assert _bodies(_recall(conn, "floor", [_axis(0)], texts, floor=at, mode=mode)) == ["near", "middle"]


def test_rrf_k_is_the_fusions_constant(conn: Conn) -> None:
    """rrf_k is the k of 1 / (k + rank): a small k lets the vector side's first hit outrank a
    piece both sides found lower down, the usual 60 flattens the ranks so that the piece both
    sides found leads. Every piece is a vector candidate (five pieces, candidates 5)."""
    for i, c in enumerate((0.9, 0.8, 0.7, 0.6, 0.5)):
        words = {3: "the zanzibar note", 4: "the zanzibar quokka note"}.get(i, f"note {i}")
        _put(conn, "rrf", i, words, _at(c))

    def order(rrf_k: int) -> list[str]:
        hits = _recall(
            conn, "rrf", [_axis(0)], ["zanzibar quokka"], {"word_weight": "1"}, floor=-1.0, candidates=5, rrf_k=rrf_k
        )
        return _bodies(hits)

    # word ranks: the quokka note 1, the zanzibar note 2; vector ranks: note 0 .. the quokka note 5
    assert order(0) == ["the zanzibar quokka note", "note 0", "the zanzibar note", "note 1", "note 2"]
    assert order(60) == ["the zanzibar quokka note", "the zanzibar note", "note 0", "note 1", "note 2"]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_since_holds_its_instant_and_until_does_not(conn: Conn, mode: str) -> None:
    """since / until are turn_time >= since and turn_time < until: a turn at the since instant is
    inside, one at the until instant outside, on the vector side and the word side alike (the
    turn at until holds the searched word)."""
    _put(conn, "bounds", 0, "before", _at(0.95), time="2026-04-30T23:59:59Z")
    _put(conn, "bounds", 1, "at since", _at(0.9), time="2026-05-01T00:00:00Z")
    _put(conn, "bounds", 2, "inside", _at(0.8), time="2026-05-15T00:00:00Z")
    _put(conn, "bounds", 3, "at until zanzibar", _at(0.7), time="2026-06-01T00:00:00Z")
    texts = None if mode == "vector" else ["zanzibar"]
    hits = _recall(
        conn,
        "bounds",
        [_axis(0)],
        texts,
        floor=-1.0,
        mode=mode,
        since="2026-05-01T00:00:00Z",
        until="2026-06-01T00:00:00Z",
    )
    assert _bodies(hits) == ["at since", "inside"]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_the_time_window_holds_its_start_and_not_its_end(conn: Conn, mode: str) -> None:
    """time_from / time_to boost turn_time >= time_from and < time_to: nothing clears the floor,
    so only the window's fused first hit comes back (pgmem.window_head), and that is the turn at
    time_from, not the nearer one at time_to."""
    _put(conn, "window", 0, "at time_from", _at(0.4), time="2026-05-01T00:00:00Z")
    _put(conn, "window", 1, "at time_to", _at(0.5), time="2026-06-01T00:00:00Z")
    texts = None if mode == "vector" else ["nothing shared"]

    def kept(time_from: str, time_to: str) -> list[str]:
        return _bodies(
            _recall(conn, "window", [_axis(0)], texts, floor=0.99, mode=mode, time_from=time_from, time_to=time_to)
        )

    assert kept("2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z") == ["at time_from"]
    assert kept("2026-05-01T00:00:01Z", "2026-06-01T00:00:01Z") == ["at time_to"]


def test_the_time_weight_setting_weighs_the_window(conn: Conn) -> None:
    """pgmem.time_weight is the window ranking's weight: at 2 (the default) the window's turn
    leads, at 0.01 the window's rank 1 adds less than a vector rank apart (1/61 - 1/62) and the
    nearer turn outside the window leads again."""
    _put(conn, "tw", 0, "outside", _at(0.9), time="2026-01-10T00:00:00Z")
    _put(conn, "tw", 1, "inside", _at(0.8), time="2026-03-10T00:00:00Z")

    def order(weight: str | None) -> list[str]:
        return _bodies(
            _recall(
                conn,
                "tw",
                [_axis(0)],
                None,
                {"time_weight": weight} if weight else None,
                floor=-1.0,
                time_from="2026-03-01T00:00:00Z",
                time_to="2026-04-01T00:00:00Z",
            )
        )

    assert order(None) == ["inside", "outside"]
    assert order("0.01") == ["outside", "inside"]


def test_a_piece_only_the_window_found_does_not_outrank_the_vector_sides_first(conn: Conn) -> None:
    """A piece the time window found and the vector side did not counts its window rank at most
    once: it follows the vector side's first (equal fused scores, the nearer first) and leads the
    vector side's second. The vector side's candidates are greatest(candidates, x) = 2."""
    # The window's piece is the oldest: the tie goes to the nearer piece, not the older one.
    _put(conn, "wonly", 0, "far inside", _at(0.1, other=2), time="2026-03-11T00:00:00Z")
    _put(conn, "wonly", 1, "outside", _at(0.9), time="2026-01-10T00:00:00Z")
    _put(conn, "wonly", 2, "outside too", _at(0.8), time="2026-01-11T00:00:00Z")
    hits = _recall(
        conn,
        "wonly",
        [_axis(0)],
        floor=-1.0,
        candidates=2,
        x=2,
        time_from="2026-03-01T00:00:00Z",
        time_to="2026-04-01T00:00:00Z",
    )
    assert _bodies(hits) == ["outside", "far inside"]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_recency_leaves_a_newer_hit_outside_the_band_in_its_place(conn: Conn, mode: str) -> None:
    """Recency reorders only hits whose cosines are within the band of the first hit's: a newer
    second hit 0.4 under the first stays second at the default band (0.05), and leads at 0.5."""
    _put(conn, "band", 0, "older and nearer", _at(0.9), time="2026-01-01T00:00:00Z")
    _put(conn, "band", 1, "newer and farther", _at(0.5), time="2026-02-01T00:00:00Z")
    texts = None if mode == "vector" else ["nothing shared"]
    assert _bodies(_recall(conn, "band", [_axis(0)], texts, floor=-1.0, mode=mode)) == [
        "older and nearer",
        "newer and farther",
    ]
    assert _bodies(_recall(conn, "band", [_axis(0)], texts, floor=-1.0, mode=mode, recency=0.5)) == [
        "newer and farther",
        "older and nearer",
    ]


def test_each_part_keeps_its_own_floor_head_and_word_cosines(conn: Conn) -> None:
    """Parts are ranked apart. pgmem.floor_head keeps the first hit of a part that has a hit above
    the floor, not of a part with none because another part has one; and a piece only the word
    side found for a part has its cosine to that part's vector."""
    for i, c in enumerate((0.9, 0.8, 0.7)):
        _put(conn, "parts", i, f"note {i}", _at(c))
    _put(conn, "parts", 3, "the zanzibar itinerary", _at(0.5, other=2))
    # part 1 along axis 0; part 2 along axis 3, at cosine 0 to every piece
    hits = _recall(conn, "parts", [_axis(0), _axis(3)], ["nothing shared", "nothing shared"], floor=0.75)
    assert [(p, b) for p, _r, b, _c, _w in hits] == [(1, "note 0"), (1, "note 1")]
    # Part 2 finds the zanzibar piece by its word only (its vector candidates: x = candidates = 3
    # of the notes): cosine 0 to part 2's vector, 0.5 to part 1's.
    hits = _recall(conn, "parts", [_axis(0), _axis(3)], ["nothing shared", "zanzibar"], floor=-1.0, x=3, candidates=3)
    (zanzibar,) = [(c, w) for p, _r, b, c, w in hits if p == 2 and b == "the zanzibar itinerary"]
    assert zanzibar[0] == pytest.approx(0.0, abs=1e-6) and zanzibar[1] == 1


def test_the_thread_and_metadata_filters_hold_on_the_word_side_and_in_the_window(conn: Conn) -> None:
    """A thread or metadata filter keeps out a piece that holds the searched word or lies inside
    the time window, as it keeps out one the vector side would find."""
    _put(
        conn,
        "filters",
        0,
        "plain note",
        _at(0.9),
        thread="t",
        time="2026-01-10T00:00:00Z",
        metadata={"channel": "voice"},
    )
    _put(
        conn,
        "filters",
        1,
        "zanzibar in another thread",
        _at(0.2),
        thread="u",
        time="2026-03-10T00:00:00Z",
        metadata={"channel": "voice"},
    )
    _put(
        conn,
        "filters",
        2,
        "zanzibar in another channel",
        _at(0.2, other=2),
        thread="t",
        time="2026-03-11T00:00:00Z",
        metadata={"channel": "chat"},
    )
    voice_only = '{"channel": "voice"}'
    # The word side (the part's text holds the word), then the window (vector mode).
    for texts in (["zanzibar"], None):
        start, end = (None, None) if texts else ("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")
        both = _recall(
            conn,
            "filters",
            [_axis(0)],
            texts,
            floor=-1.0,
            thread="t",
            metadata_filter=voice_only,
            time_from=start,
            time_to=end,
        )
        assert _bodies(both) == ["plain note"]
        in_thread = _recall(conn, "filters", [_axis(0)], texts, floor=-1.0, thread="t", time_from=start, time_to=end)
        assert sorted(_bodies(in_thread)) == ["plain note", "zanzibar in another channel"]
        voice = _recall(
            conn, "filters", [_axis(0)], texts, floor=-1.0, metadata_filter=voice_only, time_from=start, time_to=end
        )
        assert sorted(_bodies(voice)) == ["plain note", "zanzibar in another thread"]


def _put_document(conn: Conn, scope: str, chunks: list[list[tuple[str, np.ndarray]]], document: str = "doc.md") -> None:
    """One document; each chunk's body is its units' bodies joined by a space, each unit's
    stored vector its own (weight 1)."""
    bodies = [" ".join(b for b, _v in units) for units in chunks]
    units = [(i, j, b, v) for i, chunk in enumerate(chunks) for j, (b, v) in enumerate(chunk)]
    starts = [sum(len(b) + 1 for b, _v in chunks[i][:j]) for i, j, _b, _v in units]
    with scoped(conn, scope):
        conn.execute(
            """SELECT pgmem.put_document(%s, %s, 'Doc', 'body', '\\x00'::bytea, %s, %s::jsonb, %s, %s, %s, %s,
                   %s, %s, %s, %s, %s::vector[], weight => 1)""",
            (
                scope,
                document,
                MINILM,
                json.dumps([[f"H{i}"] for i in range(len(chunks))]),
                bodies,
                [i for i, _j, _b, _v in units],
                ["prose"] * len(units),
                [j for _i, j, _b, _v in units],
                starts,
                [s + len(b) for s, (_i, _j, b, _v) in zip(starts, units, strict=True)],
                [f"[H{i}]" for i, _j, _b, _v in units],
                [b for _i, _j, b, _v in units],
                [v for _i, _j, _b, v in units],
            ),
        )


def _search(
    conn: Conn, scope: str, texts: list[str] | None, settings: dict[str, str] | None = None, **kw: object
) -> list[str]:
    """document_search's chunk bodies for a query along axis 0, in its order (floor -1 unless given)."""
    kw.setdefault("floor", -1.0)
    named = "".join(f", {k} => %s" for k in kw)
    with scoped(conn, scope):
        for name, value in (settings or {}).items():
            conn.execute("SELECT set_config(%s, %s, true)", (f"pgmem.{name}", value))
        rows = conn.execute(
            f"SELECT chunk_body FROM pgmem.document_search(%s, ARRAY[%s::vector], %s::text[]{named})",
            (scope, _axis(0), texts, *kw.values()),
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_document_search_fuses_with_its_rrf_k_and_word_weight(conn: Conn) -> None:
    """document_search fuses as memory_recall does: rrf_k is the fusion's constant, the setting
    pgmem.doc_word_weight the word rank's weight (0: the vector ranking), and mode vector
    searches no words even when the parts' texts are given."""
    bodies = ["note 0", "note 1", "note 2", "the zanzibar note", "the zanzibar quokka note"]
    _put_document(conn, "docs", [[(b, _at(c))] for b, c in zip(bodies, (0.9, 0.8, 0.7, 0.6, 0.5), strict=True)])
    text = ["zanzibar quokka"]
    assert _search(conn, "docs", text, candidates=5, rrf_k=0) == [bodies[4], "note 0", bodies[3], "note 1", "note 2"]
    assert _search(conn, "docs", text, candidates=5, rrf_k=60) == [bodies[4], bodies[3], "note 0", "note 1", "note 2"]
    assert _search(conn, "docs", text, {"doc_word_weight": "0"}, candidates=5) == bodies
    assert _search(conn, "docs", text, candidates=5, mode="vector") == bodies


def test_a_unit_only_the_word_side_found_does_not_outrank_the_vector_sides_first(conn: Conn) -> None:
    """At a doc_word_weight above 1 a unit only the word side found still counts its word rank
    at most once: it follows the vector side's first (equal fused scores, the nearer first)."""
    _put_document(
        conn, "wdocs", [[("note 0", _at(0.9))], [("note 1", _at(0.8))], [("the zanzibar note", _at(0.1, other=2))]]
    )
    found = _search(conn, "wdocs", ["zanzibar"], {"doc_word_weight": "2"}, candidates=2, x=2)
    assert found == ["note 0", "the zanzibar note"]


def test_a_chunk_with_a_unit_above_the_floor_is_found_by_it(conn: Conn) -> None:
    """A chunk whose word hit is under the floor is still found by its other unit above it (as
    memory_recall keeps a piece above the floor whatever another piece's word hit does); a chunk
    with no unit above the floor is not."""
    _put_document(
        conn,
        "cfloor",
        [
            [("near note", _at(0.9))],
            [("plain words", _at(0.5)), ("zanzibar", _at(0.05, other=2))],
            [("far note", _at(0.1, other=3))],
        ],
    )
    assert _search(conn, "cfloor", ["zanzibar"], floor=0.2) == ["near note", "plain words zanzibar"]


def test_a_word_hit_under_the_floor_is_cut_unless_it_is_the_fused_first(conn: Conn) -> None:
    """Word hits meet the floor like any hit: the word side's second, 0.15 under the floor
    (beyond pgmem.word_keep_margin), is cut although its fused rank is second; the word side's
    first, above the floor, leads."""
    _put(conn, "wfloor", 0, "plain note", _at(0.9))
    _put(conn, "wfloor", 1, "zanzibar one", _at(0.8))
    _put(conn, "wfloor", 2, "zanzibar two", _at(0.05))
    hits = _recall(conn, "wfloor", [_axis(0)], ["zanzibar"], floor=0.2)
    assert [(b, w) for _p, _r, b, _c, w in hits] == [("zanzibar one", 1), ("plain note", None)]
    loose = _recall(conn, "wfloor", [_axis(0)], ["zanzibar"], floor=-1.0)
    assert [(b, w) for _p, _r, b, _c, w in loose] == [("zanzibar one", 1), ("zanzibar two", 2), ("plain note", None)]


def test_an_indexed_scope_returns_no_document_and_exact_search_skips_its_index(conn: Conn, admin_conn: Conn) -> None:
    """On a scope searched through its ANN index, with a write tail and without, memory_recall
    returns memory pieces only, each once (the index's last piece is not the tail's too), and
    exact => true searches without the index, with the same hits here (a graph of 120 pieces
    finds them all)."""
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((120, TEST_DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[119]
    # A document unit on the query itself in the graph, another written after it (in the tail).
    _put_document(conn, "ann", [[("document in the graph", query)]], "a.md")
    for i, v in enumerate(vectors):
        _put(conn, "ann", i, f"memory {i}", v)
    admin_conn.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => 100, m => 16, ef_construction => 64)")
    _put_document(conn, "ann", [[("document in the tail", query)]], "b.md")
    _put(conn, "ann", 120, "memory in the tail", query)

    def searched() -> list[str]:
        index = admin_conn.execute("SELECT pgmem.scope_ann_index('piece', 'ann')::oid").fetchone()
        assert index is not None and index[0] is not None

        def scans() -> int:
            row = conn.execute("SELECT pg_stat_get_xact_numscans(%s)", index).fetchone()
            assert row is not None
            return int(str(row[0]))

        with conn.transaction():
            before = scans()
            indexed = _recall(conn, "ann", [query], floor=-1.0, x=10)
            assert scans() > before
            before = scans()
            exact = _recall(conn, "ann", [query], floor=-1.0, x=10, exact=True)
            assert scans() == before
        assert exact == indexed
        return _bodies(indexed)

    with_tail = searched()
    # The index again without a tail: every piece in the graph.
    admin_conn.execute("SELECT * FROM pgmem.index_large_scopes(100, m => 16, ef_construction => 64, tail => false)")
    for bodies in (with_tail, searched()):
        assert bodies[:2] == ["memory 119", "memory in the tail"]
        assert len(set(bodies)) == 10 and all(b.startswith("memory") for b in bodies)


def test_a_chunk_is_returned_with_its_best_unit(conn: Conn) -> None:
    """Each chunk comes back once, with the unit that ranks best in it: its span and cosine."""
    _put_document(conn, "best", [[("first unit", _at(0.4)), ("second unit", _at(0.8))], [("other", _at(0.6))]])
    with scoped(conn, "best"):
        rows = conn.execute(
            """SELECT chunk_body, span_start, span_end, round(cosine::numeric, 3)
                 FROM pgmem.document_search('best', ARRAY[%s::vector], floor => -1)""",
            (_axis(0),),
        ).fetchall()
    assert rows == [("first unit second unit", 11, 22, Decimal("0.800")), ("other", 0, 5, Decimal("0.600"))]
