"""Concurrent writers, forgetting and retention on a few threads of one scope: the workload of
the concurrency stress test (tests/test_churn.py, tens of seconds, in the default suite) and of
the soak benchmark (minutes), and the checks both make afterwards.

    python -m pgmem.lab.bench.churn [--seconds 600] [--clients 6]

Each client has its own connection as the application login and runs random operations on a
few threads of one scope: ingest a turn (one of a few versions of its text, so re-ingesting
replaces it), forget a turn, forget a thread, put or delete a LangGraph store item, put or
forget a document, recall (logged). One more client, as the migrating login (a member of
pgmem_owner), sets the scope's retention and applies it. Every operation is logged with when
it started and ended, so the final state can be checked against what must hold whatever the
interleaving (`check`):

- no operation failed: a deadlock or serialization failure was run again inside pgmem, never
  raised (nor reported for a turn);
- every stored turn's content hash is that of its stored text, with exactly its pieces;
- no orphan rows: no piece without its turn or chunk, no store item without its turn, no item
  thread without its item, no recall-log hit naming a turn that is gone, no store directory
  entry without an item once pgmem.sweep_expired_items has run (two deletes of a namespace's
  last items at once may each leave the entry to it, as documented);
- a forgotten turn stays gone unless written again after the forget: a stored turn's text was
  written by an ingest that ended after every forget of it had started, and a turn that is gone
  was forgotten by something that ended after the last ingest of it started.

The soak runs in a temporary database on the embedded server (or DATABASE_URL's server), with
the configured embedding model, and prints operations per second, latency percentiles per
operation and the deadlocks the server detected (each one run again inside pgmem)."""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents
from pgmem.embedders.base import Embedder
from pgmem.forget import forget_document, forget_thread, forget_turn
from pgmem.ingest import content_hash, ingest_turns
from pgmem.recall import recall
from pgmem.turns import Turn

SCOPE = "churn"
THREADS = ("t0", "t1", "t2")
TURNS = 5  # turn indexes 0..4 of each thread
VERSIONS = 3
ITEMS = ("alpha", "bravo")
DOCS = ("guide.md", "notes.md")
WORDS = ("invoice", "shipment", "pallet", "freezer", "courier", "harbour", "ledger", "voucher", "customs", "warehouse")


@dataclass
class Op:
    """One operation a client ran: what, on which turn (or thread, item, document), when."""

    kind: str
    target: tuple[str, ...]
    start: float
    end: float = 0.0
    version: int | None = None
    error: str | None = None


@dataclass
class Log:
    ops: list[Op] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(
        self, kind: str, target: tuple[str, ...], fn: Callable[..., object], *args: object, version: int | None = None
    ) -> None:
        """Run fn(*args) now, timing it and keeping what it raised or reported as failed."""
        op = Op(kind, target, time.monotonic(), version=version)
        try:
            result = fn(*args)
            failed = getattr(result, "failed", None)
            if failed:
                op.error = f"reported: {failed}"
        except Exception as exc:  # the stress test's point: anything escaping is a failure
            op.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        op.end = time.monotonic()
        with self.lock:
            self.ops.append(op)


def turn_version(thread: str, index: int, version: int) -> Turn:
    """A turn's text in one of VERSIONS versions; odd versions carry a tool result (more pieces)."""
    words = " ".join(WORDS[(index + version + k) % len(WORDS)] for k in range(12))
    messages: list[dict[str, object]] = [
        {"role": "user", "content": f"{thread} turn {index} version {version}: {words}."}
    ]
    if version % 2:
        messages.append({"role": "assistant", "content": f"Checked the {words.split()[0]} records. " * 3})
    return Turn(SCOPE, thread, index, None, tuple(messages))


def item_turn_thread(key: str) -> str:
    from pgmem.integrations.langgraph import item_thread

    return item_thread(key)


def client(
    app_url: str, embedder: Embedder, log: Log, seed: int, stop: threading.Event, store_factory: Callable[[Any], Any]
) -> None:
    rng = random.Random(seed)
    conn = psycopg.connect(app_url, autocommit=True)
    store = store_factory(conn)
    try:
        while not stop.is_set():
            thread, index, version = rng.choice(THREADS), rng.randrange(TURNS), rng.randrange(VERSIONS)
            roll = rng.random()
            if roll < 0.45:
                t = turn_version(thread, index, version)
                log.run("ingest", (thread, str(index)), ingest_turns, conn, [t], embedder, version=version)
            elif roll < 0.55:
                log.run("forget_turn", (thread, str(index)), forget_turn, conn, SCOPE, thread, index)
            elif roll < 0.60:
                log.run("forget_thread", (thread,), forget_thread, conn, SCOPE, thread)
            elif roll < 0.70:
                key = rng.choice(ITEMS)
                if rng.random() < 0.75:
                    value = {"text": f"item {key} version {version}: {WORDS[version]} pallets in the harbour"}
                    log.run("put_item", (key,), store.put, (SCOPE,), key, value, version=version)
                else:
                    log.run("delete_item", (key,), store.delete, (SCOPE,), key)
            elif roll < 0.72:
                key = rng.choice(ITEMS)
                thread_of = item_turn_thread(key)
                log.run("forget_item_thread", (key,), forget_thread, conn, SCOPE, thread_of)
            elif roll < 0.80:
                doc = rng.choice(DOCS)
                text = f"# {doc}\n\n## Part {version}\n\nThe {WORDS[version]} goes to the {WORDS[version + 3]}.\n"
                if rng.random() < 0.7:
                    log.run("put_document", (doc,), add_documents, conn, SCOPE, [Document(doc, text)], embedder)
                else:
                    log.run("forget_document", (doc,), forget_document, conn, SCOPE, doc)
            else:
                message = f"What about the {WORDS[version]} in {thread}? And the {WORDS[index]}?"
                ask = functools.partial(recall, conn, SCOPE, message, embedder, log=True, floor=-1.0)
                log.run("recall", (thread,), ask)
    finally:
        conn.close()


def retention_client(owner_url: str, app_url: str, log: Log, seed: int, stop: threading.Event) -> None:
    """Sets the scope's retention (as the application) and applies it (as the migrating login)."""
    rng = random.Random(seed)
    app = psycopg.connect(app_url, autocommit=True)
    owner = psycopg.connect(owner_url, autocommit=True)

    def set_keep(n: int) -> None:
        with scoped(app, SCOPE):
            app.execute("SELECT pgmem.set_retention(%s, keep_turns => %s)", (SCOPE, n))

    def apply() -> None:
        owner.execute("SELECT * FROM pgmem.apply_retention()").fetchall()

    try:
        while not stop.is_set():
            log.run("set_retention", (), lambda: set_keep(rng.randrange(2, TURNS + 1)))
            time.sleep(rng.uniform(0.05, 0.3))
            log.run("apply_retention", (), apply)
            time.sleep(rng.uniform(0.1, 0.5))
    finally:
        app.close()
        owner.close()


def run(
    app_url: str,
    owner_url: str,
    embedder: Embedder,
    *,
    seconds: float,
    clients: int = 4,
    seed: int = 0,
) -> Log:
    """Run the workload for `seconds` with `clients` application clients and one retention client."""
    from pgmem.integrations.langgraph import PgmemStore

    log = Log()
    stop = threading.Event()
    workers = [
        threading.Thread(
            target=client,
            args=(app_url, embedder, log, seed * 100 + i, stop, lambda c: PgmemStore(c, embedder=embedder)),
        )
        for i in range(clients)
    ]
    workers.append(threading.Thread(target=retention_client, args=(owner_url, app_url, log, seed * 100 + 99, stop)))
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join(120)
    if any(w.is_alive() for w in workers):
        log.ops.append(Op("hang", (), 0.0, 0.0, error="a client did not finish within 120 s of the stop"))
    return log


def _covers(op: Op, kind_target: tuple[str, str, int]) -> bool:
    """Whether `op` may have removed the turn (thread, index) of the memory plane."""
    _, thread, index = kind_target
    if op.kind == "forget_turn":
        return op.target == (thread, str(index))
    if op.kind == "forget_thread":
        return op.target == (thread,)
    return op.kind == "apply_retention"


def check(admin: psycopg.Connection[Any], log: Log, embedder: Embedder) -> list[str]:
    """What the final state breaks of the rules above; empty when it keeps them all. `admin`
    is a connection that sees every row (a superuser)."""
    problems = [f"{op.kind} {op.target}: {op.error}" for op in log.ops if op.error]
    rows = admin.execute(
        """SELECT t.thread_id, t.turn_index, t.messages, t.content_hash,
                  (SELECT count(*) FROM pgmem.piece p WHERE p.scope_id = t.scope_id AND p.kind = 'memory'
                      AND p.thread_id = t.thread_id AND p.turn_index = t.turn_index)
             FROM pgmem.turn t WHERE t.scope_id = %s AND t.thread_id NOT LIKE 'item%%'""",
        (SCOPE,),
    ).fetchall()
    stored = {(str(r[0]), int(r[1])): (r[2], bytes(r[3]), int(r[4])) for r in rows}
    from pgmem.pieces import turn_pieces

    for (thread, index), (messages, digest, n_pieces) in stored.items():
        match = [v for v in range(VERSIONS) if list(turn_version(thread, index, v).messages) == messages]
        if not match:
            problems.append(f"turn {thread}/{index}: stored text is no version ever written")
            continue
        t = turn_version(thread, index, match[0])
        if content_hash(t, model_id=embedder.model_id, max_bytes=1200, weight=0.8) != digest:
            problems.append(f"turn {thread}/{index}: content hash is not that of its text")
        if n_pieces != len(turn_pieces(t, embedder)):
            problems.append(f"turn {thread}/{index}: {n_pieces} pieces, its text makes {len(turn_pieces(t, embedder))}")
    for thread in THREADS:
        for index in range(TURNS):
            key = ("turn", thread, index)
            writes = [o for o in log.ops if o.kind == "ingest" and o.target == (thread, str(index)) and not o.error]
            forgets = [o for o in log.ops if _covers(o, key) and not o.error]
            targeted = [o for o in forgets if o.kind != "apply_retention"]  # retention need not remove it
            if (thread, index) in stored:
                text = stored[(thread, index)][0]
                ok = [
                    w
                    for w in writes
                    if list(turn_version(thread, index, w.version or 0).messages) == text
                    and all(f.start < w.end for f in targeted)
                ]
                if not ok:
                    problems.append(f"turn {thread}/{index}: stored, but forgotten after every write of its text")
            elif writes:
                last = max(writes, key=lambda w: w.start)
                if not any(f.end > last.start for f in forgets):
                    problems.append(f"turn {thread}/{index}: gone, but written after every forget of it")
    problems += orphans(admin)
    return problems


ORPHAN_CHECKS = {
    "memory piece without its turn": """
        SELECT count(*) FROM pgmem.piece p WHERE p.kind = 'memory' AND NOT EXISTS (
            SELECT 1 FROM pgmem.turn t WHERE t.scope_id = p.scope_id AND t.thread_id = p.thread_id
               AND t.turn_index = p.turn_index)""",
    "document piece without its chunk": """
        SELECT count(*) FROM pgmem.piece p WHERE p.kind = 'document' AND NOT EXISTS (
            SELECT 1 FROM pgmem.chunk c WHERE c.scope_id = p.scope_id AND c.chunk_id = p.chunk_id)""",
    "piece without its words": """
        SELECT count(*) FROM pgmem.piece p WHERE NOT EXISTS (
            SELECT 1 FROM pgmem.piece_word w WHERE w.scope_id = p.scope_id AND w.piece_id = p.piece_id)""",
    "words without their piece, or not the piece's": """
        SELECT count(*) FROM pgmem.piece_word w WHERE NOT EXISTS (
            SELECT 1 FROM pgmem.piece p WHERE p.scope_id = w.scope_id AND p.piece_id = w.piece_id
               AND p.scope_no = w.scope_no AND p.kind = w.kind AND p.thread_id IS NOT DISTINCT FROM w.thread_id
               AND w.lexemes = pgmem.piece_lexemes(p.label, p.body))""",
    "turn without its thread": """
        SELECT count(*) FROM pgmem.turn t WHERE NOT EXISTS (
            SELECT 1 FROM pgmem.thread th WHERE th.scope_id = t.scope_id AND th.thread_id = t.thread_id)""",
    "indexed store item without its turn": """
        SELECT count(*) FROM pgmem.store_item i WHERE i.thread_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM pgmem.turn t WHERE t.scope_id = i.scope_id AND t.thread_id = i.thread_id)""",
    "item thread without its item": """
        SELECT count(*) FROM pgmem.thread th WHERE th.thread_id LIKE 'item%%' AND NOT EXISTS (
            SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = th.scope_id AND i.thread_id = th.thread_id)""",
    "store directory entry without an item": """
        SELECT count(*) FROM pgmem.store_namespace n WHERE NOT EXISTS (
            SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = n.scope_name)""",
    "recall-log hit naming a turn that is gone": """
        SELECT count(*) FROM pgmem.recall_log l, jsonb_path_query(l.results, 'strict $.**') AS o(v)
         WHERE l.plane = 'memory' AND jsonb_typeof(o.v) = 'object' AND o.v ? 'turn_index' AND o.v ? 'thread_id'
           AND jsonb_typeof(o.v -> 'turn_index') = 'number' AND NOT EXISTS (
            SELECT 1 FROM pgmem.turn t WHERE t.scope_id = l.scope_id AND t.thread_id = o.v ->> 'thread_id'
               AND t.turn_index = (o.v ->> 'turn_index')::integer)""",
}


def orphans(admin: psycopg.Connection[Any]) -> list[str]:
    """Rows that name something no longer stored (ORPHAN_CHECKS), as `what: n rows`, once
    pgmem.sweep_expired_items has run: a store directory entry may outlive its namespace's last
    item (two deletes of the last items at once each see the other's, and a put in flight keeps
    it: pgmem._drop_empty_namespace never waits), and the scheduled sweep is the documented
    remedy, so only an entry the sweep leaves is an orphan. The sweep also removes expired items:
    check for those first."""
    admin.execute("SELECT * FROM pgmem.sweep_expired_items()").fetchall()
    found = []
    for what, query in ORPHAN_CHECKS.items():
        row = admin.execute(query).fetchone()
        if row and int(row[0]):
            found.append(f"{what}: {row[0]} rows")
    return found


def latency_summary(log: Log) -> dict[str, dict[str, float]]:
    """Per operation: count, p50, p95 and p99 in milliseconds."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for op in log.ops:
        by_kind[op.kind].append((op.end - op.start) * 1000)
    out = {}
    for kind, ms in sorted(by_kind.items()):
        ms.sort()
        q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else [ms[0]] * 99
        out[kind] = {"n": len(ms), "p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1), "p99_ms": round(q[98], 1)}
    return out


def deadlocks(admin: psycopg.Connection[Any]) -> int:
    """Deadlocks the server detected in this database so far (pg_stat_database)."""
    row = admin.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def ensure_logins(admin: psycopg.Connection[Any], app_login: str, owner_login: str) -> None:
    """LOGIN members of pgmem_app and pgmem_owner for the workload (roles are cluster-wide)."""
    for login, group in ((app_login, "pgmem_app"), (owner_login, "pgmem_owner")):
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone():
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(login)))
        admin.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(login)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from psycopg.conninfo import make_conninfo

    from pgmem.config import Settings
    from pgmem.db import database_url
    from pgmem.embedders import from_settings
    from pgmem.lab.evaluation.common import temporary_database
    from pgmem.sqlfiles import InstallParams

    settings = Settings.from_env()
    embedder = from_settings(settings)
    with temporary_database(database_url(settings), InstallParams(embedder.dims, settings.fact_dims)) as url:
        with psycopg.connect(url, autocommit=True) as admin:
            ensure_logins(admin, "pgmem_churn_app", "pgmem_churn_owner")
            before = deadlocks(admin)
            t0 = time.monotonic()
            log = run(
                make_conninfo(url, user="pgmem_churn_app"),
                make_conninfo(url, user="pgmem_churn_owner"),
                embedder,
                seconds=args.seconds,
                clients=args.clients,
                seed=args.seed,
            )
            wall = time.monotonic() - t0
            problems = check(admin, log, embedder)
            detected = deadlocks(admin) - before
        figures = {
            "seconds": round(wall, 1),
            "clients": args.clients,
            "model": embedder.model_id,
            "operations": len(log.ops),
            "ops_per_s": round(len(log.ops) / wall, 1),
            "by_kind": dict(Counter(o.kind for o in log.ops)),
            "latency": latency_summary(log),
            "deadlocks_detected_and_retried": detected,
            "problems": problems,
        }
        print(json.dumps(figures, indent=2))
        if problems:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
