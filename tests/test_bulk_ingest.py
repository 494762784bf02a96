"""The bulk path (pgmem.put_turns, ingest_turns(bulk=True), pgmem ingest --bulk) stores the
rows put_turn stores, is idempotent, reports per-turn errors as the normal path does, and
runs beside put_turn writers and forgets."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgmem.cli import main
from pgmem.db import connect, scoped
from pgmem.embedders.base import Embedder
from pgmem.ingest import ingest_turns
from pgmem.turns import Turn, turn_from_dict
from tests.conftest import TEST_DIMS
from tests.helpers import InFlight
from tests.lifecycle_helpers import until_waiting

Conn = psycopg.Connection[tuple[object, ...]]

PIECE_COLUMNS = (
    "p.kind, p.unit_kind, p.thread_id, p.turn_index, p.source_index, p.seq, p.label, p.body, "
    "p.raw_embedding::text, p.embedding::text, m.model_id, w.lexemes, "
    "w.scope_no = p.scope_no AND w.kind = p.kind AND w.thread_id = p.thread_id"
)
TURN_COLUMNS = (
    "thread_id, turn_index, turn_time, messages, encode(content_hash, 'hex'), context::text, blend_weight, "
    "m.model_id, metadata"
)


def _turns(scope: str, n: int = 12) -> list[Turn]:
    out = []
    for i in range(n):
        out.append(
            turn_from_dict(
                {
                    "scope": scope,
                    "thread": f"thread-{i % 3}",
                    "turn": i // 3,
                    "time": None if i % 4 == 0 else f"2026-10-{1 + i % 28:02d}T14:0{i % 10}:00Z",
                    "metadata": {"channel": "voice", "n": i} if i % 2 else {},
                    "messages": [
                        {"role": "user", "content": f"Question {i}: where is shipment SHP-{100 + i}? The dogs say hi."},
                        {"role": "assistant", "content": f"Looking up SHP-{100 + i} for you. " * (1 + i % 3)},
                        {"role": "tool", "content": "\n".join(f"row {j},Busan,{i}" for j in range(20 * (i % 4)))},
                    ],
                }
            )
        )
    return out


def _rows(
    admin: Conn, scope: str
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]:
    pieces = admin.execute(
        f"SELECT {PIECE_COLUMNS} FROM pgmem.piece p JOIN pgmem.embedding_model m USING (model_key)"
        " JOIN pgmem.piece_word w ON w.scope_id = p.scope_id AND w.piece_id = p.piece_id"
        " WHERE p.scope_id = %s ORDER BY p.thread_id, p.turn_index, p.source_index, p.seq",
        (scope,),
    ).fetchall()
    turns = admin.execute(
        f"SELECT {TURN_COLUMNS} FROM pgmem.turn t JOIN pgmem.embedding_model m USING (model_key)"
        " WHERE t.scope_id = %s ORDER BY thread_id, turn_index",
        (scope,),
    ).fetchall()
    threads = admin.execute(
        "SELECT thread_id FROM pgmem.thread WHERE scope_id = %s ORDER BY thread_id", (scope,)
    ).fetchall()
    return pieces, turns, threads


def _moved(turns: list[Turn], scope: str) -> list[Turn]:
    return [dataclasses.replace(t, scope=scope) for t in turns]


@pytest.mark.long
def test_bulk_stores_the_rows_put_turn_stores(conn: Conn, admin_conn: Conn, embedder: Embedder) -> None:
    turns = _turns("one")
    one = ingest_turns(conn, turns, embedder)
    bulk = ingest_turns(conn, _moved(turns, "bulk"), embedder, bulk=True)
    assert one.as_dict() == bulk.as_dict() and bulk.inserted == len(turns) and not bulk.failed
    pieces, turn_rows, threads = _rows(admin_conn, "one")
    assert len(pieces) == bulk.pieces > len(turns)
    assert _rows(admin_conn, "bulk") == (pieces, turn_rows, threads)
    # Idempotent: the same batch again changes nothing (not even the row versions).
    before = admin_conn.execute(
        "SELECT piece_id, xmin::text FROM pgmem.piece WHERE scope_id = 'bulk' ORDER BY piece_id"
    ).fetchall()
    again = ingest_turns(conn, _moved(turns, "bulk"), embedder, bulk=True, force=False)
    assert again.unchanged == len(turns) and again.pieces == 0
    assert (
        admin_conn.execute(
            "SELECT piece_id, xmin::text FROM pgmem.piece WHERE scope_id = 'bulk' ORDER BY piece_id"
        ).fetchall()
        == before
    )
    # Changed turns, new metadata on an unchanged turn, forced rewrites: the same outcome both ways.
    changed = list(turns)
    changed[1] = dataclasses.replace(changed[1], messages=({"role": "user", "content": "Replaced text."},))
    changed[2] = dataclasses.replace(changed[2], metadata={"channel": "chat"})
    for scope, bulk_mode in (("one", False), ("bulk", True)):
        rep = ingest_turns(conn, _moved(changed, scope), embedder, bulk=bulk_mode)
        assert (rep.replaced, rep.unchanged) == (2, len(turns) - 2)
        rep = ingest_turns(conn, _moved(changed[:3], scope), embedder, bulk=bulk_mode, force=True)
        assert rep.replaced == 3
    assert _rows(admin_conn, "bulk") == _rows(admin_conn, "one")
    # A context vector per turn (context="text"), as put_turn's context argument.
    for scope, bulk_mode in (("ctx-one", False), ("ctx-bulk", True)):
        ingest_turns(conn, _moved(turns[:4], scope), embedder, bulk=bulk_mode, context="text")
    assert _rows(admin_conn, "ctx-bulk") == _rows(admin_conn, "ctx-one")


def _call_put_turns(conn: Conn, scope: str, turns: list[dict[str, object]]) -> list[tuple[object, ...]]:
    vectors = [v for t in turns for v in t["vectors"]]  # type: ignore[attr-defined]
    with scoped(conn, scope):
        return conn.execute(
            """SELECT turn_no, status, pieces, error_code, error, error_hint FROM pgmem.put_turns(
                   scope => %s, model_id => 'random', threads => %s, turn_indexes => %s,
                   turn_times => %s::timestamptz[], messages => %s::jsonb[], content_hashes => %s,
                   piece_counts => %s, unit_kinds => %s, source_indexes => %s, labels => %s, bodies => %s,
                   vectors => %s::vector[], metadata => %s::jsonb[])""",
            (
                scope,
                [t["thread"] for t in turns],
                [t["turn"] for t in turns],
                [None] * len(turns),
                [t.get("messages", "[]") for t in turns],
                [hashlib.sha256(repr(t["turn"]).encode()).digest() for t in turns],
                [len(t["vectors"]) for t in turns],  # type: ignore[arg-type]
                ["user"] * len(vectors),
                [0] * len(vectors),
                ["[l]"] * len(vectors),
                ["b"] * len(vectors),
                vectors,
                [t.get("metadata") for t in turns],
            ),
            binary=True,
        ).fetchall()


def _put_turn_error(conn: Conn, scope: str, t: dict[str, object]) -> tuple[str | None, str | None]:
    n = len(t["vectors"])  # type: ignore[arg-type]
    try:
        with scoped(conn, scope):
            conn.execute(
                """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => NULL,
                       messages => %s::jsonb, content_hash => '\\x00', model_id => 'random', unit_kinds => %s,
                       source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[],
                       metadata => %s::jsonb)""",
                (
                    scope,
                    t["thread"],
                    t["turn"],
                    t.get("messages", "[]"),
                    ["user"] * n,
                    [0] * n,
                    ["[l]"] * n,
                    ["b"] * n,
                    t["vectors"],
                    t.get("metadata"),
                ),
                binary=True,
            )
    except psycopg.Error as exc:
        return exc.sqlstate, exc.diag.message_primary
    return None, None


def test_per_turn_errors_are_put_turns_errors(conn: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(0)

    def unit(n: int) -> list[object]:
        a = rng.standard_normal((n, TEST_DIMS)).astype(np.float32)
        return list(a / np.linalg.norm(a, axis=1, keepdims=True))

    good = {"thread": "a", "turn": 0, "vectors": unit(3)}
    bad = [
        {"thread": "a", "turn": -1, "vectors": unit(1)},
        {"thread": "a", "turn": 1, "vectors": unit(1), "metadata": "[1, 2]"},
        {"thread": "a", "turn": 2, "vectors": unit(1), "metadata": json.dumps({"k": "x" * 5000})},
        {"thread": "b", "turn": 0, "vectors": []},
        {"thread": "b", "turn": 1, "vectors": [np.zeros(TEST_DIMS, dtype=np.float32)]},
        {"thread": "b", "turn": 2, "vectors": [np.ones(TEST_DIMS - 1, dtype=np.float32)]},
        {"thread": "b", "turn": 3, "vectors": unit(1), "messages": None},
    ]
    also_good = {"thread": "c", "turn": 0, "vectors": unit(2), "metadata": json.dumps({"x": {"nested": [1]}})}
    rows = _call_put_turns(conn, "errs", [good, *bad, also_good])
    assert [(r[0], r[1], r[2]) for r in rows if r[1] != "failed"] == [(1, "inserted", 3), (9, "inserted", 2)]
    failed = {int(str(r[0])): (r[3], r[4]) for r in rows if r[1] == "failed"}
    assert sorted(failed) == list(range(2, 9))
    for i, t in enumerate(bad, start=2):
        assert failed[i] == _put_turn_error(conn, "errs2", t), t["turn"]
        assert failed[i][0] in ("22004", "22023", "22000")
    stored = admin_conn.execute(
        "SELECT thread_id, turn_index FROM pgmem.turn WHERE scope_id = 'errs' ORDER BY 1, 2"
    ).fetchall()
    assert stored == [("a", 0), ("c", 0)]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'errs'").fetchone() == (5,)
    # A refused first turn does not decide the batch's dimension.
    first_bad = _call_put_turns(conn, "errs3", [bad[5], good])
    assert [(r[1], r[3]) for r in first_bad] == [("failed", "22000"), ("inserted", None)]
    # A malformed call fails as a whole, with one clear line; another scope is refused.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="appears more than once"):
        _call_put_turns(conn, "errs", [good, good])
    with scoped(conn, "errs"), pytest.raises(psycopg.errors.InvalidParameterValue, match="piece_counts must be"):
        conn.execute(
            "SELECT * FROM pgmem.put_turns('errs', 'random', ARRAY['a'], ARRAY[5], ARRAY[NULL::timestamptz],"
            " ARRAY['[]'::jsonb], ARRAY['\\x01'::bytea], ARRAY[2], ARRAY['user'], ARRAY[0], ARRAY['l'], ARRAY['b'],"
            " %s::vector[])",
            (unit(1),),
            binary=True,
        )
    # Arrays that are no lists indexed from 1 (rt70). An array of arrays passed the length checks
    # (its first dimension) while every element was read: '{{0,1},{2,3}}' beside threads a and b
    # stored b at turn 1. A turn to replace whose turn is gone, its hash indexed from 2, was
    # never marked skipped: the call looped until the statement timeout.
    calls = [
        ("'{{a,b},{c,d}}'", "ARRAY[0, 0]", "NULL"),
        ("ARRAY['a', 'b']", "'{{0,1},{2,3}}'", "NULL"),
        ("ARRAY['a', 'b']", "ARRAY[0, 0]", '\'[2:3]={"\\\\x01","\\\\x02"}\''),
    ]
    for threads, indexes, replace in calls:
        with scoped(conn, "errs4"), pytest.raises(psycopg.errors.InvalidParameterValue, match="one-dimensional"):
            conn.execute("SET LOCAL statement_timeout = '2s'")
            conn.execute(
                f"SELECT * FROM pgmem.put_turns('errs4', 'random', {threads}, {indexes},"
                " ARRAY[NULL, NULL]::timestamptz[], %s::jsonb[], ARRAY['\\x01', '\\x02']::bytea[],"
                " ARRAY[1, 1], ARRAY['user', 'user'], ARRAY[0, 0], ARRAY['l', 'l'], ARRAY['a', 'b'], %s::vector[],"
                f" replace_hashes => {replace}::bytea[])",
                ([json.dumps([{"role": "user", "content": t}]) for t in "ab"], unit(2)),
                binary=True,
            )
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn WHERE scope_id = 'errs4'").fetchone() == (0,)
    with scoped(conn, "other"), pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(
            "SELECT * FROM pgmem.put_turns('errs', 'random', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',"
            " '{}', '{}')"
        )


def test_hostile_turns_are_reported_as_the_normal_path_reports_them(conn: Conn, embedder: Embedder) -> None:
    good = _turns("h-one", 3)
    hostile = [
        dataclasses.replace(good[0], index=7, messages=({"role": "user", "content": "nul \x00 here"},)),
        dataclasses.replace(good[0], index=8, messages=({"role": "user", "content": "bad \udcff utf-8"},)),
        dataclasses.replace(good[0], index=9, messages=({"role": "user", "content": ""},)),
        dataclasses.replace(good[0], index=10, thread="t" * 100_000),
        dataclasses.replace(good[0], index=11, metadata={"k": "x" * 5000}),
        dataclasses.replace(good[0], index=12, messages=({"role": "user", "content": ["not", "text"]},)),
        good[1],  # twice: the last one wins, the first is superseded
    ]
    batch = [*good, *hostile]
    one = ingest_turns(conn, batch, embedder).as_dict()
    bulk = ingest_turns(conn, _moved(batch, "h-bulk"), embedder, bulk=True).as_dict()
    assert json.dumps(bulk).replace("h-bulk", "h-one") == json.dumps(one)
    assert one["inserted"] == 4 and len(one["failed"]) >= 4  # type: ignore[arg-type]


def test_cli_bulk(
    app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", app_url)
    lines = [
        json.dumps({"scope": "cli", "thread": "t", "turn": i, "messages": [{"role": "user", "content": f"hi {i}"}]})
        for i in range(5)
    ]
    lines.insert(2, "{not json")
    lines.append(json.dumps({"scope": "cli", "thread": "t", "turn": -3, "messages": []}))
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["ingest", str(path), "--bulk"]) == 1
    out = capsys.readouterr()
    assert out.out.strip() == "5 inserted, 0 replaced, 0 unchanged, 5 pieces written, 2 failed"
    assert "Traceback" not in out.err and out.err.count("failed") == 2
    assert main(["ingest", str(path), "--bulk", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["unchanged"] == 5 and report["inserted"] == 0


@pytest.mark.long
def test_concurrent_bulk_and_put_turn_writers(app_url: str, db_url: str, embedder: Embedder) -> None:
    """Two bulk writers and a put_turn writer over the same threads of one scope (overlapping
    turns, the second bulk writer's listed in the other order), and a forget of one thread
    meanwhile: no error, the server detects no deadlock (the library would store a bulk call's
    turns one by one after one, rt78), and every turn stored once with its pieces."""
    from pgmem.lab.bench.churn import deadlocks
    from tests.test_lock_order import deadlocks_now

    turns = _turns("conc", 30)
    with connect(db_url) as admin:
        before = deadlocks(admin)
    errors: list[BaseException] = []
    flight = InFlight()  # ingest calls in flight

    def run(part: list[Turn], bulk: bool) -> None:
        try:
            with connect(app_url) as c:
                for _ in range(2):
                    with flight():
                        rep = ingest_turns(c, part, embedder, bulk=bulk, force=True, group_pieces=16)
                    assert not rep.failed, rep.failed
        except BaseException as exc:
            errors.append(exc)

    def forget() -> None:
        try:
            with connect(app_url) as c, scoped(c, "conc"):
                c.execute("SELECT * FROM pgmem.forget_thread('conc', 'thread-2')")
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=run, args=(turns[:20], True)),
        threading.Thread(target=run, args=(turns[10:][::-1], True)),
        threading.Thread(target=run, args=(turns[5:25], False)),
        threading.Thread(target=forget),
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert flight.most >= 2, "the writers never wrote at the same time"
    with connect(db_url) as admin:
        assert deadlocks_now(admin) - before == 0
        per_turn = admin.execute(
            "SELECT t.thread_id, t.turn_index, count(p.*), count(DISTINCT (p.source_index, p.seq))"
            " FROM pgmem.turn t LEFT JOIN pgmem.piece p USING (scope_id, thread_id, turn_index)"
            " WHERE t.scope_id = 'conc' GROUP BY 1, 2"
        ).fetchall()
    assert per_turn and all(int(str(n)) > 0 and n == d for _, _, n, d in per_turn)
    assert {(str(t), int(str(i))) for t, i, _, _ in per_turn} >= {
        (t.thread, t.index) for t in turns if t.thread != "thread-2"
    }


def test_a_thread_gone_while_put_turns_locked_its_threads_is_no_deadlock(app_url: str, admin_conn: Conn) -> None:
    """put_turns inserted its turns' threads as a set, then locked them, and did both again when a
    thread had gone in between: it then inserted that thread anew while holding a later thread it
    had created, and another put_turns that had created the gone thread meanwhile and waited for
    the later one deadlocked with it (40P01, rt78; add_facts had the same, 0114). One thread at a
    time now, inserted then locked, in key order, whatever order the call lists them in."""
    scope, rng = "bulk-gone-thread", np.random.default_rng(7)

    def unit() -> list[object]:
        a = rng.standard_normal(TEST_DIMS).astype(np.float32)
        return [a / np.linalg.norm(a)]

    def put(c: Conn, threads: list[str], turn: int, results: list[object]) -> None:
        try:
            with c.transaction():
                rows = _call_put_turns(c, scope, [{"thread": t, "turn": turn, "vectors": unit()} for t in threads])
            results.append(sorted((str(r[1]), r[3]) for r in rows))
        except psycopg.Error as exc:
            results.append(f"{exc.sqlstate}: {str(exc).splitlines()[0]}")

    def waits(c: Conn) -> None:
        until_waiting(admin_conn, c.info.backend_pid)

    setup, a, b = connect(app_url), connect(app_url), connect(app_url)
    holder = psycopg.connect(admin_conn.info.dsn, password=admin_conn.info.password)
    first: list[object] = []
    second: list[object] = []
    try:
        put(setup, ["tb", "td"], 0, [])
        # tb held: call A, its threads listed last first, inserts its new thread tf (before: the
        # whole set first), then waits to lock tb.
        holder.execute("SELECT 1 FROM pgmem.thread WHERE scope_id = %s AND thread_id = 'tb' FOR UPDATE", (scope,))
        a_call = threading.Thread(target=put, args=(a, ["tf", "td", "tb"], 1, first))
        a_call.start()
        waits(a)
        # td forgotten before A locks it; call B creates it again with tf (before: it waited for A's tf).
        with scoped(setup, scope):
            setup.execute("SELECT * FROM pgmem.forget_thread(%s, 'td')", (scope,))
        b_call = threading.Thread(target=put, args=(b, ["td", "tf"], 2, second))
        b_call.start()
        b_call.join(0.3)
        holder.rollback()  # A goes on: td is gone for it (before: it inserted it again, waiting for B)
        a_call.join(10)
        b_call.join(10)
    finally:
        holder.close()
        for c in (setup, a, b):
            c.close()
    assert first == [[("inserted", None)] * 3]
    assert second == [[("inserted", None)] * 2]
    rows = admin_conn.execute(
        "SELECT thread_id, turn_index, count(p.*) FROM pgmem.turn t LEFT JOIN pgmem.piece p USING (scope_id, thread_id,"
        " turn_index) WHERE t.scope_id = %s GROUP BY 1, 2 ORDER BY 1, 2",
        (scope,),
    ).fetchall()
    assert rows == [("tb", 0, 1), ("tb", 1, 1), ("td", 1, 1), ("td", 2, 1), ("tf", 1, 1), ("tf", 2, 1)]
