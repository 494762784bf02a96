"""The SQL write functions refuse what Python refuses before calling them (0091).

A backend service in another language stores turns with pgmem.put_turn (docs/sql.md). Python's
ingest refuses a blank thread name (check_name) and messages of a shape it does not read
(check_messages) before it embeds; put_turn took them, and such a turn could not be read back
by Python: a rebuild reported it failed. The same for a blank fact thread (add_facts), a blank
document id (put_document) and a blank scope (every write that creates a scope's row). Each is
refused now with a 22023 of one line, through SQL as the application login, and nothing stored
before is touched by the refusal. Rows stored before 0091 stay readable and can be forgotten:
no table constraint was added, only the functions check."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.errors import InputError
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from pgmem.rebuild import rebuild
from pgmem.turns import check_messages, turn_from_dict
from tests.security_helpers import Conn, HashEmbedder, hash_vector, make_turn

EMB = HashEmbedder()
GOOD = [{"role": "user", "content": "the harbour invoice"}]


class Raw(str):
    """Messages given as JSON text (too deep or too long for json.dumps to write), with the
    Python value they stand for (`py`)."""

    py: object

    def __new__(cls, text: str, py: object) -> Raw:
        raw = super().__new__(cls, text)
        raw.py = py
        return raw


def _nested(levels: int) -> object:
    """A list nested `levels` deep: [[...[1]...]] (Python's count: [1] is 1 level)."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def _put_turn(conn: Conn, scope: str, thread: str, messages: str, metadata: str | None = None) -> None:
    """pgmem.put_turn with one piece, as a service calls it."""
    with scoped(conn, scope):
        _put_turn_here(conn, scope, thread, messages, metadata)


def _put_turn_here(conn: Conn, scope: str, thread: str, messages: str, metadata: str | None = None) -> None:
    """The same in the transaction's scope, set by the caller."""
    conn.execute(
        """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => 0, turn_time => NULL,
               messages => %s::jsonb, content_hash => %s, model_id => %s, unit_kinds => ARRAY['user'],
               source_indexes => ARRAY[0], labels => ARRAY['[Turn 0 · User]'], bodies => ARRAY['x'],
               vectors => ARRAY[%s::vector], metadata => coalesce(%s::jsonb, '{}'))""",
        (scope, thread, messages, uuid.uuid4().bytes, EMB.model_id, hash_vector("x").tolist(), metadata),
    )


def _stored(admin: Conn, scope: str) -> list[tuple[object, ...]]:
    return admin.execute(
        """SELECT thread_id, turn_index, messages, content_hash, metadata FROM pgmem.turn
            WHERE scope_id = %s ORDER BY 1, 2""",
        (scope,),
    ).fetchall()


def _stored_scope(conn: Conn) -> str:
    """A scope holding one turn stored through Python: thread t, turn 0."""
    scope = f"rules-{uuid.uuid4().hex[:8]}"
    report = ingest_turns(conn, [make_turn(scope, "t", 0, "the harbour invoice", tool="pallet 7")], EMB)
    assert report.inserted == 1 and not report.failed
    return scope


ROLE = "must be an object with a string role"
CONTENT = "content must be a string, a list of parts, an object (stored as its JSON) or null, got a JSON"
CALL = "must be an object whose function is an object with a string name"
BLANK = "thread must be a non-empty string, got only whitespace"
DEEP = "nests more than 64 levels deep; at most 64"
NOT_ARRAY = "messages must be a JSON array of chat messages, got a JSON"
HUGE = (
    "holds a number Python cannot read back (an integer of more than 4,300 digits, or a fraction beyond the range "
    "of a double)"
)


def _calls(*calls: object) -> list[object]:
    return [{"role": "assistant", "content": None, "tool_calls": list(calls) if len(calls) != 1 else calls[0]}]


#: (id, thread, messages, metadata, the line put_turn says after "put_turn: "). Each turn is
#: written over the stored turn t/0 (or beside it, for the blank threads): the refusal must leave
#: that turn as it was.
TURN_CASES: list[tuple[str, str, object, object, str]] = [
    ("blank-thread", "   ", GOOD, None, BLANK),
    ("blank-thread-unicode", "\u3000\u00a0\t", GOOD, None, BLANK),
    ("role-missing", "t", [{"content": "hi"}], None, f"messages[0] {ROLE}"),
    ("role-number", "t", [*GOOD, {"role": 7, "content": "hi"}], None, f"messages[1] {ROLE}"),
    ("role-null", "t", [{"role": None, "content": "hi"}], None, f"messages[0] {ROLE}"),
    ("role-object", "t", [{"role": {"name": "user"}, "content": "hi"}], None, f"messages[0] {ROLE}"),
    ("message-string", "t", ["hello"], None, f"messages[0] {ROLE}"),
    ("message-array", "t", [["user", "hello"]], None, f"messages[0] {ROLE}"),
    ("message-null", "t", [None], None, f"messages[0] {ROLE}"),
    ("messages-object", "t", {"role": "user", "content": "hi"}, None, f"{NOT_ARRAY} object"),
    ("messages-string", "t", "hi", None, f"{NOT_ARRAY} string"),
    ("content-number", "t", [{"role": "user", "content": 7}], None, f"messages[0].{CONTENT} number"),
    ("content-boolean", "t", [{"role": "user", "content": True}], None, f"messages[0].{CONTENT} boolean"),
    (
        "tool-calls-object",
        "t",
        _calls({"function": {"name": "run"}}),
        None,
        "messages[0].tool_calls must be a list of tool calls, got a JSON object",
    ),
    (
        "tool-calls-string",
        "t",
        _calls("run()"),
        None,
        "messages[0].tool_calls must be a list of tool calls, got a JSON string",
    ),
    ("tool-call-string", "t", _calls("run", "walk"), None, f"messages[0].tool_calls[0] {CALL}"),
    ("tool-call-no-function", "t", _calls({"id": "c1", "name": "run"}, {}), None, f"messages[0].tool_calls[0] {CALL}"),
    ("tool-call-function-string", "t", _calls({"function": "run"}, {}), None, f"messages[0].tool_calls[0] {CALL}"),
    (
        "tool-call-name-number",
        "t",
        _calls({"function": {"name": "ok"}}, {"function": {"name": 3}}),
        None,
        f"messages[0].tool_calls[1] {CALL}",
    ),
    (
        "tool-call-arguments-number",
        "t",
        _calls({"function": {"name": "run", "arguments": 5}}, {"function": {"name": "b"}}),
        None,
        "messages[0].tool_calls[0].function.arguments must be a string or JSON",
    ),
    ("nested-65", "t", [{"role": "user", "content": "x", "extra": _nested(64)}], None, f"messages[0] {DEEP}"),
    (
        "nested-5000",
        "t",
        Raw(
            '[{"role": "user", "content": ' + "[" * 5000 + "]" * 5000 + "}]",
            [{"role": "user", "content": _nested(5000)}],
        ),
        None,
        f"messages[0] {DEEP}",
    ),
    ("metadata-nested-65", "t", GOOD, {"a": _nested(64)}, "metadata nests more than 64 levels"),
    (
        "integer-of-4301-digits",
        "t",
        Raw('[{"role": "user", "content": "x", "n": [1e4300]}]', [{"role": "user", "content": "x", "n": [10**4300]}]),
        None,
        f"messages[0] {HUGE}",
    ),
    (
        "number-of-5000-digits",
        "t",
        Raw('[{"role": "user", "content": {"n": 1e5000}}]', [{"role": "user", "content": {"n": 10**5000}}]),
        None,
        f"messages[0] {HUGE}",
    ),
    ("metadata-integer-of-4301-digits", "t", GOOD, Raw('{"n": -1e4300}', {"n": -(10**4300)}), f"metadata {HUGE}"),
]


def _dump(value: object) -> str:
    return value if isinstance(value, Raw) else json.dumps(value)


@pytest.mark.parametrize(
    ("thread", "messages", "metadata", "line"), [c[1:] for c in TURN_CASES], ids=[c[0] for c in TURN_CASES]
)
def test_put_turn_refuses_what_python_refuses_and_keeps_the_stored_turn(
    conn: Conn, admin_conn: Conn, tmp_path: Path, thread: str, messages: object, metadata: object, line: str
) -> None:
    scope = _stored_scope(conn)
    before = _stored(admin_conn, scope)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        _put_turn(conn, scope, thread, _dump(messages), None if metadata is None else _dump(metadata))
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary == f"put_turn: {line}"
    assert _stored(admin_conn, scope) == before
    # Python refuses the same first, with the same words after its own prefix (its type names
    # are Python's: "got int" where SQL says "got a JSON number").
    with pytest.raises(InputError) as py_err:
        if isinstance(messages, Raw):
            messages = messages.py
        if isinstance(metadata, Raw):
            metadata = metadata.py
        turn_from_dict({"scope": scope, "thread": thread, "turn": 0, "messages": messages, "metadata": metadata})
    tail = line
    if tail.startswith("messages must be"):
        assert "messages must be a list" in str(py_err.value)
    else:
        assert tail.split(", got")[0].split(";")[0] in str(py_err.value)
    # And the scope still rebuilds whole: no turn Python cannot read back.
    result = rebuild(conn, EMB, tmp_path / "rebuild.json", scope=scope)
    assert not result.report.failed, result.report.failed


def test_put_turn_takes_what_python_takes_at_the_edges(conn: Conn, admin_conn: Conn) -> None:
    """64 levels, content of every allowed kind, null tool_calls and arguments, an empty message
    list (as the benchmarks store pieces without messages): stored, as Python takes them too."""
    scope = _stored_scope(conn)
    edges: list[list[Any]] = [
        [{"role": "user", "content": "x", "extra": _nested(63)}],
        [
            {"role": "user", "content": None},
            {"role": "user"},
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
        ],
        [{"role": "tool", "content": {"rows": [1, 2]}}, {"role": "", "content": "an empty role is a string"}],
        [{"role": "assistant", "tool_calls": None}, {"role": "assistant", "tool_calls": []}],
        [{"role": "assistant", "tool_calls": [{"function": {"name": "run", "arguments": None}}]}],
        [{"role": "assistant", "tool_calls": [{"function": {"name": "run", "arguments": {"a": [1]}}}]}],
        [{"role": "user", "content": [int(sys.float_info.max), -int(sys.float_info.max), 2.5, 5]}],
        [],
    ]
    for i, messages in enumerate(edges):
        check_messages(messages, "turn")
        _put_turn(
            conn,
            scope,
            f"edge-{i}",
            json.dumps(messages),
            json.dumps({"a": _nested(63), "n": -int(sys.float_info.max)}),
        )
    stored = {str(r[0]): r[2] for r in _stored(admin_conn, scope)}
    assert [stored[f"edge-{i}"] for i in range(len(edges))] == edges


def test_put_turns_reports_the_refused_turn_and_stores_the_others(conn: Conn, admin_conn: Conn) -> None:
    scope = _stored_scope(conn)
    before = _stored(admin_conn, scope)
    v = hash_vector("x").tolist()
    with scoped(conn, scope):
        rows = conn.execute(
            """SELECT turn_no, status, error_code, error FROM pgmem.put_turns(
                   scope => %s, model_id => %s, threads => ARRAY['t', 'u', ' '], turn_indexes => ARRAY[0, 0, 0],
                   turn_times => ARRAY[NULL, NULL, NULL]::timestamptz[],
                   messages => ARRAY[%s, %s, %s]::jsonb[], content_hashes => ARRAY['\\x01', '\\x02', '\\x03']::bytea[],
                   piece_counts => ARRAY[1, 1, 1], unit_kinds => ARRAY['user', 'user', 'user'],
                   source_indexes => ARRAY[0, 0, 0], labels => ARRAY['a', 'b', 'c'], bodies => ARRAY['a', 'b', 'c'],
                   vectors => ARRAY[%s::vector, %s::vector, %s::vector])""",
            (scope, EMB.model_id, '[{"content": "no role"}]', json.dumps(GOOD), json.dumps(GOOD), v, v, v),
        ).fetchall()
    assert rows == [
        (1, "failed", "22023", "put_turn: messages[0] must be an object with a string role"),
        (3, "failed", "22023", "put_turn: thread must be a non-empty string, got only whitespace"),
        (2, "inserted", None, None),
    ]
    after = _stored(admin_conn, scope)
    assert [r for r in after if r[0] != "u"] == before and [r[0] for r in after] == ["t", "u"]


def test_what_postgres_refuses_before_put_turn_runs(conn: Conn, admin_conn: Conn) -> None:
    """NUL inside a jsonb string: the client refuses the parameter (psycopg, before sending), and
    the \\u0000 escape is refused by jsonb itself (22P05). Nesting deeper than Postgres' stack: 54001
    from the jsonb parser. None reaches put_turn, and the stored turn stays."""
    scope = _stored_scope(conn)
    before = _stored(admin_conn, scope)
    with pytest.raises(psycopg.errors.UntranslatableCharacter) as err:
        _put_turn(conn, scope, "t", '[{"role": "user", "content": "a\\u0000b"}]')
    assert err.value.sqlstate == "22P05"
    with pytest.raises(psycopg.DataError, match="NUL"):
        _put_turn(conn, scope, "t", '[{"role": "user", "content": "a\x00b"}]')
    with pytest.raises(psycopg.errors.StatementTooComplex):
        _put_turn(conn, scope, "t", "[" * 200_000 + "]" * 200_000)
    assert _stored(admin_conn, scope) == before


@pytest.mark.parametrize("name", ["   ", "\u2003\n"])
def test_a_blank_scope_is_refused_by_every_write_that_creates_one(conn: Conn, admin_conn: Conn, name: str) -> None:
    calls = {
        "bind_scope_model": ("SELECT pgmem.bind_scope_model(%s, 'test:hash', 384)", (name,)),
        "open_scope": ("SELECT pgmem.open_scope(%s)", (name,)),
        "set_retention": ("SELECT pgmem.set_retention(%s, keep_days => 30)", (name,)),
        "log_recall": (
            "SELECT pgmem.log_recall(%s, 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, NULL, 'vector', '[]')",
            (name, hash_vector("q").tolist()),
        ),
        "put_turn": None,
    }
    for fn, call in calls.items():
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err, conn.transaction():
            if call is None:
                conn.execute("SELECT set_config('pgmem.scope', %s, true)", (name,))
                _put_turn_here(conn, name, "t", json.dumps(GOOD))
            else:
                conn.execute("SELECT set_config('pgmem.scope', %s, true)", (name,))
                conn.execute(call[0], call[1])
        want = "scope must be a non-empty string, got only whitespace"
        assert err.value.diag.message_primary == f"{fn if fn != 'put_turn' else 'put_turns'}: {want}"
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (name,)).fetchone() == (0,)


def test_put_item_refuses_a_namespace_of_one_blank_label(conn: Conn, admin_conn: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err, conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', '  ', true), set_config('pgmem.store_directory', 'd', true)")
        conn.execute("SELECT pgmem.put_item('  ', ARRAY['  '], 'k', '{\"a\": 1}'::jsonb)")
    assert err.value.diag.message_primary == "put_item: scope must be a non-empty string, got only whitespace"
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_item").fetchone() == (0,)


def _value_nested(levels: int) -> dict[str, object]:
    """An object whose deepest value is at `levels` (PgmemStore's count: the object is level 1)."""
    return {"a": _nested(levels - 2)}


@pytest.mark.parametrize(
    ("key", "value", "thread", "line"),
    [
        ("k" * 1001, {"a": 1}, None, "put_item: key is 1001 characters; at most 1000"),
        ("k", _value_nested(65), None, "put_item: value nests deeper than 64 levels"),
        ("k", Raw('{"n": [1e4300]}', {"n": [10**4300]}), None, f"put_item: value {HUGE}"),
        ("k", {"a": 1}, " ", "put_item: thread must be a non-empty string, got only whitespace"),
    ],
    ids=["long-key", "deep-value", "huge-number", "blank-thread"],
)
def test_put_item_refuses_what_pgmemstore_refuses(
    conn: Conn, admin_conn: Conn, key: str, value: object, thread: str | None, line: str
) -> None:
    from pgmem.integrations.langgraph import check_key, check_value

    scope = f"rules-{uuid.uuid4().hex[:8]}"
    put = "SELECT pgmem.put_item(%s, ARRAY[%s], %s, %s::jsonb, thread => %s)"
    with conn.transaction():
        conn.execute(
            "SELECT set_config('pgmem.scope', %s, true), set_config('pgmem.store_directory', 'd', true)", (scope,)
        )
        conn.execute(put, (scope, scope, "kept", '{"a": 1}', None))
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err, conn.transaction():
        conn.execute(
            "SELECT set_config('pgmem.scope', %s, true), set_config('pgmem.store_directory', 'd', true)", (scope,)
        )
        conn.execute(put, (scope, scope, key, _dump(value), thread))
    assert err.value.diag.message_primary == line
    rows = admin_conn.execute("SELECT item_key, value FROM pgmem.store_item WHERE scope_id = %s", (scope,)).fetchall()
    assert rows == [("kept", {"a": 1})]
    if thread is None:  # PgmemStore refuses the same first (it names an item's thread itself), in
        # the same words after the place (Python names the path inside the value: value.a[0]...).
        with pytest.raises(InputError) as py_err:
            check_key(key)
            check_value(value.py if isinstance(value, Raw) else value)
        place = "key" if line.startswith("put_item: key") else "value"
        assert str(py_err.value).startswith(place)
        assert str(py_err.value).endswith(line.removeprefix(f"put_item: {place}"))
    # The edge PgmemStore takes is stored: a value at 64 levels.
    check_value(_value_nested(64))
    with conn.transaction():
        conn.execute(
            "SELECT set_config('pgmem.scope', %s, true), set_config('pgmem.store_directory', 'd', true)", (scope,)
        )
        conn.execute(put, (scope, scope, "edge", json.dumps(_value_nested(64)), None))


def test_add_facts_refuses_a_blank_thread(conn: Conn, admin_conn: Conn) -> None:
    scope = f"rules-{uuid.uuid4().hex[:8]}"
    assert len(add_facts(conn, scope, [Fact("the pallet is in bay 7", thread="t")], EMB)) == 1
    v = hash_vector("f").tolist()
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err, scoped(conn, scope):
        conn.execute(
            """SELECT * FROM pgmem.add_facts(%s, %s, ARRAY['a', 'b'], ARRAY[%s::vector, %s::vector],
                   thread_ids => ARRAY['t', ' \t'])""",
            (scope, EMB.model_id, v, v),
        )
    assert err.value.diag.message_primary == "add_facts: thread_ids[2] must be a non-empty string, got only whitespace"
    assert admin_conn.execute("SELECT thread_id, body FROM pgmem.fact WHERE scope_id = %s", (scope,)).fetchall() == [
        ("t", "the pallet is in bay 7")
    ]
    with pytest.raises(InputError, match="thread must be a non-empty string"):
        add_facts(conn, scope, [Fact("b", thread=" \t")], EMB)


@pytest.mark.parametrize(
    ("doc_id", "line"),
    [
        ("   ", "put_document: document_id must be a non-empty string, got only whitespace"),
        ("", "put_document: document_id must be 1 to 1000 characters, got 0"),
        ("d" * 1001, "put_document: document_id must be 1 to 1000 characters, got 1001"),
    ],
    ids=["blank", "empty", "long"],
)
def test_put_document_refuses_an_id_python_refuses(conn: Conn, admin_conn: Conn, doc_id: str, line: str) -> None:
    scope = f"rules-{uuid.uuid4().hex[:8]}"
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err, scoped(conn, scope):
        conn.execute(
            """SELECT pgmem.put_document(%s, %s, 'Doc', 'body', '\\x01', %s, '[[]]'::jsonb, ARRAY['body'],
                   ARRAY[0], ARRAY['prose'], ARRAY[0], ARRAY[0], ARRAY[4], ARRAY['Doc'], ARRAY['body'],
                   ARRAY[%s::vector])""",
            (scope, doc_id, EMB.model_id, hash_vector("body").tolist()),
        )
    assert err.value.diag.message_primary == line
    assert admin_conn.execute("SELECT count(*) FROM pgmem.document WHERE scope_id = %s", (scope,)).fetchone() == (0,)


def test_rows_stored_before_the_rules_are_read_and_forgotten(conn: Conn, admin_conn: Conn) -> None:
    """No table constraint was added: a turn without a role and a fact under a blank thread,
    stored before 0091 (made here by a superuser writing the tables directly), stay where they
    are, are read back through SQL, and are forgotten through SQL; a good turn written over the
    bad one replaces it."""
    scope = _stored_scope(conn)
    assert len(add_facts(conn, scope, [Fact("an old fact", thread="t")], EMB)) == 1
    admin_conn.execute('UPDATE pgmem.turn SET messages = \'[{"content": "no role"}]\' WHERE scope_id = %s', (scope,))
    admin_conn.execute("INSERT INTO pgmem.thread (scope_id, thread_id) VALUES (%s, '  ')", (scope,))
    admin_conn.execute("UPDATE pgmem.fact SET thread_id = '  ' WHERE scope_id = %s", (scope,))
    with scoped(conn, scope):
        rows = conn.execute("SELECT thread_id, messages FROM pgmem.pending_turns(%s, now())", (scope,)).fetchall()
        assert rows == [("t", [{"content": "no role"}])]
        _put_turn(conn, scope, "t", json.dumps(GOOD))  # the good version replaces the bad one
        assert conn.execute("SELECT messages FROM pgmem.turn WHERE scope_id = %s", (scope,)).fetchone() == (GOOD,)
        forgot = conn.execute("SELECT threads, facts FROM pgmem.forget_thread(%s, '  ')", (scope,)).fetchone()
    assert forgot == (1, 1)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.fact WHERE scope_id = %s", (scope,)).fetchone() == (0,)


def test_numbers_python_reads_back_are_stored_and_those_it_cannot_are_refused(conn: Conn, admin_conn: Conn) -> None:
    """0091 refused every number beyond the largest double, but an integer beyond it reads back
    exactly (a Python int), and LangGraph's stores store it (review rt57): it is stored again
    (0093), by put_turn, put_item and Python's checks alike. What Python cannot read back stays
    refused: an integer of more than 4,300 digits (json.loads fails the read) and a fraction
    beyond the largest double (read back as infinity)."""
    from pgmem.integrations.langgraph import check_value
    from pgmem.turns import check_metadata

    scope = _stored_scope(conn)
    big = {"n": [10**400, -(10**4299) - 1]}  # beyond a double; the second of 4,300 digits
    small = {"n": -(10**400)}  # metadata is at most 4,096 bytes
    check_messages([{"role": "user", "content": "x", **big}], "turn")
    check_metadata(small, "turn")
    check_value(big)
    _put_turn(conn, scope, "big", json.dumps([{"role": "user", "content": "x", **big}]), json.dumps(small))
    row = admin_conn.execute(
        "SELECT messages, metadata FROM pgmem.turn WHERE scope_id = %s AND thread_id = 'big'", (scope,)
    ).fetchone()
    assert row is not None and row[0] == [{"role": "user", "content": "x", **big}] and row[1] == small
    fraction = "1" + "0" * 400 + ".5"
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        _put_turn(conn, scope, "frac", f'[{{"role": "user", "content": "x", "n": {fraction}}}]')
    assert err.value.diag.message_primary == f"put_turn: messages[0] {HUGE}"
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err, conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'nums', true), set_config('pgmem.store_directory', 'd', true)")
        conn.execute("SELECT pgmem.put_item('nums', ARRAY['nums'], 'k', %s::jsonb)", (f'{{"n": -{fraction}}}',))
    assert err.value.diag.message_primary == f"put_item: value {HUGE}"
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'nums', true), set_config('pgmem.store_directory', 'd', true)")
        conn.execute("SELECT pgmem.put_item('nums', ARRAY['nums'], 'k', %s::jsonb)", (json.dumps(big),))
    assert admin_conn.execute("SELECT value FROM pgmem.store_item WHERE scope_id = 'nums'").fetchone() == (big,)
