"""Mutation review of the fact plane (pgmem.facts, pgmem.add_facts / fact_recall) and of the
one-implementation sync/async layer (pgmem.calls, pgmem.aio): the behaviours a plausible slip
would break that no other test pinned, each run the same on a sync connection, an async one,
a pool and an async pool, as the app's login, with the tests' HashEmbedder.

- every fact keeps its own thread, turn and section, and comes back with them;
- fact_recall keeps x, the floor (inclusive), the thread filter, the ranks by cosine and the
  score (1 + cosine) / 2, and says why it found nothing;
- the fact plane checks its own model (not the memory plane's), on writes and on reads;
- every pgmem.aio function runs its sync namesake's call (same results);
- a transaction the caller opened stays the caller's: pgmem neither commits it nor leaves its
  scope set in it (nor after it), and a refusal inside it leaves it usable;
- a pool gets its connection back, after an error too;
- a lost race inside the caller's transaction is a ConflictError, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgmem
import pgmem.aio
from pgmem.documents.store import Document, add_documents, remove_document, search_documents, search_vectors
from pgmem.embedders.base import FloatArray
from pgmem.errors import ConflictError, InputError, ModelMismatchError
from pgmem.facts import Fact
from pgmem.recall import recall_vectors
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, ensure_login_roles, hash_vector, make_turn, role_url

EMB = HashEmbedder()
KINDS = ("sync", "async", "pool", "async_pool")

#: The sync twin of each pgmem.aio API function.
SYNC: dict[str, Callable[..., Any]] = {
    "add_documents": add_documents,
    "add_facts": pgmem.add_facts,
    "fact_recall": pgmem.fact_recall,
    "forget_document": pgmem.forget_document,
    "forget_fact": pgmem.forget_fact,
    "forget_scope": pgmem.forget_scope,
    "forget_thread": pgmem.forget_thread,
    "forget_turn": pgmem.forget_turn,
    "ingest_turns": pgmem.ingest_turns,
    "recall": pgmem.recall,
    "recall_vectors": recall_vectors,
    "reembed": pgmem.reembed,
    "remove_document": remove_document,
    "search_documents": search_documents,
    "search_vectors": search_vectors,
    "stats": pgmem.stats,
}


def call(kind: str, url: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """pgmem's `name` on a fresh handle of `kind`: the sync function on a connection or pool,
    pgmem.aio's on an async connection or pool."""
    if kind == "sync":
        with psycopg.connect(url, autocommit=True) as conn:
            return SYNC[name](conn, *args, **kwargs)
    if kind == "pool":
        with ConnectionPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
            return SYNC[name](pool, *args, **kwargs)

    async def main() -> Any:
        fn = getattr(pgmem.aio, name)
        if kind == "async":
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
                return await fn(aconn, *args, **kwargs)
        async with AsyncConnectionPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False) as apool:
            return await fn(apool, *args, **kwargs)

    return asyncio.run(main())


def _facts_of(admin_conn: Conn, scope: str) -> list[tuple[object, ...]]:
    return admin_conn.execute(
        "SELECT fact_id, thread_id, turn_index, section, body FROM pgmem.fact WHERE scope_id = %s ORDER BY fact_id",
        (scope,),
    ).fetchall()


def _hits(result: pgmem.Recall) -> list[list[tuple[object, ...]]]:
    return [[(h.piece_id, h.thread_id, h.turn_index, h.label, h.body) for h in g.hits] for g in result.groups]


@pytest.mark.parametrize("kind", KINDS)
def test_each_fact_keeps_its_own_thread_turn_and_section(app_url: str, admin_conn: Conn, kind: str) -> None:
    """Each fact is stored with, and recalled with, its own thread, turn and section (a fact's
    field sent in another's list, or dropped, stored it tied to the wrong thing)."""
    scope = f"fields-{kind}"
    facts = [
        Fact("The ferry leaves at nine.", "trip", 1, "ferry.md"),
        Fact("The bus is late.", "commute", 7),
        Fact("Deploys need a token.", section="runbook.md#deploys"),
        Fact("The user likes tea.", "trip"),
        Fact("The cat is called Tom.", "pets", np.int64(2)),  # type: ignore[arg-type]
    ]
    ids = call(kind, app_url, "add_facts", scope, facts, EMB)
    assert len(ids) == 5
    expected = [(i, f.thread, None if f.turn_index is None else int(f.turn_index), f.section, f.body)
                for i, f in zip(ids, facts, strict=True)]  # fmt: skip
    assert _facts_of(admin_conn, scope) == expected
    result = call(kind, app_url, "fact_recall", scope, "ferry bus tea", EMB, floor=-1.0, x=10)
    assert len(result.groups) == 1
    assert sorted(_hits(result)[0]) == sorted((i, t, n, s or "", b) for i, t, n, s, b in expected)
    assert all(type(h.turn_index) is int for h in result.groups[0].hits if h.turn_index is not None)
    # Idempotent by the whole content: the same facts store nothing; another turn is another fact.
    assert call(kind, app_url, "add_facts", scope, facts, EMB) == []
    assert len(call(kind, app_url, "add_facts", scope, [Fact("The bus is late.", "commute", 8)], EMB)) == 1
    assert len(_facts_of(admin_conn, scope)) == 6


@pytest.mark.parametrize("kind", KINDS)
def test_fact_recall_keeps_x_the_floor_and_the_thread(app_url: str, kind: str) -> None:
    """x caps each part's group, the floor is inclusive (a fact whose cosine equals it is kept),
    the thread filter keeps that thread's facts only, ranks follow the cosine and a hit's score is
    (1 + cosine) / 2."""
    scope = f"recall-{kind}"
    bodies = [f"fact number {i} about the harbour" for i in range(8)]
    facts = [Fact(b, "even" if i % 2 == 0 else "odd", i) for i, b in enumerate(bodies)]
    call(kind, app_url, "add_facts", scope, facts, EMB)
    everything = call(kind, app_url, "fact_recall", scope, "harbour", EMB, floor=-1.0, x=20).groups[0].hits
    assert len(everything) == 8
    assert [h.rank for h in everything] == list(range(1, 9))
    cosines = [h.cosine for h in everything]
    assert cosines == sorted(cosines, reverse=True) and len(set(cosines)) == 8
    for h in everything:
        assert -1.0 <= h.cosine <= 1.0 and math.isclose(h.score, (1 + h.cosine) / 2, abs_tol=1e-9)

    def ids(**kwargs: Any) -> list[int]:
        result = call(kind, app_url, "fact_recall", scope, "harbour", EMB, **kwargs)
        return [h.piece_id for g in result.groups for h in g.hits]

    all_ids = [h.piece_id for h in everything]
    assert ids(floor=-1.0, x=3) == all_ids[:3]
    assert ids(floor=cosines[2], x=20) == all_ids[:3]  # the floor itself is kept
    assert ids(floor=float(np.nextafter(cosines[2], 2.0)), x=20) == all_ids[:2]
    odd = [h.piece_id for h in everything if h.thread_id == "odd"]
    assert ids(floor=-1.0, x=20, thread="odd") == odd and len(odd) == 4
    assert ids(floor=-1.0, x=2, thread="even") == [h.piece_id for h in everything if h.thread_id == "even"][:2]

    def why(scope_: str, **kwargs: Any) -> tuple[str | None, bool]:
        result = call(kind, app_url, "fact_recall", scope_, "harbour", EMB, **kwargs)
        assert not any(g.hits for g in result.groups)
        return result.empty_reason, result.nothing_searched

    assert why(scope, thread="nobody") == ("thread_empty", True)
    assert why(f"nothing-{kind}") == ("scope_empty", True)
    assert why(scope, floor=float(np.nextafter(cosines[0], 2.0))) == ("below_floor", False)


@pytest.mark.parametrize("kind", KINDS)
def test_the_fact_plane_checks_its_own_model(app_url: str, kind: str) -> None:
    """Facts are bound to their own model, not the memory plane's: a scope whose turns were
    stored with one model takes facts of another. The facts' model is then checked: adding or
    searching facts with a third model is a ModelMismatchError on every kind of handle."""
    scope = f"model-{kind}"
    memory_model = HashEmbedder(model_id="test:memory-model")
    assert call(kind, app_url, "ingest_turns", [make_turn(scope, "t", 0, "the harbour")], memory_model).inserted == 1
    assert len(call(kind, app_url, "add_facts", scope, [Fact("The harbour opens at six.")], EMB)) == 1
    assert call(kind, app_url, "fact_recall", scope, "harbour", EMB, floor=-1.0).groups[0].hits
    other = HashEmbedder(model_id="test:another-model")
    with pytest.raises(ModelMismatchError):
        call(kind, app_url, "fact_recall", scope, "harbour", other, floor=-1.0)
    with pytest.raises(ModelMismatchError):
        call(kind, app_url, "add_facts", scope, [Fact("The harbour closes at ten.")], other)
    with pytest.raises(InputError, match="x"):
        call(kind, app_url, "fact_recall", scope, "harbour", EMB, x=0)


def _scenario(kind: str, url: str, scope: str) -> list[object]:
    """Every pgmem.aio API function (or its sync twin), in order, results without the scope's
    own ids and name."""
    docs = [
        Document("a.md", "# A\n\nThe freezer log is exported every night at two.\n"),
        Document("b.md", "# B\n\nThe dog is walked at seven.\n"),
    ]
    turns = [make_turn(scope, "t", i, f"turn {i} about the freezer log") for i in range(3)]
    turns.append(make_turn(scope, "u", 0, "another thread about the dog"))
    out: list[object] = []

    def hits(result: Any) -> list[object]:
        return [[(h.thread_id, h.turn_index, h.label, h.body, round(h.cosine, 4)) for h in g.hits]
                for g in result.groups]  # fmt: skip

    def run(name: str, *args: Any, **kwargs: Any) -> Any:
        return call(kind, url, name, scope, *args, **kwargs) if name != "ingest_turns" else call(kind, url, name, *args)

    out.append(dataclasses.astuple(run("ingest_turns", turns, EMB)))
    out.append(hits(run("recall", "freezer log", EMB, floor=-1.0, x=10, mode="vector")))
    out.append(hits(run("recall_vectors", ["freezer log"], np.array([hash_vector("freezer log")]), floor=-1.0)))
    fact_ids = run("add_facts", [pgmem.Fact("The freezer log runs nightly.", "u", 0), pgmem.Fact("Rex.")], EMB)
    out.append(len(fact_ids))
    out.append(hits(run("fact_recall", "freezer", EMB, floor=-1.0)))
    out.append(run("add_documents", docs, EMB).inserted)
    found = run("search_documents", "freezer export", EMB, floor=-1.0)
    out.append(
        [[(h.document_id, h.chunk_body, h.span_start, round(h.cosine, 4)) for h in g.hits] for g in found.groups]
    )
    found = run("search_vectors", ["freezer export"], np.array([hash_vector("freezer export")]), floor=-1.0)
    out.append([[(h.document_id, h.chunk_body, round(h.cosine, 4)) for h in g.hits] for g in found.groups])
    out.append([dataclasses.replace(s, scope_id="") for s in run("stats")])
    out.append(run("forget_turn", "t", 1))
    out.append(run("forget_fact", fact_ids[1]))
    out.append(run("forget_thread", "u"))
    out.append(run("remove_document", "a.md"))
    out.append(run("forget_document", "b.md"))
    out.append(dataclasses.replace(run("reembed", HashEmbedder(model_id="test:hash-2")), scope="", seconds=0.0))
    out.append(run("forget_scope"))
    return out


def test_every_aio_function_runs_its_sync_namesakes_call(app_url: str) -> None:
    """pgmem.aio's functions (all of them) give what their sync namesakes give on the same data:
    a twin bound to another call (forget_thread running forget_scope's, fact_recall recall's) is
    caught here."""
    names = {
        n for n in pgmem.aio.__all__ if n not in ("asynchronous", "connection_lock", "local_step", "run", "scoped")
    }
    assert names == set(SYNC)
    expected = _scenario("sync", app_url, "twins-sync")
    assert _scenario("async", app_url, "twins-async") == expected
    assert _scenario("async_pool", app_url, "twins-async-pool") == expected


def _scope_now(conn: Any) -> object:
    return conn.execute("SELECT coalesce(current_setting('pgmem.scope', true), '')").fetchone()[0]


def _count(url: str, scope: str) -> int:
    with psycopg.connect(url, autocommit=True) as c, pgmem.db.scoped(c, scope):
        row = c.execute("SELECT count(*) FROM pgmem.fact").fetchone()
    assert row is not None
    return int(str(row[0]))


class _Rollback(Exception):
    """Raised in the caller's `conn.transaction()` block to roll it back."""


@pytest.mark.parametrize("autocommit", [False, True], ids=["open-transaction", "autocommit-in-transaction"])
def test_the_callers_transaction_stays_the_callers_sync(app_url: str, autocommit: bool) -> None:
    """In a transaction the caller opened (by a first statement on a non-autocommit connection,
    or conn.transaction() on an autocommit one), pgmem writes inside it: the caller's rollback
    undoes them and its commit keeps them. pgmem's scope is never left set in it (the caller's
    own scope is put back, after a refused call too) nor after it."""
    scope = f"caller-sync-{autocommit}"

    def once(conn: psycopg.Connection[Any], keep: bool) -> None:
        conn.execute("SELECT set_config('pgmem.scope', 'mine', true)")
        assert len(pgmem.add_facts(conn, scope, [Fact(f"kept={keep}")], EMB)) == 1
        assert _scope_now(conn) == "mine"
        assert (
            len(pgmem.fact_recall(conn, scope, "kept", EMB, floor=-1.0).groups[0].hits) == 1
        )  # the rolled-back fact is gone
        with pytest.raises(ModelMismatchError):
            pgmem.fact_recall(conn, scope, "kept", HashEmbedder(model_id="x:y"))
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert _scope_now(conn) == "mine"
        assert _count(app_url, scope) == 0  # not committed by pgmem

    with psycopg.connect(app_url, autocommit=autocommit) as conn:
        for keep in (False, True):
            if autocommit:
                try:
                    with conn.transaction():
                        once(conn, keep)
                        if not keep:
                            raise _Rollback
                except _Rollback:
                    pass
            else:
                once(conn, keep)
                conn.commit() if keep else conn.rollback()
            assert _count(app_url, scope) == int(keep)
        assert _scope_now(conn) == ""


@pytest.mark.parametrize("autocommit", [False, True], ids=["open-transaction", "autocommit-in-transaction"])
def test_the_callers_transaction_stays_the_callers_async(app_url: str, autocommit: bool) -> None:
    """The async twin of the test above, on an AsyncConnection."""
    scope = f"caller-async-{autocommit}"

    async def scope_now(conn: psycopg.AsyncConnection[Any]) -> object:
        row = await (await conn.execute("SELECT coalesce(current_setting('pgmem.scope', true), '')")).fetchone()
        return row[0] if row else None

    async def once(conn: psycopg.AsyncConnection[Any], keep: bool) -> None:
        await conn.execute("SELECT set_config('pgmem.scope', 'mine', true)")
        assert len(await pgmem.aio.add_facts(conn, scope, [Fact(f"kept={keep}")], EMB)) == 1
        assert await scope_now(conn) == "mine"
        found = await pgmem.aio.fact_recall(conn, scope, "kept", EMB, floor=-1.0)
        assert len(found.groups[0].hits) == 1  # the rolled-back fact is gone
        with pytest.raises(ModelMismatchError):
            await pgmem.aio.fact_recall(conn, scope, "kept", HashEmbedder(model_id="x:y"))
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert await scope_now(conn) == "mine"
        assert _count(app_url, scope) == 0  # not committed by pgmem

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=autocommit) as conn:
            for keep in (False, True):
                if autocommit:
                    try:
                        async with conn.transaction():
                            await once(conn, keep)
                            if not keep:
                                raise _Rollback
                    except _Rollback:
                        pass
                else:
                    await once(conn, keep)
                    await (conn.commit() if keep else conn.rollback())
                assert _count(app_url, scope) == int(keep)
            assert await scope_now(conn) == ""

    asyncio.run(main())


def test_a_pool_gets_its_connection_back_after_every_call(app_url: str) -> None:
    """A pool of one connection serves call after call, a refused one included: each call's
    connection goes back to the pool when the call ends."""
    calls: list[Callable[[Any], object]] = [
        lambda db: pgmem.add_facts(db, "pool", [Fact("The pool is one connection.")], EMB),
        lambda db: pgmem.fact_recall(db, "pool", "pool", HashEmbedder(model_id="x:y")),
        lambda db: pgmem.fact_recall(db, "pool", "pool", EMB, x=0),
        lambda db: pgmem.fact_recall(db, "pool", "pool", EMB, floor=-1.0),
    ]
    with ConnectionPool(app_url, min_size=1, max_size=1, timeout=30, kwargs={"autocommit": True}) as pool:
        pool.wait()
        for fn in calls * 2:
            with contextlib.suppress(ModelMismatchError, InputError):
                fn(pool)
            stats = pool.get_stats()
            assert stats["pool_available"] == stats["pool_size"] == 1, stats

    async def main() -> None:
        async with AsyncConnectionPool(
            app_url, min_size=1, max_size=1, timeout=30, kwargs={"autocommit": True}, open=False
        ) as apool:
            await apool.wait()
            for kwargs in ({"floor": -1.0}, {"x": 0}, {"floor": 2.0}) * 2:
                with contextlib.suppress(InputError):
                    await pgmem.aio.fact_recall(apool, "pool", "pool", EMB, **kwargs)
                stats = apool.get_stats()
                assert stats["pool_available"] == stats["pool_size"] == 1, stats

    asyncio.run(main())


def test_a_lost_race_in_the_callers_transaction_is_a_conflict_error(app_url: str) -> None:
    """A repeatable-read transaction of the caller that adds a fact another session added after
    its snapshot loses the race (40001): a ConflictError for the caller to run its transaction
    again, sync and async alike (not psycopg's SerializationFailure). (A forget under REPEATABLE
    READ is refused since 0113, 25000: tests/test_forget_isolation.py.)"""
    with psycopg.connect(app_url, autocommit=True) as other:
        pgmem.add_facts(other, "race", [Fact("first")], EMB)
    with psycopg.connect(app_url) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT 1")  # the caller's transaction: its snapshot is taken here
        assert len(pgmem.fact_recall(conn, "race", "first", EMB, floor=-1.0).groups[0].hits) == 1  # the snapshot
        with psycopg.connect(app_url, autocommit=True) as other:
            assert len(pgmem.add_facts(other, "race", [Fact("second")], EMB)) == 1
        with pytest.raises(ConflictError) as err:
            pgmem.add_facts(conn, "race", [Fact("second")], EMB)
        assert err.value.sqlstate == "40001"
        conn.rollback()

    async def main() -> str | None:
        async with await psycopg.AsyncConnection.connect(app_url) as aconn:
            await aconn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await aconn.execute("SELECT 1")
            found = await pgmem.aio.fact_recall(aconn, "race", "second", EMB, floor=-1.0)
            assert len(found.groups[0].hits) == 2
            with psycopg.connect(app_url, autocommit=True) as other:
                assert len(pgmem.add_facts(other, "race", [Fact("third")], EMB)) == 1
            with pytest.raises(ConflictError) as aerr:
                await pgmem.aio.add_facts(aconn, "race", [Fact("third")], EMB)
            await aconn.rollback()
            return aerr.value.sqlstate

    assert asyncio.run(main()) == "40001"


def test_facts_search_cli_keeps_x(
    admin_conn: Conn, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pgmem facts search -x N` keeps N hits a part (the configured model, the app's login)."""
    from pgmem.cli import main

    ensure_login_roles(admin_conn)
    monkeypatch.setenv("DATABASE_URL", role_url(db_url, APP_LOGIN))
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(f'{{"body": "The user has dog number {i}."}}\n' for i in range(4)), encoding="utf-8")
    assert main(["facts", "add", str(path), "--scope", "cli-x"]) == 0
    capsys.readouterr()
    for x in (1, 3):
        assert (
            main(["facts", "search", "which dogs?", "--scope", "cli-x", "-x", str(x), "--floor", "-1", "--json"]) == 0
        )
        groups = json.loads(capsys.readouterr().out)["groups"]
        assert [len(g["hits"]) for g in groups] == [x]
    # --thread keeps the facts tied to that thread (it had none: every fact of the scope came back)
    tied = tmp_path / "tied.jsonl"
    tied.write_text('{"body": "The user walks dog number 9 at noon.", "thread": "walks"}\n', encoding="utf-8")
    assert main(["facts", "add", str(tied), "--scope", "cli-x"]) == 0
    capsys.readouterr()
    args = ["facts", "search", "which dogs?", "--scope", "cli-x", "-x", "5", "--floor", "-1", "--json"]
    assert main([*args, "--thread", "walks"]) == 0
    hits = json.loads(capsys.readouterr().out)["groups"][0]["hits"]
    assert [h["body"] for h in hits] == ["The user walks dog number 9 at noon."]
    assert main([*args, "--thread", "runs"]) == 1  # a thread without facts says so, as recall's
    assert json.loads(capsys.readouterr().out)["empty_reason"] == "thread_empty"


class _Scaled(HashEmbedder):
    """The HashEmbedder's vectors three times as long: a model that does not normalise."""

    def embed(self, texts: Sequence[str]) -> FloatArray:
        out: FloatArray = super().embed(texts) * np.float32(3.0)
        return out


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_facts_cosine_does_not_depend_on_its_vectors_length(app_url: str, kind: str) -> None:
    """Facts are stored at unit length: a model whose vectors are not unit vectors gets the
    cosines a normalising one gets (a raw inner product of 3 would pass any floor)."""
    facts = [Fact(f"fact {i} about the harbour") for i in range(4)]
    cosines = {}
    for name, emb in (("unit", EMB), ("scaled", _Scaled())):
        call(kind, app_url, "add_facts", f"length-{kind}-{name}", facts, emb)
        result = call(kind, app_url, "fact_recall", f"length-{kind}-{name}", "harbour", emb, floor=-1.0)
        cosines[name] = [(h.body, round(h.cosine, 3)) for h in result.groups[0].hits]
    assert cosines["scaled"] == cosines["unit"] and len(cosines["unit"]) == 4


class _Asymmetric(HashEmbedder):
    """A model with a query side of its own (as e5's "query: " prefix) and an `aembed`
    coroutine for its passages, as pgmem.aio awaits one."""

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        return super().embed([f"query: {t}" for t in texts])

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        return self.embed(texts)


def test_an_async_embedder_embeds_queries_on_their_own_side(app_url: str) -> None:
    """pgmem.aio awaits an embedder's `aembed` for what is stored only: a query is embedded on
    the query side (embed_queries) as the sync API embeds it, so both find the same facts with
    the same cosines."""
    emb = _Asymmetric()
    facts = [Fact("query: harbour"), Fact("harbour"), Fact("the bus is late")]
    got = {}
    for kind in ("sync", "async"):
        call(kind, app_url, "add_facts", f"sides-{kind}", facts, emb)
        result = call(kind, app_url, "fact_recall", f"sides-{kind}", "harbour", emb, floor=-1.0)
        got[kind] = [(h.body, round(h.cosine, 3)) for h in result.groups[0].hits]
    assert got["async"] == got["sync"]
    assert got["sync"][0] == ("query: harbour", 1.0)  # the query side's own vector
