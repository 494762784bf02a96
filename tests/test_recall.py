"""Per-part recall against the real database."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.ingest import ingest_turns
from pgmem.recall import embed_query, recall, recall_vectors, subject_cosine_for
from pgmem.turns import Turn, turn_from_dict
from tests.security_helpers import HashEmbedder

Conn = psycopg.Connection[tuple[object, ...]]


def turn(i: int, user: str, assistant: str, thread: str = "t1") -> Turn:
    return turn_from_dict(
        {
            "scope": "s",
            "thread": thread,
            "turn": i,
            "time": f"2026-10-1{i}T10:00:00Z",
            "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
        }
    )


TURNS = [
    turn(
        1,
        "The staging deploy failed: DEPLOY_TOKEN is not set.",
        "The deploy script reads DEPLOY_TOKEN from .env.local.",
    ),
    turn(2, "My dogs Biscuit and Juniper need their boosters at the vet.", "Noted, vet reminder set for Monday."),
    turn(3, "Cap cloud spend at 48k per month for Q4.", "Recorded the Q4 cloud budget cap."),
    turn(4, "Our nightly ETL takes four hours.", "Switch row-by-row inserts to COPY.", thread="t2"),
]


@pytest.fixture
def store(conn: Conn, embedder: Embedder) -> Conn:
    assert ingest_turns(conn, TURNS, embedder).inserted == 4
    return conn


def test_each_part_gets_its_own_group(store: Conn, embedder: Embedder) -> None:
    msg = "The deploy script still cannot find DEPLOY_TOKEN on staging.\nWhat are my dogs called again?"
    r = recall(store, "s", msg, embedder, x=2, floor=0.0)
    assert [g.part_no for g in r.groups] == [1, 2]
    assert r.groups[0].hits[0].turn_index == 1
    assert r.groups[1].hits[0].turn_index == 2
    assert all(len(g.hits) == 2 for g in r.groups)
    assert [h.rank for h in r.groups[0].hits] == [1, 2]
    h = r.groups[0].hits[0]
    assert h.score == pytest.approx((1 + h.cosine) / 2)


def test_a_memory_relevant_to_two_parts_appears_in_both(store: Conn, embedder: Embedder) -> None:
    # Two subjects (their parts' cosine is about 0.1, so they are not merged), one memory.
    msg = "Did the staging deploy fail?\nWhat does .env.local hold?"
    r = recall(store, "s", msg, embedder, x=2, floor=0.0)
    assert len(r.groups) == 2
    first, second = ({h.piece_id for h in g.hits} for g in r.groups)
    assert first & second  # a piece both parts found is in both groups: not deduplicated


def test_no_padding_below_the_floor(store: Conn, embedder: Embedder) -> None:
    msg = "What are my dogs called again, remind me?"
    loose = recall(store, "s", msg, embedder, x=5, floor=-1.0, mode="vector").groups[0].hits
    assert len(loose) == 5
    floor = (loose[0].cosine + loose[1].cosine) / 2
    strict = recall(store, "s", msg, embedder, x=5, floor=floor, mode="vector").groups[0].hits
    assert [h.piece_id for h in strict] == [loose[0].piece_id]
    assert all(h.cosine >= floor for h in strict)


def test_thread_filter(store: Conn, embedder: Embedder) -> None:
    r = recall(store, "s", "How do we make the ETL faster?", embedder, x=10, floor=-1.0, thread="t2")
    assert {h.thread_id for h in r.groups[0].hits} == {"t2"}


def test_document_rows_are_never_returned(store: Conn, embedder: Embedder) -> None:
    v = embedder.embed(["What are my dogs called?"])[0]
    with scoped(store, "s"):
        # a document unit whose vector is the query itself, written as the app writes documents
        store.execute(
            """SELECT pgmem.put_document('s', 'doc.md', 'Doc', 'x', '\\x00'::bytea, %s, '[["Doc"]]'::jsonb,
                      ARRAY['x'], ARRAY[0], ARRAY['prose'], ARRAY[0], ARRAY[0], ARRAY[1], ARRAY['[Doc]'],
                      ARRAY['What are my dogs called?'], ARRAY[%s]::vector[])""",
            (embedder.model_id, v),
        )
        assert store.execute("SELECT count(*) FROM pgmem.piece WHERE kind = 'document'").fetchone() == (1,)
        rows = store.execute(
            "SELECT body FROM pgmem.memory_recall('s', ARRAY[%s]::vector[], x => 50, floor => -1)", (v,)
        ).fetchall()
        memory = store.execute("SELECT count(*) FROM pgmem.piece WHERE kind = 'memory'").fetchone()
    assert memory is not None and len(rows) == memory[0]
    assert ("What are my dogs called?",) not in rows


def test_other_scopes_are_invisible(store: Conn, admin_conn: Conn, embedder: Embedder) -> None:
    question = "What are my dogs called?"
    other = [
        turn_from_dict(
            {
                "scope": "someone-else",
                "thread": "t1",
                "turn": i,
                "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
            }
        )
        for i, text in enumerate([question, "My dogs are called Rex and Fido.", "The staging deploy failed."])
    ]
    assert ingest_turns(store, other, embedder).inserted == 3
    # Without a scope filter the other scope's pieces are the nearest ones: a superuser, whom
    # row-level security does not filter, finds them first.
    q = embed_query(question, embedder).blended[0]
    nearest = admin_conn.execute("SELECT scope_id FROM pgmem.piece ORDER BY embedding <=> %s LIMIT 1", (q,)).fetchone()
    assert nearest == ("someone-else",)
    theirs = {int(str(r[0])) for r in admin_conn.execute("SELECT piece_id FROM pgmem.piece WHERE scope_id <> 's'")}
    for mode in ("vector", "hybrid"):
        mine = recall(store, "s", question, embedder, x=50, floor=-1.0, mode=mode)
        got = {h.piece_id for g in mine.groups for h in g.hits}
        assert got and not got & theirs, mode
        # ... and the other scope does see its own rows (so it is populated, not empty).
        seen = recall(store, "someone-else", question, embedder, x=50, floor=-1.0, mode=mode)
        assert {h.piece_id for g in seen.groups for h in g.hits} == theirs, mode
    with scoped(store, "s"):
        assert store.execute(
            "SELECT count(*) FROM pgmem.piece WHERE piece_id = ANY(%s)", (list(theirs),)
        ).fetchone() == (0,)


def test_one_sql_call_serves_all_parts(store: Conn, embedder: Embedder) -> None:
    q = embed_query(
        "The deploy failed again today.\nWhat are my dogs called again?\nWhat is the cloud budget cap again?", embedder
    )
    with scoped(store, "s"):
        rows = store.execute(
            "SELECT part_no, rank FROM pgmem.memory_recall('s', %s::vector[], x => 2, floor => -1)", (list(q.blended),)
        ).fetchall()
    assert rows == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]


def test_parts_of_one_subject_are_searched_as_one(store: Conn, embedder: Embedder) -> None:
    # A preamble and its question are one subject: MiniLM's parts have a cosine over its
    # subject_cosine (0.25), so the message is searched as one query, the whole message.
    one = "I'm looking back at our chat about my dogs. What are my dogs called again?"
    q = embed_query(one, embedder)
    assert q.texts == [" ".join(embed_query(one, embedder, merge=False).texts)]
    assert np.allclose(q.blended[0], q.whole, atol=1e-6)
    r = recall(store, "s", one, embedder, x=2, floor=-1.0)
    assert [g.part_text for g in r.groups] == q.texts
    # Unrelated subjects keep a part and a group each, and so does every part of a message
    # that is not all one subject: the preamble and its question stay apart beside the dogs.
    two = "The deploy failed again today.\nWhat are my dogs called again?\nWhat is the cloud budget cap again?"
    assert len(embed_query(two, embedder).texts) == 3
    assert len(recall(store, "s", two, embedder, x=2, floor=-1.0).groups) == 3
    mixed = "The deploy failed again today.\n" + one
    assert embed_query(mixed, embedder).texts == embed_query(mixed, embedder, merge=False).texts
    # A model without a measured subject cosine never merges (its cosine scale is unknown).
    plain = HashEmbedder()
    assert subject_cosine_for(plain) is None
    assert embed_query(one, plain).texts == embed_query(one, plain, merge=False).texts
    for bad in (True, "0.3", float("nan"), 2.0):
        plain.subject_cosine = bad  # type: ignore[attr-defined]
        assert subject_cosine_for(plain) is None, bad


def test_hybrid_mode_fuses_word_hits(store: Conn, embedder: Embedder) -> None:
    r = recall(store, "s", "Biscuit Juniper boosters", embedder, x=3, floor=-1.0, mode="hybrid")
    top = r.groups[0].hits[0]
    assert top.turn_index == 2 and top.word_rank == 1


def test_bad_arguments_are_refused_with_sqlstate(store: Conn, embedder: Embedder) -> None:
    v = embedder.embed(["x"])[0]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="x must be between 1 and 1000"), scoped(store, "s"):
        store.execute("SELECT * FROM pgmem.memory_recall('s', ARRAY[%s]::vector[], x => -1)", (v,))
    with (
        pytest.raises(
            psycopg.errors.DataException, match=r"has 3 dimensions but piece\.embedding was installed with 384"
        ),
        scoped(store, "s"),
    ):
        store.execute("SELECT * FROM pgmem.memory_recall('s', ARRAY['[1,2,3]']::vector[])")
    with pytest.raises(psycopg.errors.NullValueNotAllowed):
        store.execute("SELECT * FROM pgmem.memory_recall(NULL, ARRAY[%s]::vector[])", (v,))
    with pytest.raises(InputError, match="empty"):
        recall(store, "s", "   \n ", embedder)
    with pytest.raises(InputError, match="x must be"):
        recall(store, "s", "hello there", embedder, x=0)


def test_explain_shows_candidates_floor_and_verdicts(store: Conn, embedder: Embedder) -> None:
    msg = "What are my dogs called again, remind me?"
    r = recall(store, "s", msg, embedder, x=1, floor=0.2, log=True, mode="vector")
    assert r.recall_id is not None
    with scoped(store, "s"):
        rows = store.execute(
            "SELECT candidate, cosine, cosine_floor, verdict FROM pgmem.explain_logged_recall('s', %s, 4)",
            (r.recall_id,),
        ).fetchall()
    assert [row[0] for row in rows] == [1, 2, 3, 4]
    kept = [row for row in rows if row[3] == "kept"]
    assert kept == [row for row in rows[:1] if float(str(row[1])) >= 0.2]
    assert [h.cosine for h in r.groups[0].hits] == pytest.approx([float(str(row[1])) for row in kept])
    for _cand, cos, floor, verdict in rows[1:]:
        assert verdict == ("cut: below floor" if float(str(cos)) < 0.2 else "cut: beyond x")
        assert floor == 0.2


def test_recall_vectors_accepts_external_vectors(store: Conn, embedder: Embedder) -> None:
    v = embedder.embed(["Biscuit and Juniper at the vet"])
    r = recall_vectors(store, "s", ["dogs"], v, x=1, floor=0.0)
    assert r.groups[0].hits[0].turn_index == 2


def test_sql_blend_of_raw_parts_matches_python(store: Conn, embedder: Embedder) -> None:
    q = embed_query("The deploy failed again today.\nWhat are my dogs called again?", embedder)
    got = store.execute(
        "SELECT pgmem.blend(p, %s, 0.8) FROM unnest(%s::vector[]) AS p", (q.whole, list(q.raw))
    ).fetchall()
    for (g,), b in zip(got, q.blended, strict=True):
        assert np.allclose(np.asarray(g.to_numpy() if hasattr(g, "to_numpy") else g), b, atol=1e-6)


def test_facts_plane_groups(conn: Conn, embedder: Embedder) -> None:
    ids = add_facts(
        conn,
        "s",
        [
            Fact("The user's dogs are called Biscuit and Juniper.", thread="t1", turn_index=2),
            Fact("The Q4 cloud budget is capped at 48k per month.", thread="t1", turn_index=3),
            Fact("Staging deploys read DEPLOY_TOKEN from .env.local.", section="deploy"),
        ],
        embedder,
    )
    assert len(ids) == 3
    r = fact_recall(conn, "s", "What are my dogs called again?\nWhat is our cloud budget cap?", embedder, floor=0.2)
    assert r.groups[0].hits[0].body.startswith("The user's dogs")
    assert r.groups[1].hits[0].body.startswith("The Q4 cloud budget")
    assert all(h.cosine >= 0.2 for g in r.groups for h in g.hits)
