"""apply_retention beside the application's writes of the same scope (rt70).

apply_retention runs as one transaction over every scope with a setting, a scope after another;
the application meanwhile writes, changes its setting and forgets. Two interleavings, each
driven step by step (tests/test_lock_order.py's sessions), as the application login:

- a setting removed (or the scope forgotten) while retention works on an earlier scope: the
  scope keeps everything from the removal's commit on, and retention, which had read every
  setting at its start, removed its old turns all the same;
- a transaction that writes its scope's setting, then a turn of a thread retention expires:
  retention locked the thread, then waited for the setting's row to record when it was applied,
  while the turn waited for the thread (a deadlock, 40P01)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pgmem.ingest import IngestReport, ingest_turns
from pgmem.lab.bench import churn
from pgmem.turns import Turn
from tests.security_helpers import APP_LOGIN, Conn, role_url
from tests.test_lock_order import (
    EMB,
    RETENTION_LOGIN,
    Session,
    count,
    ingest,
    outcome,
    turns_of,
    waits_for_lock,
)


def _old_turns(scope: str, thread: str, n: int) -> list[Turn]:
    old = datetime.now(UTC) - timedelta(days=400)
    return [
        Turn(scope, thread, i, old, ({"role": "user", "content": f"{thread} turn {i} about the ferry"},))
        for i in range(n)
    ]


def _set_retention(scope: str, **bounds: int) -> Callable[[Conn], object]:
    args = "".join(f", {k} => %({k})s" for k in bounds)
    return lambda c: c.execute(
        f"SELECT * FROM pgmem.set_retention(%(scope)s{args})", {"scope": scope, **bounds}
    ).fetchone()


def _apply(c: Conn) -> list[tuple[object, ...]]:
    return c.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall()


def test_retention_keeps_a_scope_whose_setting_was_removed_while_it_ran(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """Scopes a and b keep 30 days; retention is held at a (a writer's open turn of its expiring
    thread) when b's application removes b's setting and commits. b keeps everything from then
    on: its 400-day-old turns stay. Retention read every setting at its start and removed them."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    tag = uuid.uuid4().hex[:8]
    a, b = f"rt-a-{tag}", f"rt-b-{tag}"  # a before b, bytewise
    assert ingest_turns(conn, _old_turns(a, "x", 1) + _old_turns(b, "y", 2), EMB).inserted == 3
    for scope in (a, b):
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            _set_retention(scope, keep_days=30)(conn)
    writer, remover, keeper = sessions(), sessions(), Session(role_url(db_url, RETENTION_LOGIN))
    try:
        writer.begin(a)
        writer.do(ingest(_old_turns(a, "x", 2)[1:]))  # holds thread x of a
        expire = keeper.start(_apply)
        assert waits_for_lock(admin_conn, expire, keeper.pid)  # at a, before b
        remover.begin(b)
        assert remover.do(_set_retention(b)) is not None  # all NULL: b keeps everything
        remover.commit()
        writer.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert turns_of(admin_conn, a, "x") == []
    assert turns_of(admin_conn, b, "y") == [0, 1], expired
    assert count(admin_conn, "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s", (b,)) == 2


def test_a_setting_then_a_turn_of_an_expiring_thread_do_not_deadlock_with_retention(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """A transaction sets its scope's retention, then stores turn 2 of thread x, whose turns 0
    and 1 retention removes (keep 30 days). Retention starts between the two: it removes x's
    turns, then waited for the setting's row (its applied_at) while the turn waited for x: a
    deadlock. Now it leaves applied_at as it was while the row is held, and finishes first."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"rt-dl-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, _old_turns(scope, "x", 2), EMB).inserted == 2
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        _set_retention(scope, keep_days=30)(conn)
    writer, keeper = sessions(), Session(role_url(db_url, RETENTION_LOGIN))
    try:
        writer.begin(scope)
        writer.do(_set_retention(scope, keep_days=30, log_keep_rows=100))
        expire = keeper.start(_apply)
        waited = waits_for_lock(admin_conn, expire, keeper.pid)
        put = outcome(writer.start(ingest([Turn(scope, "x", 2, None, ({"role": "user", "content": "x turn 2"},))])))
        if isinstance(put, IngestReport):
            writer.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert isinstance(put, IngestReport) and (put.inserted, put.failed) == (1, []), f"the put: {put!r}"
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert not waited  # for nothing: the setting's row is the writer's, and applied_at is left as it was
    assert (scope, 2) in expired
    assert turns_of(admin_conn, scope, "x") == [2]
    assert (
        count(admin_conn, "SELECT count(*) FROM pgmem.retention WHERE scope_id = %s AND applied_at IS NULL", (scope,))
        == 1
    )


def test_a_turn_stored_while_retention_waits_keeps_its_fact_and_a_threads_old_fact_goes(
    conn: Conn, admin_conn: Conn, db_url: str, sessions: Callable[[], Session]
) -> None:
    """Thread x holds two facts stored 40 days ago (keep 30 days), one about turn 3, which is not
    stored, and one about the thread only (0117: such facts outlived every keep_days). A writer
    stores turn 3 and holds thread x while retention starts: retention waits for the thread, then
    reads the facts again, so the fact of the turn just stored stays and the thread's goes."""
    churn.ensure_logins(admin_conn, APP_LOGIN, RETENTION_LOGIN)
    scope = f"rt-fa-{uuid.uuid4().hex[:8]}"
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        conn.execute(
            "SELECT pgmem.add_facts(%s, %s, ARRAY['about turn 3', 'about thread x'],"
            " ARRAY[%s::vector, %s::vector], ARRAY['x', 'x'], ARRAY[3, NULL])",
            (scope, EMB.model_id, *(str(v.tolist()) for v in EMB.embed(["turn 3", "thread x"]))),
        )
        _set_retention(scope, keep_days=30)(conn)
    admin_conn.execute("UPDATE pgmem.fact SET created_at = now() - interval '40 days' WHERE scope_id = %s", (scope,))
    writer, keeper = sessions(), Session(role_url(db_url, RETENTION_LOGIN))
    try:
        writer.begin(scope)
        writer.do(ingest([Turn(scope, "x", 3, None, ({"role": "user", "content": "x turn 3"},))]))
        expire = keeper.start(lambda c: c.execute("SELECT scope_id, facts FROM pgmem.apply_retention()").fetchall())
        waited = waits_for_lock(admin_conn, expire, keeper.pid)
        writer.commit()
        expired = outcome(expire)
    finally:
        keeper.close()
    assert not isinstance(expired, BaseException), f"retention: {expired!r}"
    assert waited and expired == [(scope, 1)]
    left = admin_conn.execute("SELECT body FROM pgmem.fact WHERE scope_id = %s", (scope,)).fetchall()
    assert left == [("about turn 3",)] and turns_of(admin_conn, scope, "x") == [3]
