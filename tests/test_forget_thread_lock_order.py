"""A forget of a thread or turn beside a writer creating the thread: no deadlock (0082).

pgmem._lock_thread locks a thread's row FOR UPDATE before a forget deletes anything (the lock
order: scope row, store items, thread, turn, pieces; the recall-log lock last). A SELECT ... FOR
UPDATE does not see a row another transaction is inserting, so a forget that started while a
put_turn created the thread locked nothing; once the writer had committed, the forget's later
statements deleted its rows, and a second forget that had locked the committed thread row met
it halfway (two forget_thread calls, each waiting for the other's transaction: seen in a stress
of writers and forgets). The same held for a scope row being inserted. _lock_thread now inserts
a row it does not find, which waits for the writer's insert, and deletes it again when there
was none.

Run as the application login, with sessions whose steps run on threads of their own."""

from __future__ import annotations

import dataclasses
import random
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from functools import partial

import psycopg
import pytest

from pgmem import forget_thread, forget_turn
from pgmem.db import connect
from pgmem.errors import PgmemError
from pgmem.forget import Forgotten
from pgmem.ingest import IngestReport, ingest_turns
from pgmem.lab.bench.churn import deadlocks
from tests.security_helpers import make_turn
from tests.test_lock_order import (
    EMB,
    Session,
    deadlocks_now,
    first_line,
    ingest,
    outcome,
    stress,
    turns_of,
    waits_for_lock,
)

Conn = psycopg.Connection[tuple[object, ...]]


def _rows(admin: Conn, table: str, scope: str) -> int:
    row = admin.execute(f"SELECT count(*) FROM pgmem.{table} WHERE scope_id = %s", (scope,)).fetchone()
    assert row is not None
    return int(str(row[0]))


@pytest.mark.parametrize("scope_exists", [True, False], ids=["new thread", "new scope"])
def test_a_forget_of_a_thread_being_created_waits_for_its_writer_so_a_second_forget_cannot_meet_it_halfway(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session], scope_exists: bool
) -> None:
    """A writer creates thread n (and, in the second case, its scope) in an open transaction.
    Forget A of n starts, in a transaction that then writes the thread anew (a re-ingest: forget
    the thread, put its turns). Before 0082 A saw no row, locked nothing and returned at once,
    holding the scope's recall-log lock; after the writer's commit forget B locked the thread,
    deleted its rows and waited for that lock, while A's put of the thread waited for B's
    delete: a deadlock (40P01). Now A waits for the writer and forgets its turn; B waits for A,
    then forgets A's new turn."""
    scope = f"lock-thread-{uuid.uuid4().hex[:8]}"
    if scope_exists:
        assert ingest_turns(conn, [make_turn(scope, "other", 0, "alpha about the harbour")], EMB).inserted == 1
    before = deadlocks(admin_conn)
    writer, a, b = sessions(), sessions(), sessions()

    writer.begin(scope)
    assert writer.do(ingest([make_turn(scope, "n", 0, "bravo, the thread's first turn")])).inserted == 1
    a.begin(scope)
    first = a.start(lambda c: forget_thread(c, scope, "n"))
    a_waited = waits_for_lock(admin_conn, first, a.pid)  # for the writer's insert of the row
    writer.commit()
    first_forgot = outcome(first)
    second = b.start(lambda c: forget_thread(c, scope, "n"))
    b_waited = waits_for_lock(admin_conn, second, b.pid)
    rewritten = outcome(a.start(ingest([make_turn(scope, "n", 1, "charlie, written anew")])))
    if isinstance(rewritten, IngestReport):
        a.commit()
    second_forgot = outcome(second)

    assert isinstance(rewritten, IngestReport), f"A's put after its forget: {rewritten!r}"
    assert isinstance(second_forgot, Forgotten), f"forget B: {second_forgot!r}"
    assert a_waited, "forget A did not wait for the writer creating the thread"
    assert isinstance(first_forgot, Forgotten), f"forget A: {first_forgot!r}"
    assert (first_forgot.threads, first_forgot.turns) == (1, 1)  # the writer's turn, committed first
    assert b_waited
    assert (rewritten.inserted, rewritten.failed) == (1, [])
    assert (second_forgot.threads, second_forgot.turns) == (1, 1)  # A's turn, committed before B ran
    assert turns_of(admin_conn, scope, "n") == []
    assert admin_conn.execute(
        "SELECT count(*) FROM pgmem.thread WHERE scope_id = %s AND thread_id = 'n'", (scope,)
    ).fetchone() == (0,)
    assert deadlocks_now(admin_conn) - before == 0


def test_a_forget_of_a_turn_waits_for_a_writer_creating_its_thread(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """forget_turn locks the thread the same way: begun while a writer creates the thread with
    that turn, it waits for the writer's commit and forgets the turn (before 0082 it returned at
    once and the turn was stored after it)."""
    scope = f"lock-turn-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(scope, "other", 0, "alpha about the harbour")], EMB).inserted == 1
    writer, forgetter = sessions(), sessions()
    writer.begin(scope)
    assert writer.do(ingest([make_turn(scope, "n", 3, "delta, a turn of a new thread")])).inserted == 1
    gone = forgetter.start(lambda c: forget_turn(c, scope, "n", 3))
    assert waits_for_lock(admin_conn, gone, forgetter.pid)
    writer.commit()
    forgot = outcome(gone)
    assert isinstance(forgot, Forgotten), f"the forget: {forgot!r}"
    assert (forgot.threads, forgot.turns) == (1, 1)
    assert turns_of(admin_conn, scope, "n") == []


@pytest.mark.parametrize(
    "scope_name, thread",
    [("exists", "never-written"), ("never-written", "t"), ("exists", "x" * 201), ("exists", "a\x00b"), ("exists", "")],
)
def test_a_forget_of_a_thread_or_scope_that_does_not_exist_leaves_no_row_and_answers_in_one_line(
    conn: Conn, admin_conn: Conn, scope_name: str, thread: str
) -> None:
    """_lock_thread inserts a row it does not find and deletes it again (0082): forgetting what
    was never written forgets nothing, leaves no thread or scope row behind, and a name the
    tables cannot hold is refused in one line or forgets nothing, as before. What is stored
    stays, and the thread can be written afterwards."""
    from pgmem.errors import PgmemError

    base = f"lock-none-{uuid.uuid4().hex[:8]}"
    scope = base if scope_name == "exists" else f"{base}-never"
    assert ingest_turns(conn, [make_turn(base, "kept", 0, "echo about the harbour")], EMB).inserted == 1
    scopes = admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone()
    forgets: list[Callable[[], Forgotten]] = [
        lambda: forget_thread(conn, scope, thread),
        lambda: forget_turn(conn, scope, thread, 0),
    ]
    for forget in forgets:
        try:
            gone = forget()
        except PgmemError as exc:
            assert "\n" not in str(exc) and "Traceback" not in str(exc)
        else:
            assert (gone.threads, gone.turns, gone.pieces) == (0, 0, 0)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == scopes
    assert admin_conn.execute("SELECT thread_id FROM pgmem.thread WHERE scope_id = %s", (base,)).fetchall() == [
        ("kept",)
    ]
    assert _rows(admin_conn, "thread", f"{base}-never") == 0
    assert turns_of(admin_conn, base, "kept") == [0]
    if scope_name == "exists" and thread == "never-written":
        assert ingest_turns(conn, [make_turn(scope, thread, 0, "foxtrot, written after")], EMB).inserted == 1


def test_writers_creating_threads_beside_forgets_of_them_never_deadlock(app_url: str, admin_conn: Conn) -> None:
    """Two clients put turns of a few threads (each created again and again), two others forget
    those threads and turns, for four seconds: every call must succeed and the server detect no
    deadlock."""
    scope = f"lock-stress-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    errors: list[str] = []
    done = [0, 0]

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with connect(app_url) as c:
            while not stop.is_set():
                th = f"t{rng.randint(0, 2)}"
                turns = [make_turn(scope, th, i, f"turn {i} of {th} about the ferry") for i in range(rng.randint(1, 3))]
                try:
                    ingest_turns(c, turns, EMB)
                    done[0] += 1
                except Exception as exc:
                    errors.append(f"put: {first_line(exc)}")

    def forgetter(seed: int) -> None:
        rng = random.Random(seed)
        with connect(app_url) as c:
            while not stop.is_set():
                th = f"t{rng.randint(0, 2)}"
                try:
                    if rng.random() < 0.5:
                        forget_thread(c, scope, th)
                    else:
                        forget_turn(c, scope, th, rng.randint(0, 2))
                    done[1] += 1
                except Exception as exc:
                    errors.append(f"forget: {first_line(exc)}")

    clients = [partial(writer, i) for i in range(2)] + [partial(forgetter, 10 + i) for i in range(2)]
    detected = stress(admin_conn, stop, clients)
    assert errors == []
    assert done[0] > 10 and done[1] > 10  # both kinds ran
    assert detected == 0


@pytest.mark.parametrize("how", ["delete_item", "sweep as the DBA", "sweep as pgmem_owner"])
def test_a_store_item_whose_thread_was_never_written_is_deleted_and_leaves_no_thread_row(
    conn: Conn, admin_conn: Conn, owner: Conn, how: str
) -> None:
    """A put_item names a thread whose turn the caller never stored (plain SQL): the thread row
    does not exist, so deleting or expiring the item makes _lock_thread insert the row and delete
    it again (0082), as the app login (delete_item), as a superuser and as the maintenance login
    (the sweep, which sets each scope in turn; row-level security is forced on the owner). None
    may fail or leave the row."""
    scope = f"lock-item-{uuid.uuid4().hex[:8]}"
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        conn.execute("SELECT set_config('pgmem.store_directory', 'd', true)")
        conn.execute(
            "SELECT * FROM pgmem.put_item(%s, %s::text[], 'k', '{\"v\": 1}'::jsonb,"
            " thread => 'never-stored', ttl_minutes => 5)",
            (scope, [scope]),
        )
    if how == "delete_item":
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            assert conn.execute("SELECT pgmem.delete_item(%s, 'k')", (scope,)).fetchone() == (True,)
    else:
        admin_conn.execute(
            "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' WHERE scope_id = %s", (scope,)
        )
        sweeper = admin_conn if how == "sweep as the DBA" else owner
        swept = sweeper.execute("SELECT * FROM pgmem.sweep_expired_items()").fetchall()
        assert (scope, 1) in swept
    assert _rows(admin_conn, "store_item", scope) == 0
    assert _rows(admin_conn, "thread", scope) == 0


def test_a_forget_that_waited_for_a_thread_row_locks_the_item_its_writer_put_before_the_thread(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A store item of thread t is being put with its turn (W, uncommitted): forget_thread(t)
    finds neither and waits for W's insert of the thread row. Until 0092 the row could be another
    writer's (W2) while W held the item, and 0082's forget, which locked the items only before
    its first look, then locked the thread row and waited for the item: a batch (G) putting the
    item again waited for the thread row, a deadlock (40P01). The forget locks the thread's items
    again after each wait, before the thread row (the lock order). Since 0092 put_item inserts
    the thread row itself, so W2's scene cannot be set; here the forget, after its wait, must
    lock and delete W's item (not only its turn): G's put of the item waits for the forget and,
    after it, writes a new item (previous_thread NULL), not an update of W's (review rt57)."""
    from pgmem.errors import PgmemError

    ns = ("lock-item-flight", uuid.uuid4().hex[:8])
    scope = "/".join(ns)
    put = "SELECT * FROM pgmem.put_item(%s, %s, 'k', %s::jsonb, thread => 't')"
    assert ingest_turns(conn, [make_turn(scope, "other", 0, "the scope's first turn")], EMB).inserted == 1
    before = deadlocks(admin_conn)
    w, w2, f, g = sessions(), sessions(), sessions(), sessions()

    del w2  # since 0092 put_item inserts the thread row itself: W2's scene cannot be set
    w.begin(scope, directory="d")
    put_rows = w.do(lambda c: c.execute(put, (scope, list(ns), '{"v": 1}')).fetchall())
    # The item's turn as the store writes it: turn 0 at the item's created_at (0094 refuses others).
    created = put_rows[0][0]
    assert isinstance(created, datetime)
    item_turn = dataclasses.replace(make_turn(scope, "t", 0, "alpha, the item's turn"), time=created)
    assert w.do(ingest([item_turn])).inserted == 1
    f.begin(scope)
    forgot = f.start(lambda c: forget_thread(c, scope, "t"))
    assert waits_for_lock(admin_conn, forgot, f.pid)  # for W's insert of the thread row
    w.commit()
    forgotten = outcome(forgot)
    g.begin(scope, directory="d")

    def put_again(c: Conn) -> object:
        return c.execute(put, (scope, list(ns), '{"v": 2}')).fetchall()

    again = g.start(put_again)
    assert isinstance(forgotten, Forgotten), f"the forget: {forgotten!r}"
    assert waits_for_lock(admin_conn, again, g.pid)  # for the item the forget holds
    f.commit()
    assert (forgotten.threads, forgotten.turns) == (1, 1)  # W's turn
    assert _rows(admin_conn, "store_item", scope) == 0  # and W's item
    put_result = outcome(again)
    assert not isinstance(put_result, PgmemError | psycopg.Error), put_result
    g.commit()
    assert isinstance(put_result, list) and [r[2] for r in put_result] == [
        None
    ]  # a new item: no previous thread (W's was deleted)
    assert _rows(admin_conn, "store_item", scope) == 1  # put again after the forget
    assert deadlocks_now(admin_conn) - before == 0


def test_a_forget_in_a_repeatable_read_transaction_of_a_thread_created_after_its_snapshot_is_refused(
    conn: Conn, admin_conn: Conn, app_url: str
) -> None:
    """In REPEATABLE READ the thread row another transaction committed after the snapshot is
    not seen: the forget is refused (25000, since 0113; a serialization failure, 40001, before),
    never a forget that returns zeros while the thread stays. Run again at READ COMMITTED, the
    forget takes it."""
    scope = f"lock-rr-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(scope, "other", 0, "alpha about the harbour")], EMB).inserted == 1
    with connect(app_url) as rr:
        rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        rr.execute("SELECT count(*) FROM pgmem.turn").fetchone()  # the snapshot
        assert ingest_turns(conn, [make_turn(scope, "late", 0, "bravo, written after it")], EMB).inserted == 1
        with pytest.raises(PgmemError, match="READ COMMITTED") as err:
            forget_thread(rr, scope, "late")
        assert getattr(err.value, "sqlstate", None) == "25000"
        rr.execute("ROLLBACK")
        assert forget_thread(rr, scope, "late").turns == 1
    assert turns_of(admin_conn, scope, "late") == []
