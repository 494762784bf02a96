"""Per-model recall settings in SQL (issue 29): pgmem.model_setting holds each model's floor,
word weight and subject cosine, and the recall functions use them when the caller gives none,
so a SQL caller with e5 vectors gets e5's floor without knowing it."""

from __future__ import annotations

import hashlib

import numpy as np
import psycopg
import pytest

from pgmem import recall
from pgmem.db import scoped
from pgmem.embedders import e5, local
from pgmem.embedders.base import Embedder
from pgmem.ingest import ingest_turns
from pgmem.recall import DEFAULT_FLOOR
from pgmem.turns import Turn
from tests.conftest import TEST_DIMS

Conn = psycopg.Connection[tuple[object, ...]]
MINILM, E5 = local.MODEL_ID, e5.MODEL_ID
#: e5-small's row as sql/incremental/015_model_keep_settings.sql sets it (measured there).
E5_WORD_WEIGHT, E5_KEEP_RANK, E5_KEEP_MARGIN = 2.0, 1, 0.05


def _put(conn: Conn, scope: str, model_id: str, vectors: np.ndarray, bodies: list[str]) -> None:
    n = len(vectors)
    with scoped(conn, scope):
        conn.execute(
            """SELECT pgmem.put_turn(scope => %s, thread => 't', turn_index => 0, turn_time => NULL,
                   messages => '[]'::jsonb, content_hash => %s, model_id => %s, unit_kinds => %s,
                   source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[])""",
            (
                scope,
                hashlib.sha256(scope.encode()).digest(),
                model_id,
                ["user"] * n,
                list(range(n)),
                [f"[{i}]" for i in range(n)],
                bodies,
                list(vectors),
            ),
        )


def _axis(i: int) -> np.ndarray:
    v = np.zeros(TEST_DIMS, dtype=np.float32)
    v[i] = 1.0
    return v


def _at_cosine(c: float) -> np.ndarray:
    """A unit vector at cosine c to axis 0."""
    v: np.ndarray = (c * _axis(0) + np.sqrt(1 - c * c) * _axis(1)).astype(np.float32)
    return v


def _recall(conn: Conn, scope: str, vec: np.ndarray, **kw: object) -> list[tuple[object, ...]]:
    named = "".join(f", {k} => %s" for k in kw)
    with scoped(conn, scope):
        return conn.execute(
            f"SELECT piece_id, cosine FROM pgmem.memory_recall(%s, ARRAY[%s::vector]{named})",
            (scope, vec, *kw.values()),
        ).fetchall()


def test_the_registry_holds_the_embedders_values(conn: Conn) -> None:
    rows = {
        str(r[0]): r[1:]
        for r in conn.execute("SELECT model_id, floor, word_weight, subject_cosine, known FROM pgmem.model_settings(%s)"
                              " UNION ALL SELECT model_id, floor, word_weight, subject_cosine, known"
                              " FROM pgmem.model_settings(%s)", (MINILM, E5)).fetchall()
    }  # fmt: skip
    assert rows[MINILM] == (DEFAULT_FLOOR, 2.0, local.SUBJECT_COSINE, True)
    assert rows[E5][0] == e5.DEFAULT_FLOOR and rows[E5][2] is None and rows[E5][3] is True
    # a model without a row, and no model, get the defaults
    for model in ("someone/else", None):
        row = conn.execute("SELECT floor, word_weight, subject_cosine, known FROM pgmem.model_settings(%s)", (model,))
        assert row.fetchone() == (0.2, 2.0, 0.25, False)


def test_the_keep_rank_and_margin_are_per_model(conn: Conn) -> None:
    """The floor's exception for a strong word hit follows the model's cosine scale: MiniLM's
    0.05 under its floor, e5-small's measured on its own scale (docs/evaluation.md)."""
    sql = "SELECT word_keep_rank, word_keep_margin FROM pgmem.model_settings(%s)"
    assert conn.execute(sql, (MINILM,)).fetchone() == (1, 0.05)
    assert conn.execute(sql, (E5,)).fetchone() == (E5_KEEP_RANK, E5_KEEP_MARGIN)
    assert conn.execute(sql, ("someone/else",)).fetchone() == (1, 0.05)  # no row: MiniLM's
    row = conn.execute("SELECT word_weight FROM pgmem.model_settings(%s)", (E5,)).fetchone()
    assert row == (E5_WORD_WEIGHT,)


def _word_first(conn: Conn, scope: str, floor: float, **settings: object) -> list[str]:
    """The bodies memory_recall keeps for the query word 'zanzibar' along axis 0, with the
    session's pgmem.* settings."""
    with conn.transaction():
        for name, value in settings.items():
            conn.execute("SELECT set_config(%s, %s, true)", (f"pgmem.{name}", str(value)))
        with scoped(conn, scope):
            rows = conn.execute(
                """SELECT p.body FROM pgmem.memory_recall(%s, ARRAY[%s::vector], ARRAY['zanzibar'], floor => %s,
                       candidates => 10, rrf_k => 0) r JOIN pgmem.piece p USING (piece_id) ORDER BY r.rank""",
                (scope, _axis(0), floor),
            ).fetchall()
    return [str(r[0]) for r in rows]


def _cosines(conn: Conn, scope: str) -> dict[str, float]:
    with scoped(conn, scope):
        rows = conn.execute(
            """SELECT p.body, r.cosine FROM pgmem.memory_recall(%s, ARRAY[%s::vector], floor => -1, x => 100) r
                 JOIN pgmem.piece p USING (piece_id)""",
            (scope, _axis(0)),
        ).fetchall()
    return {str(b): float(str(c)) for b, c in rows}


def test_the_word_hit_under_the_floor_is_kept_within_the_registrys_margin(admin_conn: Conn, conn: Conn) -> None:
    # the word hit's cosine is the highest, yet 0.03 under the floor: nothing clears the floor
    bodies = [f"ordinary note number {i}" for i in range(4)] + ["the zanzibar itinerary"]
    _put(conn, "keep", MINILM, np.vstack([_at_cosine(0.05)] * 4 + [_at_cosine(0.17)]), bodies)
    floor = _cosines(conn, "keep")["the zanzibar itinerary"] + 0.03
    try:
        assert _word_first(conn, "keep", floor) == ["the zanzibar itinerary"]  # MiniLM's 0.05
        admin_conn.execute("UPDATE pgmem.model_setting SET word_keep_margin = 0.01 WHERE model_id = %s", (MINILM,))
        admin_conn.commit()
        assert _word_first(conn, "keep", floor) == []
        # the session settings still override the registry
        assert _word_first(conn, "keep", floor, word_keep_margin=0.1) == ["the zanzibar itinerary"]
        admin_conn.execute("UPDATE pgmem.model_setting SET word_keep_margin = 0.05 WHERE model_id = %s", (MINILM,))
        admin_conn.commit()
        assert _word_first(conn, "keep", floor, word_keep_rank=0) == []
    finally:
        admin_conn.execute("UPDATE pgmem.model_setting SET word_keep_margin = 0.05 WHERE model_id = %s", (MINILM,))
        admin_conn.commit()


def test_a_related_part_keeps_its_first_hit_under_the_floor(conn: Conn) -> None:
    """pgmem.floor_head: a part with a hit above the floor keeps the fused ranking's first hit
    whatever its cosine; a part with none above the floor still comes back empty."""
    bodies = ["the closest note", "a middling note", "the zanzibar itinerary"]
    _put(conn, "head", MINILM, np.vstack([_at_cosine(0.9), _at_cosine(0.6), _at_cosine(0.3)]), bodies)
    cos = _cosines(conn, "head")
    # the word hit is the fused first (word rank 1 at weight 2), its cosine well under the floor
    floor = (cos["the zanzibar itinerary"] + cos["a middling note"]) / 2
    assert _word_first(conn, "head", floor, word_keep_rank=0) == ["the zanzibar itinerary", "the closest note",
                                                                   "a middling note"]  # fmt: skip
    assert _word_first(conn, "head", floor, word_keep_rank=0, floor_head=0) == ["the closest note", "a middling note"]
    # nothing above the floor: empty, first hit or not
    assert _word_first(conn, "head", cos["the closest note"] + 0.01, word_keep_rank=0) == []
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="floor_head"):
        _word_first(conn, "head", floor, floor_head=-1)


def test_a_sql_caller_gets_the_scope_models_floor(conn: Conn) -> None:
    bodies = ["close", "middling"]
    vectors = np.vstack([_at_cosine(0.9), _at_cosine(0.5)])
    _put(conn, "e5-scope", E5, vectors, bodies)
    _put(conn, "minilm-scope", MINILM, vectors, bodies)
    # e5's floor (0.82) keeps only the close piece (stored blended with its turn: about 0.87);
    # MiniLM's (0.2) keeps both
    kept = _recall(conn, "e5-scope", _axis(0))
    assert len(kept) == 1 and float(str(kept[0][1])) >= e5.DEFAULT_FLOOR
    assert len(_recall(conn, "minilm-scope", _axis(0))) == 2
    # an explicit floor still wins, and model_id names the model when the scope has none yet
    assert len(_recall(conn, "e5-scope", _axis(0), floor=0.0)) == 2
    with scoped(conn, "e5-scope"):
        floors = conn.execute(
            "SELECT DISTINCT cosine_floor FROM pgmem.explain_recall('e5-scope', ARRAY[%s::vector])", (_axis(0),)
        ).fetchall()
    assert floors == [(e5.DEFAULT_FLOOR,)]


def test_the_word_weight_comes_from_the_registry(admin_conn: Conn, conn: Conn) -> None:
    # the last piece holds the query's distinctive word; its vector ranks last of the candidates
    bodies = [f"ordinary note number {i}" for i in range(6)] + ["the zanzibar itinerary"]
    vectors = np.vstack([_at_cosine(0.9 - 0.01 * i) for i in range(6)] + [_at_cosine(0.3)])
    _put(conn, "weights", MINILM, vectors, bodies)

    def first(weight: float) -> str:
        admin_conn.execute("UPDATE pgmem.model_setting SET word_weight = %s WHERE model_id = %s", (weight, MINILM))
        admin_conn.commit()
        with scoped(conn, "weights"):
            row = conn.execute(
                """SELECT p.body FROM pgmem.memory_recall('weights', ARRAY[%s::vector], ARRAY['zanzibar'], x => 1,
                       candidates => 10, rrf_k => 0) r JOIN pgmem.piece p USING (piece_id)""",
                (_axis(0),),
            ).fetchone()
        assert row is not None
        return str(row[0])

    try:
        assert first(0.0) == "ordinary note number 0"  # the word side counts for nothing
        assert first(2.0) == "the zanzibar itinerary"
        # the session setting still overrides the registry
        with conn.transaction():
            conn.execute("SET LOCAL pgmem.word_weight = 0")
            with scoped(conn, "weights"):
                row = conn.execute(
                    """SELECT p.body FROM pgmem.memory_recall('weights', ARRAY[%s::vector], ARRAY['zanzibar'],
                           x => 1, candidates => 10, rrf_k => 0) r JOIN pgmem.piece p USING (piece_id)""",
                    (_axis(0),),
                ).fetchone()
        assert row is not None and row[0] == "ordinary note number 0"
    finally:
        admin_conn.execute("UPDATE pgmem.model_setting SET word_weight = 2.0 WHERE model_id = %s", (MINILM,))
        admin_conn.commit()


def test_python_recall_merges_parts_at_the_registrys_subject_cosine(
    admin_conn: Conn, conn: Conn, embedder: Embedder
) -> None:
    turn = Turn("subjects", "t", 0, None, ({"role": "user", "content": "My sister Ana lives in Porto."},))
    ingest_turns(conn, [turn], embedder)
    message = "Where does my sister live? Which city is my sister in?"
    try:
        assert len(recall(conn, "subjects", message, embedder).groups) == 1  # one subject: merged
        admin_conn.execute("UPDATE pgmem.model_setting SET subject_cosine = NULL WHERE model_id = %s", (MINILM,))
        admin_conn.commit()
        assert len(recall(conn, "subjects", message, embedder).groups) == 2  # every part alone
    finally:
        admin_conn.execute("UPDATE pgmem.model_setting SET subject_cosine = %s WHERE model_id = %s",
                           (local.SUBJECT_COSINE, MINILM))  # fmt: skip
        admin_conn.commit()


@pytest.mark.parametrize(
    ("column", "value"), [("floor", 2.0), ("floor", float("nan")), ("word_weight", -1.0), ("subject_cosine", 1.5)]
)
def test_the_registry_refuses_values_out_of_range(admin_conn: Conn, column: str, value: float) -> None:
    row: dict[str, float | None] = {"floor": 0.2, "word_weight": 2.0, "subject_cosine": None, column: value}
    with pytest.raises(psycopg.errors.CheckViolation):
        admin_conn.execute(
            "INSERT INTO pgmem.model_setting (model_id, floor, word_weight, subject_cosine)"
            " VALUES ('m', %(floor)s, %(word_weight)s, %(subject_cosine)s)",
            row,
        )
    admin_conn.rollback()


def test_the_app_may_read_the_registry_but_not_change_it(conn: Conn) -> None:
    assert conn.execute("SELECT count(*) FROM pgmem.model_setting").fetchone() == (2,)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("UPDATE pgmem.model_setting SET floor = -1")
    conn.rollback()
