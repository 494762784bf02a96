"""The recall rules of pgmem.memory_recall and pgmem.document_search, each on a scope built for
it: one piece per turn, its vector placed at a chosen cosine to the query (axis 0), so every
rank, cosine and word hit is known. Run as the app login, under row-level security. Each test
names the rule it holds; a mutation review of the recall SQL found these rules untested."""

from __future__ import annotations

import hashlib
import json

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
    _put(conn, "wonly", 0, "outside", _at(0.9), time="2026-01-10T00:00:00Z")
    _put(conn, "wonly", 1, "outside too", _at(0.8), time="2026-01-11T00:00:00Z")
    _put(conn, "wonly", 2, "far inside", _at(0.1, other=2), time="2026-03-11T00:00:00Z")
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
