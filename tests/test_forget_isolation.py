"""Forgets and retention run READ COMMITTED only (0113).

A forget waits for the writers of what it forgets (the lock order, docs/architecture.md), then
deletes what they wrote. Under REPEATABLE READ or SERIALIZABLE (a database or login whose
default_transaction_isolation says so) its snapshot predates that wait, so a writer that
committed meanwhile was not seen: a fact it tied to the forgotten turn outlived forget_turn
(also under SERIALIZABLE, when the writer ran READ COMMITTED, which SSI does not watch). Every
forget, and apply_retention, now refuses such a transaction (25000) before it changes anything,
as reembed_flip does (0106)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from pgmem import forget_turn
from pgmem.db import connect
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from tests.security_helpers import Conn, make_turn
from tests.test_lock_order import EMB, Session, count, outcome, waits_for_lock

SCOPE = "forget-isolation"


def _begin(level: str) -> Callable[[Conn], None]:
    def go(c: Conn) -> None:
        c.execute(f"BEGIN ISOLATION LEVEL {level}")
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))

    return go


def _facts_of_turn(admin: Conn, thread: str, turn_index: int) -> int:
    return count(
        admin,
        "SELECT count(*) FROM pgmem.fact WHERE scope_id = %s AND thread_id = %s AND turn_index = %s",
        (SCOPE, thread, turn_index),
    )


@pytest.mark.parametrize(
    ("isolation", "writer_isolation"),
    [("REPEATABLE READ", "READ COMMITTED"), ("SERIALIZABLE", "READ COMMITTED")],
)
def test_a_forget_under_a_stricter_isolation_leaves_nothing_of_a_writer_it_waited_for(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session], isolation: str, writer_isolation: str
) -> None:
    """A writer ties a fact to turn 1 of thread t, its transaction open (it holds the thread FOR
    KEY SHARE); forget_turn(t, 1) starts under the stricter isolation and waits for it; the writer
    commits. Before 0113 the forget then deleted the turn with the snapshot it had before the wait,
    and the writer's fact about the forgotten turn stayed. Now the forget is refused (25000) before
    it changes anything, and run again at READ COMMITTED it takes the fact too."""
    turns = [make_turn(SCOPE, "t", i, f"turn {i} about the harbour") for i in range(2)]
    assert ingest_turns(conn, turns, EMB).inserted == 2
    writer, forgetter = sessions(), sessions()

    writer.do(_begin(writer_isolation))
    assert len(writer.do(lambda c: add_facts(c, SCOPE, [Fact("Ann moved to Oslo", "t", 1)], EMB))) == 1
    forgetter.do(_begin(isolation))
    step = forgetter.start(lambda c: c.execute("SELECT turns, facts FROM pgmem.forget_turn(%s, 't', 1)", (SCOPE,)))
    waits_for_lock(admin_conn, step, forgetter.pid)  # for the writer (or refused at once)
    writer.commit()
    result = outcome(step)
    forgetter.do(lambda c: c.execute("ROLLBACK" if isinstance(result, BaseException) else "COMMIT"))

    # Never the forgotten turn's fact without its turn (before 0113: the turn gone, the fact kept).
    turn_left = count(admin_conn, "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s AND turn_index = 1", (SCOPE,))
    assert (turn_left, _facts_of_turn(admin_conn, "t", 1)) == (1, 1), result
    assert isinstance(result, psycopg.Error) and result.sqlstate == "25000", result
    assert f"READ COMMITTED transaction, not {isolation}" in str(result)
    assert forget_turn(conn, SCOPE, "t", 1).facts == 1  # at READ COMMITTED: all of it
    assert _facts_of_turn(admin_conn, "t", 1) == 0


def test_every_forget_and_retention_refuse_repeatable_read_in_one_line_changing_nothing(
    conn: Conn, admin_conn: Conn, app_url: str, owner: Conn
) -> None:
    assert ingest_turns(conn, [make_turn(SCOPE, "t", 0, "turn about the harbour")], EMB).inserted == 1
    fact = add_facts(conn, SCOPE, [Fact("Ann moved to Oslo", "t", 0)], EMB)[0]
    with connect(app_url) as rr:
        rr.execute("SET default_transaction_isolation = 'repeatable read'")
        for call, args in (
            ("forget_turn(%s, 't', 0)", ()),
            ("forget_thread(%s, 't')", ()),
            ("forget_fact(%s, %s)", (fact,)),
            ("forget_document(%s, 'd')", ()),
            ("forget_scope(%s)", ()),
        ):
            with pytest.raises(psycopg.Error) as err:
                rr.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
                rr.execute(f"SELECT * FROM pgmem.{call}", (SCOPE, *args))
            rr.rollback()
            name = call.split("(")[0]
            assert err.value.sqlstate == "25000"
            assert (
                err.value.diag.message_primary
                == f"{name} must run in a READ COMMITTED transaction, not REPEATABLE READ"
            )
    owner.execute("SET default_transaction_isolation = 'serializable'")
    with pytest.raises(psycopg.Error) as err:
        owner.execute("SELECT * FROM pgmem.apply_retention()")
    owner.rollback()
    primary = err.value.diag.message_primary
    assert primary == "apply_retention must run in a READ COMMITTED transaction, not SERIALIZABLE"
    assert count(admin_conn, "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s", (SCOPE,)) == 1
    assert _facts_of_turn(admin_conn, "t", 0) == 1


def test_pythons_forgets_run_read_committed_on_a_repeatable_read_login(conn: Conn, app_url: str) -> None:
    """A login whose default is REPEATABLE READ still forgets through the Python API, sync and
    async: a forget run in its own transaction is sent at READ COMMITTED (Query.read_committed).
    Inside the caller's own REPEATABLE READ transaction the refusal is one line (PgmemError)."""
    import asyncio

    from pgmem import aio, forget_scope, forget_thread
    from pgmem.errors import PgmemError

    turns = [make_turn(SCOPE, t, 0, f"turn of {t} about the harbour") for t in ("a", "b", "c")]
    assert ingest_turns(conn, turns, EMB).inserted == 3
    with connect(app_url) as rr:
        rr.execute("ALTER ROLE CURRENT_USER SET default_transaction_isolation = 'repeatable read'")
    try:
        with connect(app_url) as rr:
            assert rr.execute("SHOW default_transaction_isolation").fetchone() == ("repeatable read",)
            assert forget_turn(rr, SCOPE, "a", 0).turns == 1
            with pytest.raises(PgmemError) as err, rr.transaction():
                forget_thread(rr, SCOPE, "b")
            assert "\n" not in str(err.value) and "READ COMMITTED transaction, not REPEATABLE READ" in str(err.value)
            assert forget_thread(rr, SCOPE, "b").turns == 1

        async def go() -> int:
            async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as arr:
                return (await aio.forget_scope(arr, SCOPE)).turns

        assert asyncio.run(go()) == 1
        assert forget_scope(conn, SCOPE).turns == 0
    finally:
        with connect(app_url) as rr:
            rr.execute("ALTER ROLE CURRENT_USER RESET default_transaction_isolation")
