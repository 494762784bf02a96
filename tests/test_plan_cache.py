"""Recall reads only the thread it is asked for, whatever plans the connection keeps.

PL/pgSQL caches a statement's plan per connection, and after five calls may keep a generic plan,
planned without the call's values; memory_recall keeps generic plans on purpose, for itself and
for the functions it calls that set no plan_cache_mode of their own. For "thread IS NULL OR
thread_id = thread" a generic plan cannot use the thread's index range: a connection that had
run scope-wide exact searches then read the whole scope for every thread-filtered search (a
300-piece thread of a 100,000-piece scope: about 55 ms a part instead of 0.5). Each reader of a
thread keeps its own protection, and each variant here guards one (sql/idempotent/030_recall.sql):

- vector: _memory_candidates's scope and thread are two statements (one statement for both read
  the scope's pieces);
- hybrid: _word_postings, planned once a connection scope-wide, plans a thread's statements with
  the call's values (set_config of plan_cache_mode; without it they read the scope's words);
- window: _window_candidates sets plan_cache_mode = force_custom_plan (without it, it read the
  scope's turns).

The session forces generic plans, so the plan a connection may come to keep is the one used from
the first call; the thread search is compared with the same search scope-wide, side by side on the
table its variant guards."""

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

#: Rows of a table this backend read and has not reported yet: its indexes' entries, and the
#: rows its sequential scans read (they only grow within a transaction: the difference around one
#: call is what the call read). Counting index entries alone, a scope-wide search the planner ran
#: as a sequential scan (after an autovacuum's ANALYZE of the small table) read "0" (CI, stop 59).
READ = """SELECT (SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)
                    FROM pg_index i WHERE i.indrelid = %(t)s::regclass)
                 + pg_stat_get_xact_tuples_returned(%(t)s::regclass)"""


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    turns = [
        make_turn(SCOPE, f"t{t}", i, f"note {t} {i} about topic{(t * 7 + i) % 13} and item{i % 5}")
        for t in range(THREADS)
        for i in range(PER_THREAD)
    ]
    assert not ingest_turns(app_conn, turns, EMB).failed
    return app_conn


def _read(conn: Conn, table: str, sql: str, args: tuple[object, ...]) -> int:
    with scoped(conn, SCOPE):
        before = conn.execute(READ, {"t": table}).fetchone()
        assert conn.execute(sql, args).fetchall()
        after = conn.execute(READ, {"t": table}).fetchone()
    assert before is not None and after is not None
    return int(str(after[0])) - int(str(before[0]))


@pytest.mark.parametrize(
    ("table", "sql"),
    [
        (
            "pgmem.piece",
            "SELECT * FROM pgmem.memory_recall(%s, %s, x => 5, floor => -1, thread => %s, mode => 'vector', "
            "exact => %s)",
        ),
        (
            "pgmem.piece_word",
            "SELECT * FROM pgmem.memory_recall(%s, %s, ARRAY['topic3 item2'], x => 5, floor => -1, thread => %s, "
            "mode => 'hybrid', exact => %s)",
        ),
        (
            "pgmem.turn",
            "SELECT * FROM pgmem.memory_recall(%s, %s, x => 5, floor => -1, thread => %s, mode => 'vector', "
            "exact => %s, time_from => '2000-01-01')",
        ),
    ],
    ids=["vector", "hybrid", "window"],
)
def test_a_thread_search_reads_its_thread_under_generic_plans(store: Conn, table: str, sql: str) -> None:
    store.execute("SET plan_cache_mode = force_generic_plan")
    # A thread's 60 rows of a 480-row table: after an autovacuum's ANALYZE the planner may read a
    # table this small whole (a sequential scan), for the thread as for the scope (CI, ciAV: the
    # window variant read 480 and 480). Index scans only, so what is read is what the plan selects.
    store.execute("SET enable_seqscan = off")
    vecs = [EMB.embed(["topic3 item2"])[0]]
    scope_wide = _read(store, table, sql, (SCOPE, vecs, None, True))
    thread = _read(store, table, sql, (SCOPE, vecs, "t1", False))
    # The thread search skips the other seven threads' rows the scope-wide search reads (all
    # of them but a thread's worth of margin); a generic plan of "thread IS NULL OR thread_id =
    # thread" reads as many as scope-wide.
    assert scope_wide - thread >= (THREADS - 2) * PER_THREAD, (table, scope_wide, thread)
