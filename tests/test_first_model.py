"""The first registration of an embedding model the database has never seen
(pgmem.embedding_model), by several writers at once (docs/architecture.md, "Lock order"): one
transaction registering the model while another that had created a scope row waited for the
registry, and the first then asked for that scope row. A deterministic interleaving on two
sessions, then a small randomized start of every kind of client (sync and pgmem.aio ingest,
facts, documents, LangGraph store batches of one or two namespaces) in new scopes and in one
shared scope, each round with a model never seen before."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from langgraph.store.base import PutOp
from psycopg import sql

import pgmem.aio
from pgmem.db import connect, scoped
from pgmem.documents.store import Document, add_documents
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from pgmem.integrations.langgraph import PgmemStore
from pgmem.lab.bench import churn
from tests.security_helpers import DIMS, Conn, HashEmbedder, make_turn
from tests.test_lock_order import Session, outcome, waits_for_lock


def _bind(scope: str, model: str) -> Callable[[Conn], object]:
    """bind_scope_model in the session's open transaction, as a store batch binds each scope."""

    def go(c: Conn) -> object:
        c.execute(sql.SQL("SET LOCAL pgmem.scope = {}").format(sql.Literal(scope)))
        return c.execute("SELECT pgmem.bind_scope_model(%s, %s, %s)", (scope, model, DIMS)).fetchone()

    return go


def _deadlocks_settled(admin: Conn, before: int) -> int:
    """pg_stat_database.deadlocks once the sessions' backends have reported (they flush their
    counts when they end or at most a second after a transaction)."""
    time.sleep(1.2)
    admin.execute("SELECT pg_stat_clear_snapshot()")
    return churn.deadlocks(admin) - before


def test_a_batch_of_two_new_scopes_and_a_writer_of_the_second_do_not_deadlock(
    admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A store batch puts items in two new namespaces (two new scopes) with a model never seen
    before, while a third transaction registers that model (the registry's lock, held to its
    commit) and another client's first write inserts the batch's second scope's row and asks for
    the registry. Once the registrar commits, the batch registered nothing itself but took the
    lock first: it used to bind its first scope (taking the registry's lock, to its commit),
    then insert its second scope's row, which the other client held while it waited for the
    registry: a deadlock (40P01; the other client was rolled back). The batch now opens both
    scopes' rows before it binds a model, so the other client waits for the batch instead."""
    tag = uuid.uuid4().hex[:8]
    emb = HashEmbedder(model_id=f"test:first-{tag}")
    own, shared = f"first-a-{tag}", f"first-b-{tag}"
    before = churn.deadlocks(admin_conn)
    registrar, batch, writer = sessions(), sessions(), sessions()
    registrar.do(lambda c: c.execute("BEGIN"))
    registrar.do(_bind(f"first-r-{tag}", emb.model_id))
    puts = [PutOp((s,), "k", {"text": f"an item of {s}"}) for s in (own, shared)]
    stored = batch.start(lambda c: PgmemStore(c, embedder=emb).batch(puts))
    assert waits_for_lock(admin_conn, stored, batch.pid)  # for the registry
    writer.do(lambda c: c.execute("BEGIN"))
    late = writer.start(_bind(shared, emb.model_id))
    assert waits_for_lock(admin_conn, late, writer.pid)  # for the registry, or (now) the batch's row
    registrar.commit()
    got = outcome(stored)
    other = outcome(late)
    if not isinstance(other, BaseException):
        writer.commit()
    assert not isinstance(got, BaseException), f"the batch: {got!r}"
    assert not isinstance(other, BaseException), f"the other writer: {other!r}"
    assert _deadlocks_settled(admin_conn, before) == 0
    rows = admin_conn.execute(
        "SELECT count(*), count(DISTINCT piece_model_key) FROM pgmem.scope WHERE scope_id = ANY(%s)", ([own, shared],)
    ).fetchone()
    assert rows == (2, 1)
    assert count_items(admin_conn, [own, shared]) == 2


def count_items(admin: Conn, scopes: list[str]) -> int:
    row = admin.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = ANY(%s)", (scopes,)).fetchone()
    assert row is not None
    return int(str(row[0]))


KINDS = ("ingest", "bulk", "facts", "document", "store", "store2", "aio")


def _client(url: str, kind: str, scope: str, shared: str, emb: HashEmbedder, start: threading.Barrier) -> None:
    """One client's first write, in `scope` (a store2 batch: `scope` and `shared`)."""
    if kind == "aio":

        async def run() -> None:
            aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            try:
                start.wait()
                report = await pgmem.aio.ingest_turns(aconn, [make_turn(scope, "t", 0, f"aio {scope}")], emb)
                assert not report.failed, report.failed
            finally:
                await aconn.close()

        asyncio.run(run())
        return
    conn = connect(url)
    try:
        start.wait()
        if kind in ("ingest", "bulk"):
            turns = [make_turn(scope, f"t{i}", 0, f"{kind} {i} {scope}") for i in range(3 if kind == "bulk" else 1)]
            report = ingest_turns(conn, turns, emb, bulk=kind == "bulk")
            assert not report.failed, report.failed
        elif kind == "facts":
            add_facts(conn, scope, [Fact(f"fact of {scope}")], emb)
        elif kind == "document":
            add_documents(conn, scope, [Document("d.md", f"# Doc\n\nA document of {scope}.")], emb)
        else:
            spaces = [scope, shared] if kind == "store2" else [scope]
            PgmemStore(conn, embedder=emb).batch(
                [PutOp((s, "ns"), f"k-{kind}", {"text": f"item of {s}"}) for s in spaces]
            )
    finally:
        conn.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_first_writers_of_a_new_model_in_new_and_shared_scopes_do_not_deadlock(
    admin_conn: Conn, app_url: str, seed: int
) -> None:
    """Rounds of eight clients started at once, each round with a model never seen before,
    every client's first write in its own new scope or in the round's shared scope (a two
    namespace store batch: both). No call fails and the server detects no deadlock (pgmem would
    have run its own transaction again: the count is what shows a cycle)."""
    rng = random.Random(seed)
    before = churn.deadlocks(admin_conn)
    errors: list[BaseException] = []
    for round_ in range(6):
        tag = uuid.uuid4().hex[:8]
        emb = HashEmbedder(model_id=f"test:first-{tag}")
        shared = f"shared-{tag}"
        start = threading.Barrier(8)
        threads = []
        for i in range(8):
            kind = rng.choice(KINDS)
            scope = shared if rng.random() < 0.4 else f"own-{tag}-{i}"

            def go(
                kind: str = kind,
                scope: str = scope,
                shared: str = shared,
                emb: HashEmbedder = emb,
                start: threading.Barrier = start,
            ) -> None:
                try:
                    _client(app_url, kind, scope, shared, emb, start)
                except BaseException as exc:  # judged below, with the round's other calls
                    errors.append(exc)

            threads.append(threading.Thread(target=go))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, f"round {round_}: {errors[:3]!r}"
    assert _deadlocks_settled(admin_conn, before) == 0


def test_open_scope_creates_the_row_once_and_binds_no_model(app_conn: Conn, admin_conn: Conn) -> None:
    scope = f"opened-{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        with scoped(app_conn, scope):
            app_conn.execute("SELECT pgmem.open_scope(%s)", (scope,))
    rows = admin_conn.execute(
        "SELECT piece_model_key, fact_model_key FROM pgmem.scope WHERE scope_id = %s", (scope,)
    ).fetchall()
    assert rows == [(None, None)]
    with pytest.raises(psycopg.errors.NullValueNotAllowed), scoped(app_conn, scope):
        app_conn.execute("SELECT pgmem.open_scope(NULL)")
