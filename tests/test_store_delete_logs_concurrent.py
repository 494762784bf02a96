"""Store deletes whose recall-log rows go at their commit (0073, 0076: the deferred trigger
store_item_logs_at_commit) beside every other writer of the same scopes' recall logs: store
batches deleting several items of two scopes each (and putting new ones), recalls logged over
the scopes and filtered to item threads, forgets of item threads, ingests of a chat thread, and
the maintenance login's apply_retention (keep two chat turns) and sweep_expired_items (items put
with a TTL that expires within their put). Each client is a thread on its own app-login
connection, a seeded random mix, a fixed number of operations.

Checked after the run: the server detected no deadlock in this database (pg_stat_database; the
store retries one, so a client's success alone would hide it); no call failed; no recall-log row
holds a hit of an item whose delete or forget was acknowledged (the copies of deleted text must
not survive its commit); and the log rows that name no deleted item's thread and were not
trimmed are all still there (a delete forgets nothing else's). Would catch: a commit-time lock
order that deadlocks with retention, the sweep or a forget (two scopes' recall-log locks taken
in different orders); a delete whose log rows survive when its trigger meets another writer; a
delete forgetting log rows of items still stored."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langgraph.store.postgres", reason="the [langgraph] extra is not installed")

from langgraph.store.base import PutOp

from pgmem.db import connect
from pgmem.forget import forget_thread
from pgmem.ingest import ingest_turns
from pgmem.integrations.langgraph import PgmemStore, item_thread, namespace_scope
from pgmem.lab.bench.churn import deadlocks
from pgmem.recall import recall
from pgmem.turns import Turn
from tests.security_helpers import Conn, HashEmbedder

MODEL = HashEmbedder()
NAMESPACES = (("dl", "one"), ("dl", "two"))
SCOPES = [namespace_scope(ns) for ns in NAMESPACES]
WORDS = ("invoice", "shipment", "pallet", "freezer", "courier", "harbour", "ledger", "voucher")
#: A TTL (minutes) so short that the item expires inside its own put: the sweep's work.
EXPIRING = 1e-12


class Run:
    def __init__(self, seed: int) -> None:
        self.lock = threading.Lock()
        self.gone: set[tuple[str, str]] = set()  # (scope, thread) acknowledged deleted or forgotten
        self.live: dict[str, set[str]] = {s: set() for s in SCOPES}  # keys put and not (yet) deleted
        self.errors: list[str] = []
        self.seed = seed

    def keys(self, scope: str, rng: random.Random, n: int) -> list[str]:
        with self.lock:
            return rng.sample(sorted(self.live[scope]), min(n, len(self.live[scope])))

    def text(self, rng: random.Random) -> dict[str, Any]:
        return {"text": " ".join(rng.choices(WORDS, k=4))}


def deleter(app_url: str, run: Run, n: int, ops: int) -> None:
    """Store batches: two or three deletes in each namespace, and a new item in each."""
    rng = random.Random(run.seed * 100 + n)
    with connect(app_url) as conn:
        store = PgmemStore(conn, embedder=MODEL)
        for i in range(ops):
            batch: list[PutOp] = []
            doomed: list[tuple[str, str]] = []
            fresh: list[tuple[str, str]] = []
            for ns, scope in zip(NAMESPACES, SCOPES, strict=True):
                for key in run.keys(scope, rng, rng.choice((2, 3))):
                    batch.append(PutOp(ns, key, None))
                    doomed.append((scope, key))
                key = f"d{n}-{i}"
                ttl = EXPIRING if rng.random() < 0.2 else None
                batch.append(PutOp(ns, key, run.text(rng), ttl=ttl))
                fresh.append((scope, key))
            try:
                store.batch(batch)
            except Exception as exc:
                run.errors.append(f"batch: {type(exc).__name__}: {exc}")
                continue
            with run.lock:
                for scope, key in doomed:
                    run.live[scope].discard(key)
                    run.gone.add((scope, item_thread(key)))
                for scope, key in fresh:
                    run.live[scope].add(key)


def logger(app_url: str, run: Run, ops: int) -> None:
    """Recalls logged over a scope and filtered to an item's thread; ingests of the chat thread."""
    rng = random.Random(run.seed * 100 + 50)
    with connect(app_url) as conn:
        for i in range(ops):
            scope = rng.choice(SCOPES)
            try:
                if i % 4 == 0:
                    turn = Turn(
                        scope, "chat", i, None, ({"role": "user", "content": " ".join(rng.choices(WORDS, k=5))},)
                    )
                    report = ingest_turns(conn, [turn], MODEL)
                    if report.failed:
                        raise AssertionError(f"ingest reported {report.failed}")
                    continue
                keys = run.keys(scope, rng, 1)
                thread = item_thread(keys[0]) if keys and rng.random() < 0.5 else None
                recall(conn, scope, " ".join(rng.choices(WORDS, k=2)), MODEL, log=True, floor=-1.0, thread=thread)
            except Exception as exc:
                run.errors.append(f"logger: {type(exc).__name__}: {exc}")


def forgetter(app_url: str, run: Run, ops: int) -> None:
    rng = random.Random(run.seed * 100 + 70)
    with connect(app_url) as conn:
        for _ in range(ops):
            scope = rng.choice(SCOPES)
            keys = run.keys(scope, rng, 1)
            if not keys:
                continue
            try:
                forget_thread(conn, scope, item_thread(keys[0]))
            except Exception as exc:
                run.errors.append(f"forget_thread: {type(exc).__name__}: {exc}")
                continue
            with run.lock:
                run.live[scope].discard(keys[0])
                run.gone.add((scope, item_thread(keys[0])))


def maintenance(owner: Conn, run: Run, stop: threading.Event) -> None:
    while not stop.is_set():
        for call in ("SELECT * FROM pgmem.sweep_expired_items()", "SELECT * FROM pgmem.apply_retention()"):
            try:
                owner.execute(call).fetchall()
            except Exception as exc:
                run.errors.append(f"maintenance: {type(exc).__name__}: {exc}")


def named_threads(admin: Conn) -> list[tuple[str, int, str]]:
    """(scope, recall_id, thread) of every hit of every logged recall, and of its thread filter."""
    rows = admin.execute(
        """SELECT l.scope_id, l.recall_id, o.v ->> 'thread_id'
             FROM pgmem.recall_log l, jsonb_path_query(l.results, 'strict $.**') AS o(v)
            WHERE jsonb_typeof(o.v) = 'object' AND o.v ? 'thread_id'"""
    ).fetchall()
    return [(str(s), int(str(r)), str(t)) for s, r, t in rows]


def test_store_deletes_beside_retention_sweeps_forgets_and_loggers_leave_no_log_row_and_no_deadlock(
    app_url: str, admin_conn: Conn, owner: Conn
) -> None:
    mixed_deletes(app_url, admin_conn, owner, seed=1, ops=12)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_store_deletes_beside_the_other_writers_longer(app_url: str, admin_conn: Conn, owner: Conn, seed: int) -> None:
    mixed_deletes(app_url, admin_conn, owner, seed=seed, ops=40)


def mixed_deletes(app_url: str, admin_conn: Conn, owner: Conn, *, seed: int, ops: int) -> None:
    run = Run(seed)
    owner.autocommit = True
    with connect(app_url) as conn:
        for ns, scope in zip(NAMESPACES, SCOPES, strict=True):
            keys = [f"k{i:02d}" for i in range(16)]
            PgmemStore(conn, embedder=MODEL).batch(
                [PutOp(ns, k, {"text": f"item {k} about {WORDS[i % 8]}"}) for i, k in enumerate(keys)]
            )
            run.live[scope].update(keys[4:])  # k00..k03 are never deleted: their log rows must stay
            with conn.transaction():
                conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
                conn.execute("SELECT pgmem.set_retention(%s, keep_turns => 2)", (scope,))
            for k in keys[:8]:
                recall(conn, scope, "pallet ledger", MODEL, log=True, floor=-1.0, thread=item_thread(k))
            recall(conn, scope, "pallet ledger invoice", MODEL, log=True, floor=-1.0, x=20)
    filtered = {
        (str(sc), str(t)): int(str(r))
        for sc, r, t in admin_conn.execute(
            "SELECT scope_id, recall_id, thread_id FROM pgmem.recall_log WHERE thread_id IS NOT NULL"
        )
    }
    assert len(filtered) == 16
    before = deadlocks(admin_conn)
    stop = threading.Event()
    workers: list[Callable[[], None]] = [
        *(lambda n=n: deleter(app_url, run, n, ops) for n in range(3)),
        lambda: logger(app_url, run, ops * 3),
        lambda: forgetter(app_url, run, ops),
    ]
    threads = [threading.Thread(target=w) for w in workers]
    chores = threading.Thread(target=maintenance, args=(owner, run, stop))
    chores.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    stop.set()
    chores.join(timeout=600)
    assert run.errors == []
    assert deadlocks(admin_conn) == before
    survivors = [(s, r, t) for s, r, t in named_threads(admin_conn) if (s, t) in run.gone]
    assert survivors == []
    assert run.gone  # the run deleted something
    kept = {int(str(r[0])) for r in admin_conn.execute("SELECT recall_id FROM pgmem.recall_log")}
    spared = {key: r for key, r in filtered.items() if key not in run.gone}
    assert spared  # some logged items were never deleted
    assert {key: r for key, r in spared.items() if r not in kept} == {}
