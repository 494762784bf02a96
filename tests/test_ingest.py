"""Memory ingest against the real database."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest

from pgmem.blend import blend, unit_mean
from pgmem.db import connect, scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import DatabaseError, InputError
from pgmem.ingest import ingest_turns
from pgmem.packing import utf8_len
from pgmem.pieces import turn_pieces
from pgmem.turns import Turn, split_sources, turn_from_dict
from tests.helpers import CountingEmbedder, vec

Conn = psycopg.Connection[tuple[object, ...]]

EXPORT = "\n".join(f"SHP-{i},Busan,Hamburg,delivered,ok" for i in range(300))


def sample_turn(index: int = 4, *, scope: str = "s1", thread: str = "t1", extra: str = "") -> Turn:
    return turn_from_dict(
        {
            "scope": scope,
            "thread": thread,
            "turn": index,
            "time": "2026-10-16T14:02:00Z",
            "messages": [
                {
                    "role": "user",
                    "content": "Pull the October export, please. My dogs Biscuit and Juniper say hi." + extra,
                },
                {
                    "role": "assistant",
                    "content": "Fetching it.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "logistics_export", "arguments": '{"month": "2026-10"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": EXPORT},
                {"role": "assistant", "content": "300 shipments, all delivered."},
            ],
        }
    )


def test_sources_split_by_role_with_whole_tool_call() -> None:
    sources = split_sources(sample_turn().messages)
    assert [s.name for s in sources] == ["User", "Assistant step 1", "Tool logistics_export", "Assistant step 2"]
    tool = sources[2]
    assert tool.text.startswith('logistics_export({"month": "2026-10"})\n')
    assert tool.text.endswith(EXPORT)  # the whole result, untruncated


def test_pieces_are_labelled_within_budget_and_untruncated(embedder: Embedder) -> None:
    pieces = turn_pieces(sample_turn(), embedder)
    assert pieces[0].label == "[Turn 4 · User · Oct 16, 2:02 PM]"
    assert {p.label for p in pieces} >= {"[Turn 4 · Tool logistics_export · Oct 16, 2:02 PM]"}
    tokens = embedder.count_tokens([p.text for p in pieces])
    for p, n in zip(pieces, tokens, strict=True):
        assert utf8_len(p.text) <= 1200
        assert n <= embedder.max_input_tokens  # the model reads every token of every piece
    tool_bodies = " ".join(p.body for p in pieces if p.unit_kind == "tool")
    assert "".join(tool_bodies.split()).endswith("".join(EXPORT.split()))


def test_byte_budget_is_configurable(embedder: Embedder) -> None:
    pieces = turn_pieces(sample_turn(), embedder, max_bytes=300)
    assert all(utf8_len(p.text) <= 300 for p in pieces)


def test_ingest_stores_blended_vectors_that_sql_and_python_agree_on(conn: Conn, embedder: Embedder) -> None:
    report = ingest_turns(conn, [sample_turn()], embedder)
    assert (report.inserted, report.failed) == (1, [])
    with scoped(conn, "s1"):
        rows = conn.execute(
            """SELECT p.raw_embedding, p.embedding, t.context
                 FROM pgmem.piece p JOIN pgmem.turn t USING (scope_id, thread_id, turn_index) ORDER BY piece_id"""
        ).fetchall()
    raw = np.array([vec(r[0]) for r in rows])
    stored = np.array([vec(r[1]) for r in rows])
    context = vec(rows[0][2])
    assert np.allclose(context, unit_mean(raw), atol=1e-6)
    assert np.allclose(stored, blend(raw, np.broadcast_to(context, raw.shape), 0.8), atol=1e-6)
    # pgmem.blend in SQL on arbitrary vectors, against Python
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(384).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    got = conn.execute("SELECT pgmem.blend(%s, %s, 0.7)", (a, b)).fetchone()
    assert got is not None
    assert np.allclose(vec(got[0]), blend(a, b, 0.7), atol=1e-6)


def test_reingest_writes_nothing_and_embeds_nothing(conn: Conn, embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    ingest_turns(conn, [sample_turn(1), sample_turn(2)], counting)
    calls = counting.calls
    with scoped(conn, "s1"):
        before = conn.execute("SELECT count(*), max(xmin::text::bigint) FROM pgmem.piece").fetchone()
    report = ingest_turns(conn, [sample_turn(1), sample_turn(2)], counting)
    with scoped(conn, "s1"):
        after = conn.execute("SELECT count(*), max(xmin::text::bigint) FROM pgmem.piece").fetchone()
    assert (report.unchanged, report.inserted, report.pieces) == (2, 0, 0)
    assert counting.calls == calls
    assert before == after


def test_changed_turn_replaces_its_pieces(conn: Conn, embedder: Embedder) -> None:
    ingest_turns(conn, [sample_turn(1)], embedder)
    report = ingest_turns(conn, [sample_turn(1, extra=" Also: the budget cap is 48k.")], embedder)
    assert report.replaced == 1
    with scoped(conn, "s1"):
        bodies = [r[0] for r in conn.execute("SELECT body FROM pgmem.piece WHERE unit_kind = 'user'")]
    assert len(bodies) == 1 and "48k" in str(bodies[0])


def test_turn_failing_midway_leaves_no_trace(conn: Conn, admin_conn: Conn, embedder: Embedder) -> None:
    # A trigger (set up by a DBA) that raises on the third piece: the statement dies between pieces.
    admin_conn.execute(
        """CREATE FUNCTION public.boom() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN IF NEW.seq = 2 AND NEW.unit_kind = 'tool' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$"""
    )
    admin_conn.execute("CREATE TRIGGER boom BEFORE INSERT ON pgmem.piece FOR EACH ROW EXECUTE FUNCTION public.boom()")
    with pytest.raises(DatabaseError, match="boom") as err:  # the database's refusal, its SQLSTATE kept
        ingest_turns(conn, [sample_turn(7)], embedder)
    assert err.value.sqlstate == "P0001"
    admin_conn.execute("DROP TRIGGER boom ON pgmem.piece")
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (0,)


def test_reblend_rewrites_vectors_without_embedding(conn: Conn, embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    ingest_turns(conn, [sample_turn(1)], counting)
    calls = counting.calls
    with scoped(conn, "s1"):
        before = [vec(r[0]) for r in conn.execute("SELECT embedding FROM pgmem.piece ORDER BY piece_id")]
        n = conn.execute("SELECT pgmem.reblend('s1', 0.95)").fetchone()
        rows = conn.execute("SELECT raw_embedding, embedding FROM pgmem.piece ORDER BY piece_id").fetchall()
        ctx = vec(conn.execute("SELECT context FROM pgmem.turn").fetchone()[0])  # type: ignore[index]
    assert n == (len(rows),)
    for (raw, emb), old in zip(rows, before, strict=True):
        assert not np.allclose(vec(emb), old, atol=1e-4)
        assert np.allclose(vec(emb), blend(vec(raw), ctx, 0.95), atol=1e-6)
    assert counting.calls == calls


def test_bad_turn_is_reported_and_the_rest_stored(conn: Conn, embedder: Embedder) -> None:
    empty = turn_from_dict({"scope": "s1", "thread": "t1", "turn": 3, "messages": [{"role": "user", "content": "  "}]})
    report = ingest_turns(conn, [sample_turn(1), empty, sample_turn(2)], embedder)
    assert report.inserted == 2
    assert [k for k, _ in report.failed] == [("s1", "t1", 3)]
    assert "no text" in report.failed[0][1]


def test_model_of_another_dimension_is_refused_naming_both(conn: Conn, admin_conn: Conn) -> None:
    with pytest.raises(psycopg.errors.DataException) as err:
        admin_conn.execute("SELECT pgmem._model_key('openai:text-embedding-3-small', 256, 'piece.embedding')")
    assert "256 dimensions" in str(err.value) and "384 dimensions" in str(err.value)
    from pgmem.db import check_model
    from pgmem.errors import ModelMismatchError

    with pytest.raises(ModelMismatchError, match=r"256-dimensional.*384 dimensions"):
        check_model(conn, plane="piece", model_id="openai:text-embedding-3-small", dims=256)


def test_scope_bound_to_its_model(conn: Conn, embedder: Embedder) -> None:
    ingest_turns(conn, [sample_turn(1)], embedder)
    with pytest.raises(psycopg.errors.DataException, match="refusing model other-model"), scoped(conn, "s1"):
        conn.execute("SELECT pgmem.bind_scope_model('s1', 'other-model', 384)")
    refusal = "SELECT pgmem.model_refusal('s1', %s, 384)"
    with scoped(conn, "s1"):
        assert conn.execute(refusal, (embedder.model_id,)).fetchone() == (None,)
        key = conn.execute("SELECT pgmem.bind_scope_model('s1', 'other-model', 384, 'piece', true)").fetchone()
    # With reembed the scope is rebound: the other model is its model now, and the first refused.
    with scoped(conn, "s1"):
        assert conn.execute(refusal, ("other-model",)).fetchone() == (None,)
        assert "refusing model " + embedder.model_id in str(conn.execute(refusal, (embedder.model_id,)).fetchone())
        assert conn.execute("SELECT pgmem.bind_scope_model('s1', 'other-model', 384)").fetchone() == key


def test_invalid_turn_input_names_the_field() -> None:
    with pytest.raises(InputError, match="turn must be an integer between 0 and 2147483647"):
        turn_from_dict({"scope": "s", "thread": "t", "turn": -1, "messages": []})
    with pytest.raises(InputError, match=r"messages\[0\] must be an object"):
        turn_from_dict({"scope": "s", "thread": "t", "turn": 1, "messages": ["hi"]})
    with pytest.raises(InputError, match="time"):
        turn_from_dict({"scope": "s", "thread": "t", "turn": 1, "time": "yesterday", "messages": []})


def test_ingest_cli_and_pieces_visible(app_url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from pgmem.cli import main

    path = Path(str(tmp_path)) / "turns.jsonl"
    path.write_text(
        json.dumps({"thread": "t", "turn": 1, "messages": [{"role": "user", "content": "Hello there."}]}) + "\n"
    )
    monkeypatch.setenv("DATABASE_URL", app_url)
    assert main(["ingest", str(path), "--scope", "cli"]) == 0
    with connect(app_url) as c, scoped(c, "cli"):
        assert c.execute("SELECT label, body FROM pgmem.piece").fetchall() == [("[Turn 1 · User]", "Hello there.")]


def test_turn_text_as_context_option(conn: Conn, embedder: Embedder) -> None:
    small = turn_from_dict(
        {"scope": "c", "thread": "t", "turn": 1, "messages": [{"role": "user", "content": "Short turn about dogs."}]}
    )
    report = ingest_turns(conn, [small, sample_turn(2, scope="c")], embedder, context="text")
    assert report.inserted == 2
    # the 300-row tool result is far over 256 tokens: that turn falls back to the mean, and says so
    assert report.context_fallbacks == [("c", "t1", 2)]
    with scoped(conn, "c"):
        ctx = vec(conn.execute("SELECT context FROM pgmem.turn WHERE turn_index = 1").fetchone()[0])  # type: ignore[index]
    expected = embedder.embed(["User: Short turn about dogs."])[0]
    assert np.allclose(ctx, expected, atol=1e-5)
    with pytest.raises(InputError, match="context must be one of"):
        ingest_turns(conn, [small], embedder, context="summary")


def _two_bookings(call_id: object) -> list[dict[str, object]]:
    """Two parallel calls of one tool sharing an id (call_id, or none when call_id is ...)."""

    def call(to: str) -> dict[str, object]:
        c: dict[str, object] = {"type": "function", "function": {"name": "book", "arguments": json.dumps({"to": to})}}
        if call_id is not ...:
            c["id"] = call_id
        return c

    return [
        {"role": "user", "content": "book two flights"},
        {"role": "assistant", "content": None, "tool_calls": [call("Oslo"), call("Rome")]},
    ]


@pytest.mark.parametrize("call_id", ["", "call_0", ...], ids=["empty id", "repeated id", "no id"])
def test_tool_calls_sharing_an_id_each_keep_their_arguments(call_id: object) -> None:
    """Calls were kept in a dict by tool_call_id, so a call overwrote an earlier one of the same id
    (an empty or repeated id, or none): the earlier call's name and arguments went into no source
    (every result was labelled with the last call), and of such calls never answered only the last
    was kept. 'Oslo' was in no piece of the turn. Each result now takes the first unanswered call
    of its id, in order, and every call never answered is kept."""
    messages = _two_bookings(call_id)
    reply = {} if call_id is ... else {"tool_call_id": call_id}  # no id: the results name none either
    answered = [
        *messages,
        {"role": "tool", **reply, "content": "booked OSL-123"},
        {"role": "tool", **reply, "content": "booked ROM-456"},
    ]
    texts = [s.text for s in split_sources(answered)]
    assert texts == [
        "book two flights",
        'book({"to": "Oslo"})\nbooked OSL-123',
        'book({"to": "Rome"})\nbooked ROM-456',
    ]
    unanswered = [s.text for s in split_sources(messages)]
    assert unanswered == ["book two flights", 'book({"to": "Oslo"})', 'book({"to": "Rome"})']


def test_a_result_of_a_call_answered_already_is_labelled_with_that_call_again() -> None:
    """A second result of one call (a retry logged twice) keeps the call's name and arguments, as
    it did when calls were kept by id."""
    messages: list[dict[str, object]] = [
        {"role": "user", "content": "book a flight"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{\"to\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "timeout"},
        {"role": "tool", "tool_call_id": "c1", "content": "booked OSL-123"},
    ]  # fmt: skip
    texts = [s.text for s in split_sources(messages)]
    assert texts[1:] == ['book({"to": "Oslo"})\ntimeout', 'book({"to": "Oslo"})\nbooked OSL-123']


def test_content_parts_that_are_not_text_parts_are_kept_as_json_and_media_left_out() -> None:
    """A content list's parts without a string `text` were dropped: a tool's result given as a
    list of records stored only the tool's name and arguments, and an assistant's refusal part
    nothing. Such a part is its JSON now (as a whole object content always was), a refusal its
    text; a media part (an image) is still left out."""
    image = {"type": "image_url", "image_url": {"url": "data:x"}}
    messages: list[dict[str, object]] = [
        {"role": "user", "content": [{"type": "text", "text": "stock of A1?"}, image]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "stock", "arguments": "{\"sku\": \"A1\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"sku": "A1", "qty": 3}, {"sku": "A1-b", "qty": 0}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot reorder it"}]},
    ]  # fmt: skip
    texts = [s.text for s in split_sources(messages)]
    assert texts == [
        "stock of A1?",
        'stock({"sku": "A1"})\n{"sku": "A1", "qty": 3}\n{"sku": "A1-b", "qty": 0}',
        "I cannot reorder it",
    ]


def test_an_assistant_function_call_of_the_older_form_keeps_its_arguments() -> None:
    """OpenAI's older form, an assistant's function_call answered by a "function" message: the
    call's name and arguments were in no source (the assistant's content is null, and only
    tool_calls were read), and the result was stored as a system-like "Function" source. The
    call is a tool call now, answered by the function message of its name."""
    messages: list[dict[str, object]] = [
        {"role": "user", "content": "weather in Bergen?"},
        {"role": "assistant", "content": None, "function_call": {"name": "weather", "arguments": '{"city": "Bergen"}'}},
        {"role": "function", "name": "weather", "content": "rain, 9 C"},
        {"role": "assistant", "content": None, "function_call": {"name": "forecast", "arguments": '{"days": 3}'}},
    ]
    got = [(s.kind, s.name, s.text) for s in split_sources(messages)]
    assert got == [
        ("user", "User", "weather in Bergen?"),
        ("tool", "Tool weather", 'weather({"city": "Bergen"})\nrain, 9 C'),
        ("tool", "Tool forecast", 'forecast({"days": 3})'),
    ]


def test_numpy_turn_indexes_are_integers(conn: Conn) -> None:
    """A turn index from numpy (a pandas column, say) is an integer, as a fact's turn and the
    forget functions' ids are: a Turn built with np.int64(3) refused it ("turn index must be an
    integer ..., got np.int64(3)"), and so did turn_from_dict. Floats and bools are still refused."""
    from tests.security_helpers import HashEmbedder

    msgs = ({"role": "user", "content": "a turn with a numpy index"},)
    turn = Turn("s", "t", np.int64(3), None, msgs)  # type: ignore[arg-type]
    assert type(turn.index) is int and turn.index == 3
    parsed = turn_from_dict({"scope": "s", "thread": "t", "turn": np.int32(4), "messages": list(msgs)})
    assert type(parsed.index) is int and parsed.index == 4
    report = ingest_turns(conn, [turn, parsed], HashEmbedder())
    assert (report.inserted, report.failed) == (2, [])
    for bad in (np.float64(3.0), True, 2.5):
        with pytest.raises(InputError, match="turn must be an integer"):
            turn_from_dict({"scope": "s", "thread": "t", "turn": bad, "messages": list(msgs)})
    floated = ingest_turns(conn, [Turn("s", "t", np.float64(5.0), None, msgs)], HashEmbedder())  # type: ignore[arg-type]
    assert floated.inserted == 0 and len(floated.failed) == 1
    assert "turn index must be an integer between 0 and 2147483647, got np.float64(5.0)" in floated.failed[0][1]
