"""Hostile and broken input: each case is stored faithfully or refused with a clear error
(an InputError naming the field, or an SQLSTATE), never a crash and never a poisoned batch.

NUL characters and invalid UTF-8 cannot be stored faithfully by Postgres text or jsonb, so
a turn containing them is refused (and reported) before anything is embedded."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgmem.db import scoped
from pgmem.documents.store import Document
from pgmem.embedders.base import FloatArray
from pgmem.errors import InputError
from pgmem.ingest import ingest_turns
from pgmem.recall import recall, recall_vectors
from pgmem.turns import Turn, read_jsonl
from tests.security_helpers import DIMS, Conn, HashEmbedder, app_conn, hash_vector, make_turn, repo_root

__all__ = ["app_conn"]

#: Size of the big tool result in the default suite (the 50 MB variant is marked slow:
#: storing its ~45,000 pieces takes minutes on a 2-core machine).
BIG_MB = int(os.environ.get("PGMEM_BIG_MB", "5"))


def _sqlstate_ok(exc: psycopg.Error) -> bool:
    """A refusal is clear when it carries an SQLSTATE that is not an internal error."""
    state = exc.sqlstate or ""
    return len(state) == 5 and state[:2] not in ("XX", "58") and bool(str(exc).strip())


def _stored_turns(conn: Conn) -> set[tuple[str, str, int]]:
    rows = conn.execute("SELECT scope_id, thread_id, turn_index FROM pgmem.turn").fetchall()
    return {(str(a), str(b), int(str(c))) for a, b, c in rows}


def test_nul_and_invalid_utf8_are_refused_naming_the_field(app_conn: Conn, admin_conn: Conn, tmp_path: Path) -> None:
    good = make_turn("s", "t", 0, "fine")
    nul = make_turn("s", "t", 1, "look", tool="binary\x00output")
    surrogate = make_turn("s", "t", 2, "look", tool="latin-1 \udce9 byte")
    report = ingest_turns(app_conn, [good, nul, surrogate], HashEmbedder())
    assert report.inserted == 1
    failed = dict(report.failed)
    assert "messages[2].content contains a NUL character (U+0000) at offset 6" in failed[("s", "t", 1)]
    assert "invalid UTF-8" in failed[("s", "t", 2)] and "offset 8" in failed[("s", "t", 2)]
    assert _stored_turns(admin_conn) == {("s", "t", 0)}

    # The same from a JSONL file with raw invalid bytes: the reader keeps them as surrogates.
    path = tmp_path / "turns.jsonl"
    line = b'{"scope": "s", "thread": "f", "turn": %d, "messages": [{"role": "tool", "content": "%s"}]}\n'
    path.write_bytes(line % (0, b"ok") + line % (1, b"bad \xff\xfe bytes") + line % (2, b"also ok"))
    report = ingest_turns(app_conn, list(read_jsonl(path)), HashEmbedder())
    assert report.inserted == 2 and [k for k, _ in report.failed] == [("s", "f", 1)]
    assert "U+DCFF" in report.failed[0][1]

    # At the SQL level the server refuses both, with an SQLSTATE.
    with scoped(app_conn, "s"):
        for query in (
            "SELECT pgmem.turn_hashes(E'a\\u0000b', 't', '{}')",
            "SELECT '[\"\\u0000\"]'::jsonb",
        ):
            with pytest.raises(psycopg.Error) as err, app_conn.transaction():
                app_conn.execute(query)
            assert _sqlstate_ok(err.value)
        # as a bound parameter, the driver refuses NUL before sending
        with pytest.raises(psycopg.DataError, match="NUL"), app_conn.transaction():
            app_conn.execute("SELECT pgmem.turn_hashes(%s, 't', '{}')", ("a\x00b",))
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire):
        app_conn.execute(b"SELECT pgmem.turn_hashes('\xff\xfe', 't', '{}')")


def test_empty_and_whitespace_messages(app_conn: Conn, admin_conn: Conn) -> None:
    emb = HashEmbedder()
    empty = Turn("s", "t", 0, None, ())
    blank = Turn("s", "t", 1, None, ({"role": "user", "content": ""},))
    spaces = Turn(
        "s", "t", 2, None, ({"role": "user", "content": " \n\t  "}, {"role": "assistant", "content": "\u3000 "})
    )
    partly = Turn("s", "t", 3, None, ({"role": "user", "content": "   "}, {"role": "assistant", "content": "hi"}))
    report = ingest_turns(app_conn, [empty, blank, spaces, partly], emb)
    assert report.inserted == 1
    assert sorted(k[2] for k, _ in report.failed) == [0, 1, 2]
    assert all("no text" in e for _, e in report.failed)
    # the stored turn keeps its blank message as sent (faithful), with one piece for the text
    row = admin_conn.execute("SELECT messages FROM pgmem.turn WHERE turn_index = 3").fetchone()
    assert row is not None and row[0] == [dict(m) for m in partly.messages]
    for message in ("", "   ", "\n\t\n"):
        with pytest.raises(InputError, match="empty"):
            recall(app_conn, "s", message, emb)


def _put_turn(conn: Conn, vectors: Sequence[object], **over: object) -> None:
    args: dict[str, object] = {
        "scope": "s",
        "thread": "t",
        "turn_index": 0,
        "messages": "[]",
        "weight": 0.8,
    }
    args.update(over)
    with scoped(conn, "s"):
        conn.execute(
            """SELECT pgmem.put_turn(scope => %(scope)s, thread => %(thread)s, turn_index => %(turn_index)s::integer,
                   turn_time => NULL, messages => %(messages)s::jsonb, content_hash => '\\x01', model_id => 'test:hash',
                   unit_kinds => %(kinds)s, source_indexes => %(srcs)s, labels => %(labels)s, bodies => %(bodies)s,
                   vectors => %(vectors)s::vector[], weight => %(weight)s::float8)""",
            {
                **args,
                "kinds": ["user"] * len(vectors),
                "srcs": [0] * len(vectors),
                "labels": ["[Turn 0 · User]"] * len(vectors),
                "bodies": ["x"] * len(vectors),
                "vectors": list(vectors),
            },
            binary=True,
        )


def _bad_vectors() -> Iterator[tuple[str, FloatArray]]:
    v = hash_vector("x")
    yield "wrong dimension", v[:-1]
    yield "too many dimensions", np.concatenate([v, v])
    nan = v.copy()
    nan[3] = np.nan
    yield "NaN", nan
    inf = v.copy()
    inf[0] = np.inf
    yield "infinity", inf
    yield "zero", np.zeros(DIMS, dtype=np.float32)


@pytest.mark.parametrize("what", [w for w, _ in _bad_vectors()])
def test_bad_vectors_are_refused_with_sqlstate(app_conn: Conn, admin_conn: Conn, what: str) -> None:
    vec = dict(_bad_vectors())[what]
    with pytest.raises(psycopg.DataError) as err:
        _put_turn(app_conn, [hash_vector("ok"), vec])
    assert _sqlstate_ok(err.value)
    with pytest.raises(psycopg.DataError) as err, scoped(app_conn, "s"):
        app_conn.execute(
            "SELECT * FROM pgmem.memory_recall('s', %s::vector[], floor => -1)", ([hash_vector("q"), vec],), binary=True
        )
    assert _sqlstate_ok(err.value)
    # Through the Python API a refusal is a PgmemError (an InputError), never the driver's.
    with pytest.raises(InputError) as refused:
        recall_vectors(app_conn, "s", ["a", "b"], np.stack([vec, vec]), floor=-1.0)
    assert not isinstance(refused.value, psycopg.Error) and "\n" not in str(refused.value), refused.value
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)


def test_out_of_range_numbers_are_refused(app_conn: Conn) -> None:
    emb = HashEmbedder()
    ingest_turns(app_conn, [make_turn("s", "t", 0, "something to find")], emb)
    q = [hash_vector("q")]
    for x in (-1, 0, 1001, 2**31 - 1, 2**31, -(2**40)):
        with pytest.raises(psycopg.DataError) as err, scoped(app_conn, "s"):
            app_conn.execute("SELECT * FROM pgmem.memory_recall('s', %s::vector[], x => %s::integer)", (q, x))
        assert err.value.sqlstate in ("22023", "22003"), (x, err.value.sqlstate)
        with pytest.raises(psycopg.DataError), scoped(app_conn, "s"):
            app_conn.execute("SELECT * FROM pgmem.fact_recall('s', %s::vector[], x => %s::integer)", (q, x))
        with pytest.raises(InputError, match="x must be an integer from 1 to 1,000"):
            recall(app_conn, "s", "something", emb, x=x)
    for floor in (math.nan, -1.5, 2.0, math.inf):
        with pytest.raises(psycopg.DataError), scoped(app_conn, "s"):
            app_conn.execute("SELECT * FROM pgmem.memory_recall('s', %s::vector[], floor => %s::float8)", (q, floor))
        with pytest.raises(InputError):
            recall(app_conn, "s", "something", emb, floor=floor)
    for index in (-1, 2**31):
        with pytest.raises(psycopg.DataError) as err:
            _put_turn(app_conn, [hash_vector("ok")], turn_index=index)
        assert err.value.sqlstate in ("22023", "22003")
        with pytest.raises(InputError, match="turn must be an integer between 0 and 2147483647"):
            from pgmem.turns import turn_from_dict

            turn_from_dict({"scope": "s", "thread": "t", "turn": index, "messages": []})
    for weight in (math.nan, -0.1, 1.5):
        with pytest.raises(psycopg.DataError):
            _put_turn(app_conn, [hash_vector("ok")], turn_index=5, weight=weight)


SAMPLE_BY_NAME: dict[str, object] = {
    "plane": "piece",
    "column_name": "piece.embedding",
    "mode": "vector",
    "what": "vectors",
    "messages": "[]",
    "chunk_heading_paths": '[["Title"]]',
    "results": "[]",
}


def _sample(type_name: str, arg_name: str) -> object:
    if arg_name in SAMPLE_BY_NAME:
        return SAMPLE_BY_NAME[arg_name]
    v = hash_vector("sample")
    return {
        "text": "s",
        "integer": 0,
        "bigint": 1,
        "smallint": 1,
        "double precision": 0.5,
        "real": 0.5,
        "boolean": False,
        "jsonb": "[]",
        "bytea": b"\x01",
        "vector": v,
        "vector[]": [v],
        "text[]": ["user"],
        "integer[]": [0],
        "bigint[]": [1],
        "timestamp with time zone": None,
    }.get(type_name)


def test_null_arguments_to_every_sql_function(app_conn: Conn, admin_conn: Conn) -> None:
    ingest_turns(app_conn, [make_turn("s", "t", 0, "something to find")], HashEmbedder())
    functions = admin_conn.execute(
        """SELECT p.oid::regprocedure::text, p.proname,
                  array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t),
                  coalesce(p.proargnames[1:p.pronargs], array_fill(''::text, ARRAY[p.pronargs]))
             FROM pg_proc p
            WHERE p.pronamespace = 'pgmem'::regnamespace AND has_function_privilege(%s, p.oid, 'EXECUTE')
            ORDER BY 1""",
        ("pgmem_app",),
    ).fetchall()
    assert len(functions) >= 15
    calls = 0
    outcomes: dict[str, int] = {}
    for signature, name, types, names in functions:
        types_l = [str(t) for t in types]  # type: ignore[attr-defined]
        names_l = [str(n) for n in names]  # type: ignore[attr-defined]
        variants: list[list[object]] = [[None] * len(types_l)]
        for i in range(len(types_l)):
            args: list[object] = [_sample(t, n) for t, n in zip(types_l, names_l, strict=True)]
            args[i] = None
            variants.append(args)
        # type names come from the catalog (format_type), not from input
        call = sql.SQL("SELECT * FROM {}({})").format(
            sql.Identifier("pgmem", str(name)),
            sql.SQL(", ").join(sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(t)) for t in types_l),
        )
        for args in variants:
            calls += 1
            try:
                with app_conn.transaction(force_rollback=True):
                    app_conn.execute("SELECT set_config('pgmem.scope', 's', true)")
                    app_conn.execute(call, args, binary=True).fetchall()
                outcomes["returned"] = outcomes.get("returned", 0) + 1
            except psycopg.Error as exc:
                assert _sqlstate_ok(exc), f"{signature} with {args!r}: {exc!r}"
                outcomes[str(exc.sqlstate)] = outcomes.get(str(exc.sqlstate), 0) + 1
            assert app_conn.execute("SELECT 1").fetchone() == (1,), f"connection lost after {signature}"
    assert calls > 60
    print(f"NULL-argument calls: {calls}; outcomes by SQLSTATE: {dict(sorted(outcomes.items()))}")


class PoisonEmbedder(HashEmbedder):
    """Returns a NaN vector for any text containing the marker: a bad row mid-batch."""

    def embed(self, texts: Sequence[str]) -> FloatArray:
        out = super().embed(texts)
        for i, t in enumerate(texts):
            if "POISON" in t:
                out[i, 0] = np.nan
        return out


@pytest.mark.parametrize("kind", ["nul-in-tool-output", "nan-vector-from-embedder"])
def test_one_bad_turn_in_a_batch_of_100(app_conn: Conn, admin_conn: Conn, kind: str) -> None:
    turns = [make_turn("s", f"t{i % 4}", i, f"ordinary turn number {i}", tool=f"result {i}") for i in range(100)]
    if kind == "nul-in-tool-output":
        turns[57] = make_turn("s", "t1", 57, "bad one", tool="bytes \x00 here")
    else:
        turns[57] = make_turn("s", "t1", 57, "bad one POISON")
    report = ingest_turns(app_conn, turns, PoisonEmbedder(), group_pieces=64)
    assert report.inserted == 99
    assert [k for k, _ in report.failed] == [("s", "t1", 57)]
    if kind == "nan-vector-from-embedder":
        assert report.failed[0][1].startswith("22")  # the SQLSTATE leads the message
    stored = _stored_turns(admin_conn)
    assert len(stored) == 99 and ("s", "t1", 57) not in stored
    # every stored turn is whole: 2 pieces each (user + tool)
    counts = admin_conn.execute("SELECT count(*) FROM pgmem.piece GROUP BY thread_id, turn_index").fetchall()
    assert {int(str(c[0])) for c in counts} == {2}


BIG_SCRIPT = r"""
import json, resource, sys, time
from pgmem.db import connect
from pgmem.ingest import ingest_turns
from tests.security_helpers import HashEmbedder, make_turn

url, mb = sys.argv[1], int(sys.argv[2])
line = "2026-10-16 14:02:11 INFO shipment 48213 pallet scanned at dock 7, freezer temp -18.4C ok\n"
text = (line * (mb * 1024 * 1024 // len(line) + 1))[: mb * 1024 * 1024]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
conn = connect(url)
backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
t0 = time.monotonic()
report = ingest_turns(conn, [make_turn("big", "t", 0, "run the export", tool=text)], HashEmbedder())
server_peak = None
try:  # the server backend's own peak (readable when the test runs as root or as the server's user)
    with open(f"/proc/{backend}/status") as f:
        server_peak = int(next(l for l in f if l.startswith("VmHWM")).split()[1]) / 1024
except (OSError, StopIteration):
    pass
print(json.dumps({"inserted": report.inserted, "pieces": report.pieces, "failed": report.failed,
                  "seconds": round(time.monotonic() - t0, 1), "text_mb": len(text) / 2**20,
                  "rss_before_mb": before / 1024,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "server_backend_peak_mb": server_peak}))
"""


@pytest.mark.parametrize("mb", [BIG_MB, pytest.param(50, marks=pytest.mark.slow)])
def test_big_tool_result_is_stored_whole_with_bounded_memory(
    app_conn: Conn, admin_conn: Conn, db_url: str, mb: int, request: pytest.FixtureRequest
) -> None:
    """A 50 MB tool result (5 MB in the default suite): stored whole, cut into pieces under
    the byte budget, client peak RSS reported and bounded by a fixed multiple of the payload."""
    from tests.security_helpers import APP_LOGIN, role_url, slow_enabled

    if mb == 50 and not slow_enabled(request.config):
        pytest.skip("50 MB variant: run with -m slow")
    proc = subprocess.run(
        [sys.executable, "-c", BIG_SCRIPT, role_url(db_url, APP_LOGIN), str(mb)],
        capture_output=True,
        text=True,
        cwd=repo_root(),
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{mb} MB tool result: {result}")
    assert result["inserted"] == 1 and not result["failed"]
    size = mb * 2**20
    row = admin_conn.execute(
        "SELECT octet_length(messages->2->>'content'), md5(messages->2->>'content') FROM pgmem.turn"
    ).fetchone()
    line = "2026-10-16 14:02:11 INFO shipment 48213 pallet scanned at dock 7, freezer temp -18.4C ok\n"
    text = (line * (size // len(line) + 1))[:size]
    import hashlib

    assert row == (size, hashlib.md5(text.encode()).hexdigest())  # stored faithfully, whole
    pieces = admin_conn.execute("SELECT count(*), max(octet_length(label || ' ' || body)) FROM pgmem.piece").fetchone()
    assert pieces is not None and int(str(pieces[0])) == result["pieces"] and int(str(pieces[1])) <= 1200
    # Bounded: the client's peak grows linearly with the payload, by a fixed factor (it holds
    # the message, its JSON, the pieces, their texts and vectors and the encoded call at once:
    # about 22x at 50 MB, measured), never by the number of pieces times anything larger.
    growth = result["peak_rss_mb"] - result["rss_before_mb"]
    assert growth < 26 * mb + 150, result


@pytest.mark.parametrize(
    "bad",
    [
        Turn("s", "x" * 201, 57, None, ({"role": "user", "content": "long thread id"},)),
        Turn("", "t1", 57, None, ({"role": "user", "content": "empty scope"},)),
        Turn("s" * 201, "t1", 57, None, ({"role": "user", "content": "long scope"},)),
        Turn("s", "t1", -57, None, ({"role": "user", "content": "negative index"},)),
        Turn("s", "t1", 2**31, None, ({"role": "user", "content": "huge index"},)),
        Turn("s", "t1", 57, None, ({"role": "user", "content": "an int key", 5: "x"},)),  # type: ignore[dict-item]
        Turn("s", "t1", 57, None, ({"role": "user", "content": "nested", "extra": {"a": {(1, 2): "x"}}},)),
        Turn("s", "t1", 57, None, ({"role": "user", "content": "metadata"},), metadata={1: 2, "a": 3}),  # type: ignore[dict-item]
        Turn("s", "t1", 57, None, None),  # type: ignore[arg-type]
        Turn("s", "t1", 57, None, "not a list"),  # type: ignore[arg-type]
    ],
    ids=[
        "long-thread",
        "empty-scope",
        "long-scope",
        "negative-index",
        "huge-index",
        "int-key",
        "tuple-key-nested",
        "int-metadata-key",
        "messages-none",
        "messages-str",
    ],
)
def test_one_badly_keyed_turn_built_in_python_is_reported(app_conn: Conn, admin_conn: Conn, bad: Turn) -> None:
    """Turns built directly (not read through turn_from_dict) are checked too."""
    turns = [make_turn("s", "t1", i, f"turn {i}") for i in range(10)]
    report = ingest_turns(app_conn, [*turns[:5], bad, *turns[5:]], HashEmbedder())
    assert report.inserted == 10
    assert [k for k, _ in report.failed] == [bad.key]
    assert len(_stored_turns(admin_conn)) == 10


def test_wrong_types_to_the_python_api_are_one_line_input_errors(app_conn: Conn) -> None:
    """Each public function checks its own arguments: a wrong type or value is an InputError
    (a ValueError too) naming the argument, never a TypeError or AttributeError from inside,
    nor a 42883 "function does not exist" for a numpy integer or a float given as x."""
    from pgmem.documents.store import add_documents, search_documents
    from pgmem.facts import add_facts, fact_recall
    from pgmem.splitting import SplitRules

    emb = HashEmbedder()
    ingest_turns(app_conn, [make_turn("s", "t", 0, "something to find")], emb)
    bad_calls: list[tuple[str, object]] = [
        ("x must be", lambda: recall(app_conn, "s", "something", emb, x=None)),  # type: ignore[arg-type]
        ("x must be", lambda: recall(app_conn, "s", "something", emb, x="5")),  # type: ignore[arg-type]
        ("x must be", lambda: recall(app_conn, "s", "something", emb, x=2.5)),  # type: ignore[arg-type]
        ("x must be", lambda: recall(app_conn, "s", "something", emb, x=True)),
        ("floor", lambda: recall(app_conn, "s", "something", emb, floor="0.2")),  # type: ignore[arg-type]
        ("weight must be between 0 and 1", lambda: recall(app_conn, "s", "something", emb, weight=2)),
        ("weight", lambda: recall(app_conn, "s", "something", emb, weight="a")),  # type: ignore[arg-type]
        ("rules must be a SplitRules", lambda: recall(app_conn, "s", "something", emb, rules=None)),  # type: ignore[arg-type]
        ("recency", lambda: recall(app_conn, "s", "something", emb, recency="0.1")),  # type: ignore[arg-type]
        # An integer too large for a float is a number out of range, not an OverflowError.
        ("floor", lambda: recall(app_conn, "s", "something", emb, floor=10**400)),
        ("floor", lambda: recall(app_conn, "s", "something", emb, floor=-(10**400))),
        ("weight must be between 0 and 1", lambda: recall(app_conn, "s", "something", emb, weight=10**400)),
        ("recency is a cosine band", lambda: recall(app_conn, "s", "something", emb, recency=10**400)),
        ("floor", lambda: fact_recall(app_conn, "s", "something", emb, floor=10**400)),
        ("weight must be between 0 and 1", lambda: fact_recall(app_conn, "s", "something", emb, weight=10**400)),
        ("turns must be a list of Turn", lambda: ingest_turns(app_conn, None, emb)),  # type: ignore[arg-type]
        ("turns\\[0\\] must be a Turn", lambda: ingest_turns(app_conn, [None], emb)),  # type: ignore[list-item]
        ("weight", lambda: ingest_turns(app_conn, [], emb, weight="a")),  # type: ignore[arg-type]
        ("max_bytes", lambda: ingest_turns(app_conn, [], emb, max_bytes="a")),  # type: ignore[arg-type]
        ("group_pieces", lambda: ingest_turns(app_conn, [], emb, group_pieces=None)),  # type: ignore[arg-type]
        ("x must be", lambda: search_documents(app_conn, "s", "something", emb, x="5")),  # type: ignore[arg-type]
        ("candidates", lambda: search_documents(app_conn, "s", "something", emb, candidates=0)),
        ("facts must be a list of Fact", lambda: add_facts(app_conn, "s", None, emb)),  # type: ignore[arg-type]
        ("facts\\[0\\] must be a Fact", lambda: add_facts(app_conn, "s", ["a str"], emb)),  # type: ignore[list-item]
        ("facts\\[0\\] must be a Fact", lambda: add_facts(app_conn, "s", [None], emb)),  # type: ignore[list-item]
        ("x must be", lambda: fact_recall(app_conn, "s", "something", emb, x="5")),  # type: ignore[arg-type]
        ("max_words", lambda: SplitRules(max_words=0)),
        ("SplitRules.max_parts must be an integer", lambda: SplitRules(max_parts=None)),  # type: ignore[arg-type]
        ("docs must be a list of Document", lambda: add_documents(app_conn, "s", None, emb)),  # type: ignore[arg-type]
        ("max_bytes", lambda: add_documents(app_conn, "s", [Document("ok.md", "# ok")], emb, max_bytes=0)),
    ]
    for match, call in bad_calls:
        assert callable(call)
        with pytest.raises(InputError, match=match) as err:
            call()
        assert isinstance(err.value, ValueError) and "\n" not in str(err.value), str(err.value)
    # numpy's numbers are numbers
    hits = recall(app_conn, "s", "something to find", emb, x=np.int64(3), floor=np.float32(-1.0)).groups[0].hits  # type: ignore[arg-type]
    assert hits and hits[0].body.endswith("something to find")
    assert ingest_turns(app_conn, [make_turn("s", "t", 1, "more")], emb, weight=np.float64(0.8)).inserted == 1


def test_one_bad_document_costs_none_of_the_others(app_conn: Conn, admin_conn: Conn) -> None:
    """A document whose id or text Postgres cannot store (a lone surrogate, a NUL, no string,
    an id of 1,000 characters that is too long for the id's index: 4,000 bytes of UTF-8) is
    reported with its reason, and the good documents of the same call are stored. The long id
    raised out of add_documents (54000, index row size), so none after it was stored."""
    import random

    from pgmem.documents.store import add_documents

    rng = random.Random(7)  # characters of four UTF-8 bytes that do not compress
    wide = "".join(chr(0x20000 + rng.randrange(0xA6DF)) for _ in range(1000))
    good = [Document("a.md", "# Alpha\n\nThe ferry leaves at nine."), Document("b.md", "# Beta\n\nThe bus is late.")]
    bad = [
        Document("bad.md", "# h\n\nx\udcffy"),
        Document("bad\x00.md", "# h\n\nxy"),
        Document(None, "# h\n\nxy"),  # type: ignore[arg-type]
        Document(["a"], "# h\n\nxy"),  # type: ignore[arg-type]  # not even hashable
        Document("five.md", 5),  # type: ignore[arg-type]
        Document("nul.md", "# h\n\nx\x00y"),
        Document(wide, "# h\n\nxy"),
    ]
    report = add_documents(app_conn, "docs", [good[0], *bad, good[1]], HashEmbedder())
    assert report.inserted == 2, report
    reasons = dict(report.failed)
    assert set(reasons) == {"bad.md", "bad\x00.md", "None", "['a']", "five.md", "nul.md", wide}, reasons
    assert "lone surrogate" in reasons["bad.md"] and "NUL" in reasons["nul.md"] and "offset 6" in reasons["nul.md"]
    assert "must be a string" in reasons["five.md"]
    assert reasons[wide].startswith("54000: index row size"), reasons[wide]
    stored = admin_conn.execute("SELECT document_id FROM pgmem.document WHERE scope_id = 'docs' ORDER BY 1").fetchall()
    assert stored == [("a.md",), ("b.md",)]


def test_a_key_given_twice_in_a_jsonl_line_is_refused(tmp_path: Path) -> None:
    """json.loads keeps the last of two equal keys silently: {"turn": 4, "turn": 5} stored turn 5.
    A turn line or a fact line that gives a key twice is refused, naming the line and the key;
    the lines around it are read. So is one giving the thread (or the turn) under both its names,
    of which one was kept silently."""
    from pgmem.facts import read_facts

    turns = tmp_path / "turns.jsonl"
    turns.write_text(
        '{"scope": "s", "thread": "t", "turn": 0, "messages": [{"role": "user", "content": "a"}]}\n'
        '{"scope": "s", "thread": "t", "turn": 4, "turn": 5, "messages": [{"role": "user", "content": "b"}]}\n'
        '{"scope": "s", "thread": "t", "turn": 2, "messages": [{"role": "user", "content": "c", "content": "d"}]}\n',
        encoding="utf-8",
    )
    failed: list[tuple[str, str]] = []
    read = list(read_jsonl(turns, failed=failed))
    assert [t.index for t in read] == [0]
    assert [(w.rsplit(":", 1)[1], "twice" in e) for w, e in failed] == [("2", True), ("3", True)], failed
    assert "'turn'" in failed[0][1] and "'content'" in failed[1][1]
    # The same key under its two names: thread and thread_id, turn and turn_index.
    both = tmp_path / "both.jsonl"
    both.write_text(
        '{"scope": "s", "thread": "t", "thread_id": "u", "turn": 0, "messages": [{"role": "user", "content": "a"}]}\n'
        '{"scope": "s", "thread": "t", "turn": 1, "turn_index": 1, "messages": [{"role": "user", "content": "a"}]}\n',
        encoding="utf-8",
    )
    failed.clear()
    assert list(read_jsonl(both, failed=failed)) == []
    assert ["not both" in e for _, e in failed] == [True, True], failed
    facts = tmp_path / "facts.jsonl"
    facts.write_text('{"body": "x", "body": "y"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"facts.jsonl:1 gives the key 'body' twice"):
        read_facts(facts)


@pytest.mark.parametrize(
    "argv",
    [
        ["recall", "hello", "--scope", "s", "-x", "abc"],
        ["recall", "hello", "--scope", "s", "--mode", "bogus"],
        ["recall"],
        ["no-such-command"],
        ["forget", "--scope"],
    ],
)
def test_a_cli_usage_error_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse printed its usage block (several lines) before the error; the error is one line
    now, naming the command's --help, with argparse's exit status 2."""
    from pgmem.cli import build_parser

    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("pgmem") and ": error: " in err and "--help)" in err


def test_a_server_message_or_hint_over_lines_is_one_line(app_conn: Conn) -> None:
    """btree's 54000 refusal carries a two-line hint, which the CLI and every report printed on
    two lines; a refusal is one line whatever the server's text."""
    from pgmem.errors import DatabaseError

    with pytest.raises(psycopg.Error) as refused:
        app_conn.execute(
            "DO $$ BEGIN RAISE EXCEPTION E'first\\n  second' USING ERRCODE = '54000', HINT = E'one.\\nTwo.'; END $$"
        )
    app_conn.rollback()
    err = DatabaseError.from_driver(refused.value)
    assert str(err) == "first second (SQLSTATE 54000); hint: one. Two."


def test_message_content_shapes_are_those_the_docs_name(app_conn: Conn, admin_conn: Conn) -> None:
    """docs/python.md said `content` is a string, a list of parts or null, and a wrong type's
    error said the same, yet an object was stored (as its JSON text, as a tool's structured result
    is): both name the object now, and other types stay refused."""
    obj = Turn("s", "o", 0, None, ({"role": "tool", "content": {"rows": 2, "status": "stuck"}},))
    bad = Turn("s", "o", 1, None, ({"role": "user", "content": 42},))
    report = ingest_turns(app_conn, [obj, bad], HashEmbedder())
    assert report.inserted == 1 and [k for k, _ in report.failed] == [("s", "o", 1)]
    assert "a string, a list of parts, an object (stored as its JSON) or null, got int" in report.failed[0][1]
    body = admin_conn.execute("SELECT body FROM pgmem.piece WHERE thread_id = 'o'").fetchone()
    assert body is not None and '"status": "stuck"' in str(body[0])
    doc = (repo_root() / "docs" / "python.md").read_text(encoding="utf-8")
    assert "`content` is a string, a list of parts, an object (stored as its JSON) or null" in doc


def test_a_line_of_nul_or_invalid_utf8_is_reported_with_its_file_and_line(app_conn: Conn, tmp_path: Path) -> None:
    """Every refused line of a JSONL file is named `path:line` but one whose text Postgres cannot
    store (NUL, invalid UTF-8): `failed turn ('s', 'f', 1): messages[0].content contains ...`, and
    in a file of a hundred thousand turns the key was all there was to find it by."""
    path = tmp_path / "turns.jsonl"
    line = b'{"scope": "s", "thread": "f", "turn": %d, "messages": [{"role": "user", "content": "%s"}]}\n'
    path.write_bytes(line % (0, b"ok") + line % (1, b"bad \xff bytes") + line % (2, b"nul \\u0000 here"))
    report = ingest_turns(app_conn, list(read_jsonl(path)), HashEmbedder())
    assert report.inserted == 1
    failed = dict(report.failed)
    assert failed[("s", "f", 1)].startswith(f"{path}:2: messages[0].content contains an invalid UTF-8 byte")
    assert failed[("s", "f", 2)].startswith(f"{path}:3: messages[0].content contains a NUL character")


def test_a_line_giving_a_key_twice_is_reported_once_and_not_as_bad_json(tmp_path: Path) -> None:
    """A turn line giving a key twice was reported "t.jsonl:1: not valid JSON (t.jsonl:1 gives the
    key 'scope' twice)": the line named twice, and JSON that is valid called invalid."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"scope": "a", "scope": "b", "thread": "t", "turn": 0, "messages": []}\n', encoding="utf-8")
    failed: list[tuple[str, str]] = []
    assert list(read_jsonl(path, failed=failed)) == []
    assert failed == [(f"{path}:1", f"{path}:1 gives the key 'scope' twice")]
