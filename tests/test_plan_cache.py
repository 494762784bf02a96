"""Recall reads only the thread it is asked for, however the connection was used before.

PL/pgSQL caches a statement's plan per connection, and after five calls may keep a generic plan,
planned without the call's values. For "thread IS NULL OR thread_id = thread" a generic plan
cannot use the thread's index range: a connection that had run scope-wide exact searches then
read the whole scope for every thread-filtered search (a 300-piece thread of a 100,000-piece scope:
about 55 ms a part instead of 0.5). The candidate functions are planned with each call's values."""

from __future__ import annotations

import pytest

from pgmem.db import scoped
from pgmem.ingest import ingest_turns
from tests.security_helpers import Conn, HashEmbedder, app_conn, make_turn

__all__ = ["app_conn"]

SCOPE = "plans"
THREADS = 8
PER_THREAD = 60
EMB = HashEmbedder(model_id="test:hash")

#: Index entries of the piece table's indexes this backend read and has not reported yet (they
#: only grow within a transaction: the difference around one call is what the call read).
READ = """SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::bigint
            FROM pg_index i WHERE i.indrelid = 'pgmem.piece'::regclass"""


WARM = "SELECT * FROM pgmem.memory_recall(%s, %s, x => 5, floor => -1, mode => 'vector', exact => true)"


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    turns = [
        make_turn(SCOPE, f"t{t}", i, f"note {t} {i} about topic{(t * 7 + i) % 13} and item{i % 5}")
        for t in range(THREADS)
        for i in range(PER_THREAD)
    ]
    assert not ingest_turns(app_conn, turns, EMB).failed
    return app_conn


def _read(conn: Conn, sql: str, args: tuple[object, ...]) -> int:
    with scoped(conn, SCOPE):
        before = conn.execute(READ).fetchone()
        assert conn.execute(sql, args).fetchall()
        after = conn.execute(READ).fetchone()
    assert before is not None and after is not None
    return int(str(after[0])) - int(str(before[0]))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM pgmem.memory_recall(%s, %s, x => 5, floor => -1, thread => %s, mode => 'vector', exact => %s)",
        "SELECT * FROM pgmem.memory_recall(%s, %s, ARRAY['topic3 item2'], x => 5, floor => -1, thread => %s, "
        "mode => 'hybrid', exact => %s)",
        "SELECT * FROM pgmem.memory_recall(%s, %s, x => 5, floor => -1, thread => %s, mode => 'vector', exact => %s, "
        "time_from => '2000-01-01')",
    ],
    ids=["vector", "hybrid", "window"],
)
def test_a_thread_search_reads_its_thread_after_scope_wide_searches(store: Conn, sql: str) -> None:
    vecs = [EMB.embed(["topic3 item2"])[0]]
    fresh = _read(store, sql, (SCOPE, vecs, "t1", False))
    # Scope-wide exact searches, the way a service's connection also runs them: after five,
    # PL/pgSQL may keep a generic plan of the statements they share with a thread search.
    for _ in range(8):
        _read(store, sql, (SCOPE, vecs, None, True))
        _read(store, WARM, (SCOPE, vecs))
    after = _read(store, sql, (SCOPE, vecs, "t1", False))
    # Read again for the thread: at most one thread's worth more (the whole scope is 8 threads).
    assert after <= fresh + PER_THREAD, (fresh, after)
