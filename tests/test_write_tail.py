"""The write tail of an indexed scope: pieces written after the scope's ANN index was built are
not in the graph, and every reader still sees them.

One scope of 5,400 pieces gets its partial HNSW index; further turns land in the tail
(piece_id above the index's pgmem.ann_index_through). Recall (vector and hybrid, broad
metadata filters through the index, thread filters), forget and re-embedding must see the
tail; the plan folds it; and writers, recall, forget and a concurrent fold run side by side."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import numpy as np
import numpy.typing as npt
import psycopg
import pytest

from pgmem.db import connect, scoped
from tests.conftest import TEST_DIMS
from tests.helpers import InFlight

Conn = psycopg.Connection[tuple[object, ...]]
F32 = npt.NDArray[np.float32]

SCOPE = "big"
PER_TURN = 300
BASE_TURNS = 18  # 5,400 pieces: more than the 5,000 a broad metadata filter needs for the index path
META = {"k": "a"}


def _unit(rng: np.random.Generator, n: int) -> F32:
    a = rng.standard_normal((n, TEST_DIMS)).astype(np.float32)
    out: F32 = (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)
    return out


def _put_turn(conn: Conn, turn: int, vectors: F32, thread: str = "t0") -> None:
    n = len(vectors)
    with scoped(conn, SCOPE):
        conn.execute(
            """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => NULL,
                   messages => '[]'::jsonb, content_hash => %s, model_id => 'random', unit_kinds => %s,
                   source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[],
                   metadata => %s::jsonb)""",
            (
                SCOPE,
                thread,
                turn,
                hashlib.sha256(f"{thread}/{turn}".encode()).digest(),
                ["user"] * n,
                list(range(n)),
                [f"[turn {turn} piece {i}]" for i in range(n)],
                [f"word{turn}x{i} body" for i in range(n)],
                list(vectors),
                json.dumps(META),
            ),
            binary=True,
        )


def _stored(admin: Conn, turn: int, thread: str = "t0") -> tuple[list[int], F32]:
    rows = admin.execute(
        "SELECT piece_id, embedding FROM pgmem.piece WHERE scope_id = %s AND thread_id = %s AND turn_index = %s"
        " ORDER BY piece_id",
        (SCOPE, thread, turn),
        binary=True,
    ).fetchall()
    return [int(str(r[0])) for r in rows], np.stack([np.asarray(r[1].to_numpy(), dtype=np.float32) for r in rows])  # type: ignore[attr-defined]


def _top1(conn: Conn, queries: F32, **kw: object) -> list[int | None]:
    extra = "".join(f", {k} => %({k})s" for k in kw)
    with scoped(conn, SCOPE):
        rows = conn.execute(
            "SELECT part_no, piece_id FROM pgmem.memory_recall(scope => %(s)s, part_vectors => %(v)s::vector[], "
            f"x => 1, floor => -1, ef_search => 200{extra})",
            {"s": SCOPE, "v": list(queries), **kw},
            binary=True,
        ).fetchall()
    got: list[int | None] = [None] * len(queries)
    for part, pid in rows:
        got[int(str(part)) - 1] = int(str(pid))
    return got


def _through(admin: Conn) -> int | None:
    row = admin.execute("SELECT pgmem.ann_index_through(pgmem.scope_ann_index('piece', %s))", (SCOPE,)).fetchone()
    assert row is not None
    return None if row[0] is None else int(str(row[0]))


def _index_scans(conn: Conn) -> int:
    row = conn.execute("SELECT pg_stat_get_xact_numscans(pgmem.scope_ann_index('piece', %s))", (SCOPE,)).fetchone()
    return int(str(row[0])) if row else 0


@pytest.fixture
def indexed(conn: Conn, admin_conn: Conn) -> int:
    """The scope with its index (a cheap graph: the test is about the tail, not the graph)."""
    rng = np.random.default_rng(1)
    for t in range(BASE_TURNS):
        _put_turn(conn, t, _unit(rng, PER_TURN))
    admin_conn.execute("ANALYZE pgmem.piece")
    made = admin_conn.execute(
        "SELECT action FROM pgmem.index_large_scopes(min_pieces => 2000, m => 16, ef_construction => 64)"
    ).fetchall()
    # The index, and the word side's folded postings (pgmem.word_fold) with its sample.
    assert made == [("create",), ("postings",)]
    through = _through(admin_conn)
    last = admin_conn.execute("SELECT max(piece_id) FROM pgmem.piece WHERE scope_id = %s", (SCOPE,)).fetchone()
    assert last is not None and through == int(str(last[0]))
    return through


@pytest.mark.long
def test_every_reader_sees_the_tail(conn: Conn, admin_conn: Conn, indexed: int) -> None:
    rng = np.random.default_rng(2)
    _put_turn(conn, 100, _unit(rng, 40))
    _put_turn(conn, 0, _unit(rng, 20), thread="t9")
    ids, vecs = _stored(admin_conn, 100)
    assert min(ids) > indexed  # the tail: above what the index holds
    assert _through(admin_conn) == indexed  # writing moved nothing
    # The index path (no thread, not exact) finds each tail piece by its own vector, and the index is scanned.
    with scoped(conn, SCOPE):
        assert _top1(conn, vecs[:8]) == ids[:8]
        assert _top1(conn, vecs[8:16], mode="hybrid", part_texts=["x"] * 8) == ids[8:16]
        assert _index_scans(conn) >= 16
    # A broad metadata filter (5,400 + 40 matching pieces) goes through the index too, with the tail.
    with scoped(conn, SCOPE):
        assert _top1(conn, vecs[16:24], metadata_filter=json.dumps(META)) == ids[16:24]
        assert _index_scans(conn) >= 8
    # A selective one (thread t9 has no metadata) and a thread filter are exact: the tail is there as well.
    tids, tvecs = _stored(admin_conn, 0, thread="t9")
    assert _top1(conn, tvecs[:4], thread="t9") == tids[:4]
    assert _top1(conn, vecs[24:28], metadata_filter=json.dumps(META), thread="t0") == ids[24:28]
    # Index and tail merged: the top 5 of random queries against exact search.
    queries = _unit(rng, 8)
    with scoped(conn, SCOPE):
        sql = (
            "SELECT part_no, piece_id FROM pgmem.memory_recall(scope => %s, part_vectors => %s::vector[], x => 5,"
            " floor => -1, ef_search => 400, exact => %s) ORDER BY part_no, rank"
        )
        approx = conn.execute(sql, (SCOPE, list(queries), False), binary=True).fetchall()
        exact = conn.execute(sql, (SCOPE, list(queries), True), binary=True).fetchall()
    assert len(set(approx) & set(exact)) / len(exact) >= 0.95
    # explain_recall never calls a tail piece "missed by the approximate index".
    with scoped(conn, SCOPE):
        verdicts = conn.execute(
            "SELECT piece_id, verdict FROM pgmem.explain_recall(scope => %s, part_vectors => %s::vector[], x => 1,"
            " floor => -1, show => 1)",
            (SCOPE, list(vecs[:4])),
            binary=True,
        ).fetchall()
    assert [(int(str(p)), str(v)) for p, v in verdicts] == [(i, "kept") for i in ids[:4]]
    # Re-embedding lists tail pieces like any other.
    with scoped(conn, SCOPE):
        pending = conn.execute(
            "SELECT piece_id FROM pgmem.reembed_pending(%s, 'other', %s, max_rows => 10000, after => %s)",
            (SCOPE, TEST_DIMS, indexed),
        ).fetchall()
    assert set(ids) <= {int(str(p[0])) for p in pending}
    # Forgetting a tail turn removes it from recall.
    with scoped(conn, SCOPE):
        conn.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', 100)", (SCOPE,))
    assert not set(_top1(conn, vecs[:8])) & set(ids)


@pytest.mark.long
def test_the_plan_folds_the_tail(conn: Conn, admin_conn: Conn, indexed: int) -> None:
    rng = np.random.default_rng(3)
    _put_turn(conn, 100, _unit(rng, 150))
    ids, vecs = _stored(admin_conn, 100)
    plan = (
        "SELECT action, ddl FROM pgmem.scope_index_plan(2000, m => 16, ef_construction => 64, max_tail => %s)"
        " WHERE plane = 'piece'"
    )
    assert admin_conn.execute(plan, (151,)).fetchall() == []  # below max_tail: nothing to do
    steps = admin_conn.execute(plan, (150,)).fetchall()
    assert [s[0] for s in steps] == ["fold"] * 3
    assert "CONCURRENTLY" in str(steps[0][1]) and f"piece_id <= {max(ids)}" in str(steps[0][1])
    admin_conn.execute("SELECT * FROM pgmem.index_large_scopes(2000, m => 16, ef_construction => 64, max_tail => 150)")
    assert _through(admin_conn) == max(ids)
    assert admin_conn.execute(plan, (1,)).fetchall() == []
    assert _top1(conn, vecs[:8]) == ids[:8]
    # tail => false: an index every write goes into (the behaviour before the tail).
    steps = admin_conn.execute(
        "SELECT action FROM pgmem.scope_index_plan(2000, m => 16, ef_construction => 64, tail => false)"
    ).fetchall()
    assert steps == [("rebuild",)] * 3 + [("unlock",)]  # the last gives back the maintenance lock (0110)
    admin_conn.execute("SELECT * FROM pgmem.index_large_scopes(2000, m => 16, ef_construction => 64, tail => false)")
    assert _through(admin_conn) is None
    # index_large_scopes gave back the lock the plans read above took (0110): nothing holds it.
    assert admin_conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 60"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"  # not the other worker's
    ).fetchone() == (0,)
    _put_turn(conn, 101, _unit(rng, 8))
    more, mvecs = _stored(admin_conn, 101)
    with scoped(conn, SCOPE):
        assert _top1(conn, mvecs) == more
        assert _index_scans(conn) >= 8
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        admin_conn.execute("SELECT * FROM pgmem.scope_index_plan(max_tail => 0)")


@pytest.mark.long
def test_concurrent_writers_recall_forget_and_fold(app_url: str, db_url: str, indexed: int) -> None:
    """Two writers add tail turns, a reader recalls each written turn's pieces, a forgetter
    forgets every third written turn, while the index is folded CONCURRENTLY beside them."""
    written: dict[int, tuple[list[int], F32]] = {}
    forgotten: set[int] = set()
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()
    flight = InFlight()  # the writes, recalls, forgets and folds in flight
    folded = threading.Event()  # a whole fold has run

    def writer(w: int) -> None:
        rng = np.random.default_rng(10 + w)
        with connect(app_url) as c, connect(db_url) as admin:
            # 12 turns at least, and on until a fold has ended (it then ran beside the writes).
            for i in range(100):
                if i >= 12 and folded.is_set():
                    break
                turn = 1000 + w * 100 + i
                with flight("write"):
                    _put_turn(c, turn, _unit(rng, 25))
                with lock:
                    written[turn] = _stored(admin, turn)

    def reader() -> None:
        with connect(app_url) as c:
            while not stop.is_set():
                with lock:
                    picks = [(t, v) for t, v in written.items() if t not in forgotten][-4:]
                for turn, (ids, vecs) in picks:
                    with flight("read"):
                        got = _top1(c, vecs[:2])
                    with lock:
                        gone = turn in forgotten
                    if not gone:
                        assert got == ids[:2], (turn, got, ids[:2])

    def forgetter() -> None:
        with connect(app_url) as c:
            while not stop.is_set():
                with lock:
                    todo = [t for t in written if t % 3 == 0 and t not in forgotten]
                for turn in todo:
                    with lock:
                        forgotten.add(turn)
                    with flight("forget"), scoped(c, SCOPE):
                        c.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', %s)", (SCOPE, turn))

    def folder() -> None:
        with connect(db_url) as admin:
            while not stop.is_set():
                steps = admin.execute(
                    "SELECT ddl FROM pgmem.scope_index_plan(2000, m => 16, ef_construction => 64, max_tail => 1)"
                ).fetchall()
                if not steps:  # no tail yet: the writers have not begun
                    time.sleep(0.01)
                    continue
                for (ddl,) in steps:
                    with flight("fold"):
                        admin.execute(str(ddl))
                folded.set()

    def run(fn: object, *args: object) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)  # type: ignore[operator]
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        t = threading.Thread(target=body)
        t.start()
        return t

    writers = [run(writer, w) for w in range(2)]
    others = [run(reader), run(forgetter), run(folder)]
    for t in writers:
        t.join()
    stop.set()
    for t in others:
        t.join()
    assert not errors, errors
    # The threads met: two writers wrote at once, and a recall, a forget and a fold each ran
    # while a write did (else the checks below hold for threads run one after another).
    assert {("write", "write"), ("read", "write"), ("forget", "write"), ("fold", "write")} <= flight.met, flight.met
    with connect(db_url) as admin:
        assert (_through(admin) or 0) > indexed  # the folds took written turns into the index
        left = {
            int(str(r[0]))
            for r in admin.execute("SELECT DISTINCT turn_index FROM pgmem.piece WHERE scope_id = %s", (SCOPE,))
        }
    with connect(app_url) as c:
        for turn, (ids, vecs) in written.items():
            got = _top1(c, vecs[:3])
            if turn in forgotten:
                assert turn not in left and not set(got) & set(ids)
            else:
                assert turn in left and got == ids[:3], turn
