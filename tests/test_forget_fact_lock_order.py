"""forget_fact of a fact tied to no thread, beside forget_scope: no deadlock (0083).

Every forget takes its scope row first (docs/architecture.md, "Lock order"; 0054). forget_fact
took it only through pgmem._lock_thread, for a fact tied to a thread: a fact without one was
deleted with no scope row held, so forget_scope locked the scope row and waited for that fact
row, while the transaction that forgot it went on to write into the scope (add_facts, whose
bind_scope_model holds the scope row FOR SHARE) and waited for forget_scope: a deadlock (40P01).
forget_fact now holds the scope row first for such a fact too (pgmem._lock_scope).

Run as the application login, with sessions whose steps run on threads of their own."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg
import pytest

from pgmem import forget_fact
from pgmem.errors import PgmemError
from pgmem.facts import Fact, add_facts
from pgmem.forget import Forgotten, forget_scope
from pgmem.lab.bench.churn import deadlocks
from tests.test_lock_order import EMB, Session, deadlocks_now, outcome, waits_for_lock

Conn = psycopg.Connection[tuple[object, ...]]


def _count(admin: Conn, table: str, scope: str) -> int:
    row = admin.execute(f"SELECT count(*) FROM pgmem.{table} WHERE scope_id = %s", (scope,)).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_forget_fact_of_a_fact_without_a_thread_and_a_forget_scope_do_not_deadlock(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A transaction forgets a fact tied to no thread, then adds another; forget_scope starts
    between the two. Before 0083 the forget held the deleted fact row without the scope row:
    forget_scope locked the scope row and waited for the fact, and add_facts waited for the
    scope row (FOR SHARE): a deadlock. Now forget_scope waits for the transaction and then
    forgets the fact it added too."""
    scope = f"lock-fact-{uuid.uuid4().hex[:8]}"
    ids = add_facts(conn, scope, [Fact("the ferry leaves at nine"), Fact("the pier is closed")], EMB)
    assert len(ids) == 2
    before = deadlocks(admin_conn)
    writer, forgetter = sessions(), sessions()

    writer.begin(scope)
    assert writer.do(lambda c: forget_fact(c, scope, ids[0])).facts == 1
    forgetter.begin(scope)
    forgot = forgetter.start(lambda c: forget_scope(c, scope))
    forget_waited = waits_for_lock(admin_conn, forgot, forgetter.pid)
    added = outcome(writer.start(lambda c: add_facts(c, scope, [Fact("the ferry leaves at ten")], EMB)))
    if isinstance(added, list):
        writer.commit()
    forgotten = outcome(forgot)
    if isinstance(forgotten, Forgotten):
        forgetter.commit()

    assert isinstance(added, list), f"add_facts after the forget: {added!r}"
    assert isinstance(forgotten, Forgotten), f"forget_scope: {forgotten!r}"
    assert forget_waited
    assert len(added) == 1
    assert forgotten.facts == 2  # the second fact and the one added, committed first
    assert _count(admin_conn, "fact", scope) == 0
    assert _count(admin_conn, "scope", scope) == 0
    assert deadlocks_now(admin_conn) - before == 0


@pytest.mark.parametrize("scope_name", ["exists", "never-written"])
@pytest.mark.parametrize("fact_id", [0, 2**63 - 1, -1, None, "1"])
def test_forget_fact_of_a_fact_that_does_not_exist_leaves_no_row_and_answers_in_one_line(
    conn: Conn, admin_conn: Conn, scope_name: str, fact_id: object
) -> None:
    """A fact id the scope does not hold, or a scope never written, forgets nothing and leaves
    no scope row (pgmem._lock_scope inserts and deletes it, 0083); an id that is no integer in
    range, or NULL, is refused in one line; the scope's facts stay."""
    base = f"lock-fact-none-{uuid.uuid4().hex[:8]}"
    scope = base if scope_name == "exists" else f"{base}-never"
    assert len(add_facts(conn, base, [Fact("the harbour opens at six")], EMB)) == 1
    scopes = admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone()
    try:
        gone = forget_fact(conn, scope, fact_id)  # type: ignore[arg-type]
    except PgmemError as exc:
        assert fact_id in (-1, None, "1")
        assert "\n" not in str(exc)
    else:
        assert (gone.facts, gone.threads) == (0, 0)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == scopes
    assert _count(admin_conn, "fact", base) == 1
    assert _count(admin_conn, "scope", f"{base}-never") == 0


@pytest.mark.parametrize("scope", ["", " ", "x" * 201, "\U0001f600" * 200, "never-written"])
@pytest.mark.parametrize(
    "call",
    [
        "SELECT facts FROM pgmem.forget_fact(%s, 1)",
        "SELECT documents FROM pgmem.forget_document(%s, 'd.md')",
        "SELECT threads FROM pgmem.forget_thread(%s, 't')",
        "SELECT turns FROM pgmem.forget_turn(%s, 't', 0)",
    ],
)
def test_a_superuser_forgetting_in_a_scope_name_no_table_holds_leaves_no_row(
    admin_conn: Conn, scope: str, call: str
) -> None:
    """A superuser may forget with no pgmem.scope set (check_scope lets it name any scope), so
    pgmem._lock_scope (0083) meets names the app's Python checks refuse: empty, blank, too long,
    wide. Each forgets nothing in one statement and leaves no scope row; a name the scope table
    could hold is inserted and deleted again."""
    name = f"{scope}-{uuid.uuid4().hex[:8]}" if scope == "never-written" else scope
    scopes = admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone()
    with admin_conn.transaction():
        row = admin_conn.execute(call, (name,)).fetchone()
    assert row == (0,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == scopes
