"""The application API on the caller's connection as it is: a plain `psycopg.connect`, a
`dict_row` connection, a connection with a transaction open, a `ConnectionPool` — and the
async twin `pgmem.aio` on `AsyncConnection` and `AsyncConnectionPool`. One scenario (ingest,
recall, facts, documents, forget, a refused call) runs through every kind, sync and async,
with the same assertions; the timings are printed side by side (measured, not asserted)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgmem
import pgmem.aio
from pgmem.calls import Call, Query, run
from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.errors import ArgumentError, DatabaseError, InputError, ModelMismatchError, PgmemError, ScopeError
from pgmem.recall import recall_vectors, recall_vectors_call
from tests.helpers import sent
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, hash_vector, make_turn, role_url

EMB = HashEmbedder()
DOC = Document("guide.md", "# Guide\n\nThe freezer log is exported every night at two.\n")


def _hits(result: pgmem.Recall) -> set[tuple[str | None, int | None]]:
    return {(h.thread_id, h.turn_index) for g in result.groups for h in g.hits}


def _check_scenario(out: dict[str, Any], scope: str) -> None:
    assert out["ingest"].inserted == 3 and not out["ingest"].failed
    assert out["before"] == {("t", 0), ("t", 1), ("t", 2)}
    assert len(out["facts"]) == 1 and out["fact_hits"] == 1
    assert out["docs"].inserted == 1 and out["doc_hits"] >= 1
    assert out["forgot"].turns == 1
    assert out["after"] == {("t", 0), ("t", 2)}


def _sync_scenario(db: Any, scope: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    turns = [make_turn(scope, "t", i, f"turn {i} about the freezer log") for i in range(3)]
    out["ingest"] = pgmem.ingest_turns(db, turns, EMB)
    out["before"] = _hits(pgmem.recall(db, scope, "freezer log", EMB, floor=-1.0, x=10, mode="vector"))
    out["facts"] = pgmem.add_facts(db, scope, [pgmem.Fact("The freezer log runs nightly.")], EMB)
    out["fact_hits"] = sum(len(g.hits) for g in pgmem.fact_recall(db, scope, "freezer", EMB, floor=-1.0).groups)
    out["docs"] = add_documents(db, scope, [DOC], EMB)
    out["doc_hits"] = sum(len(g.hits) for g in search_documents(db, scope, "export", EMB, floor=-1.0).groups)
    out["forgot"] = pgmem.forget_turn(db, scope, "t", 1)
    out["after"] = _hits(pgmem.recall(db, scope, "freezer log", EMB, floor=-1.0, x=10, mode="vector"))
    return out


async def _async_scenario(db: Any, scope: str) -> dict[str, Any]:
    aio = pgmem.aio
    out: dict[str, Any] = {}
    turns = [make_turn(scope, "t", i, f"turn {i} about the freezer log") for i in range(3)]
    out["ingest"] = await aio.ingest_turns(db, turns, EMB)
    out["before"] = _hits(await aio.recall(db, scope, "freezer log", EMB, floor=-1.0, x=10, mode="vector"))
    out["facts"] = await aio.add_facts(db, scope, [pgmem.Fact("The freezer log runs nightly.")], EMB)
    out["fact_hits"] = sum(len(g.hits) for g in (await aio.fact_recall(db, scope, "freezer", EMB, floor=-1.0)).groups)
    out["docs"] = await aio.add_documents(db, scope, [DOC], EMB)
    out["doc_hits"] = sum(
        len(g.hits) for g in (await aio.search_documents(db, scope, "export", EMB, floor=-1.0)).groups
    )
    out["forgot"] = await aio.forget_turn(db, scope, "t", 1)
    out["after"] = _hits(await aio.recall(db, scope, "freezer log", EMB, floor=-1.0, x=10, mode="vector"))
    return out


@pytest.fixture
def app_url(db_url: str, conn: Conn) -> str:
    return role_url(db_url, APP_LOGIN)


SYNC_KINDS = ("plain", "dict_row", "open_transaction", "pool")


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_sync_api_on_any_connection(app_url: str, kind: str) -> None:
    scope = f"sync-{kind}"
    if kind == "pool":
        with ConnectionPool(app_url, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
            out = _sync_scenario(pool, scope)
        _check_scenario(out, scope)
        return
    conn = psycopg.connect(
        app_url, autocommit=kind != "open_transaction", row_factory=dict_row if kind == "dict_row" else None
    )
    with conn:
        adapters_before = conn.adapters.types.get("vector")
        if kind == "open_transaction":
            conn.execute("SELECT 1")  # the caller's transaction is open: pgmem works in savepoints
        out = _sync_scenario(conn, scope)
        _check_scenario(out, scope)
        # The caller's connection is as it was: no adapters added, its row factory, no scope left.
        assert conn.adapters.types.get("vector") is adapters_before is None
        assert conn.row_factory is (dict_row if kind == "dict_row" else psycopg.rows.tuple_row)
        row = conn.execute("SELECT current_setting('pgmem.scope', true) AS s").fetchone()
        assert row in ((None,), ("",), {"s": None}, {"s": ""})
        if kind == "open_transaction":
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            conn.commit()  # the turns were written in the caller's transaction: now they count
    with psycopg.connect(app_url) as check, pgmem.db.scoped(check, scope):
        assert check.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (2,)


ASYNC_KINDS = ("plain", "dict_row", "pool")


@pytest.mark.parametrize("kind", ASYNC_KINDS)
def test_async_api_on_any_connection(app_url: str, kind: str) -> None:
    scope = f"async-{kind}"

    async def main() -> dict[str, Any]:
        if kind == "pool":
            async with AsyncConnectionPool(
                app_url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
            ) as pool:
                return await _async_scenario(pool, scope)
        conn = await psycopg.AsyncConnection.connect(
            app_url, autocommit=True, row_factory=dict_row if kind == "dict_row" else None
        )
        async with conn:
            out = await _async_scenario(conn, scope)
            assert conn.adapters.types.get("vector") is None
        return out

    _check_scenario(asyncio.run(main()), scope)


def test_refusals_are_pgmem_errors_that_keep_their_sqlstate(app_url: str) -> None:
    with psycopg.connect(app_url, autocommit=True) as conn:
        pgmem.ingest_turns(conn, [make_turn("s", "t", 0, "hello")], EMB)
        with pytest.raises(ModelMismatchError) as model:
            recall_vectors(conn, "s", ["q"], hash_vector("q")[None, :], model_id="another:model")
        assert isinstance(model.value, DatabaseError) and model.value.sqlstate == "22000"
        with pytest.raises(ArgumentError) as dims:
            recall_vectors(conn, "s", ["q"], hash_vector("q", dims=8)[None, :])
        assert dims.value.sqlstate == "22000" and "8 dimensions" in str(dims.value)
        with pytest.raises(ScopeError) as scope:  # a write outside the transaction's scope
            run(conn, _write_other_scope())
        assert scope.value.sqlstate == "42501" and scope.value.hint

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            with pytest.raises(ModelMismatchError):
                await pgmem.aio.run(aconn, recall_vectors_call("s", ["q"], hash_vector("q")[None, :], model_id="x:y"))

    asyncio.run(main())


def test_caller_vectors_may_be_lists_and_bad_ones_are_one_input_error(app_url: str) -> None:
    # Part vectors travel in pgvector's binary format; rows of floats from any source work,
    # anything else is one InputError line before a query is sent.
    with psycopg.connect(app_url, autocommit=True) as conn:
        pgmem.ingest_turns(conn, [make_turn("lists", "t", 0, "the harbour cat")], EMB)
        v = EMB.embed(["harbour cat"])
        as_array = recall_vectors(conn, "lists", ["harbour cat"], v, floor=-1.0)
        as_lists = recall_vectors(conn, "lists", ["harbour cat"], v.astype(np.float64).tolist(), floor=-1.0)
        assert as_array.groups[0].hits and as_lists == as_array
        bad: list[tuple[object, str]] = [
            ([[1.0, 2.0], [1.0]], "rows of numbers"),
            ([["a"] * 384], "rows of numbers"),
            ({"a": 1}, "rows of numbers"),
            ([[[1.0]]], "one row per part"),
            (v[0], "one row per part"),
            (np.ones((1, 70000), np.float32), "at most 16000"),
        ]
        for value, message in bad:
            with pytest.raises(InputError, match=message):
                recall_vectors(conn, "lists", ["q"], value, floor=-1.0)  # type: ignore[arg-type]
        assert len(recall_vectors(conn, "lists", ["harbour cat"], v, floor=-1.0).groups[0].hits) == 1


def _write_other_scope() -> Call[object]:
    return (yield Query("s", "SELECT pgmem.reblend('other', 0.5)", one=True))


def test_wrong_kind_of_database_handle_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Connection or ConnectionPool"):
        pgmem.recall("not a connection", "s", "q", EMB)  # type: ignore[arg-type]


def test_a_handle_of_the_other_api_is_a_type_error_naming_the_right_one(app_url: str) -> None:
    """A sync connection or pool given to pgmem.aio (or an async one to the sync API) is the
    same TypeError as any other wrong handle, naming the API that takes it; not psycopg's
    "'Connection' object is not callable" from inside the driver."""

    async def main() -> list[str]:
        errors = []
        with psycopg.connect(app_url, autocommit=True) as sync_conn, ConnectionPool(app_url) as sync_pool:
            for db in (sync_conn, sync_pool):
                with pytest.raises(TypeError, match="AsyncConnection or AsyncConnectionPool") as err:
                    await pgmem.aio.recall(db, "s", "q", EMB)
                errors.append(str(err.value))
        async_conn = await psycopg.AsyncConnection.connect(app_url, autocommit=True)
        async with async_conn, AsyncConnectionPool(app_url, open=False) as async_pool:
            for handle in (async_conn, async_pool):
                with pytest.raises(TypeError, match="Connection or ConnectionPool") as err:
                    pgmem.recall(handle, "s", "q", EMB)  # type: ignore[arg-type]
                errors.append(str(err.value))
        return errors

    errors = asyncio.run(main())
    assert all("pgmem.aio" in e for e in errors[2:]) and all("sync API" in e for e in errors[:2]), errors


def test_metadata_from_jsonl_and_python_filters_recall(app_url: str, tmp_path: Any) -> None:
    """Turns carry a metadata object (JSONL "metadata", Turn.metadata); recall's
    metadata_filter keeps the turns whose metadata contains it, sync and async alike."""
    import json

    from pgmem.turns import Turn, read_jsonl

    lines = [
        {
            "scope": "m",
            "thread": "t",
            "turn": 0,
            "metadata": {"channel": "voice", "project": "atlas"},
            "messages": [{"role": "user", "content": "the freezer log"}],
        },
        {
            "scope": "m",
            "thread": "t",
            "turn": 1,
            "metadata": {"channel": "chat"},
            "messages": [{"role": "user", "content": "the freezer log again"}],
        },
        {
            "scope": "m",
            "thread": "t",
            "turn": 2,
            "metadata": ["not", "an", "object"],
            "messages": [{"role": "user", "content": "refused"}],
        },
        {
            "scope": "m",
            "thread": "t",
            "turn": 3,
            "metadata": {"big": "x" * 5000},
            "messages": [{"role": "user", "content": "refused too"}],
        },
    ]
    path = tmp_path / "meta.jsonl"
    path.write_text("\n".join(json.dumps(obj) for obj in lines) + "\n")
    failed: list[tuple[str, str]] = []
    turns = list(read_jsonl(path, failed=failed))
    turns.append(Turn("m", "t", 4, None, ({"role": "user", "content": "python side"},), metadata={"channel": "voice"}))
    assert [w for w, _ in failed] == [f"{path}:3", f"{path}:4"]
    assert "metadata must be a JSON object" in failed[0][1] and "at most 4096" in failed[1][1]
    with psycopg.connect(app_url, autocommit=True) as conn:
        report = pgmem.ingest_turns(conn, turns, EMB)
        assert report.inserted == 3 and not report.failed
        voice = pgmem.recall(conn, "m", "freezer", EMB, floor=-1.0, mode="vector", metadata_filter={"channel": "voice"})
        assert _hits(voice) == {("t", 0), ("t", 4)}
        both = pgmem.recall(
            conn,
            "m",
            "freezer",
            EMB,
            floor=-1.0,
            mode="vector",
            metadata_filter={"channel": "voice", "project": "atlas"},
        )
        assert _hits(both) == {("t", 0)}
        assert _hits(pgmem.recall(conn, "m", "freezer", EMB, floor=-1.0, mode="vector")) == {
            ("t", 0),
            ("t", 1),
            ("t", 4),
        }
        with pytest.raises(pgmem.errors.InputError, match="metadata_filter must be a JSON object"):
            pgmem.recall(conn, "m", "freezer", EMB, metadata_filter=["channel"])  # type: ignore[arg-type]
        # Changed metadata is a changed turn: stored again, and the filter follows it.
        moved = Turn("m", "t", 1, None, turns[1].messages, metadata={"channel": "voice"})
        assert pgmem.ingest_turns(conn, [moved], EMB).failed == []
        voice = pgmem.recall(conn, "m", "freezer", EMB, floor=-1.0, mode="vector", metadata_filter={"channel": "voice"})
        assert _hits(voice) == {("t", 0), ("t", 1), ("t", 4)}

    async def main() -> set[tuple[str | None, int | None]]:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as aconn:
            result = await pgmem.aio.recall(
                aconn, "m", "freezer", EMB, floor=-1.0, mode="vector", metadata_filter={"channel": "chat"}
            )
            return _hits(result)

    assert asyncio.run(main()) == set()  # turn 1 moved to voice: no chat turn left


def _round_trips(trace: Path) -> int:
    """The client's waits for the server: each Sync (the end of an extended-protocol pipeline)
    and each simple Query (BEGIN, COMMIT) it sent."""
    return sent(trace, "Sync", "Query")


def _scope_left(conn: psycopg.Connection[Any]) -> object:
    return conn.execute("SELECT coalesce(current_setting('pgmem.scope', true), '')").fetchone()


def test_a_call_on_an_autocommit_connection_is_one_round_trip_a_statement(app_url: str, tmp_path: Path) -> None:
    """On an autocommit connection (pgmem.db.connect's) a statement and its
    scope go in one round trip: the scope's setting and the statement pipelined, one Sync, one
    implicit transaction. Counted on the wire (libpq's trace): a recall is 1 round trip (4
    before: BEGIN, the scope, the statement, COMMIT); storing a new turn 2 (its hash with the
    model check, then put_turn). The scope never outlives its statement, nor a refused one's."""
    scope = "round-trips"
    trace = tmp_path / "libpq.trace"
    with psycopg.connect(app_url, autocommit=True) as c:
        pgmem.ingest_turns(c, [make_turn(scope, "t", 0, "the freezer log is exported at two")], EMB)
        vec = np.array([hash_vector("freezer log")])
        with trace.open("w") as f:
            c.pgconn.trace(f.fileno())
            try:
                hits = recall_vectors(c, scope, ["freezer log"], vec, floor=-1.0)
                recall_trips = _round_trips(trace)
                report = pgmem.ingest_turns(c, [make_turn(scope, "t", 1, "the dog is called Rex")], EMB)
                ingest_trips = _round_trips(trace) - recall_trips
            finally:
                c.pgconn.untrace()
        assert [h.turn_index for g in hits.groups for h in g.hits] == [0]
        assert report.inserted == 1
        assert (recall_trips, ingest_trips) == (1, 2)
        assert _scope_left(c) == ("",)
        # A statement the database refuses: a PgmemError, and the connection (idle, out of
        # pipeline mode, no scope left) serves the next call.
        with pytest.raises(PgmemError, match="384"):
            run(c, _wrong_size_recall(scope))
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert c.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        assert _scope_left(c) == ("",)
        assert pgmem.ingest_turns(c, [make_turn(scope, "t", 2, "the cat is called Tom")], EMB).inserted == 1
        assert len(recall_vectors(c, scope, ["freezer log"], vec, floor=-1.0, x=10).groups[0].hits) == 3


def test_turns_of_many_threads_have_their_stored_hashes_read_in_one_statement(app_url: str, tmp_path: Path) -> None:
    """Storing six new turns of six threads (`bulk=True`: one put_turns) reads their stored hashes
    in one statement, pgmem.stored_turn_hashes, not one a thread: 2 round trips (7 before). Run
    again, they are unchanged and nothing is written (1 round trip). The function itself: pairs
    of (thread, turn index), each stored one once, in the transaction's scope only, and arrays
    of different lengths are one clear error."""
    scope = "hashes-at-once"
    trace = tmp_path / "libpq.trace"
    turns = [make_turn(scope, f"t{i}", 0, f"thread {i} holds the note about parcel {i}") for i in range(6)]
    with psycopg.connect(app_url, autocommit=True) as c:
        pgmem.ingest_turns(c, [make_turn(scope, "warm", 0, "the connection's types are read once, before")], EMB)
        trips: list[int] = []
        with trace.open("w") as f:
            c.pgconn.trace(f.fileno())
            try:
                for _ in range(2):
                    before = _round_trips(trace)
                    report = pgmem.ingest_turns(c, turns, EMB, bulk=True)
                    trips.append(_round_trips(trace) - before)
            finally:
                c.pgconn.untrace()
        assert trips == [2, 1] and report.unchanged == 6
        with scoped(c, scope):
            rows = c.execute(
                "SELECT thread_id, turn_index FROM pgmem.stored_turn_hashes(%s, %s, %s) ORDER BY 1",
                (scope, ["t1", "t2", "t1", "t9", "t2"], [0, 0, 0, 0, 3]),
            ).fetchall()
            assert rows == [("t1", 0), ("t2", 0)]
            assert c.execute("SELECT count(*) FROM pgmem.stored_turn_hashes(%s, NULL, NULL)", (scope,)).fetchone() == (
                0,
            )
            assert c.execute("SELECT count(*) FROM pgmem.turn_hashes(%s, 't3', ARRAY[0, 1])", (scope,)).fetchone() == (
                1,
            )
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="2 threads for 1 turn indexes"):
                c.execute("SELECT * FROM pgmem.stored_turn_hashes(%s, ARRAY['t1', 't2'], ARRAY[0])", (scope,))
        with scoped(c, "another-scope"), pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM pgmem.stored_turn_hashes(%s, ARRAY['t1'], ARRAY[0])", (scope,))
        with scoped(c, scope), pytest.raises(psycopg.errors.CharacterNotInRepertoire):
            c.execute(b"SELECT * FROM pgmem.stored_turn_hashes('hashes-at-once', ARRAY['\xff\xfe'], ARRAY[0])")


def test_a_one_part_message_is_recalled_in_one_round_trip(app_url: str, tmp_path: Path) -> None:
    """pgmem.recall reads the model's subject cosine (pgmem.model_settings) only for a message of
    two parts or more, which it may merge into one: a one-part question is 1 round trip (2
    before), a two-part message 2."""
    scope = "one-part"
    trace = tmp_path / "libpq.trace"
    messages = ("When is the freezer log exported?", "When is the freezer log exported? And what is the dog called?")
    with psycopg.connect(app_url, autocommit=True) as c:
        pgmem.ingest_turns(c, [make_turn(scope, "t", 0, "the freezer log is exported at two"),
                               make_turn(scope, "t", 1, "the dog is called Rex")], EMB)  # fmt: skip
        pgmem.recall(c, scope, messages[0], EMB, floor=-1.0)  # the connection's types, read once
        trips: list[int] = []
        with trace.open("w") as f:
            c.pgconn.trace(f.fileno())
            try:
                for m in messages:
                    before = _round_trips(trace)
                    got = pgmem.recall(c, scope, m, EMB, floor=-1.0)
                    trips.append(_round_trips(trace) - before)
                    assert got.groups and all(g.hits for g in got.groups)
            finally:
                c.pgconn.untrace()
    assert trips == [1, 2]


def _wrong_size_recall(scope: str) -> Call[object]:
    """A recall the database refuses after the scope is set: a part vector of the wrong size."""
    rows = yield Query(scope, "SELECT * FROM pgmem.memory_recall(%s, ARRAY['[1,0]'::vector])", (scope,))
    return rows


def test_an_async_call_is_one_round_trip_too(app_url: str, tmp_path: Path) -> None:
    scope = "round-trips-async"
    trace = tmp_path / "libpq.trace"

    async def main() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as c:
            await pgmem.aio.ingest_turns(c, [make_turn(scope, "t", 0, "the freezer log is exported at two")], EMB)
            with trace.open("w") as f:
                c.pgconn.trace(f.fileno())
                try:
                    hits = await pgmem.aio.recall_vectors(
                        c, scope, ["freezer log"], np.array([hash_vector("freezer log")]), floor=-1.0
                    )
                finally:
                    c.pgconn.untrace()
            return _round_trips(trace), len(hits.groups[0].hits)

    assert asyncio.run(main()) == (1, 1)


def test_a_transaction_the_caller_broke_is_one_line_and_nothing_on_stderr(
    app_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier statement of the caller aborted its transaction: a pgmem call on that
    connection (sync, async, the LangGraph store) says so in one line (25P02) before it runs
    anything. Before, its savepoint failed with psycopg's InFailedSqlTransaction and psycopg
    logged the failed rollback of the savepoint ("error ignored in rollback ... does not exist")."""
    from pgmem.integrations.langgraph import PgmemStore

    emb = HashEmbedder()
    with psycopg.connect(app_url) as conn:  # not autocommit: the caller's transaction
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        for call in (
            lambda: pgmem.recall(conn, "s", "hello", emb),
            lambda: pgmem.ingest_turns(conn, [make_turn("s", "t", 0, "hello")], emb),
            lambda: PgmemStore(conn, embedder=emb).get(("ns",), "k"),
        ):
            with pytest.raises(DatabaseError) as err:
                call()
            assert err.value.sqlstate == "25P02" and "roll it back" in str(err.value)
        conn.rollback()
        assert pgmem.recall(conn, "s", "hello", emb).groups  # usable again

    async def main() -> str | None:
        async with await psycopg.AsyncConnection.connect(app_url) as aconn:
            with pytest.raises(psycopg.errors.DivisionByZero):
                await aconn.execute("SELECT 1 / 0")
            with pytest.raises(DatabaseError) as err:
                await pgmem.aio.recall(aconn, "s", "hello", emb)
            return err.value.sqlstate

    assert asyncio.run(main()) == "25P02"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_importing_pgmem_loads_pgvectors_adapters_so_no_thread_imports_them_later() -> None:
    """pgmem registered pgvector's types through imports inside the call (pgmem.calls.
    register_types), so the first calls of an application's threads imported
    pgvector.psycopg.halfvec while another thread imported pgvector.psycopg (`from pgmem.db import
    connect` in a handler, the MCP server's module): the two module locks taken in opposite
    orders, Python raised `_DeadlockError` in one thread and left the other's module half made
    (`cannot import name 'redact_secrets' from 'pgmem.db'`), seen with 4 store threads, asyncio
    tasks, forgets and an import at once. `import pgmem` (and the LangGraph store's module) now
    loads them, once, where the application imports pgmem."""
    for module in ("pgmem", "pgmem.integrations.langgraph", "pgmem.aio"):
        code = (
            f"import sys, {module}; "
            "assert {'pgvector.psycopg', 'pgvector.psycopg.halfvec', 'pgvector.psycopg.vector'} <= set(sys.modules)"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        assert done.returncode == 0, (module, done.stderr[-500:])
