"""set_retention removing a setting beside forget_scope: no deadlock (0083).

Every writer takes its scope row before any other row (docs/architecture.md, "Lock order"), and
set_retention does when it writes a setting (the row inserted, then held FOR KEY SHARE). A
setting of all NULLs removes the scope's retention row, and did so without the scope row: the
transaction held the deleted retention row, forget_scope locked the scope row, deleted the
scope's rows and, deleting the scope row last, waited for the retention row (its foreign key
cascades), while the transaction went on to write into the scope (a put_turn) and waited for
forget_scope's scope row: a deadlock (40P01). The removal now holds the scope row FOR KEY SHARE
first, so forget_scope waits for it and then forgets what it wrote.

Run as the application login, with sessions whose steps run on threads of their own."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgmem.errors import PgmemError, database_error
from pgmem.forget import Forgotten, forget_scope
from pgmem.ingest import IngestReport, ingest_turns
from pgmem.lab.bench.churn import deadlocks
from tests.security_helpers import make_turn
from tests.test_lock_order import EMB, Session, deadlocks_now, ingest, outcome, waits_for_lock

Conn = psycopg.Connection[tuple[object, ...]]


def _count(admin: Conn, table: str, scope: str) -> int:
    row = admin.execute(f"SELECT count(*) FROM pgmem.{table} WHERE scope_id = %s", (scope,)).fetchone()
    assert row is not None
    return int(str(row[0]))


def _set_retention(scope: str, **bounds: int | None) -> Callable[[Conn], Any]:
    args = ", ".join(f"{k} => %({k})s" for k in bounds)
    query = f"SELECT * FROM pgmem.set_retention(%(scope)s{', ' if args else ''}{args})"
    return lambda c: c.execute(query, {"scope": scope, **bounds}).fetchone()


def test_removing_a_retention_setting_and_a_forget_scope_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A transaction removes its scope's retention setting (all NULL), then stores a turn;
    forget_scope of the scope starts between the two. Before 0083 the removal held the retention
    row without the scope row: forget_scope locked the scope row and waited for the retention row
    (the cascade of the scope row's delete), and the turn's put waited for the scope row: a
    deadlock. Now forget_scope waits for the transaction and forgets its turn too."""
    scope = f"lock-retention-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(scope, "t", 0, "alpha about the harbour")], EMB).inserted == 1
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        _set_retention(scope, keep_days=30)(conn)
    before = deadlocks(admin_conn)
    writer, forgetter = sessions(), sessions()

    writer.begin(scope)
    assert writer.do(_set_retention(scope)) is not None  # all NULL: the setting goes
    forgetter.begin(scope)
    forgot = forgetter.start(lambda c: forget_scope(c, scope))
    forget_waited = waits_for_lock(admin_conn, forgot, forgetter.pid)
    put = outcome(writer.start(ingest([make_turn(scope, "t", 1, "bravo, written after the removal")])))
    if isinstance(put, IngestReport):
        writer.commit()
    forgotten = outcome(forgot)
    if isinstance(forgotten, Forgotten):
        forgetter.commit()

    assert deadlocks_now(admin_conn) - before == 0
    assert isinstance(put, IngestReport), f"the put after the removal: {put!r}"
    assert isinstance(forgotten, Forgotten), f"forget_scope: {forgotten!r}"
    assert forget_waited
    assert (put.inserted, put.failed) == (1, [])
    assert (forgotten.threads, forgotten.turns) == (1, 2)  # the writer's turn, committed first
    for table in ("scope", "retention", "turn", "thread"):
        assert _count(admin_conn, table, scope) == 0, table


@pytest.mark.parametrize("scope", ["never-written", "", "x" * 201, "a\x00b", None])
def test_removing_a_retention_setting_of_a_scope_that_does_not_exist_stores_nothing(
    conn: Conn, admin_conn: Conn, scope: str | None
) -> None:
    """Removing the setting of a scope never written, or of a name no scope can have, creates no
    scope row and loses nothing stored; a name Postgres cannot take (NUL), another scope's name
    (empty, too long) or NULL is refused in one line."""
    base = f"lock-retention-none-{uuid.uuid4().hex[:8]}"
    name = f"{base}-{scope}" if scope == "never-written" else scope
    assert ingest_turns(conn, [make_turn(base, "kept", 0, "charlie about the harbour")], EMB).inserted == 1
    scopes = admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone()
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (name if name else base,))
            row = _set_retention(name)(conn)  # type: ignore[arg-type]
    except psycopg.Error as exc:  # as the library reports it (pgmem.errors.database_error)
        assert scope in ("a\x00b", None, "", "x" * 201), f"{scope!r}: {exc!r}"
        err = database_error(exc)
        assert isinstance(err, PgmemError) and "\n" not in str(err), str(err)
    else:
        assert row is not None and all(v is None for v in row)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == scopes
    assert _count(admin_conn, "turn", base) == 1
