"""The lock order of every writer (docs/architecture.md, "Lock order"), shown by deterministic
interleavings of two or three transactions on a real server, as the application login.

Each concurrent step runs on its connection's own worker thread (`Session`); the test goes on
once the step has finished or, seen from a superuser connection in pg_stat_activity, is waiting
for a lock. So every interleaving below happens in the order written, on every run: a forget
that waits for a writer, a writer that waits for a forget, two writers of one scope or one key.
The last tests check that forgetting leaves no copy of the forgotten text in any table of the
schema (listed from pg_catalog, so a new table is covered without editing this file), and that
LangGraph store batches through a pool end in the state of the last write of each key."""

from __future__ import annotations

import base64
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np
import psycopg
import pytest
from langgraph.store.base import PutOp, SearchOp
from psycopg import sql

from pgmem import forget_document, forget_fact, forget_thread, forget_turn
from pgmem.db import connect, scoped
from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.embedders.base import Embedder
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.forget import Forgotten
from pgmem.ingest import IngestReport, ingest_turns
from pgmem.integrations.langgraph import PgmemStore, item_thread, namespace_scope
from pgmem.lab.bench import churn
from pgmem.recall import embed_query, recall
from pgmem.turns import Turn
from tests.helpers import InFlight
from tests.lifecycle_helpers import vec
from tests.security_helpers import APP_LOGIN, DIMS, Conn, HashEmbedder, hash_vector, make_turn, role_url

T = TypeVar("T")
EMB = HashEmbedder()
SCOPE = "locks"
NS = ("users", "u1")
#: A LOGIN member of pgmem_owner, the role that runs apply_retention.
RETENTION_LOGIN = "pgmem_test_locks_owner"
#: A step that should finish, or start waiting for a lock, well within this many seconds.
STEP_SECONDS = 30.0


class Session:
    """One application-login connection whose statements run on a worker thread of its own, so
    that a step can block on a lock while the test drives the other transactions."""

    def __init__(self, url: str) -> None:
        self.conn = connect(url)
        self.pid = self.conn.info.backend_pid
        self._worker = ThreadPoolExecutor(max_workers=1)

    def start(self, fn: Callable[[Conn], T]) -> Future[T]:
        return self._worker.submit(fn, self.conn)

    def do(self, fn: Callable[[Conn], T]) -> T:
        """A step that must finish without waiting for the other sessions."""
        return self.start(fn).result(timeout=STEP_SECONDS)

    def begin(self, scope: str, *, directory: str | None = None) -> None:
        """An explicit transaction in `scope` (and, for store writes, a store directory)."""

        def go(c: Conn) -> None:
            c.execute("BEGIN")
            c.execute(sql.SQL("SET LOCAL pgmem.scope = {}").format(sql.Literal(scope)))
            if directory is not None:
                c.execute(sql.SQL("SET LOCAL pgmem.store_directory = {}").format(sql.Literal(directory)))

        self.do(go)

    def commit(self) -> None:
        self.do(lambda c: c.execute("COMMIT"))

    def close(self) -> None:
        self.conn.cancel()  # a step still waiting (a failing run) ends now, not at the timeout
        self._worker.shutdown(wait=True)
        self.conn.close()


def waits_for_lock(admin: Conn, step: Future[Any], pid: int, event: str | None = None) -> bool:
    """True once the session's backend waits for a lock (pg_stat_activity; of that wait_event
    when given, e.g. 'advisory'), False when the step finished first. Fails when it does neither
    in STEP_SECONDS."""
    deadline = time.monotonic() + STEP_SECONDS
    while time.monotonic() < deadline:
        if step.done():
            return False
        row = admin.execute(
            "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock" and (event is None or row[1] == event):
            return True
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} neither finished nor waited for a lock in {STEP_SECONDS} s")


def outcome(step: Future[T]) -> T | BaseException:
    """The step's result, or the exception it raised (a deadlock, a constraint error)."""
    try:
        return step.result(timeout=STEP_SECONDS)
    except Exception as exc:
        return exc


def deadlocks_now(admin: Conn) -> int:
    """The deadlocks the server has detected in this database, read once a backend's statistics
    can have reached it (each reports them within about a second)."""
    time.sleep(1.2)
    admin.execute("SELECT pg_stat_clear_snapshot()")
    return churn.deadlocks(admin)


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__


def stress(admin: Conn, stop: threading.Event, clients: Sequence[Callable[[], None]], seconds: float = 4.0) -> int:
    """Runs each client on a thread of its own for `seconds` (each loops until `stop` is set),
    fails when one hangs, and returns the deadlocks the server detected meanwhile."""
    before = churn.deadlocks(admin)
    threads = [threading.Thread(target=c) for c in clients]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a client hung"
    return deadlocks_now(admin) - before


def count(admin: Conn, query: str | sql.Composed, params: Sequence[object] | Mapping[str, object] = ()) -> int:
    row = admin.execute(query, params).fetchone()
    assert row is not None
    return int(str(row[0]))


def turns_of(admin: Conn, scope: str, thread: str) -> list[int]:
    rows = admin.execute(
        "SELECT turn_index FROM pgmem.turn WHERE scope_id = %s AND thread_id = %s ORDER BY 1", (scope, thread)
    ).fetchall()
    return [int(str(r[0])) for r in rows]


def ingest(turns: list[Turn]) -> Callable[[Conn], IngestReport]:
    return lambda c: ingest_turns(c, turns, EMB)


def test_forget_thread_and_a_reingest_of_its_turn_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A writer re-ingests turn 1 of a thread in an open transaction; forget_thread of the
    thread starts and waits; the writer then adds turn 2. Before the lock order, the forget held
    the thread and waited for the writer's pieces while the writer waited for the thread."""
    report = ingest_turns(conn, [make_turn(SCOPE, "t", 0, "alpha harbour"), make_turn(SCOPE, "t", 1, "bravo")], EMB)
    assert report.inserted == 2
    writer, forgetter = sessions(), sessions()

    writer.begin(SCOPE)
    assert writer.do(ingest([make_turn(SCOPE, "t", 1, "bravo, second version")])).replaced == 1
    forget = forgetter.start(lambda c: forget_thread(c, SCOPE, "t"))
    assert waits_for_lock(admin_conn, forget, forgetter.pid)  # the forget waits for the writer
    second = outcome(writer.start(ingest([make_turn(SCOPE, "t", 2, "charlie")])))
    writer.commit()
    forgotten = outcome(forget)

    assert isinstance(second, IngestReport), f"the writer's second turn: {second!r}"
    assert (second.inserted, second.failed) == (1, [])
    assert isinstance(forgotten, Forgotten), f"the forget: {forgotten!r}"
    # Defined final state: the forget ran after the writer's transaction, and took all of it.
    assert (forgotten.threads, forgotten.turns) == (1, 3)
    assert turns_of(admin_conn, SCOPE, "t") == []
    assert count(admin_conn, "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND thread_id = 't'", (SCOPE,)) == 0


def test_a_turn_put_while_its_thread_is_forgotten_is_stored_after_the_forget(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """A new turn of a thread whose forget is uncommitted waits for the forget, and is then
    stored, in a thread created again: never a foreign-key error (23503)."""
    turns = [make_turn(SCOPE, th, i, f"{th} turn {i} about the ferry") for th in ("t", "u") for i in range(2)]
    assert ingest_turns(conn, turns, EMB).inserted == 4
    forgetter, writer = sessions(), sessions()

    # 1. The forget's statement has finished; its transaction is still open.
    forgetter.begin(SCOPE)
    assert forgetter.do(lambda c: forget_thread(c, SCOPE, "t")).turns == 2
    put = writer.start(ingest([make_turn(SCOPE, "t", 5, "echo, written during the forget")]))
    assert waits_for_lock(admin_conn, put, writer.pid)
    forgetter.commit()
    report = outcome(put)
    assert isinstance(report, IngestReport), f"the put: {report!r}"
    assert (report.inserted, report.failed) == (1, [])
    assert turns_of(admin_conn, SCOPE, "t") == [5]

    # 2. The forget is stopped half-way, after it locked the thread and before it deleted it: a
    # superuser transaction holds the thread's pieces, which the forget deletes first.
    holder = psycopg.connect(db_url)
    try:
        holder.execute("SELECT 1 FROM pgmem.piece WHERE scope_id = %s AND thread_id = 'u' FOR UPDATE", (SCOPE,))
        forget = forgetter.start(lambda c: forget_thread(c, SCOPE, "u"))
        assert waits_for_lock(admin_conn, forget, forgetter.pid)
        put = writer.start(ingest([make_turn(SCOPE, "u", 7, "foxtrot, written during the forget")]))
        assert waits_for_lock(admin_conn, put, writer.pid)  # for the forget's lock on the thread
        holder.rollback()
        forgotten, report = outcome(forget), outcome(put)
    finally:
        holder.close()
    assert isinstance(forgotten, Forgotten), f"the forget: {forgotten!r}"
    assert forgotten.turns == 2
    assert isinstance(report, IngestReport), f"the put: {report!r}"
    assert report.failed == [], "the turn written during the forget was refused"
    assert report.inserted == 1
    assert turns_of(admin_conn, SCOPE, "u") == [7]


def test_store_puts_and_turn_puts_of_one_scope_interleave_without_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """Two LangGraph store writes of one scope, each an open transaction (put_item, then its
    turn, as PgmemStore writes a batch), interleaved: item 1, item 2, turn 1, turn 2. Each item
    holds the scope row's KEY SHARE lock (its foreign key); a writer asking for the scope row
    FOR UPDATE (bind_scope_model before the lock order) then waited for the other, both ways."""
    scope = namespace_scope(NS)
    # A first item, committed: the scope's model is bound and the namespace is in the store's
    # directory (a put of a new namespace waits for the first one's directory row, by design).
    PgmemStore(conn, embedder=EMB).put(NS, "k0", {"text": "note k0"})
    a, b = sessions(), sessions()

    def put_item(key: str) -> Callable[[Conn], object]:
        def go(c: Conn) -> object:
            return c.execute(
                "SELECT * FROM pgmem.put_item(%s, %s, %s, jsonb_build_object('text', %s::text), %s)",
                (scope, list(NS), key, f"note {key}", item_thread(key)),
            ).fetchall()

        return go

    def item_turn(key: str, put: Any) -> list[Turn]:
        # As the store writes it: turn 0 at the item's created_at (0094 refuses other turns).
        return [Turn(scope, item_thread(key), 0, put[0][0], ({"role": "memory", "content": f"note {key}"},))]

    a.begin(scope, directory="default")
    put_a = a.do(put_item("k1"))
    b.begin(scope, directory="default")
    put_b = b.do(put_item("k2"))
    turn_a = a.start(ingest(item_turn("k1", put_a)))
    a_waited = waits_for_lock(admin_conn, turn_a, a.pid)
    turn_b = b.start(ingest(item_turn("k2", put_b)))
    results = [outcome(turn_a), outcome(turn_b)]
    a.commit()
    b.commit()

    assert all(isinstance(r, IngestReport) and r.inserted == 1 and not r.failed for r in results), results
    assert not a_waited, "two writers of one scope waited for each other on the scope row"
    rows = admin_conn.execute(
        """SELECT i.item_key, count(t.turn_index) FROM pgmem.store_item i
             LEFT JOIN pgmem.turn t ON t.scope_id = i.scope_id AND t.thread_id = i.thread_id
            WHERE i.scope_id = %s GROUP BY 1 ORDER BY 1""",
        (scope,),
    ).fetchall()
    assert rows == [("k0", 1), ("k1", 1), ("k2", 1)]


def test_two_puts_of_one_new_store_key_store_one_item(admin_conn: Conn, sessions: Callable[[], Session]) -> None:
    """Two transactions put the same new key at the same moment (released together by a barrier;
    a large value keeps each insert busy between its conflict check and its index entries, so
    both pass the check). One item results, holding one of the two values; neither put fails
    on a unique index (23505: the item's thread is unique too, and the key's ON CONFLICT arbiter
    did not cover it)."""
    scope = namespace_scope(NS)
    a, b = sessions(), sessions()
    rng = random.Random(7)
    failures: list[str] = []
    for round_no in range(6):
        key = f"new-{round_no}"
        barrier = threading.Barrier(2)
        values = {w: base64.b64encode(rng.randbytes(900_000)).decode() for w in ("a", "b")}

        def put(
            w: str, key: str = key, barrier: threading.Barrier = barrier, values: dict[str, str] = values
        ) -> Callable[[Conn], str]:
            def go(c: Conn) -> str:
                barrier.wait(timeout=STEP_SECONDS)
                with scoped(c, scope):
                    c.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
                    c.execute(
                        "SELECT * FROM pgmem.put_item(%s, %s, %s, jsonb_build_object('text', %s::text), %s)",
                        (scope, list(NS), key, values[w], item_thread(key)),
                    )
                return w

            return go

        steps: list[Future[str]] = [s.start(put(w)) for s, w in ((a, "a"), (b, "b"))]
        for step in steps:
            result = outcome(step)
            if isinstance(result, BaseException):
                failures.append(f"round {round_no}: {type(result).__name__}: {result}")
        stored = admin_conn.execute(
            "SELECT value->>'text' FROM pgmem.store_item WHERE scope_id = %s AND item_key = %s", (scope, key)
        ).fetchall()
        assert len(stored) == 1 and stored[0][0] in values.values(), (round_no, len(stored), failures)
    assert failures == []


def test_retention_locks_its_threads_before_forgetting_so_a_forget_of_one_does_not_deadlock(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """Retention expires turns of threads a and b; one recall-log row names a piece of each. A
    writer of b holds b (an open put_turn) when retention starts, then forgets a turn of b,
    which deletes that log row. Retention used to forget a's turn (deleting the log row) and then
    wait for b while the writer's forget waited for the log row: a deadlock. Now retention
    locks a and b first, waits for the writer without holding the row, and finishes after it."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"locks-retention-{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=400)
    aged = [
        Turn(scope, th, i, old if i == 0 else None, ({"role": "user", "content": f"{th} turn {i} about the ferry"},))
        for th in ("a", "b")
        for i in range(2)
    ]
    assert ingest_turns(conn, aged, EMB).inserted == 4
    rows = admin_conn.execute(
        "SELECT thread_id, turn_index, piece_id FROM pgmem.piece WHERE scope_id = %s ORDER BY 1, 2, 3", (scope,)
    ).fetchall()
    named = [pid for th, i, pid in rows if (th, i) in (("a", 0), ("b", 1))]
    with scoped(conn, scope):
        conn.execute(
            "SELECT pgmem.log_recall(%s, 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, -1, NULL, 'vector',"
            " %s::jsonb)",
            (scope, vec("q"), json.dumps([{"piece_id": p} for p in named])),
        )
        conn.execute("SELECT pgmem.set_retention(%s, keep_days => 30)", (scope,))
    deadlocks_before = churn.deadlocks(admin_conn)
    writer, keeper = sessions(), Session(role_url(db_url, RETENTION_LOGIN))
    try:
        writer.begin(scope)
        writer.do(ingest([make_turn(scope, "b", 2, "b turn 2, written during retention")]))
        expire = keeper.start(lambda c: c.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall())
        assert waits_for_lock(admin_conn, expire, keeper.pid)  # for the writer's thread b
        forgot = outcome(writer.start(lambda c: forget_turn(c, scope, "b", 1)))
        writer.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert isinstance(forgot, Forgotten), f"the writer's forget: {forgot!r}"
    assert (forgot.turns, forgot.recall_logs) == (1, 1)
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert (scope, 2) in expired
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert turns_of(admin_conn, scope, "a") == [1] and turns_of(admin_conn, scope, "b") == [2]


def _retention_held_before_y2(
    admin: Conn,
    scope: str,
    keeper: Session,
    forgetter: Session,
    forget: Callable[[Conn], Forgotten],
    *,
    forget_waits: bool = True,
) -> tuple[Any, Any]:
    """apply_retention (as keeper) held by a superuser's row lock on turn y2/0's piece, after it
    forgot what comes before it; `forget` started (as forgetter) meanwhile, and seen waiting for
    retention (with forget_waits) or finished; then the lock goes. Both outcomes: retention's
    (scope, turns, facts) rows, and the forget's."""
    try:
        with admin.transaction():
            admin.execute(
                "SELECT 1 FROM pgmem.piece WHERE scope_id = %s AND thread_id = 'y2' AND turn_index = 0 FOR KEY SHARE",
                (scope,),
            )
            expire = keeper.start(
                lambda c: c.execute("SELECT scope_id, turns, facts FROM pgmem.apply_retention()").fetchall()
            )
            assert waits_for_lock(admin, expire, keeper.pid)  # what came before y2 gone, waiting for its piece
            forgot = forgetter.start(forget)
            if forget_waits:
                assert waits_for_lock(admin, forgot, forgetter.pid)  # for retention
            else:
                forgot.exception(timeout=STEP_SECONDS)  # finished, not waiting for retention
        return outcome(expire), outcome(forgot)
    finally:
        keeper.close()


def test_retention_and_a_forget_deleting_log_rows_that_name_both_do_not_deadlock(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """Retention expires turn 0 of threads y and y2; a forget of thread x runs meanwhile. Two
    recall-log rows each name x and one of y, y2 (the one naming y2 older). A superuser's row lock
    on a piece of y2 holds retention after y's turn, before y2's. Retention used to delete the row
    naming y with y's turn; the forget of x then deleted the row naming y2 and waited for the one
    retention had deleted, while retention, let go, waited for the forget's row: a deadlock, one
    side rolled back. Retention now deletes its log rows in one step after all its turns (the
    recall log read once a scope), so it holds no log row (nor the scope's recall-log lock) while
    it waits: the forget of x does not wait, deletes both rows, and retention finishes after it."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"locks-logs-{uuid.uuid4().hex[:8]}"
    turns = [make_turn(scope, th, i, f"{th} turn {i} about the ferry") for th, n in (("x", 1), ("y", 2), ("y2", 2))
             for i in range(n)]  # fmt: skip
    assert ingest_turns(conn, turns, EMB).inserted == 5
    piece = {
        (str(th), int(str(i))): int(str(p))
        for th, i, p in admin_conn.execute(
            "SELECT thread_id, turn_index, min(piece_id) FROM pgmem.piece WHERE scope_id = %s GROUP BY 1, 2", (scope,)
        ).fetchall()
    }
    with scoped(conn, scope):
        for other in ("y2", "y"):  # the row naming y2 first, so it is the older row
            hits = [{"piece_id": piece[(th, 0)], "thread_id": th, "turn_index": 0} for th in ("x", other)]
            conn.execute(
                "SELECT pgmem.log_recall(%s, 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, -1, NULL, 'vector',"
                " %s::jsonb)",
                (scope, vec("q"), json.dumps([hits])),
            )
        conn.execute("SELECT pgmem.set_retention(%s, keep_turns => 1)", (scope,))
    deadlocks_before = churn.deadlocks(admin_conn)
    expired, forgotten = _retention_held_before_y2(
        admin_conn,
        scope,
        Session(role_url(db_url, RETENTION_LOGIN)),
        sessions(),
        lambda c: forget_thread(c, scope, "x"),
        forget_waits=False,
    )
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert (scope, 2, 0) in expired
    assert isinstance(forgotten, Forgotten), f"the forget: {forgotten!r}"
    assert (forgotten.turns, forgotten.recall_logs) == (1, 2)
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert count(admin_conn, "SELECT count(*) FROM pgmem.recall_log WHERE scope_id = %s", (scope,)) == 0
    assert [turns_of(admin_conn, scope, th) for th in ("x", "y", "y2")] == [[], [1], [1]]


def test_retention_and_a_forget_of_a_fact_of_an_expiring_turn_do_not_deadlock(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """A fact is tied to turn 0 of thread y2, which retention expires with turn 0 of y. Retention
    forgets y's turn (taking the scope's recall-log lock) and is held before y2's by a superuser's
    row lock; the app forgets the fact meanwhile. forget_fact now locks the fact's thread first,
    so it waits for retention before it holds the fact (deleting the fact first, it would then
    wait for the recall-log lock while retention waited for the fact: a deadlock)."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"locks-fact-{uuid.uuid4().hex[:8]}"
    turns = [make_turn(scope, th, i, f"{th} turn {i} about the ferry") for th in ("y", "y2") for i in range(2)]
    assert ingest_turns(conn, turns, EMB).inserted == 4
    add_facts(conn, scope, [Fact("the ferry leaves at nine", "y2", 0)], EMB)
    fact_id = count(admin_conn, "SELECT fact_id FROM pgmem.fact WHERE scope_id = %s", (scope,))
    with scoped(conn, scope):
        conn.execute("SELECT pgmem.set_retention(%s, keep_turns => 1)", (scope,))
    deadlocks_before = churn.deadlocks(admin_conn)
    expired, forgotten = _retention_held_before_y2(
        admin_conn,
        scope,
        Session(role_url(db_url, RETENTION_LOGIN)),
        sessions(),
        lambda c: forget_fact(c, scope, fact_id),
    )
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert (scope, 2, 1) in expired  # retention took the fact with its turn
    assert isinstance(forgotten, Forgotten) and forgotten.facts == 0, f"the forget: {forgotten!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before


def _put_item(scope: str, key: str) -> Callable[[Conn], object]:
    return lambda c: c.execute(
        "SELECT * FROM pgmem.put_item(%s, %s, %s, '{\"v\": 1}'::jsonb)", (scope, list(NS), key)
    ).fetchall()


def _listed(admin: Conn, scope: str) -> list[str]:
    rows = admin.execute("SELECT directory FROM pgmem.store_namespace WHERE scope_name = %s", (scope,)).fetchall()
    return sorted(str(r[0]) for r in rows)


def test_a_new_item_put_while_the_last_one_is_deleted_keeps_its_namespace_listed(
    admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A put of a new key is in flight (uncommitted) when another transaction deletes the
    namespace's last committed item. The put found the directory entry and wrote none; the
    delete used to remove the entry under it, so the new item was in no listing, search or sweep.
    Now the delete sees the scope row held by the put and leaves the entry (it does not wait).
    With no writer in flight, a delete of the last item removes the entry; an entry left by a put
    that rolled back goes with the next expiry sweep of the namespace."""
    scope = namespace_scope(NS)
    putter, deleter = sessions(), sessions()
    putter.begin(scope, directory="default")
    putter.do(_put_item(scope, "k1"))
    putter.commit()
    assert _listed(admin_conn, scope) == ["default"]

    putter.begin(scope, directory="default")
    putter.do(_put_item(scope, "k2"))  # in flight
    deleter.begin(scope, directory="default")
    assert deleter.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k1')", (scope,)).fetchone()) == (True,)
    deleter.commit()
    putter.commit()
    assert _listed(admin_conn, scope) == ["default"]
    deleter.begin(scope, directory="default")
    listed = deleter.do(lambda c: c.execute("SELECT pgmem.store_namespaces('default')").fetchall())
    deleter.commit()
    assert listed == [(list(NS),)]

    # A put in flight that then rolls back: the entry stays, empty, until the sweep finds it so.
    putter.begin(scope, directory="default")
    putter.do(_put_item(scope, "k3"))
    deleter.begin(scope, directory="default")
    deleter.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k2')", (scope,)))
    deleter.commit()
    putter.do(lambda c: c.execute("ROLLBACK"))
    assert _listed(admin_conn, scope) == ["default"]
    deleter.begin(scope, directory="default")
    assert deleter.do(lambda c: c.execute("SELECT pgmem.expire_items(%s)", (scope,)).fetchone()) == (0,)
    deleter.commit()
    assert _listed(admin_conn, scope) == []

    # No writer in flight: the last item's delete removes the entry itself.
    putter.begin(scope, directory="default")
    putter.do(_put_item(scope, "k4"))
    putter.commit()
    deleter.begin(scope, directory="default")
    deleter.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k4')", (scope,)))
    deleter.commit()
    assert _listed(admin_conn, scope) == []


def test_first_writers_of_a_new_scope_and_a_new_model_do_not_deadlock(
    admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """One transaction creates a new scope's row without a model (set_retention; put_item does
    the same), then stores a turn with a model never seen before; another stores a turn of the
    scope with that model meanwhile. The second used to register the model (holding the model
    registry's lock) and then wait for the first's scope row, while the first waited for the
    registry: a deadlock. The scope row now comes first, so the second waits for the first."""
    scope = f"locks-first-{uuid.uuid4().hex[:8]}"
    emb = HashEmbedder(model_id=f"test:hash-{uuid.uuid4().hex[:8]}")
    deadlocks_before = churn.deadlocks(admin_conn)
    first, second = sessions(), sessions()
    first.begin(scope)
    first.do(lambda c: c.execute("SELECT pgmem.set_retention(%s, keep_days => 3650)", (scope,)))
    late = second.start(lambda c: ingest_turns(c, [make_turn(scope, "t2", 0, "second writer")], emb))
    assert waits_for_lock(admin_conn, late, second.pid)  # for the first's new scope row
    early = outcome(first.start(lambda c: ingest_turns(c, [make_turn(scope, "t1", 0, "first writer")], emb)))
    first.commit()
    later = outcome(late)
    assert isinstance(early, IngestReport) and early.inserted == 1, f"the first writer: {early!r}"
    assert isinstance(later, IngestReport) and later.inserted == 1, f"the second writer: {later!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert count(admin_conn, "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s", (scope,)) == 2


@pytest.mark.parametrize("how", ["forget_thread", "forget_turn 0"])
def test_forgetting_a_store_items_thread_removes_the_item(conn: Conn, admin_conn: Conn, how: str) -> None:
    store = PgmemStore(conn, embedder=EMB, floor=-1)
    scope = namespace_scope(NS)
    store.put(NS, "k1", {"text": "the spare key is under the blue flowerpot"})
    store.put(NS, "k2", {"text": "the ferry leaves at nine"})
    assert store.get(NS, "k1") is not None
    if how == "forget_thread":
        done = forget_thread(conn, scope, item_thread("k1"))
    else:
        done = forget_turn(conn, scope, item_thread("k1"), 0)
    assert done.turns == 1
    assert store.get(NS, "k1") is None
    assert [h.key for h in store.search(NS, query="the spare key is under the blue flowerpot")] == ["k2"]
    # The other item is untouched, and the namespace stays listed while it has an item.
    got = store.get(NS, "k2")
    assert got is not None and got.value == {"text": "the ferry leaves at nine"}
    assert store.list_namespaces() == [NS]
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)) == 1


def _logs_naming(
    admin: Conn,
    scope: str,
    *,
    thread: str | None = None,
    pieces: Sequence[int] = (),
    document: str | None = None,
    facts: Sequence[int] = (),
) -> int:
    """Recall-log rows of the scope that name the thread (filter or hit), a piece id, a document
    or (fact plane) a fact id."""
    return count(
        admin,
        """SELECT count(*) FROM pgmem.recall_log l
            WHERE l.scope_id = %(scope)s
              AND (l.thread_id = %(thread)s
                   OR EXISTS (SELECT 1 FROM jsonb_path_query(l.results, 'strict $.**') AS o(v)
                               WHERE jsonb_typeof(o.v) = 'object'
                                 AND ((o.v ->> 'thread_id') = %(thread)s
                                      OR (o.v ->> 'document_id') = %(document)s
                                      OR (o.v ->> 'piece_id')::numeric = ANY (%(pieces)s::bigint[])
                                      OR (l.plane = 'fact'
                                          AND (o.v ->> 'fact_id')::numeric = ANY (%(facts)s::bigint[])))))""",
        {"scope": scope, "thread": thread, "document": document, "pieces": list(pieces), "facts": list(facts)},
    )


def test_delete_item_removes_the_recall_log_rows_that_returned_it(conn: Conn, admin_conn: Conn) -> None:
    store = PgmemStore(conn, embedder=EMB)
    scope = namespace_scope(NS)
    one, two = "the spare key is under the blue flowerpot", "the ferry leaves at nine"
    store.put(NS, "k1", {"text": one})
    store.put(NS, "k2", {"text": two})
    pieces = [
        int(str(r[0]))
        for r in admin_conn.execute(
            "SELECT piece_id FROM pgmem.piece WHERE scope_id = %s AND thread_id = %s", (scope, item_thread("k1"))
        ).fetchall()
    ]
    assert pieces
    filtered = recall(conn, scope, one, EMB, floor=-1, thread=item_thread("k1"), log=True)
    everything = recall(conn, scope, one, EMB, floor=-1, x=10, log=True)
    other = recall(conn, scope, two, EMB, floor=-1, thread=item_thread("k2"), log=True)
    assert {h.thread_id for g in everything.groups for h in g.hits} == {item_thread("k1"), item_thread("k2")}
    assert _logs_naming(admin_conn, scope, thread=item_thread("k1"), pieces=pieces) == 2

    store.delete(NS, "k1")
    logged = {int(str(r[0])) for r in admin_conn.execute("SELECT recall_id FROM pgmem.recall_log").fetchall()}
    assert filtered.recall_id not in logged and everything.recall_id not in logged
    assert other.recall_id in logged  # a recall that never returned the item stays
    assert _logs_naming(admin_conn, scope, thread=item_thread("k1"), pieces=pieces) == 0


def pgmem_tables(admin: Conn) -> list[str]:
    """Every table of schema pgmem, from the catalog (so a table added later is checked too)."""
    rows = admin.execute(
        """SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p') ORDER BY 1"""
    ).fetchall()
    return [str(r[0]) for r in rows]


def tables_holding(admin: Conn, marker: str) -> dict[str, int]:
    """Tables with a row whose text (the whole row cast to text) contains the marker. The row is
    written ROW(r.*), not `r`: a bare alias means the column when the table has one of that name
    (recall_log.x is the recall's x, an integer)."""
    found = {}
    for table in pgmem_tables(admin):
        n = count(
            admin,
            sql.SQL("SELECT count(*) FROM {} r WHERE ROW(r.*)::text LIKE %s").format(sql.Identifier("pgmem", table)),
            (f"%{marker}%",),
        )
        if n:
            found[table] = n
    return found


@dataclass
class Stored:
    """What was stored under a marker, for the checks after the forget."""

    thread: str | None = None
    document: str | None = None
    pieces: tuple[int, ...] = ()
    facts: tuple[int, ...] = ()


def _log_fact_recall(conn: Conn, scope: str, message: str) -> list[int]:
    """A logged fact-plane recall (no Python API logs one; the SQL function takes any plane)."""
    facts = fact_recall(conn, scope, message, EMB, floor=-1, x=50)
    ids = [h.piece_id for g in facts.groups for h in g.hits]
    q = embed_query(message, EMB)
    with scoped(conn, scope):
        conn.execute(
            "SELECT pgmem.log_recall(%s, 'fact', %s, %s, %s::vector[], 50, -1, NULL, 'vector', %s::jsonb)",
            (scope, message, q.texts, list(q.blended), psycopg.types.json.Jsonb(
                [{"part_no": g.part_no, "hits": [{"fact_id": h.piece_id, "body": h.body} for h in g.hits]}
                 for g in facts.groups])),
        )  # fmt: skip
    return ids


def _log_document_search(conn: Conn, scope: str, message: str) -> None:
    found = search_documents(conn, scope, message, EMB, floor=-1, x=10)
    q = embed_query(message, EMB)
    with scoped(conn, scope):
        conn.execute(
            "SELECT pgmem.log_recall(%s, 'document', %s, %s, %s::vector[], 10, -1, NULL, 'vector', %s::jsonb)",
            (scope, message, q.texts, list(q.blended), psycopg.types.json.Jsonb(found.as_dict()["groups"])),
        )


def _store_marked(conn: Conn, admin: Conn, what: str, marker: str) -> Stored:
    """Store `marker` in the kind of object `what` forgets, and log recalls that return it."""
    text = f"the locker code is {marker} and the spare key is under the flowerpot"
    if what in ("item", "item thread"):
        PgmemStore(conn, embedder=EMB).put(NS, "k1", {"text": text})
        scope, thread = namespace_scope(NS), item_thread("k1")
    else:
        scope, thread = SCOPE, "marked"
    stored = Stored()
    if what in ("thread", "item thread", "item"):
        if what == "thread":
            turns = [make_turn(scope, thread, 0, text, tool=f"registry: {marker}"), make_turn(scope, thread, 1, "ok")]
            assert ingest_turns(conn, turns, EMB).inserted == 2
            add_facts(conn, scope, [Fact(f"the locker code is {marker}", thread, 0)], EMB)
        recall(conn, scope, text, EMB, floor=-1, x=20, log=True)
        recall(conn, scope, "ok", EMB, floor=-1, thread=thread, log=True)
        stored.thread = thread
    elif what == "document":
        stored.document = f"doc-{marker}"
        doc = Document(stored.document, f"# Lockers\n\n{text}\n\n## Keys\n\nAsk {marker} at the desk.\n")
        assert add_documents(conn, scope, [doc], EMB).inserted == 1
        add_facts(conn, scope, [Fact(f"the locker code is {marker}", section=stored.document)], EMB)
        _log_document_search(conn, scope, text)
    elif what == "fact":
        add_facts(conn, scope, [Fact(f"the locker code is {marker}")], EMB)
    if what in ("thread", "document", "fact"):
        ids = _log_fact_recall(conn, scope, f"the locker code is {marker}")
        stored.facts = tuple(
            i
            for i in ids
            if count(admin, "SELECT count(*) FROM pgmem.fact WHERE fact_id = %s AND body LIKE %s", (i, f"%{marker}%"))
        )
        assert stored.facts
    stored.pieces = tuple(
        int(str(r[0]))
        for r in admin.execute(
            """SELECT p.piece_id FROM pgmem.piece p LEFT JOIN pgmem.chunk ch USING (scope_id, chunk_id)
                WHERE p.scope_id = %s AND (p.thread_id = %s OR ch.document_id = %s)""",
            (scope, stored.thread, stored.document),
        ).fetchall()
    )
    assert stored.pieces or what == "fact"
    return stored


@pytest.mark.parametrize("what", ["thread", "item thread", "document", "fact", "item"])
def test_forgetting_leaves_the_marker_in_no_table(conn: Conn, admin_conn: Conn, what: str) -> None:
    """forget_thread (of a conversation, of a store item's turn), forget_document, forget_fact
    and delete_item remove every row of every pgmem table that holds what was forgotten, and
    every recall-log row that names it; a second, unforgotten marker stays, so the scan finds
    what is there."""
    tables = pgmem_tables(admin_conn)
    assert {"scope", "thread", "turn", "piece", "fact", "document", "chunk", "recall_log", "store_item"} <= set(tables)
    marker, kept = f"QX{uuid.uuid4().hex}", f"KQ{uuid.uuid4().hex}"
    keep = [make_turn(SCOPE, "kept", 0, f"the kept turn says {kept}")]
    assert ingest_turns(conn, keep, EMB).inserted == 1
    recall(conn, SCOPE, f"the kept turn says {kept}", EMB, floor=-1, thread="kept", log=True)
    stored = _store_marked(conn, admin_conn, what, marker)
    holding = tables_holding(admin_conn, marker)
    assert "recall_log" in holding and (what == "fact" or "piece" in holding), holding

    scope = namespace_scope(NS) if what.startswith("item") else SCOPE
    if what in ("thread", "item thread"):
        assert stored.thread is not None
        forget_thread(conn, scope, stored.thread)
    elif what == "document":
        assert stored.document is not None
        forget_document(conn, scope, stored.document)
    elif what == "fact":
        for fact_id in stored.facts:
            forget_fact(conn, scope, fact_id)
    else:
        PgmemStore(conn, embedder=EMB).delete(NS, "k1")

    assert tables_holding(admin_conn, marker) == {}
    naming = _logs_naming(
        admin_conn, scope, thread=stored.thread, pieces=list(stored.pieces), document=stored.document,
        facts=list(stored.facts),
    )  # fmt: skip
    assert naming == 0
    assert {"turn", "piece", "recall_log"} <= set(tables_holding(admin_conn, kept))


def test_concurrent_store_batches_through_a_pool_end_in_the_last_write_of_each_key(
    app_url: str, admin_conn: Conn
) -> None:
    """Several threads run PgmemStore batches through one psycopg_pool ConnectionPool: puts and
    deletes of overlapping keys in two namespaces (in random order within a batch), with searches.
    No deadlock or serialization failure escapes a batch, and each key ends as its last write
    left it: the final value is that of a write no other write of the key started after (a
    register's linearizability), with its turn holding the same text."""
    pool_mod = pytest.importorskip("psycopg_pool")
    namespaces: list[tuple[str, ...]] = [("pool", "a"), ("pool", "b")]
    keys = [(ns, f"k{i}") for ns in namespaces for i in range(4)]
    writes: dict[tuple[tuple[str, ...], str], list[tuple[str | None, float, float]]] = {k: [] for k in keys}
    errors: list[str] = []
    lock = threading.Lock()
    flight = InFlight()  # batches in flight

    def client(w: int, store: PgmemStore) -> None:
        rng = random.Random(w)
        for b in range(10):
            chosen = rng.sample(keys, 3)
            ops: list[Any] = [
                PutOp(ns, key, None if rng.random() < 0.25 else {"text": f"writer {w} batch {b} wrote {key}"})
                for ns, key in chosen
            ]
            ops.append(SearchOp(("pool",), query=f"batch {b} wrote", limit=5))
            rng.shuffle(ops)
            started = time.monotonic()
            try:
                with flight():
                    store.batch(ops)
            except Exception as exc:
                errors.append(f"writer {w} batch {b}: {type(exc).__name__}: {exc}")
                continue
            ended = time.monotonic()
            with lock:
                for op in ops:
                    if isinstance(op, PutOp):
                        value = None if op.value is None else str(op.value["text"])
                        writes[(op.namespace, op.key)].append((value, started, ended))

    with pool_mod.ConnectionPool(app_url, min_size=4, max_size=4, kwargs={"autocommit": True}) as pool:
        store = PgmemStore(pool, embedder=EMB)
        workers = [threading.Thread(target=client, args=(w, store)) for w in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
        assert not any(t.is_alive() for t in workers), "a batch hung"
        assert errors == []
        final = {k: store.get(*k) for k in keys}
    # Batches ran at the same time, so of different workers (else nothing here raced).
    assert flight.most >= 2, "no two workers overlapped"

    for k, done in writes.items():
        assert done, f"{k} was never written: the workload is too small"
        # Writes no other write of the key started after: one of them is the last.
        last = {v for v, _, end in done if not any(start > end for _, start, _ in done)}
        got = final[k]
        assert (None if got is None else got.value["text"]) in last, (k, got, last)
    rows = admin_conn.execute(
        """SELECT i.scope_id, i.item_key, i.value->>'text', t.messages->0->>'content'
             FROM pgmem.store_item i LEFT JOIN pgmem.turn t USING (scope_id, thread_id)"""
    ).fetchall()
    # Each item's turn holds its value (the whole value as JSON: index path "$"), not an older one.
    assert rows and all(text is not None and f'"{value}"' in str(text) for _, _, value, text in rows), rows
    orphans = count(
        admin_conn,
        """SELECT count(*) FROM pgmem.thread th WHERE th.thread_id LIKE 'item:%%'
              AND NOT EXISTS (SELECT 1 FROM pgmem.store_item i
                               WHERE i.scope_id = th.scope_id AND i.thread_id = th.thread_id)""",
    )
    assert orphans == 0


# -- the writers fixed after a red-team pass (0040) ----------------------------------------------


def _in_scope(scope: str, sql_text: str, params: Sequence[object] = ()) -> Callable[[Conn], Any]:
    """A step that opens a transaction in `scope` and runs one statement (committed by the test)."""

    def go(c: Conn) -> Any:
        c.execute("BEGIN")
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        return c.execute(sql_text, params).fetchall()

    return go


def test_reblend_and_a_writer_replacing_a_turn_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A superuser holds turn t/0, so reblend waits for it. reblend used to hold every piece of
    the scope by then (it rewrote the pieces first, the turns after), and a writer replacing
    turn t/5 held that turn while it waited for its pieces: a deadlock when the holder let go.
    Now reblend takes the turns in key order before any piece: the writer replaces t/5 without
    waiting, and reblend rewrites every piece after it, at the new weight."""
    scope = f"locks-reblend-{uuid.uuid4().hex[:8]}"
    assert (
        ingest_turns(conn, [make_turn(scope, "t", i, f"turn {i} about the ferry") for i in range(8)], EMB).inserted == 8
    )
    deadlocks_before = churn.deadlocks(admin_conn)
    blender, writer = sessions(), sessions()
    with admin_conn.transaction():
        admin_conn.execute(
            "SELECT 1 FROM pgmem.turn WHERE scope_id = %s AND thread_id = 't' AND turn_index = 0 FOR UPDATE", (scope,)
        )
        step = blender.start(_in_scope(scope, "SELECT pgmem.reblend(%s, 0.5)", (scope,)))
        assert waits_for_lock(admin_conn, step, blender.pid)
        writer.begin(scope)
        report = writer.do(ingest([make_turn(scope, "t", 5, "turn 5, written again during the reblend")]))
        assert report.replaced == 1
        writer.commit()
    assert outcome(step) == [(8,)]
    blender.commit()
    assert deadlocks_now(admin_conn) == deadlocks_before
    stale = count(
        admin_conn,
        """SELECT count(*) FROM pgmem.piece p JOIN pgmem.turn t USING (scope_id, thread_id, turn_index)
            WHERE p.scope_id = %s AND (t.blend_weight <> 0.5
                                       OR (p.embedding <=> pgmem.blend(p.raw_embedding, t.context, 0.5)) > 1e-5)""",
        (scope,),
    )
    assert stale == 0


def test_reblend_and_a_bulk_writer_replacing_turns_on_both_sides_of_it_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A superuser holds turn t/2, so reblend waits for it holding t/0 and t/1. A bulk write
    (put_turns) replacing t/1 and t/3 starts meanwhile. It takes its turns in key order, as
    reblend does: it waits for t/1 holding neither, reblend goes on to t/3 once let go, and the
    write follows. Taking them in another order (t/3 first) it held t/3 while it waited for t/1,
    which reblend held while it waited for t/3: a deadlock."""
    scope = f"locks-reblend-bulk-{uuid.uuid4().hex[:8]}"
    assert (
        ingest_turns(conn, [make_turn(scope, "t", i, f"turn {i} about the ferry") for i in range(4)], EMB).inserted == 4
    )
    deadlocks_before = churn.deadlocks(admin_conn)
    blender, writer = sessions(), sessions()
    changed = [make_turn(scope, "t", i, f"turn {i}, written again during the reblend") for i in (1, 3)]
    with admin_conn.transaction():
        admin_conn.execute(
            "SELECT 1 FROM pgmem.turn WHERE scope_id = %s AND thread_id = 't' AND turn_index = 2 FOR UPDATE", (scope,)
        )
        step = blender.start(_in_scope(scope, "SELECT pgmem.reblend(%s, 0.5)", (scope,)))
        assert waits_for_lock(admin_conn, step, blender.pid)
        writer.begin(scope)
        write = writer.start(lambda c: ingest_turns(c, changed, EMB, bulk=True))
        assert waits_for_lock(admin_conn, write, writer.pid)
    blended = outcome(step)
    blender.commit()
    report = outcome(write)
    writer.commit()
    assert blended == [(4,)], f"reblend: {blended!r}"
    assert isinstance(report, IngestReport) and report.replaced == 2, f"the write: {report!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    bodies = admin_conn.execute(
        "SELECT turn_index, body FROM pgmem.piece WHERE scope_id = %s ORDER BY turn_index", (scope,)
    ).fetchall()
    assert [b for i, b in bodies if i in (1, 3)] == [
        "turn 1, written again during the reblend",
        "turn 3, written again during the reblend",
    ]


def test_a_turn_forgotten_while_a_writer_waits_to_replace_it_is_stored_after_the_forget(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A superuser holds turn t/1 FOR UPDATE, as a forget does before deleting it. A writer
    of a new version of t/1 finds the row there (its insert does nothing) and waits to lock it;
    the holder deletes the turn and commits. The writer's lock then finds no row: it must try
    the turn again and insert it (the forget first, the write after), not end with the turn in
    no state, stored nowhere and reported unchanged."""
    scope = f"locks-gone-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(scope, "t", 1, "the first version")], EMB).inserted == 1
    writer = sessions()
    with admin_conn.transaction():
        admin_conn.execute(
            "SELECT 1 FROM pgmem.turn WHERE scope_id = %s AND thread_id = 't' AND turn_index = 1 FOR UPDATE", (scope,)
        )
        write = writer.start(ingest([make_turn(scope, "t", 1, "the second version")]))
        assert waits_for_lock(admin_conn, write, writer.pid)
        admin_conn.execute(
            "DELETE FROM pgmem.turn WHERE scope_id = %s AND thread_id = 't' AND turn_index = 1", (scope,)
        )
    report = outcome(write)
    assert isinstance(report, IngestReport) and (report.inserted, report.pieces) == (1, 1), f"the write: {report!r}"
    assert admin_conn.execute(
        "SELECT body FROM pgmem.piece WHERE scope_id = %s AND thread_id = 't' AND turn_index = 1", (scope,)
    ).fetchall() == [("the second version",)]


def test_reblend_waiting_for_a_model_change_blends_vectors_of_one_model(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A model change's flip is in flight when reblend starts. reblend used to wait for its
    pieces and then read them as the flip left them (the new model's raw vectors) beside the
    turns' contexts as its statement saw them before (the old model's): every piece ended up a
    blend of two models. Now reblend waits for the flip at the scope row and reads both after it."""
    from pgmem.reembed import reembed

    class Other(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> Any:
            return np.array([hash_vector(t, DIMS, salt=b"other") for t in texts], dtype=np.float32)

    scope = f"locks-flip-{uuid.uuid4().hex[:8]}"
    assert (
        ingest_turns(
            conn, [make_turn(scope, f"t{i % 3}", i, f"turn {i} about harbours") for i in range(9)], EMB
        ).inserted
        == 9
    )
    other = Other(model_id="test:other")
    reembed(conn, scope, other, flip=False)
    flipper, blender = sessions(), sessions()
    flipper.do(_in_scope(scope, "SELECT * FROM pgmem.reembed_flip(%s, %s, %s)", (scope, other.model_id, DIMS)))
    step = blender.start(_in_scope(scope, "SELECT pgmem.reblend(%s, 0.5)", (scope,)))
    assert waits_for_lock(admin_conn, step, blender.pid)
    flipper.commit()
    assert outcome(step) == [(9,)]
    blender.commit()
    mixed = count(
        admin_conn,
        """SELECT count(*) FROM pgmem.piece p JOIN pgmem.turn t USING (scope_id, thread_id, turn_index)
            WHERE p.scope_id = %s AND (p.embedding <=> pgmem.blend(p.raw_embedding, t.context, 0.5)) > 1e-5""",
        (scope,),
    )
    assert mixed == 0


def test_a_rebuild_leaves_turns_forgotten_or_written_meanwhile_and_keeps_metadata(
    conn: Conn, admin_conn: Conn, app_url: str, tmp_path: Any
) -> None:
    """A rebuild reads a scope's turns, then embeds them. Meanwhile one is forgotten and one is
    written again. The rebuild used to put back the forgotten turn (its text, its thread) and
    overwrite the new one with its older copy, and stored every turn without its metadata. Now
    both are skipped, and the turns it does rebuild keep their metadata."""
    from pgmem.rebuild import rebuild

    class Gated(HashEmbedder):
        """Holds its first embedding until the test lets it go (the model's time)."""

        def __init__(self) -> None:
            super().__init__()
            self.entered, self.gate = threading.Event(), threading.Event()

        def embed(self, texts: Sequence[str]) -> Any:
            self.entered.set()
            assert self.gate.wait(STEP_SECONDS)
            return super().embed(texts)

    scope = f"locks-rebuild-{uuid.uuid4().hex[:8]}"
    tagged = Turn(
        scope, "tagged", 0, None, ({"role": "user", "content": "tagged turn"},), metadata={"channel": "voice"}
    )
    stored = [make_turn(scope, "notes", 0, "v1: meeting at 9"), make_turn(scope, "secret", 0, "my card number"), tagged]
    assert ingest_turns(conn, stored, EMB).inserted == 3
    gated = Gated()
    result: list[object] = []

    def run_rebuild() -> None:
        with connect(app_url) as c:
            result.append(rebuild(c, gated, tmp_path / "state.json", scope=scope))

    worker = threading.Thread(target=run_rebuild)
    worker.start()
    try:
        assert gated.entered.wait(STEP_SECONDS)
        assert forget_thread(conn, scope, "secret").turns == 1
        assert ingest_turns(conn, [make_turn(scope, "notes", 0, "v2: meeting moved to 11")], EMB).replaced == 1
    finally:
        gated.gate.set()
        worker.join(STEP_SECONDS)
    (res,) = result
    assert (res.report.replaced, res.report.skipped, res.report.failed) == (1, 2, [])  # type: ignore[attr-defined]
    rows = admin_conn.execute(
        "SELECT thread_id, messages->0->>'content', metadata FROM pgmem.turn WHERE scope_id = %s ORDER BY 1", (scope,)
    ).fetchall()
    assert rows == [("notes", "v2: meeting moved to 11", {}), ("tagged", "tagged turn", {"channel": "voice"})]
    assert (
        count(admin_conn, "SELECT count(*) FROM pgmem.thread WHERE scope_id = %s AND thread_id = 'secret'", (scope,))
        == 0
    )


def test_a_fact_added_while_its_thread_is_forgotten_lands_after_the_forget(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """forget_thread holds the thread when it is paused in its last step (a superuser holds the
    scope's recall-log lock). add_facts of a fact tied to that thread used to go through without
    waiting, and the fact outlived the forget; now it waits for the thread and lands after the
    forget, under its thread again (a forget of the thread then removes it)."""
    scope = f"locks-facts-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(scope, "t", 0, "I work at a bakery")], EMB).inserted == 1
    forgetter, adder = sessions(), sessions()
    with admin_conn.transaction():
        admin_conn.execute("SELECT pg_advisory_xact_lock(pgmem._recall_log_lock(%s))", (scope,))
        forgot = forgetter.start(lambda c: forget_thread(c, scope, "t"))
        assert waits_for_lock(admin_conn, forgot, forgetter.pid)
        added = adder.start(lambda c: add_facts(c, scope, [Fact("works at a bakery", "t", 0)], EMB))
        assert waits_for_lock(admin_conn, added, adder.pid)  # for the thread the forget holds
    forgotten, ids = outcome(forgot), outcome(added)
    assert isinstance(forgotten, Forgotten) and forgotten.turns == 1, forgotten
    assert isinstance(ids, list) and len(ids) == 1, ids
    assert count(admin_conn, "SELECT count(*) FROM pgmem.thread WHERE scope_id = %s AND thread_id = 't'", (scope,)) == 1
    assert forget_thread(conn, scope, "t").facts == 1


def test_set_retention_and_a_logged_recall_during_forget_scope_land_after_it(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A superuser holds the scope row, so forget_scope waits; a retention setting and a recall
    log of the scope are written meanwhile. set_retention used to fail on its foreign key
    (23503) once the forget deleted the row under it, and the log row stayed behind with no
    scope row. Both now wait; the setting lands after the forget, under a scope row again, and
    the log too when the setting's row is there first: a log of a scope with no row logs
    nothing (NULL) and makes no scope (0113)."""
    scope = f"locks-scope-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(scope, "t", 0, "about the ferry")], EMB).inserted == 1
    forgetter, setter, logger_ = sessions(), sessions(), sessions()
    with admin_conn.transaction():
        admin_conn.execute("SELECT 1 FROM pgmem.scope WHERE scope_id = %s FOR UPDATE", (scope,))
        forgot = forgetter.start(_in_scope(scope, "SELECT turns FROM pgmem.forget_scope(%s)", (scope,)))
        assert waits_for_lock(admin_conn, forgot, forgetter.pid)
        setting = setter.start(
            _in_scope(scope, "SELECT keep_days FROM pgmem.set_retention(%s, keep_days => 30)", (scope,))
        )
        assert waits_for_lock(admin_conn, setting, setter.pid)
        logged = logger_.start(
            _in_scope(
                scope,
                "SELECT pgmem.log_recall(%s, 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, -1, NULL,"
                " 'vector', '[]')",
                (scope, vec("q")),
            )
        )
        assert waits_for_lock(admin_conn, logged, logger_.pid)
    assert outcome(forgot) == [(1,)]
    forgetter.commit()
    # Whichever of the two makes the scope row again first, the other waits for its commit.
    pending = {setter: setting, logger_: logged}
    deadline = time.monotonic() + STEP_SECONDS
    while pending and time.monotonic() < deadline:
        for session, step in list(pending.items()):
            if step.done():
                assert not isinstance(outcome(step), BaseException), outcome(step)
                session.commit()
                del pending[session]
        time.sleep(0.01)
    assert not pending and outcome(setting) == [(30,)]
    assert count(admin_conn, "SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (scope,)) == 1
    assert count(admin_conn, "SELECT count(*) FROM pgmem.retention WHERE scope_id = %s", (scope,)) == 1
    [(logged_id,)] = outcome(logged)  # type: ignore[misc]
    logs = count(admin_conn, "SELECT count(*) FROM pgmem.recall_log WHERE scope_id = %s", (scope,))
    assert logs == (0 if logged_id is None else 1)
    assert count(admin_conn, "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s", (scope,)) == 0


def test_a_fact_plane_log_keeps_no_hit_of_a_forgotten_fact(conn: Conn, admin_conn: Conn) -> None:
    """log_recall dropped the hits of forgotten turns and documents but kept a forgotten fact's
    (its body), and forget_fact of a fact already gone skipped the log rows naming it. Now the
    hit is dropped when the log is written, and a forget_fact of the id removes any row that
    still names it."""
    scope = f"locks-factlog-{uuid.uuid4().hex[:8]}"
    (fact_id,) = add_facts(conn, scope, [Fact("the locker code is 4417")], EMB)
    assert forget_fact(conn, scope, fact_id).facts == 1
    hits = json.dumps([{"hits": [{"fact_id": fact_id, "body": "the locker code is 4417"}]}])
    with scoped(conn, scope):
        conn.execute(
            "SELECT pgmem.log_recall(%s, 'fact', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.3, NULL, 'vector',"
            " %s::jsonb)",
            (scope, vec("q"), hits),
        )
    logged = admin_conn.execute("SELECT results::text FROM pgmem.recall_log WHERE scope_id = %s", (scope,)).fetchall()
    assert len(logged) == 1 and "4417" not in str(logged[0][0])
    admin_conn.execute(  # a row written around the check (as a superuser can): the forget still finds it
        "INSERT INTO pgmem.recall_log (scope_id, plane, message, part_texts, part_vectors, x, floor, mode, results)"
        " SELECT scope_id, plane, message, part_texts, part_vectors, x, floor, mode, %s::jsonb"
        " FROM pgmem.recall_log WHERE scope_id = %s",
        (hits, scope),
    )
    assert forget_fact(conn, scope, fact_id).recall_logs == 1
    assert (
        count(
            admin_conn,
            "SELECT count(*) FROM pgmem.recall_log WHERE scope_id = %s AND results::text LIKE %s",
            (scope, "%4417%"),
        )
        == 0
    )


def test_retention_and_a_forget_of_a_document_with_facts_of_expiring_turns_do_not_deadlock(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """Two facts about document doc.md are tied to turn 0 of threads y2 (the older fact) and y,
    which retention expires. Retention forgets y's turn (its fact with it) and is held before
    y2's by a superuser's row lock; the app forgets the document meanwhile. forget_document now
    locks the threads of the facts it deletes first, as forget_fact does, so it waits for
    retention before it holds any fact (deleting y2's fact first, it waited for y's, which
    retention held, while retention, let go, waited for y2's: a deadlock)."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"locks-doc-{uuid.uuid4().hex[:8]}"
    turns = [make_turn(scope, th, i, f"{th} turn {i} about the ferry") for th in ("y", "y2") for i in range(2)]
    assert ingest_turns(conn, turns, EMB).inserted == 4
    assert add_documents(conn, scope, [Document("doc.md", "# Ferry\n\nThe ferry leaves at nine.\n")], EMB).inserted == 1
    about = [Fact("the ferry leaves at nine", th, 0, "doc.md") for th in ("y2", "y")]  # y2's fact first
    assert len(add_facts(conn, scope, about, EMB)) == 2
    with scoped(conn, scope):
        conn.execute("SELECT pgmem.set_retention(%s, keep_turns => 1)", (scope,))
    deadlocks_before = churn.deadlocks(admin_conn)
    expired, forgotten = _retention_held_before_y2(
        admin_conn,
        scope,
        Session(role_url(db_url, RETENTION_LOGIN)),
        sessions(),
        lambda c: forget_document(c, scope, "doc.md"),
    )
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert (scope, 2, 2) in expired  # retention took both facts with their turns
    assert isinstance(forgotten, Forgotten), f"the forget: {forgotten!r}"
    assert (forgotten.documents, forgotten.facts) == (1, 0)
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert count(admin_conn, "SELECT count(*) FROM pgmem.fact WHERE scope_id = %s", (scope,)) == 0


@pytest.mark.parametrize("deleted", ["stored", "missing"])
def test_a_batch_that_deletes_then_puts_and_a_forget_scope_do_not_deadlock(
    admin_conn: Conn, sessions: Callable[[], Session], deleted: str
) -> None:
    """A store batch deletes a key, then puts another of the same namespace (its writes in key
    order), while forget_scope of the namespace starts between the two. delete_item held the
    item row (or, for a key not stored, its record in pgmem.store_tombstone) without the scope
    row; forget_scope took the scope row FOR UPDATE and waited for that row, and the batch's put
    waited for the scope row: a deadlock (40P01). delete_item now holds the scope row FOR KEY
    SHARE first, as put_item does, so forget_scope waits for the batch and then forgets it all."""
    scope = namespace_scope(NS)
    batch, forgetter = sessions(), sessions()
    batch.begin(scope, directory="default")
    batch.do(_put_item(scope, "k0"))
    if deleted == "stored":
        batch.do(_put_item(scope, "k1"))
    else:  # a record of an earlier delete, which the delete below updates
        batch.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k1')", (scope,)))
    batch.commit()
    batch.begin(scope, directory="default")
    batch.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k1')", (scope,)))
    forgetter.begin(scope)
    forgot: Future[Any] = forgetter.start(
        lambda c: c.execute("SELECT * FROM pgmem.forget_scope(%s)", (scope,)).fetchall()
    )
    assert waits_for_lock(admin_conn, forgot, forgetter.pid)
    put = batch.start(_put_item(scope, "k2"))
    assert not isinstance(outcome(put), BaseException), outcome(put)
    batch.commit()
    assert not isinstance(outcome(forgot), BaseException), outcome(forgot)
    forgetter.commit()
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)) == 0
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_tombstone WHERE scope_id = %s", (scope,)) == 0
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = %s", (scope,)) == 0
    assert count(admin_conn, "SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (scope,)) == 0


@pytest.mark.parametrize("forget", ["thread", "turn", "expire"])
def test_a_forget_then_a_put_and_a_forget_scope_do_not_deadlock(
    admin_conn: Conn, sessions: Callable[[], Session], forget: str
) -> None:
    """A transaction forgets a thread (or a turn, or sweeps the expired items) of a namespace and
    then puts into it, while forget_scope of the namespace starts between the two. The forget held
    the thread's rows without the scope row; forget_scope took the scope row FOR UPDATE and waited
    for those rows, and the put waited for the scope row: a deadlock (40P01). The forgets now hold
    the scope row FOR KEY SHARE first, so forget_scope waits for the transaction and then
    forgets it all."""
    scope = namespace_scope(NS)
    writer, forgetter = sessions(), sessions()
    writer.begin(scope, directory="default")
    writer.do(_put_item(scope, "k0"))
    writer.do(ingest([make_turn(scope, "t", 0, "alpha harbour")]))
    writer.do(
        lambda c: c.execute(
            "SELECT * FROM pgmem.put_item(%s, %s, 'old', '{}'::jsonb, ttl_minutes => 1)", (scope, list(NS))
        )
    )
    writer.commit()
    admin_conn.execute("UPDATE pgmem.store_item SET expires_at = now() - interval '1 minute' WHERE item_key = 'old'")
    writer.begin(scope, directory="default")
    if forget == "thread":
        writer.do(lambda c: c.execute("SELECT * FROM pgmem.forget_thread(%s, 't')", (scope,)))
    elif forget == "turn":
        writer.do(lambda c: c.execute("SELECT * FROM pgmem.forget_turn(%s, 't', 0)", (scope,)))
    else:
        writer.do(lambda c: c.execute("SELECT pgmem.expire_items(%s)", (scope,)))
    forgetter.begin(scope)
    forgot: Future[Any] = forgetter.start(
        lambda c: c.execute("SELECT * FROM pgmem.forget_scope(%s)", (scope,)).fetchall()
    )
    assert waits_for_lock(admin_conn, forgot, forgetter.pid)
    put = writer.start(_put_item(scope, "k2"))
    assert not isinstance(outcome(put), BaseException), outcome(put)
    writer.commit()
    assert not isinstance(outcome(forgot), BaseException), outcome(forgot)
    forgetter.commit()
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)) == 0
    assert count(admin_conn, "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s", (scope,)) == 0
    assert count(admin_conn, "SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (scope,)) == 0


@pytest.mark.parametrize("how", ["forget_thread", "forget_turn 0"])
def test_forgetting_every_items_thread_takes_the_namespace_out_of_the_directory(
    conn: Conn, admin_conn: Conn, how: str
) -> None:
    """The forget that takes a namespace's last item takes its directory entry too (as a delete
    of the last item does): no listing shows a namespace that holds nothing."""
    store = PgmemStore(conn, embedder=EMB, floor=-1)
    scope = namespace_scope(NS)
    for key in ("k1", "k2"):
        store.put(NS, key, {"text": f"note {key} about the ferry"})
    for key in ("k1", "k2"):
        assert store.list_namespaces() == [NS]
        if how == "forget_thread":
            done = forget_thread(conn, scope, item_thread(key))
        else:
            done = forget_turn(conn, scope, item_thread(key), 0)
        assert done.turns == 1
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)) == 0
    assert _listed(admin_conn, scope) == []
    assert store.list_namespaces() == []


def test_a_forget_of_an_items_thread_waits_for_the_items_writer_before_taking_the_thread(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A LangGraph batch re-puts item k1 (put_item, the item row locked) and, in the same open
    transaction, then stores its turn (put_turn, a key share lock on the thread). A forget of the
    item's thread starting in between takes the item before the thread (the lock order): it waits
    for the batch, which stores its turn, and then forgets item and turn. Taking the thread first,
    it held the thread while waiting for the item, and the batch's turn waited for the thread: a
    deadlock."""
    scope = namespace_scope(NS)
    PgmemStore(conn, embedder=EMB).put(NS, "k1", {"text": "note k1"})
    thread = item_thread("k1")
    deadlocks_before = churn.deadlocks(admin_conn)
    batch, forgetter = sessions(), sessions()
    batch.begin(scope, directory="default")
    put = batch.do(
        lambda c: c.execute(
            "SELECT * FROM pgmem.put_item(%s, %s, 'k1', jsonb_build_object('text', 'note k1, again'), %s)",
            (scope, list(NS), thread),
        ).fetchall()
    )
    # In SQL, not through the Python API: a deadlock is an error here, never retried away.
    forget = forgetter.start(
        _in_scope(scope, "SELECT threads, turns FROM pgmem.forget_thread(%s, %s)", (scope, thread))
    )
    assert waits_for_lock(admin_conn, forget, forgetter.pid)
    created = put[0][0]  # the item's turn at its created_at, as the store writes it (0094)
    assert isinstance(created, datetime)
    turn = outcome(
        batch.start(ingest([Turn(scope, thread, 0, created, ({"role": "memory", "content": "note k1, again"},))]))
    )
    batch.commit()
    forgotten = outcome(forget)
    forgetter.commit()
    assert isinstance(turn, IngestReport) and turn.failed == [], f"the batch's turn: {turn!r}"
    assert forgotten == [(1, 1)], f"the forget: {forgotten!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert count(admin_conn, "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)) == 0
    assert turns_of(admin_conn, scope, thread) == []


def test_reblend_and_a_forget_of_a_turn_it_has_locked_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A superuser holds turn t/2, so reblend waits for it holding t/0 and t/1 (the turns in key
    order, before any piece). forget_turn of t/1 starts meanwhile. It takes the turn before its
    pieces (the lock order), so it waits for reblend holding none of them; taking the pieces
    first, it held t/1's pieces while waiting for the turn, and reblend, let go by the holder,
    waited for those pieces: a deadlock. Now reblend rewrites every piece, and the forget then
    takes t/1."""
    scope = f"locks-reblend-forget-{uuid.uuid4().hex[:8]}"
    assert (
        ingest_turns(conn, [make_turn(scope, "t", i, f"turn {i} about the ferry") for i in range(4)], EMB).inserted == 4
    )
    deadlocks_before = churn.deadlocks(admin_conn)
    blender, forgetter = sessions(), sessions()
    with admin_conn.transaction():
        admin_conn.execute(
            "SELECT 1 FROM pgmem.turn WHERE scope_id = %s AND thread_id = 't' AND turn_index = 2 FOR UPDATE", (scope,)
        )
        step = blender.start(_in_scope(scope, "SELECT pgmem.reblend(%s, 0.5)", (scope,)))
        assert waits_for_lock(admin_conn, step, blender.pid)
        # In SQL, not through the Python API: a deadlock is an error here, never retried away.
        forget = forgetter.start(_in_scope(scope, "SELECT turns FROM pgmem.forget_turn(%s, 't', 1)", (scope,)))
        assert waits_for_lock(admin_conn, forget, forgetter.pid)
    blended = outcome(step)
    blender.commit()
    forgotten = outcome(forget)
    forgetter.commit()
    assert blended == [(4,)], f"reblend: {blended!r}"
    assert forgotten == [(1,)], f"the forget: {forgotten!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert turns_of(admin_conn, scope, "t") == [0, 2, 3]


def test_reblend_documents_and_a_forget_of_a_document_it_has_locked_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """The same for documents: a superuser holds document b.md, so reblend_documents waits for it
    holding a.md. forget_document of a.md takes the document row before its units (the lock
    order) and waits holding none of them; taking the units first, it held a.md's units while
    waiting for the row, and reblend_documents then waited for them: a deadlock."""
    scope = f"locks-docs-forget-{uuid.uuid4().hex[:8]}"
    add_documents(conn, scope, [Document(f"{d}.md", f"# {d}\n\nabout the {d} harbour") for d in ("a", "b")], EMB)
    deadlocks_before = churn.deadlocks(admin_conn)
    blender, forgetter = sessions(), sessions()
    with admin_conn.transaction():
        admin_conn.execute(
            "SELECT 1 FROM pgmem.document WHERE scope_id = %s AND document_id = 'b.md' FOR UPDATE", (scope,)
        )
        step = blender.start(_in_scope(scope, "SELECT pgmem.reblend_documents(%s, 0.5)", (scope,)))
        assert waits_for_lock(admin_conn, step, blender.pid)
        forget = forgetter.start(_in_scope(scope, "SELECT documents FROM pgmem.forget_document(%s, 'a.md')", (scope,)))
        assert waits_for_lock(admin_conn, forget, forgetter.pid)
    blended = outcome(step)
    blender.commit()
    forgotten = outcome(forget)
    forgetter.commit()
    assert isinstance(blended, list) and int(str(blended[0][0])) >= 2, f"reblend_documents: {blended!r}"
    assert forgotten == [(1,)], f"the forget: {forgotten!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    rows = admin_conn.execute("SELECT document_id FROM pgmem.document WHERE scope_id = %s", (scope,)).fetchall()
    assert rows == [("b.md",)]


def test_two_replacements_of_one_document_serialise_and_the_later_is_stored_whole(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session], embedder: Embedder
) -> None:
    """put_document locks a stored document FOR UPDATE before it replaces its chunks, so a second
    writer of the document waits for the first, then replaces what it stored. A superuser holding
    the old chunks stops the first writer after it has read the document: without the lock the
    second read the old hash too, deleted none of the first one's chunks (not yet visible to it)
    and its own collided with them (23505), so the later version was lost, reported as failed."""
    scope = f"locks-docs-replace-{uuid.uuid4().hex[:8]}"
    versions = [f"# Ferry\n\nThe ferry leaves at {h}.\n\n## Return\n\nBack at {h + 8}.\n" for h in (7, 8, 9)]
    assert add_documents(conn, scope, [Document("ferry.md", versions[0])], embedder).inserted == 1
    first, second = sessions(), sessions()
    with admin_conn.transaction():
        admin_conn.execute("SELECT 1 FROM pgmem.chunk WHERE scope_id = %s FOR SHARE", (scope,))
        earlier = first.start(lambda c: add_documents(c, scope, [Document("ferry.md", versions[1])], embedder))
        assert waits_for_lock(admin_conn, earlier, first.pid)
        later = second.start(lambda c: add_documents(c, scope, [Document("ferry.md", versions[2])], embedder))
        assert waits_for_lock(admin_conn, later, second.pid)
    reports = [outcome(earlier), outcome(later)]
    assert all(not isinstance(r, BaseException) and (r.replaced, r.failed) == (1, []) for r in reports), reports
    chunks = admin_conn.execute(
        "SELECT ordinal, body FROM pgmem.chunk WHERE scope_id = %s ORDER BY ordinal", (scope,)
    ).fetchall()
    assert chunks == [(0, "# Ferry\n\nThe ferry leaves at 9."), (1, "## Return\n\nBack at 17.")]
    body = admin_conn.execute("SELECT body FROM pgmem.document WHERE scope_id = %s", (scope,)).fetchone()
    assert body == (versions[2],)


def _expiring_scope(conn: Conn, admin_conn: Conn, kind: str) -> str:
    """A new scope with keep_days => 30 whose turns a/0 and b/0 are 400 days old."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"locks-{kind}-{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=400)
    aged = [Turn(scope, th, 0, old, ({"role": "user", "content": f"{th} turn 0 about the ferry"},)) for th in "ab"]
    assert ingest_turns(conn, aged, EMB).inserted == 2
    with scoped(conn, scope):
        conn.execute("SELECT pgmem.set_retention(%s, keep_days => 30)", (scope,))
    return scope


def test_retention_keeps_an_expired_turn_a_writer_renews_while_retention_waits_for_it(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """keep_days => 30; turns a/0 and b/0 are 400 days old. A writer re-stores b/0 with today's
    time (an open transaction) when retention starts: retention locks the expiring threads, waits
    for the writer at b, and lists the expired turns again once it is in. b/0 is no longer
    expired then and stays, with the writer's text; only a/0 goes. Listing them before the locks,
    retention removed the turn the writer had just renewed."""
    scope = _expiring_scope(conn, admin_conn, "renewed")
    writer, keeper = sessions(), Session(role_url(db_url, RETENTION_LOGIN))
    try:
        writer.begin(scope)
        renewed = Turn(scope, "b", 0, datetime.now(UTC), ({"role": "user", "content": "b turn 0, said again today"},))
        assert writer.do(ingest([renewed])).replaced == 1
        expire = keeper.start(lambda c: c.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall())
        assert waits_for_lock(admin_conn, expire, keeper.pid)  # for the writer's thread b
        writer.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert expired == [(scope, 1)], f"retention: {expired!r}"
    assert turns_of(admin_conn, scope, "a") == [] and turns_of(admin_conn, scope, "b") == [0]
    bodies = admin_conn.execute("SELECT body FROM pgmem.piece WHERE scope_id = %s", (scope,)).fetchall()
    assert bodies and all("said again today" in str(b[0]) for b in bodies), bodies


@pytest.mark.parametrize("n", [1, 2], ids=["one turn", "two turns"])
def test_a_writer_waits_for_the_scope_row_before_it_locks_a_thread_or_a_turn(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session], n: int
) -> None:
    """The lock order (docs/architecture.md): a writer into an existing scope takes the scope row
    before its threads and turns. While another transaction holds the scope row FOR UPDATE, as
    forget_scope does before deleting the scope's threads, the writer waits for it holding no
    lock on the thread or the turns it writes: the holder can still lock them without waiting.
    A writer that locked its thread first would deadlock with forget_scope (the write-path
    review's mutation M33, which only a new scope's first write caught: the scope row is made
    here before the first write, so the first write does not depend on the order)."""
    admin_conn.execute("INSERT INTO pgmem.scope (scope_id) VALUES (%s)", (SCOPE,))
    assert ingest_turns(conn, [make_turn(SCOPE, "t", 0, "the first turn about the ferry")], EMB).inserted == 1
    writer = sessions()
    turns = [make_turn(SCOPE, "t", 0, "the first turn, changed"), make_turn(SCOPE, "t", 1, "a second turn")][:n]
    holder = psycopg.connect(db_url)
    try:
        holder.execute("SELECT 1 FROM pgmem.scope WHERE scope_id = %s FOR UPDATE", (SCOPE,))
        put = writer.start(ingest(turns))
        assert waits_for_lock(admin_conn, put, writer.pid)
        for table in ("thread", "turn"):
            holder.execute(
                sql.SQL("SELECT 1 FROM pgmem.{} WHERE scope_id = %s AND thread_id = 't' FOR UPDATE NOWAIT").format(
                    sql.Identifier(table)
                ),
                (SCOPE,),
            )
        holder.rollback()
        report = outcome(put)
    finally:
        holder.close()
    assert isinstance(report, IngestReport), f"the put: {report!r}"
    assert (report.replaced, report.inserted, report.failed) == (1, n - 1, [])


def test_forget_scope_waits_for_a_writer_of_the_scope_before_it_deletes_anything(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A writer stores a new turn of thread a (an open transaction) when forget_scope starts, then
    a new version of turn b/0. forget_scope takes the scope row FOR UPDATE first, so it waits for
    the writer before it deletes anything; the writer's second turn goes through, and the forget,
    run after the writer's commit, takes everything. Without that lock (a mutant the tests of
    forget_scope did not catch) forget_scope deleted b/0 and then waited for the writer's lock on
    thread a, while the writer's new b/0 waited for the deleted row: a deadlock."""
    scope = f"locks-fscope-{uuid.uuid4().hex[:8]}"
    turns = [make_turn(scope, th, 0, f"{th} turn 0 about the ferry") for th in ("b", "a")]
    assert ingest_turns(conn, turns, EMB).inserted == 2
    writer, forgetter = sessions(), sessions()
    deadlocks_before = churn.deadlocks(admin_conn)
    writer.begin(scope)
    assert writer.do(ingest([make_turn(scope, "a", 1, "a turn 1, written during the forget")])).inserted == 1
    forgot: Future[Any] = forgetter.start(_in_scope(scope, "SELECT turns FROM pgmem.forget_scope(%s)", (scope,)))
    assert waits_for_lock(admin_conn, forgot, forgetter.pid)
    second = outcome(writer.start(ingest([make_turn(scope, "b", 0, "b turn 0, said again during the forget")])))
    writer.commit()
    forgotten = outcome(forgot)
    forgetter.commit()
    assert isinstance(second, IngestReport) and (second.replaced, second.failed) == (1, []), f"the writer: {second!r}"
    assert forgotten == [(3,)], f"the forget: {forgotten!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    for table in ("scope", "thread", "turn", "piece"):
        assert count(admin_conn, sql.SQL("SELECT count(*) FROM {} WHERE scope_id = %s").format(
            sql.Identifier("pgmem", table)), (scope,)) == 0, table  # fmt: skip


def test_retention_waits_for_a_forget_scope_in_flight_before_it_locks_a_thread(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """forget_scope holds the scope row FOR UPDATE and is held before its deletes by a superuser's
    row lock on a piece; apply_retention starts meanwhile, the scope's turns expired. Retention
    takes the scope row FOR KEY SHARE before its threads, so it waits for the forget holding
    nothing of the scope, and then finds nothing left to remove, not even the setting. Locking the threads first (a
    mutant no test caught), it held them while it waited for the scope row, and forget_scope,
    let go, waited for them: a deadlock."""
    scope = _expiring_scope(conn, admin_conn, "retscope")
    forgetter, keeper = sessions(), Session(role_url(db_url, RETENTION_LOGIN))
    deadlocks_before = churn.deadlocks(admin_conn)
    try:
        with admin_conn.transaction():
            admin_conn.execute("SELECT 1 FROM pgmem.piece WHERE scope_id = %s FOR KEY SHARE", (scope,))
            forgot: Future[Any] = forgetter.start(
                _in_scope(scope, "SELECT turns FROM pgmem.forget_scope(%s)", (scope,))
            )
            assert waits_for_lock(admin_conn, forgot, forgetter.pid)  # for the pieces, the scope row held
            expire = keeper.start(lambda c: c.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall())
            assert waits_for_lock(admin_conn, expire, keeper.pid)
        forgotten = outcome(forgot)
        if not isinstance(forgotten, BaseException):
            forgetter.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert forgotten == [(2,)], f"the forget: {forgotten!r}"
    # The forget took the scope's setting with it: retention, which reads a scope's setting when
    # it comes to the scope (since 0107), passes over it (before, a row of zeros).
    assert expired == [], f"retention: {expired!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    assert count(admin_conn, "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s", (scope,)) == 0


def _long_keys_in_opposite_orders() -> tuple[str, str]:
    """Two store keys too long to be read in their item's thread (`item-sha256:<hex>`), k1 < k2,
    whose threads sort the other way: the store locks items in key order, and a lock taken in
    thread order would meet it in the opposite one."""
    base = "k" * 200
    keys = [f"{base}{i}" for i in range(20)]
    for k1 in keys:
        for k2 in keys:
            if k1 < k2 and item_thread(k1) > item_thread(k2):
                return k1, k2
    raise AssertionError("no such pair")


def test_retention_of_expired_items_and_a_batch_putting_them_again_do_not_deadlock(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """keep_days => 30; two store items with long keys were last put 400 days ago. A batch puts
    both again (the store's order: by key, so k1 first) while retention expires them. Retention
    locked a scope's items sorted by their threads, `item-sha256:<hex>` for a long key, so k2
    before k1: it held k2 and waited for the batch's k1 while the batch waited for k2, and the
    server ended one of them (40P01; apply_retention, which the DBA's job runs once, is not run
    again). Items are now locked by key everywhere (retention, forget_document, expire_items, the
    store): retention waits for the batch and finds both items renewed."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    k1, k2 = _long_keys_in_opposite_orders()
    ns = (f"locks-items-{uuid.uuid4().hex[:8]}",)
    scope = namespace_scope(ns)
    store = PgmemStore(conn, embedder=EMB)
    store.put(ns, k1, {"text": "the first pallet"})
    store.put(ns, k2, {"text": "the second pallet"})
    admin_conn.execute(
        """UPDATE pgmem.turn SET turn_time = now() - interval '400 days', ingested_at = now() - interval '400 days'
            WHERE scope_id = %s""",
        (scope,),
    )
    # The items' own rows as old (retention ages an item by its last put, 0089).
    admin_conn.execute(
        """UPDATE pgmem.store_item SET created_at = now() - interval '400 days',
                   updated_at = now() - interval '400 days'
            WHERE scope_id = %s""",
        (scope,),
    )
    with scoped(conn, scope):
        conn.execute("SELECT pgmem.set_retention(%s, keep_days => 30)", (scope,))
    deadlocks_before = churn.deadlocks(admin_conn)
    writer, keeper = sessions(), Session(role_url(db_url, RETENTION_LOGIN))

    def put(key: str) -> Callable[[Conn], object]:
        return lambda c: c.execute(
            "SELECT * FROM pgmem.put_item(%s, %s, %s, jsonb_build_object('text', 'put again'), %s)",
            (scope, list(ns), key, item_thread(key)),
        ).fetchall()

    try:
        writer.begin(scope, directory="default")
        put_first = writer.do(put(k1))
        expire = keeper.start(lambda c: c.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall())
        assert waits_for_lock(admin_conn, expire, keeper.pid)  # for the batch's k1
        second = writer.start(put(k2))
        put_again = outcome(second)
        if not isinstance(put_again, BaseException):
            # Then the items' turns, as the batch stores them after its puts: at each item's
            # created_at, which a put again keeps (0094 refuses other turns into an item's thread).
            renewed = [
                Turn(scope, item_thread(k), 0, rows[0][0], ({"role": "user", "content": "put again"},))  # type: ignore[index]
                for k, rows in ((k1, put_first), (k2, put_again))
            ]
            assert writer.do(ingest(renewed)).replaced == 2
            writer.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert not isinstance(put_again, BaseException), f"the batch's second put: {put_again!r}"
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    values = admin_conn.execute(
        "SELECT item_key, value->>'text' FROM pgmem.store_item WHERE scope_id = %s ORDER BY 1", (scope,)
    ).fetchall()
    assert values == [(k1, "put again"), (k2, "put again")]


def test_a_store_batch_deleting_then_putting_and_a_model_flip_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A store batch deletes item a (its thread locked and deleted, the scope row held FOR KEY
    SHARE) and puts item b; a model change of the namespace flips meanwhile. The flip holds the
    scope row FOR NO KEY UPDATE and waits for thread item:a; the batch's put then stores b's turn,
    whose bind_scope_model asks for the row FOR SHARE: it waited for the flip, which waited for
    it (40P01, found by tests/test_mixed_writers.py). A batch that stores turns now holds the
    scope row FOR SHARE before its first item, as every writer of pieces does: the flip waits
    for the whole batch, then finds b's pieces not staged yet and changes nothing (reembed embeds
    them and flips again), as after any writer of the old model."""
    from pgmem.lab.bench.reembed import Rotated
    from pgmem.reembed import reembed

    new = Rotated(EMB)
    ns = (f"locks-flip-{uuid.uuid4().hex[:8]}",)
    scope = namespace_scope(ns)
    PgmemStore(conn, embedder=EMB).put(ns, "a", {"text": "the pallet in the harbour"})
    staged = reembed(conn, scope, new, flip=False)  # every vector of the new model staged
    assert not staged.flipped and staged.embedded > 0
    deadlocks_before = churn.deadlocks(admin_conn)
    batcher, flipper = sessions(), sessions()
    hold = threading.Event()
    release = threading.Event()

    class Paused(HashEmbedder):
        """The old model, pausing the batch after its delete (while it embeds b's texts)."""

        def embed(self, texts: Sequence[str]) -> Any:
            hold.set()
            assert release.wait(STEP_SECONDS)
            return super().embed(texts)

    def batch(c: Conn) -> object:
        return PgmemStore(c, embedder=Paused()).batch(
            [PutOp(ns, "a", None), PutOp(ns, "b", {"text": "the freezer at the depot"})]
        )

    written = batcher.start(batch)
    assert hold.wait(STEP_SECONDS)

    def flip_now(c: Conn) -> object:
        with scoped(c, scope):
            return c.execute(
                "SELECT flipped FROM pgmem.reembed_flip(%s, %s, %s, 0.8)", (scope, new.model_id, new.dims)
            ).fetchall()

    flip = flipper.start(flip_now)
    assert waits_for_lock(admin_conn, flip, flipper.pid)  # for the batch
    release.set()
    result, flipped = outcome(written), outcome(flip)
    assert not isinstance(result, BaseException), f"the batch: {result!r}"
    assert flipped == [(False,)], f"the flip: {flipped!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    items = admin_conn.execute("SELECT item_key FROM pgmem.store_item WHERE scope_id = %s", (scope,)).fetchall()
    assert items == [("b",)]


@pytest.mark.parametrize("function", ["pgmem.sweep_expired_items(integer)", "pgmem.apply_retention()"])
def test_maintenance_goes_through_scopes_in_the_order_of_the_store_s_batches(admin_conn: Conn, function: str) -> None:
    """A store batch writes its namespaces' scopes in Python's order (code points: "B/x" before
    "a/x"); sweep_expired_items and apply_retention each run every scope in one transaction. On a
    database whose collation orders "a/x" first (en_US), each could hold a scope's locks the
    other waited for. Both now order by scope_id COLLATE "C" (bytewise: code points, in UTF-8).
    This server has no collation but C to run the two orders against each other, so the
    definitions are read: each orders its scopes with COLLATE "C"."""
    row = admin_conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (function,)).fetchone()
    assert row is not None
    source = " ".join(str(row[0]).split())
    assert 'scope_id COLLATE "C"' in source, function  # sweep_expired_items: its loop's ORDER BY (0084)
    assert sorted(["B/x", "a/x"]) == ["B/x", "a/x"]  # the batches' order, which "C" matches


def test_the_store_sweeper_and_a_batch_go_through_scopes_in_one_order(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """The LangGraph store's TTL sweep (`sweep_ttl`, the sweeper's step) expires every namespace
    of its directory in one transaction. It went through them in the directory's order, label by
    label: ("a", "x") before ("a!",), while a batch writes their scopes bytewise, "a!" before
    "a/x" (even on a C-collation server). Here the sweep has expired a/x's item (holding a/x's
    recall-log lock) and waits, inside a!'s expiry, for a gate; a batch deletes an item in a! and
    one in a/x and, at its commit, holds a!'s recall-log lock and waits for a/x's. Opened, the
    gate let the sweep ask for a!'s: a deadlock (40P01, the statement run again). The sweep now
    goes through scopes bytewise: it is in a! first, so the batch waits for nothing of it."""
    label = f"locks-sweep-{uuid.uuid4().hex[:8]}"
    first, second = (f"{label}!",), (label, "x")
    assert sorted([namespace_scope(second), namespace_scope(first)]) == [
        namespace_scope(first),
        namespace_scope(second),
    ]
    store = PgmemStore(conn, embedder=EMB, ttl={"default_ttl": 60})
    for ns in (first, second):
        store.put(ns, "e", {"text": "the expiring pallet"})
        store.put(ns, "d", {"text": "the deleted pallet"})
    admin_conn.execute(
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second'"
        " WHERE scope_id = ANY(%s) AND item_key = 'e'",
        ([namespace_scope(first), namespace_scope(second)],),
    )
    admin_conn.execute(
        "CREATE FUNCTION pgmem.test_gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " PERFORM pg_advisory_xact_lock(4258); RETURN OLD; END$$"
    )
    admin_conn.execute(
        sql.SQL(
            "CREATE TRIGGER test_gate BEFORE DELETE ON pgmem.store_item FOR EACH ROW"
            " WHEN (OLD.item_key = 'e' AND OLD.scope_id = {}) EXECUTE FUNCTION pgmem.test_gate()"
        ).format(sql.Literal(namespace_scope(first)))
    )
    deadlocks_before = churn.deadlocks(admin_conn)
    sweeper, batcher = sessions(), sessions()
    admin_conn.execute("SELECT pg_advisory_lock(4258)")
    try:
        sweep = sweeper.start(lambda c: PgmemStore(c, embedder=EMB).sweep_ttl())
        assert waits_for_lock(admin_conn, sweep, sweeper.pid, "advisory")  # at the gate, in a!'s expiry
        batch = batcher.start(
            lambda c: PgmemStore(c, embedder=EMB).batch([PutOp(first, "d", None), PutOp(second, "d", None)])
        )
        waits_for_lock(admin_conn, batch, batcher.pid)  # before: for a/x's recall-log lock
    finally:
        admin_conn.execute("SELECT pg_advisory_unlock(4258)")
    swept, deleted = outcome(sweep), outcome(batch)
    assert swept == 2, f"the sweep: {swept!r}"
    assert not isinstance(deleted, BaseException), f"the batch: {deleted!r}"
    assert deadlocks_now(admin_conn) == deadlocks_before
    left = admin_conn.execute(
        "SELECT count(*) FROM pgmem.store_item WHERE scope_id = ANY(%s)",
        ([namespace_scope(first), namespace_scope(second)],),
    ).fetchone()
    assert left == (0,)
