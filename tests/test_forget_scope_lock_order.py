"""forget_scope beside the scope's writers and readers: no deadlock (0081).

forget_scope locks its scope row first and deletes the scope's rows after it, the store items
last (with the row), after the scope's recall-log lock. Two ways let a writer's locks in
between, each found as a deadlock of tests/test_mixed_async_ttl.py's stress test (forget_scope
against refresh_items, failing about one run in six of `pytest -n 2` on five store files):

- the scope row being inserted by a writer that recreates the scope is not seen by `SELECT ...
  FOR UPDATE`, so forget_scope locked nothing, and the writers that came after met it halfway;
- `refresh_items` (a store read's TTL refresh) locked items without the scope row, so it held
  an item forget_scope was about to delete while its transaction went on to wait for
  forget_scope.

Run as the application login, with sessions whose steps run on threads of their own."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
import pytest

from pgmem.forget import forget_scope
from pgmem.integrations.langgraph import DEFAULT_DIRECTORY, PgmemStore, namespace_scope
from tests.security_helpers import HashEmbedder
from tests.test_lock_order import Session, deadlocks_now, first_line, outcome, stress, waits_for_lock

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")
from langgraph.store.base import GetOp, PutOp, SearchOp

Conn = psycopg.Connection[tuple[object, ...]]
MODEL = HashEmbedder()
TTL = {"default_ttl": 60, "refresh_on_read": True}


def _put(ns: tuple[str, ...], key: str) -> Callable[[Conn], None]:
    return lambda c: PgmemStore(c, embedder=MODEL).put(ns, key, {"text": f"item {key} about pallets"})


def test_forget_scope_waits_for_a_writer_recreating_the_scope_instead_of_meeting_it_halfway(
    admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A writer recreates a forgotten scope (its row inserted, not committed) while forget_scope
    starts: forget_scope's SELECT ... FOR UPDATE saw no row and locked nothing, went on to the
    recall-log lock (held here by another transaction, so that the steps interleave as they did
    under load), and then waited, deleting the scope row, for a delete_item that had locked the
    recreated row and its item meanwhile, whose commit needed that recall-log lock: a deadlock
    (40P01 for one of them). forget_scope now inserts the row first, which waits for the writer's
    insert; the delete then waits for forget_scope and finds its item gone."""
    ns = ("fs", "recreated")
    scope = namespace_scope(ns)
    writer, forgetter, deleter = sessions(), sessions(), sessions()
    with admin_conn.transaction():  # the scope's recall-log lock, as a forget of its log rows holds it
        admin_conn.execute("SELECT pg_advisory_xact_lock(pgmem._recall_log_lock(%s))", (scope,))
        writer.begin(scope, directory=DEFAULT_DIRECTORY)
        writer.do(_put(ns, "a"))  # the scope row inserted, not committed
        forgotten = forgetter.start(lambda c: str(forget_scope(c, scope)))
        assert waits_for_lock(admin_conn, forgotten, forgetter.pid)
        writer.commit()
        # forget_scope holds the scope row now and waits for the recall-log lock (under load the
        # delete started before it had the row, and went first: no interleaving to test).
        assert waits_for_lock(admin_conn, forgotten, forgetter.pid, event="advisory")
        deleter.begin(scope, directory=DEFAULT_DIRECTORY)
        deleted = deleter.start(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (scope,)).fetchone())
        assert waits_for_lock(admin_conn, deleted, deleter.pid)  # the scope row, forget_scope's
    forgot = outcome(forgotten)
    assert isinstance(forgot, str), forgot
    assert outcome(deleted) == (False,)  # forgotten with the scope
    deleter.commit()
    assert deadlocks_now(admin_conn) == 0
    left = admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)).fetchone()
    assert left == (0,)


def test_a_store_read_s_ttl_refresh_holds_the_scope_row_so_forget_scope_waits_for_its_transaction(
    admin_conn: Conn, conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A read batch refreshes item a's TTL (refresh_items), then deletes b in the same
    transaction. refresh_items locked a without the scope row: forget_scope took the row, deleted
    the scope's pieces and threads, and waited for a; the delete of b then waited for the scope
    row: a deadlock. refresh_items now holds the scope row FOR KEY SHARE, as the scope's writers
    do: forget_scope waits for the reader's transaction, then forgets everything."""
    ns = ("fs", "refreshed")
    scope = namespace_scope(ns)
    store = PgmemStore(conn, embedder=MODEL, ttl=TTL)
    for key in ("a", "b"):
        store.put(ns, key, {"text": f"item {key} about pallets"})
    reader, forgetter = sessions(), sessions()
    reader.begin(scope, directory=DEFAULT_DIRECTORY)
    assert reader.do(lambda c: c.execute("SELECT pgmem.refresh_items(%s, ARRAY['a'])", (scope,)).fetchone()) == (1,)
    forgotten = forgetter.start(lambda c: str(forget_scope(c, scope)))
    assert waits_for_lock(admin_conn, forgotten, forgetter.pid)
    deleted = reader.start(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'b')", (scope,)).fetchone())
    assert outcome(deleted) == (True,)  # never waits: forget_scope waits for this transaction
    reader.commit()
    forgot = outcome(forgotten)
    assert isinstance(forgot, str), forgot
    assert deadlocks_now(admin_conn) == 0
    left = admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)).fetchone()
    assert left == (0,)


def test_store_batches_beside_forget_scope_never_deadlock(app_url: str, admin_conn: Conn) -> None:
    """Three clients' store batches (puts, deletes, gets and searches that refresh TTLs, a put
    and a get of one key in one batch) on a few keys of one namespace, beside forget_scope of
    its scope every few milliseconds, for four seconds. Before 0081 the server detected about
    18 deadlocks a minute of this (the store retries them, so only the count shows them); every
    batch must succeed and the server detect none."""
    from pgmem.db import connect

    ns = ("fs", "stress")
    scope = namespace_scope(ns)
    stop = threading.Event()
    errors: list[str] = []
    done = [0]

    def batcher(seed: int) -> None:
        rng = random.Random(seed)
        with connect(app_url) as c:
            store = PgmemStore(c, embedder=MODEL, ttl=TTL)
            while not stop.is_set():
                ops: list[Any] = []
                for _ in range(rng.randint(1, 5)):
                    roll, key = rng.random(), f"k{rng.randint(0, 6)}"
                    text = {"text": f"value {rng.random()} about pallets"}
                    if roll < 0.2:
                        ops += [PutOp(ns, key, text), GetOp(ns, key)]
                    elif roll < 0.4:
                        ops.append(PutOp(ns, key, text))
                    elif roll < 0.55:
                        ops.append(PutOp(ns, key, None))
                    elif roll < 0.9:
                        ops.append(GetOp(ns, key))
                    else:
                        ops.append(SearchOp(ns, query="pallets", limit=3))
                try:
                    store.batch(ops)
                    done[0] += 1
                except Exception as exc:
                    errors.append(f"batch: {first_line(exc)}")

    def forgetter() -> None:
        with connect(app_url) as c:
            while not stop.is_set():
                try:
                    forget_scope(c, scope)
                except Exception as exc:
                    errors.append(f"forget_scope: {first_line(exc)}")
                time.sleep(0.01)

    detected = stress(admin_conn, stop, [partial(batcher, i) for i in range(3)] + [forgetter])
    assert errors == []
    assert done[0] > 20  # the batches ran
    assert detected == 0


@pytest.mark.parametrize("name", ["x" * 201, "a\x00b", " "])
def test_forget_scope_of_a_name_no_scope_can_have_stores_nothing_and_answers_in_one_line(
    conn: Conn, admin_conn: Conn, name: str
) -> None:
    """forget_scope inserts its scope's row before locking it (0081); a name the scope table
    cannot hold is refused in one line or forgets nothing, as before, and leaves no row."""
    from pgmem.errors import PgmemError

    before = admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone()
    try:
        gone = forget_scope(conn, name)
    except PgmemError as exc:
        assert "\n" not in str(exc) and "Traceback" not in str(exc)
    else:
        assert (gone.threads, gone.turns, gone.pieces) == (0, 0, 0)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == before


def test_a_delete_whose_scope_row_a_forget_deleted_while_it_waited_looks_again_so_an_import_cannot_meet_it_halfway(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """A forget of the scope holds its row FOR UPDATE (a superuser transaction here, as
    forget_scope takes it first and deletes it last). A batch deletes item a and waits for the
    row; the forget deletes the row and commits. Before 0085 the delete found no row to lock and
    went on to a's key lock holding none; an import's page then inserted the row, stored k0 and
    waited for a's key, while the batch's put of b waited for the import's insert of the row: a
    deadlock (tests/test_langgraph_import.py's stress met it). delete_item now looks again
    (pgmem._lock_scope): the import waits for the batch, then stores its keys after it."""
    from pgmem.db import scoped

    scope = "fs-delete-loop"
    put = "SELECT pgmem.put_item(%s, %s, %s, %s::jsonb)"
    cond = "SELECT written FROM pgmem.put_item(%s, %s, %s, %s::jsonb, unless_newer_than => '2000-01-01')"
    with scoped(conn, scope), conn.transaction():
        conn.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        conn.execute(put, (scope, [scope], "k5", '{"v": 0}'))
    batch, importer = sessions(), sessions()
    forget = psycopg.connect(db_url)
    try:
        forget.execute("SELECT 1 FROM pgmem.scope WHERE scope_id = %s FOR UPDATE", (scope,))
        batch.begin(scope, directory="default")
        deleted = batch.start(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k3')", (scope,)).fetchone())
        assert waits_for_lock(admin_conn, deleted, batch.pid)  # for the scope row
        forget.execute("DELETE FROM pgmem.scope WHERE scope_id = %s", (scope,))
        forget.commit()
        assert outcome(deleted) == (False,)
        importer.begin(scope, directory="default")
        first = importer.start(lambda c: c.execute(cond, (scope, [scope], "k0", '{"v": 1}')).fetchone())
        first_waited = waits_for_lock(admin_conn, first, importer.pid)  # for the batch's scope row
        put_b = batch.start(lambda c: c.execute(put, (scope, [scope], "k7", '{"v": 2}')).fetchone())
        put_result = outcome(put_b)
        if not isinstance(put_result, BaseException):
            batch.commit()
        assert not isinstance(put_result, BaseException), f"the batch's put: {put_result!r}"
        assert first_waited
        assert outcome(first) == (True,)
        second = outcome(importer.start(lambda c: c.execute(cond, (scope, [scope], "k3", '{"v": 3}')).fetchone()))
        assert second == (False,)  # deleted after the import's time: remembered, not written again
        importer.commit()
    finally:
        forget.close()
    assert deadlocks_now(admin_conn) == 0
    keys = admin_conn.execute(
        "SELECT item_key FROM pgmem.store_item WHERE scope_id = %s ORDER BY 1", (scope,)
    ).fetchall()
    assert keys == [("k0",), ("k7",)]
