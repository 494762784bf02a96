"""What the write path stores, read back as a user would (as the app login): a changed turn
stored whole again (its time, metadata, context and pieces in order), the same turn put again
in SQL rewriting nothing, the context and weight every piece was blended with recorded on its
turn (reblend and reembed read them), put_turns blending as put_turn does, and a piece's words
holding its label's.

These rows were only ever compared between put_turn and put_turns, or read after a first write:
a fault both paths share, or one only a second write shows, went unseen (mutation review)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import numpy as np
import psycopg
import pytest

from pgmem.blend import blend, unit, unit_mean
from pgmem.db import scoped
from pgmem.documents.store import DocumentReport
from pgmem.embedders.base import Embedder
from pgmem.errors import DatabaseError
from pgmem.ingest import IngestReport, ingest_turns
from pgmem.pieces import turn_pieces
from pgmem.turns import Turn, turn_from_dict
from tests.conftest import TEST_DIMS
from tests.helpers import vec
from tests.lifecycle_helpers import put_turn
from tests.security_helpers import hash_vector

Conn = psycopg.Connection[tuple[object, ...]]

STORY = (
    "The October export is late. Busan held the containers for customs. Hamburg expects them on "
    "Friday. Biscuit and Juniper, the dogs, waited at the dock all morning. The budget cap is 48k."
)


def _turn(when: str, metadata: dict[str, object], story: str) -> Turn:
    return turn_from_dict(
        {
            "scope": "w",
            "thread": "t",
            "turn": 3,
            "time": when,
            "metadata": metadata,
            "messages": [
                {"role": "user", "content": story},
                {"role": "assistant", "content": "Noted. I will watch the Hamburg arrival."},
            ],
        }
    )


def _pieces(conn: Conn) -> list[tuple[str, str, object]]:
    with scoped(conn, "w"):
        rows = conn.execute(
            "SELECT label, body, raw_embedding FROM pgmem.piece WHERE thread_id = 't' AND turn_index = 3"
            " ORDER BY source_index, seq"
        ).fetchall()
    return [(str(label), str(body), raw) for label, body, raw in rows]


def test_a_changed_turn_is_stored_whole_again(conn: Conn, embedder: Embedder) -> None:
    first = _turn("2026-10-16T14:02:00Z", {"channel": "voice"}, STORY)
    assert ingest_turns(conn, [first], embedder, max_bytes=120).inserted == 1
    # Another time, other metadata, other text: every column of the turn is the new version's.
    second = _turn("2026-11-02T09:30:00Z", {"channel": "chat"}, STORY.replace("48k", "52k"))
    assert ingest_turns(conn, [second], embedder, max_bytes=120).replaced == 1
    with scoped(conn, "w"):
        row = conn.execute("SELECT turn_time, metadata, context FROM pgmem.turn WHERE thread_id = 't'").fetchone()
    assert row is not None
    turn_time, metadata, context = row
    assert turn_time == datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    assert metadata == {"channel": "chat"}
    pieces = _pieces(conn)
    # The pieces in (source, seq) order are the turn's pieces as packed: the text reads in order.
    expected = turn_pieces(second, embedder, max_bytes=120)
    assert len(expected) > 3
    assert [(label, body) for label, body, _ in pieces] == [(p.label, p.body) for p in expected]
    # The context is the new pieces' (reblend and reembed blend with it).
    raw = np.array([vec(r) for _, _, r in pieces])
    assert np.allclose(vec(context), unit_mean(raw), atol=1e-6)


def test_the_same_turn_put_again_in_sql_rewrites_nothing(conn: Conn) -> None:
    """A service in another language calls put_turn for a turn it may have sent before (a retry,
    a replayed log): the same content hash is no write, whatever the client skipped."""
    with scoped(conn, "w"):
        assert put_turn(conn, "w", "t", 0, ["first piece", "second piece"]) == ("inserted", 2)
        before = conn.execute("SELECT piece_id, xmin::text FROM pgmem.piece ORDER BY piece_id").fetchall()
        turn = conn.execute("SELECT xmin::text FROM pgmem.turn").fetchall()
        assert put_turn(conn, "w", "t", 0, ["first piece", "second piece"]) == ("unchanged", 0)
        assert conn.execute("SELECT piece_id, xmin::text FROM pgmem.piece ORDER BY piece_id").fetchall() == before
        assert conn.execute("SELECT xmin::text FROM pgmem.turn").fetchall() == turn


def test_a_given_context_is_stored_as_a_unit_vector(conn: Conn) -> None:
    """An endpoint's vectors need not be unit length (a truncated dimension, another model): the
    turn keeps unit(context), the vector every piece was blended with."""
    raw = hash_vector("piece", TEST_DIMS)
    context = 3.0 * hash_vector("the whole turn", TEST_DIMS)
    with scoped(conn, "w"):
        conn.execute(
            """SELECT pgmem.put_turn(scope => 'w', thread => 't', turn_index => 0, turn_time => NULL,
                   messages => '[]', content_hash => '\\x01', model_id => 'test:hash', unit_kinds => ARRAY['user'],
                   source_indexes => ARRAY[0], labels => ARRAY['[Turn 0 · User]'], bodies => ARRAY['b'],
                   vectors => ARRAY[%s::vector], context => %s::vector)""",
            (str(raw.tolist()), str(context.tolist())),
        )
        stored, embedding = conn.execute(
            "SELECT t.context, p.embedding FROM pgmem.turn t JOIN pgmem.piece p USING (scope_id, thread_id, turn_index)"
        ).fetchone() or (None, None)
    assert np.isclose(np.linalg.norm(vec(stored)), 1.0, atol=1e-5)
    assert np.allclose(vec(stored), unit(context), atol=1e-6)
    assert np.allclose(vec(embedding), blend(raw, context, 0.8), atol=1e-6)


def test_the_turn_records_the_weight_its_pieces_were_blended_with(conn: Conn, embedder: Embedder) -> None:
    """reembed blends the new vectors with the turn's blend_weight: it must be the one used."""
    turn = _turn("2026-10-16T14:02:00Z", {}, STORY)
    ingest_turns(conn, [turn], embedder, weight=0.6)
    with scoped(conn, "w"):
        weight, context = conn.execute("SELECT blend_weight, context FROM pgmem.turn").fetchone() or (None, None)
        rows = conn.execute("SELECT raw_embedding, embedding FROM pgmem.piece").fetchall()
    assert weight is not None and abs(float(str(weight)) - 0.6) < 1e-6
    for raw, emb in rows:
        assert np.allclose(vec(emb), blend(vec(raw), vec(context), 0.6), atol=1e-6)


def test_put_turns_blends_by_default_as_put_turn_does(conn: Conn) -> None:
    """Called without a weight, put_turns (a backfill in SQL) stores the vectors put_turn stores."""
    raws = [hash_vector(f"piece {i}", TEST_DIMS) for i in range(3)]
    literals = [str(r.tolist()) for r in raws]
    args = (["user"] * 3, [0, 0, 1], ["[Turn 0 · User]"] * 3, ["a", "b", "c"], literals)
    digest = hashlib.sha256(b"turn").digest()
    with scoped(conn, "one"):
        conn.execute(
            """SELECT pgmem.put_turn(scope => 'one', thread => 't', turn_index => 0, turn_time => NULL,
                   messages => '[]', content_hash => %s, model_id => 'test:hash', unit_kinds => %s,
                   source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[])""",
            (digest, *args),
        )
    with scoped(conn, "bulk"):
        conn.execute(
            """SELECT * FROM pgmem.put_turns(scope => 'bulk', model_id => 'test:hash', threads => ARRAY['t'],
                   turn_indexes => ARRAY[0], turn_times => ARRAY[NULL::timestamptz], messages => ARRAY['[]'::jsonb],
                   content_hashes => ARRAY[%s], piece_counts => ARRAY[3], unit_kinds => %s, source_indexes => %s,
                   labels => %s, bodies => %s, vectors => %s::vector[])""",
            (digest, *args),
        )
    stored = {}
    for scope in ("one", "bulk"):
        with scoped(conn, scope):
            stored[scope] = [
                vec(r[0]) for r in conn.execute("SELECT embedding FROM pgmem.piece ORDER BY source_index, seq")
            ]
            assert conn.execute("SELECT blend_weight FROM pgmem.turn").fetchone() == (0.8,)
    context = unit_mean(np.array(raws))
    expected = [blend(r, context, 0.8) for r in raws]
    for scope in ("one", "bulk"):
        assert all(np.allclose(got, want, atol=1e-6) for got, want in zip(stored[scope], expected, strict=True))


def test_a_pieces_words_hold_its_labels_words(conn: Conn, embedder: Embedder) -> None:
    """The label names the turn, source and time; its words are searchable with the body's
    (pgmem.piece_word: the lexemes of label and body)."""
    turn = turn_from_dict(
        {
            "scope": "w",
            "thread": "t",
            "turn": 4,
            "time": "2026-10-16T14:02:00Z",
            "messages": [
                {
                    "role": "assistant",
                    "content": "Fetching it.",
                    "tool_calls": [{"id": "c1", "function": {"name": "fetch", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"rows": 3})},
            ],
        }
    )
    ingest_turns(conn, [turn], embedder)
    with scoped(conn, "w"):
        rows = conn.execute(
            "SELECT p.label, w.lexemes FROM pgmem.piece p JOIN pgmem.piece_word w USING (scope_id, piece_id)"
            " ORDER BY p.source_index"
        ).fetchall()
    assert [r[0] for r in rows] == [
        "[Turn 4 · Assistant step 1 · Oct 16, 2:02 PM]",
        "[Turn 4 · Tool fetch · Oct 16, 2:02 PM]",
    ]
    for _, lexemes in rows:
        # "turn", "oct" and "pm" are in no body: they are the label's.
        assert {"turn", "oct", "pm"} <= set(str(lexemes).split(" "))
    assert "assist" in str(rows[0][1]).split(" ")


@pytest.mark.parametrize("status", ["gone", "", "failed"])
def test_a_status_this_pgmem_does_not_know_is_an_error_not_unchanged(status: str) -> None:
    """The writers counted any status put_turns or put_document returned that they did not know
    as unchanged: a turn the database did not store (a newer schema's status, or a mutation of
    put_turns' loop, which the write path's review found) read as stored in the report. Now it is
    a DatabaseError; the known ones are counted."""
    turns = IngestReport()
    for known in ("inserted", "replaced", "unchanged", "skipped"):
        turns.count(known, 2)
    assert (turns.inserted, turns.replaced, turns.unchanged, turns.skipped, turns.pieces) == (1, 1, 1, 1, 8)
    with pytest.raises(DatabaseError, match="put_turns returned the status"):
        turns.count(status, 0)
    docs = DocumentReport()
    for known in ("inserted", "replaced", "unchanged"):
        docs.count(known, 3)
    assert (docs.inserted, docs.replaced, docs.unchanged, docs.units) == (1, 1, 1, 9)
    with pytest.raises(DatabaseError, match="put_document returned the status"):
        docs.count("skipped" if status == "failed" else status, 0)
    assert (turns.unchanged, docs.unchanged) == (1, 1)
