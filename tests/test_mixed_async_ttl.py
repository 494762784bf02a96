"""Mixed async writers with TTL (docs/langgraph.md, docs/architecture.md "Lock order"): async
clients, each on its own async connections as the application login, run a seeded random mix
on two store namespaces (one of pgmem's pieces, one of field vectors) through `AsyncPgmemStore`:
puts without a TTL, with a long one and with one so short that the item expires within its own
put ("expiring" puts: the clock without waiting for it), single calls and gathered ones (which
LangGraph batches into one `abatch`), explicit batches of puts, gets and deletes, gets and
searches that refresh TTLs, deletes, and, through `pgmem.aio`, ingests of a chat thread into the
pieces namespace and forgets of its turns. Beside them a sync client imports a PostgresStore
(whose items include one with a TTL that expires at once in pgmem) into the pieces namespace
again and again, another forgets item threads, the chat thread and, now and then, a whole
scope, and the maintenance login (a LOGIN member of pgmem_owner) runs
`pgmem.sweep_expired_items()` and `pgmem.apply_retention()` (the pieces scope keeps two turns a
thread). Every call is logged with when it started and ended; then, as a superuser:

- no call raised or reported anything (nothing here is a documented refusal);
- no get or search, during the run or after it, returned an item an expiring put wrote;
- the server detected no deadlock;
- no orphan rows (`pgmem.lab.bench.churn.orphans`, which covers store items without their
  turn, item threads without their item and directory entries without an item, after a last
  sweep: the docs keep an expired item's namespace listed until the sweep; and store vectors
  without their item);
- every key's visible value (none when absent or expired) is that of a write (a put, an
  expiring put reading as none, a delete) acknowledged after the last forget that could remove
  it, and that no later acknowledged write replaced; an imported key no one deleted or forgot
  holds the source's value.

A fixed number of operations per client, not a time; the slow variant runs more seeds with more
clients and operations."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.store.postgres", reason="the [langgraph] extra is not installed")

from langgraph.store.base import GetOp, Item, PutOp
from langgraph.store.postgres import PostgresStore

import pgmem.aio
from pgmem.db import connect
from pgmem.forget import forget_scope, forget_thread
from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore, item_thread, namespace_scope
from pgmem.integrations.langgraph_import import import_postgres_store
from pgmem.lab.bench.churn import orphans
from pgmem.recall import recall
from pgmem.turns import Turn
from tests.conftest import scratch_database
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, hash_vector, role_url

Namespace = tuple[str, ...]
PIECES: Namespace = ("mt", "pieces")
FIELDS: Namespace = ("mt", "fields")
NAMESPACES = (PIECES, FIELDS)
SCOPE: dict[Namespace, str] = {ns: namespace_scope(ns) for ns in NAMESPACES}
#: The clients' keys; the last is too long for its thread's name (`item-sha256:<hex>`).
KEYS = ("k0", "k1", "k2", "k" * 200 + "x")
#: Keys only the import writes (into PIECES); the last expires in pgmem as soon as it is copied.
IMPORTED: dict[str, dict[str, Any]] = {
    "imp0": {"text": "imported note zero about pallets"},
    "imp1": {"text": "imported note one about ledgers"},
}
IMPORTED_EXPIRING = "impx"
CHAT = "chat"
CHAT_TURNS = 4
#: A TTL (minutes) so short that the item expires inside its own put's transaction.
EXPIRING = 1e-12
WORDS = ("invoice", "shipment", "pallet", "freezer", "courier", "harbour", "ledger", "voucher")
MODEL = HashEmbedder()
MAINTENANCE = ("sweep", "apply_retention")


def field_embed(texts: list[str]) -> list[list[float]]:
    return [hash_vector(t).tolist() for t in texts]


FIELD_INDEX = {"dims": 384, "embed": field_embed, "fields": ["text"]}
TTL_CONFIG = {"refresh_on_read": True}


@dataclass
class Op:
    kind: str
    scope: str
    start: float
    end: float = 0.0
    #: What the call removed (a forget): thread names, or () for a scope.
    targets: list[str] = field(default_factory=list)
    #: key -> the value it wrote, None for a delete or an expiring put; kept only if acknowledged.
    wrote: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    error: str | None = None


class Log:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        #: Counts the clients' calls, so that maintenance runs once every few of them.
        self.ticks = 0
        self.tick = threading.Condition(self.lock)
        #: Reads that returned an item an expiring put wrote.
        self.bad_reads: list[str] = []

    def add(self, op: Op) -> None:
        op.end = time.monotonic()
        with self.lock:
            self.ops.append(op)
            if op.kind not in MAINTENANCE:
                self.ticks += 1
                self.tick.notify_all()

    def saw(self, what: str, values: list[tuple[str, dict[str, Any] | None]]) -> None:
        for key, value in values:
            if value is not None and value.get("expiring"):
                with self.lock:
                    self.bad_reads.append(f"{what} {key!r:.20}: returned an expired item {value}")


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


# -- the async clients --------------------------------------------------------------------------


class AsyncClient:
    def __init__(self, n: int, app_url: str, log: Log, seed: int) -> None:
        self.n = n
        self.app_url = app_url
        self.log = log
        self.rng = random.Random(seed)
        self.count = 0

    async def open(self) -> None:
        async def one() -> psycopg.AsyncConnection[Any]:
            return await psycopg.AsyncConnection.connect(self.app_url, autocommit=True)

        self.conns = [await one(), await one(), await one()]
        self.stores: dict[Namespace, AsyncPgmemStore] = {
            PIECES: AsyncPgmemStore(self.conns[0], embedder=MODEL, ttl=TTL_CONFIG),
            FIELDS: AsyncPgmemStore(self.conns[1], index=FIELD_INDEX, ttl=TTL_CONFIG),
        }
        self.memory = self.conns[2]  # pgmem.aio's ingests and forgets

    async def close(self) -> None:
        for c in self.conns:
            await c.close()

    def value(self, key: str, expiring: bool) -> dict[str, Any]:
        self.count += 1
        word = self.rng.choice(WORDS)
        return {"text": f"{key[:6]} note {self.n}-{self.count} about the {word}", "expiring": expiring}

    def ttl(self) -> tuple[float | None, bool]:
        roll = self.rng.random()
        if roll < 0.35:
            return EXPIRING, True
        return (None if roll < 0.7 else 60.0), False

    async def timed(self, kind: str, scope: str, fn: Callable[[Op], Any]) -> None:
        op = Op(kind, scope, time.monotonic())
        try:
            await fn(op)
        except Exception as exc:  # anything escaping is judged by the checks
            op.error = describe(exc)
            op.wrote = {}
        self.log.add(op)

    async def put(self, ns: tuple[str, ...], key: str) -> None:
        ttl, expiring = self.ttl()
        value = self.value(key, expiring)

        async def go(op: Op) -> None:
            await self.stores[ns].aput(ns, key, value, ttl=ttl)
            op.wrote[key] = None if expiring else value

        await self.timed("put", SCOPE[ns], go)

    async def delete(self, ns: tuple[str, ...], key: str) -> None:
        async def go(op: Op) -> None:
            await self.stores[ns].adelete(ns, key)
            op.wrote[key] = None

        await self.timed("delete", SCOPE[ns], go)

    async def get(self, ns: tuple[str, ...], key: str) -> None:
        async def go(op: Op) -> None:
            item = await self.stores[ns].aget(ns, key, refresh_ttl=self.rng.random() < 0.7)
            self.log.saw("get", [(key, None if item is None else item.value)])

        await self.timed("get", SCOPE[ns], go)

    async def search(self, ns: tuple[str, ...]) -> None:
        query = f"what about the {self.rng.choice(WORDS)}?" if self.rng.random() < 0.6 else None

        async def go(op: Op) -> None:
            found = await self.stores[ns].asearch(ns, query=query, limit=20, refresh_ttl=True)
            self.log.saw("search", [(i.key, i.value) for i in found])

        await self.timed("search", SCOPE[ns], go)

    async def batch(self, ns: tuple[str, ...]) -> None:
        ops: list[Any] = []
        wrote: dict[str, dict[str, Any] | None] = {}
        for key in self.rng.sample(KEYS, self.rng.randint(1, 3)):
            roll = self.rng.random()
            if roll < 0.25:
                ops.append(GetOp(ns, key, refresh_ttl=True))
            elif roll < 0.4:
                # Batches delete several items (test_two_store_batches_deleting_indexed_items_do_not_deadlock).
                ops.append(PutOp(ns, key, None))
                wrote[key] = None
            else:
                ttl, expiring = self.ttl()
                value = self.value(key, expiring)
                ops.append(PutOp(ns, key, value, ttl=ttl))
                wrote[key] = None if expiring else value

        async def go(op: Op) -> None:
            results = await self.stores[ns].abatch(ops)
            self.log.saw(
                "batch get", [(o.key, r.value) for o, r in zip(ops, results, strict=True) if isinstance(r, Item)]
            )
            op.wrote.update(wrote)

        await self.timed("batch", SCOPE[ns], go)

    async def ingest(self) -> None:
        index = self.rng.randrange(CHAT_TURNS)
        turn = Turn(SCOPE[PIECES], CHAT, index, None, ({"role": "user", "content": self.value(CHAT, False)["text"]},))

        async def go(op: Op) -> None:
            report = await pgmem.aio.ingest_turns(self.memory, [turn], MODEL)
            if report.failed:
                raise AssertionError(f"ingest reported {report.failed}")

        await self.timed("ingest", SCOPE[PIECES], go)

    async def forget_chat(self) -> None:
        async def go(op: Op) -> None:
            if self.rng.random() < 0.5:
                await pgmem.aio.forget_turn(self.memory, SCOPE[PIECES], CHAT, self.rng.randrange(CHAT_TURNS))
            else:
                await pgmem.aio.forget_thread(self.memory, SCOPE[PIECES], CHAT)

        await self.timed("aio_forget", SCOPE[PIECES], go)

    def one(self) -> Any:
        rng = self.rng
        ns = rng.choice(NAMESPACES)
        key = rng.choice(KEYS)
        roll = rng.random()
        if roll < 0.3:
            return self.put(ns, key)
        if roll < 0.4:
            return self.delete(ns, key)
        if roll < 0.55:
            return self.get(ns, key)
        if roll < 0.65:
            return self.search(ns)
        if roll < 0.8:
            return self.batch(ns)
        if roll < 0.92:
            return self.ingest()
        return self.forget_chat()

    async def step(self) -> None:
        if self.rng.random() < 0.35:
            # Calls gathered at once: LangGraph batches the store's into one abatch.
            await asyncio.gather(*(self.one() for _ in range(self.rng.randint(2, 4))))
        else:
            await self.one()


async def async_clients(app_url: str, log: Log, *, clients: int, ops: int, seed: int) -> None:
    cs = [AsyncClient(i, app_url, log, seed * 1000 + i) for i in range(clients)]
    for c in cs:
        await c.open()

    async def drive(c: AsyncClient) -> None:
        for _ in range(ops):
            await c.step()

    try:
        await asyncio.gather(*(drive(c) for c in cs))
    finally:
        for c in cs:
            await c.close()


# -- the sync clients -------------------------------------------------------------------------


def timed(log: Log, kind: str, scope: str, fn: Callable[[Op], object]) -> None:
    op = Op(kind, scope, time.monotonic())
    try:
        fn(op)
    except Exception as exc:
        op.error = describe(exc)
    log.add(op)


def forgetter(app_url: str, log: Log, rng: random.Random, ops: int) -> None:
    """Forgets of item threads, the chat thread and (rarely) a whole scope."""
    with connect(app_url) as conn:
        for _ in range(ops):
            ns = rng.choice(NAMESPACES)
            scope = SCOPE[ns]
            roll = rng.random()
            if roll < 0.06:

                def whole(op: Op, scope: str = scope) -> None:
                    forget_scope(conn, scope)

                timed(log, "forget_scope", scope, whole)
                continue
            if roll < 0.25:
                thread = CHAT
                scope = SCOPE[PIECES]
            else:
                thread = item_thread(rng.choice((*KEYS, *IMPORTED, IMPORTED_EXPIRING)))

            def one(op: Op, scope: str = scope, thread: str = thread) -> None:
                op.targets = [thread]
                forget_thread(conn, scope, thread)

            timed(log, "forget_thread", scope, one)


def importer(app_url: str, source_url: str, log: Log, runs: int) -> None:
    """Writes the source's items again (a new version, later than any forget ended before the
    op began), then imports the source into PIECES; again and again."""
    with connect(app_url) as conn:
        store = PgmemStore(conn, embedder=MODEL, ttl=TTL_CONFIG)
        for n in range(runs):
            # The source is written inside the timed op: a forget that ended between the source's
            # write and the import's start left a delete record newer than the source's copy, and
            # the import rightly kept the key deleted, while the check took the import as later.
            def one(op: Op, n: int = n) -> None:
                op.wrote.update(fill_source(source_url, n))
                report = import_postgres_store(source_url, store, page_size=2)
                op.targets = [report.summary()]
                if report.failed or not report.complete:
                    raise AssertionError(f"import: {report.summary()} {report.failed}")

            timed(log, "import", SCOPE[PIECES], one)


def maintenance(owner: Conn, log: Log, stop: threading.Event) -> None:
    """Sweeps and retention runs, a round every three calls of the clients, until they stop
    (at least twice)."""
    runs, last = 0, 0
    while True:
        with log.tick:
            log.tick.wait_for(lambda last=last: stop.is_set() or log.ticks >= last + 3)  # type: ignore[misc]
            last = log.ticks
        if stop.is_set() and runs >= 2:
            return
        runs += 1
        timed(log, "sweep", "*", lambda op: owner.execute("SELECT * FROM pgmem.sweep_expired_items()").fetchall())
        timed(log, "apply_retention", "*", lambda op: owner.execute("SELECT * FROM pgmem.apply_retention()").fetchall())


# -- the run and its checks ---------------------------------------------------------------------


def fill_source(source_url: str, version: int) -> dict[str, dict[str, Any]]:
    """Puts the source's items (version `version` of their values); returns the lasting ones."""
    values = {key: {**value, "version": version} for key, value in IMPORTED.items()}
    with PostgresStore.from_conn_string(source_url) as lg:
        if version == 0:
            lg.setup()
        for key, value in values.items():
            lg.put(PIECES, key, value)
        lg.put(PIECES, IMPORTED_EXPIRING, {"text": "imported and expiring", "expiring": True}, ttl=1)
    with psycopg.connect(source_url, autocommit=True) as c:
        # Unexpired in the source, expired in pgmem once copied (its TTL counts from the import).
        # LangGraph's own tests make the column a float for TTLs under a minute.
        if version == 0:
            c.execute("ALTER TABLE store ALTER COLUMN ttl_minutes TYPE double precision")
        c.execute(
            "UPDATE store SET ttl_minutes = %s, expires_at = now() + interval '1 day' WHERE key = %s",
            (EXPIRING, IMPORTED_EXPIRING),
        )
    return values


def run(app_url: str, source_url: str, owner: Conn, *, clients: int, ops: int, seed: int) -> Log:
    log = Log()
    with connect(app_url) as conn, conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE[PIECES],))
        conn.execute("SELECT pgmem.set_retention(%s, keep_turns => 2)", (SCOPE[PIECES],))
    stop = threading.Event()
    errors: list[BaseException] = []

    def body(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # a bug of the test itself
            errors.append(exc)

    rng = random.Random(seed)
    workers = [
        threading.Thread(target=body, args=(lambda: forgetter(app_url, log, random.Random(rng.random()), ops),)),
        threading.Thread(target=body, args=(lambda: importer(app_url, source_url, log, max(3, ops // 8)),)),
    ]
    side = threading.Thread(target=body, args=(lambda: maintenance(owner, log, stop),))
    for w in [*workers, side]:
        w.start()
    try:
        asyncio.run(async_clients(app_url, log, clients=clients, ops=ops, seed=seed))
    finally:
        for w in workers:
            w.join(600)
        stop.set()
        with log.tick:
            log.tick.notify_all()
        side.join(600)
    assert not any(w.is_alive() for w in [*workers, side]), "a client hung (a lock wait without end?)"
    assert errors == [], errors
    return log


def covers(f: Op, scope: str, key: str) -> bool:
    """Whether the forget `f` may have removed the item `key` of `scope`."""
    if f.error or f.scope != scope:
        return False
    return f.kind == "forget_scope" or (f.kind == "forget_thread" and f.targets == [item_thread(key)])


def visible(admin: Conn) -> dict[tuple[str, str], Any]:
    return {
        (str(r[0]), str(r[1])): r[2]
        for r in admin.execute(
            "SELECT scope_id, item_key, value FROM pgmem.store_item WHERE expires_at IS NULL OR expires_at > now()"
        )
    }


EXTRA_ORPHANS = {
    "store vector without its item": """
        SELECT count(*) FROM pgmem.store_vector v WHERE NOT EXISTS (
            SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = v.scope_id AND i.item_key = v.item_key)""",
    "expired item left after the last sweep": """
        SELECT count(*) FROM pgmem.store_item WHERE expires_at <= now()""",
}


def check(admin: Conn, app_url: str, log: Log, seen: dict[str, int]) -> list[str]:
    """The problems of the final state (empty: none); `seen` counts what was checked."""
    problems = [f"{op.kind} {op.scope:.20} {op.targets}: {op.error}" for op in log.ops if op.error]
    problems += log.bad_reads
    for what, query in EXTRA_ORPHANS.items():
        row = admin.execute(query).fetchone()
        if row and int(str(row[0])):
            problems.append(f"{what}: {row[0]} rows")
    problems += orphans(admin)
    items = visible(admin)
    removers = [o for o in log.ops if o.kind.startswith("forget")]
    for ns in NAMESPACES:
        scope = SCOPE[ns]
        for key in KEYS:
            ws = [(o, o.wrote[key]) for o in log.ops if o.scope == scope and key in o.wrote]
            cut = max((f.end for f in removers if covers(f, scope, key)), default=float("-inf"))
            if not any(w.start > cut for w, _ in ws):
                continue  # every write of it may have been removed by a forget that ended later
            final = {repr(v) for w, v in ws if not any(w2.start > w.end and repr(v2) != repr(v) for w2, v2 in ws)}
            got = items.get((scope, key))
            seen["present" if got is not None else "absent"] = (
                seen.get("present" if got is not None else "absent", 0) + 1
            )
            if repr(got) not in final:
                problems.append(f"item {ns} {key:.10}: {got!r:.80} is not the last acknowledged {final}")
    # An imported key: the last import (they run one after the other) started after the last
    # forget that could remove it wrote its source version (written after that forget too).
    imports = [o for o in log.ops if o.kind == "import" and not o.error]
    for key in IMPORTED:
        cut = max((f.end for f in removers if covers(f, SCOPE[PIECES], key)), default=float("-inf"))
        if not imports or imports[-1].start < cut:
            continue
        seen["imported"] = seen.get("imported", 0) + 1
        got = items.get((SCOPE[PIECES], key))
        if got != imports[-1].wrote[key]:
            problems.append(f"imported {key}: {got!r:.80}, not the last import's {imports[-1].wrote[key]}")
    if (SCOPE[PIECES], IMPORTED_EXPIRING) in items:
        problems.append(f"imported {IMPORTED_EXPIRING}: visible although it expired")
    # What the store itself returns now agrees, and returns no expired item.
    with connect(app_url) as conn:
        for ns, store in (
            (PIECES, PgmemStore(conn, embedder=MODEL)),
            (FIELDS, PgmemStore(conn, index=FIELD_INDEX)),
        ):
            for key in (*KEYS, *IMPORTED, IMPORTED_EXPIRING):
                item = store.get(ns, key, refresh_ttl=False)
                got = None if item is None else item.value
                if got != items.get((SCOPE[ns], key)):
                    problems.append(f"get {ns} {key:.10}: {got!r:.60}, stored {items.get((SCOPE[ns], key))!r:.60}")
            listed = {i.key: i.value for i in store.search(ns, limit=100)}
            log.saw("final search", list(listed.items()))
    return problems


@pytest.fixture
def source_url(admin_conn: Conn) -> Iterator[str]:
    with scratch_database(admin_conn, "attlsrc") as url:
        yield url


def mixed_run(
    db_url: str, admin_conn: Conn, owner: Conn, source_url: str, *, clients: int, ops: int, seed: int
) -> None:
    app_url = role_url(db_url, APP_LOGIN)
    log = run(app_url, source_url, owner, clients=clients, ops=ops, seed=seed)
    owner.execute("SELECT * FROM pgmem.sweep_expired_items()").fetchall()  # the docs' last sweep
    seen: dict[str, int] = {}
    problems = check(admin_conn, app_url, log, seen)
    problems += [b for b in log.bad_reads if b.startswith("final")]
    row = admin_conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    deadlocks = int(str(row[0])) if row else 0
    counts = {k: sum(o.kind == k for o in log.ops) for k in sorted({o.kind for o in log.ops})}
    print(*(o.targets[0] for o in log.ops if o.kind == "import" and o.targets), sep="\n")
    print(f"seed {seed}: {len(log.ops)} operations {counts}; checked {seen}; deadlocks detected: {deadlocks}")
    assert problems == [], "\n".join(problems)
    assert deadlocks == 0, f"the server detected {deadlocks} deadlocks: some writer took its locks out of order"
    kinds = {o.kind for o in log.ops if o.error is None}
    assert {
        "put", "delete", "get", "search", "batch", "ingest", "aio_forget", "forget_thread", "import", "sweep",
        "apply_retention",
    } <= kinds, kinds  # fmt: skip


def test_async_store_writers_with_ttl_keep_every_acknowledged_write_and_never_return_an_expired_item(
    db_url: str, admin_conn: Conn, owner: Conn, source_url: str
) -> None:
    mixed_run(db_url, admin_conn, owner, source_url, clients=4, ops=60, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_async_store_writers_with_ttl_longer(
    db_url: str, admin_conn: Conn, owner: Conn, source_url: str, seed: int
) -> None:
    mixed_run(db_url, admin_conn, owner, source_url, clients=6, ops=150, seed=seed)


def test_pgmem_aio_calls_gathered_on_one_async_connection_run_one_after_the_other(app_url: str) -> None:
    """Found by the run above: pgmem.aio calls gathered on one AsyncConnection (and the async
    store's on the same connection) interleaved their transactions and pipelines, and psycopg
    failed them with a bare AssertionError. They now hold the connection's lock in turn."""

    async def go() -> list[object]:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as conn:
            store = AsyncPgmemStore(conn, embedder=MODEL)
            turns = [
                Turn(f"ag{i}", "t", 0, None, ({"role": "user", "content": f"note {i} about the pallets"},))
                for i in range(3)
            ]
            return await asyncio.gather(
                *(pgmem.aio.ingest_turns(conn, [t], MODEL) for t in turns),
                store.aput(("ag3",), "k", {"text": "a store item about the ledger"}),
                return_exceptions=True,
            )

    results = asyncio.run(go())
    assert [describe(r) for r in results if isinstance(r, BaseException)] == []
    assert [getattr(r, "failed", None) for r in results[:3]] == [[], [], []]
    with connect(app_url) as conn:
        assert PgmemStore(conn, embedder=MODEL).get(("ag3",), "k") is not None
        for i in range(3):
            with conn.transaction():
                conn.execute("SELECT set_config('pgmem.scope', %s, true)", (f"ag{i}",))
                assert conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (1,)


class PutWhileEmbedding(HashEmbedder):
    """Embeds as HashEmbedder; on the first text holding `marker`, first runs `hook` (a put by
    another connection, committed inside the reader's transaction, before its read)."""

    def __init__(self, marker: str, hook: Callable[[], None]) -> None:
        super().__init__()
        self.marker, self.hook = marker, hook

    def embed(self, texts: Any) -> Any:
        if any(self.marker in t for t in texts) and self.hook is not None:
            hook, self.hook = self.hook, None  # type: ignore[assignment]
            hook()
        return super().embed(texts)


def test_a_search_never_returns_an_item_that_expired_in_a_put_committed_after_the_search_began(
    app_url: str,
) -> None:
    """Found by the run above: a search's transaction began (embedding its query) before another
    client's put of an item with a TTL short enough to expire within the put committed; the
    search's statement then read the item, already expired, and returned it: the store's reads
    compared expires_at with now(), their transaction's start, not the time they read."""
    ns = ("mt", "expiring")
    with connect(app_url) as reader, connect(app_url) as writer:
        wstore = PgmemStore(writer, embedder=MODEL)
        wstore.put(ns, "seed", {"text": "the seed item about pallets"})

        def put() -> None:
            wstore.put(ns, "k", {"text": "an expiring note about pallets", "expiring": True}, ttl=EXPIRING)

        rstore = PgmemStore(reader, embedder=PutWhileEmbedding("pallets query", put))
        found = rstore.search(ns, query="pallets query", limit=10)
        assert rstore.get(ns, "k") is None
    assert [i.key for i in found] == ["seed"]


def _two_logged_items(conn: Conn, ns: Namespace) -> str:
    """Items a and b of the namespace, each returned by one logged recall filtered to its thread."""
    scope = namespace_scope(ns)
    PgmemStore(conn, embedder=MODEL).batch(
        [PutOp(ns, "a", {"text": "item a about pallets"}), PutOp(ns, "b", {"text": "item b about ledgers"})]
    )
    for key in ("a", "b"):
        recall(conn, scope, "pallets and ledgers", MODEL, log=True, floor=-1.0, thread=item_thread(key))
    return scope


def _logged_rows(admin: Conn, scope: str) -> int:
    row = admin.execute("SELECT count(*) FROM pgmem.recall_log WHERE scope_id = %s", (scope,)).fetchone()
    return int(str(row[0])) if row else 0


def test_two_store_batches_deleting_indexed_items_do_not_deadlock(
    app_url: str, admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """Found by the slow variant above: a transaction deleting two indexed items took the scope's
    recall-log lock at its first delete (the delete of a's log rows), then asked for b's key lock,
    while a delete of b alone held b's key and asked for the recall-log lock: a deadlock. The log
    rows of a store delete now go at its commit (0073), after every lock the transaction took:
    the lone delete runs through, the batch's second delete waits for it, and both commit; the
    recalls that returned the items are gone with them, and not before the commit."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY
    from tests.test_lock_order import outcome, waits_for_lock

    ns = ("mt", "deletes")
    scope = _two_logged_items(conn, ns)  # a recall in each item's thread: its log row names that item only
    store = PgmemStore(conn, embedder=MODEL)
    recall(conn, scope, "pallets and ledgers", MODEL, log=True, floor=-1.0)  # names both
    assert _logged_rows(admin_conn, scope) == 3
    first, second = sessions(), sessions()
    delete = "SELECT pgmem.delete_item(%s, %s)"
    first.begin(scope, directory=DEFAULT_DIRECTORY)
    first.do(lambda c: c.execute(delete, (scope, "a")))
    assert _logged_rows(admin_conn, scope) == 3  # a's log rows wait for the commit
    second.begin(scope, directory=DEFAULT_DIRECTORY)
    lone = second.do(lambda c: c.execute(delete, (scope, "b")).fetchone())  # never waits for the first
    assert lone == (True,)
    then = first.start(lambda c: c.execute(delete, (scope, "b")).fetchone())
    assert waits_for_lock(admin_conn, then, first.pid)  # b's key, held by the lone delete
    second.commit()
    assert outcome(then) == (False,)  # deleted by the other
    assert _logged_rows(admin_conn, scope) == 1  # the recall in a's thread
    first.commit()
    assert _logged_rows(admin_conn, scope) == 0
    assert store.get(ns, "a") is None and store.get(ns, "b") is None


def test_a_store_delete_rolled_back_keeps_its_log_rows_and_one_in_a_savepoint_too(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """The recall-log rows of a store delete go at its commit: a rollback, of the transaction or of
    the savepoint the delete ran in, keeps them with the item; a delete after the rolled-back
    savepoint takes them at the commit."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("mt", "rolled")
    scope = _two_logged_items(conn, ns)
    store = PgmemStore(conn, embedder=MODEL)
    s = sessions()
    delete = "SELECT pgmem.delete_item(%s, %s)"
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute(delete, (scope, "a")))
    s.do(lambda c: c.execute("ROLLBACK"))
    assert _logged_rows(admin_conn, scope) == 2 and store.get(ns, "a") is not None
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SAVEPOINT x"))
    s.do(lambda c: c.execute(delete, (scope, "a")))
    s.do(lambda c: c.execute("ROLLBACK TO SAVEPOINT x"))
    s.do(lambda c: c.execute(delete, (scope, "b")))
    s.commit()
    assert _logged_rows(admin_conn, scope) == 1 and store.get(ns, "a") is not None
    assert store.get(ns, "b") is None


@pytest.mark.parametrize(
    "planted",
    [
        "not json",
        "[1, 2]",
        "null",
        '{"mt/other": {"threads": ["%(other)s"], "piece_ids": [], "fact_ids": []}}',
        '{"mt/planted": {"threads": 5, "piece_ids": "x", "fact_ids": null}}',
        '{"mt/planted": "x"}',
    ],
)
def test_a_planted_item_logs_setting_forgets_nothing_of_another_scope(
    admin_conn: Conn, conn: Conn, sessions: Any, planted: str
) -> None:
    """pgmem.item_logs_at_commit is pgmem's own setting, but the caller can set it: whatever it held
    before a delete_item, the delete forgets its own item's log rows at the commit, and none of
    another scope (the trigger reads only the entry of the deleted row's scope)."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    mine, other = ("mt", "planted"), ("mt", "other")
    for ns in (mine, other):
        PgmemStore(conn, embedder=MODEL).put(ns, "a", {"text": "item a about pallets"})
        recall(conn, namespace_scope(ns), "pallets", MODEL, log=True, floor=-1.0, thread=item_thread("a"))
    s = sessions()
    s.begin(namespace_scope(mine), directory=DEFAULT_DIRECTORY)
    value = planted.replace("%(other)s", item_thread("a"))
    s.do(lambda c: c.execute("SELECT set_config('pgmem.item_logs_at_commit', %s, true)", (value,)))
    assert s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (namespace_scope(mine),)).fetchone()) == (
        True,
    )
    s.commit()
    assert _logged_rows(admin_conn, namespace_scope(mine)) == 0
    assert _logged_rows(admin_conn, namespace_scope(other)) == 1


def test_an_item_logs_setting_changed_after_a_delete_still_forgets_the_item_and_a_forged_one_fails(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """Set after the delete to a value that is not the transaction's own (0076: no transaction id),
    the setting names nothing, and the trigger forgets the deleted row's own thread all the same: the
    commit succeeds and the item's log rows are gone. Forged with the transaction's id to what pgmem
    never writes, it cannot say which log rows to forget: the commit fails with one line (22023),
    and the item and its log rows stay."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("mt", "changed")
    scope = _two_logged_items(conn, ns)
    store = PgmemStore(conn, embedder=MODEL)
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (scope,)))
    foreign = json.dumps({scope: {"threads": [], "piece_ids": ["x"], "fact_ids": []}})
    s.do(lambda c: c.execute("SELECT set_config('pgmem.item_logs_at_commit', %s, true)", (foreign,)))
    s.commit()
    assert _logged_rows(admin_conn, scope) == 1 and store.get(ns, "a") is None
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'b')", (scope,)))
    noted = s.do(lambda c: c.execute("SELECT current_setting('pgmem.item_logs_at_commit')").fetchone())
    assert noted is not None
    forged = str(noted[0]) + json.dumps(scope) + "\t" + json.dumps({"thread": "t", "piece_ids": ["x"]}) + "\n"
    s.do(lambda c: c.execute("SELECT set_config('pgmem.item_logs_at_commit', %s, true)", (forged,)))
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        s.commit()
    assert err.value.diag.message_primary == (
        "pgmem.item_logs_at_commit is not what delete_item wrote: it is pgmem's own setting"
    )
    assert _logged_rows(admin_conn, scope) == 1 and store.get(ns, "b") is not None


def _logged_threads(admin: Conn, scope: str) -> list[str]:
    rows = admin.execute(
        "SELECT thread_id FROM pgmem.recall_log WHERE scope_id = %s ORDER BY recall_id", (scope,)
    ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize("when", ["before", "before, two", "after"])
def test_a_store_delete_under_set_constraints_immediate_forgets_its_log_rows(
    admin_conn: Conn, conn: Conn, sessions: Any, when: str
) -> None:
    """Found probing 0073 as the application login: under SET CONSTRAINTS ALL IMMEDIATE (as
    Django's constraint checks run it) the trigger fires at the end of the statement deleting the
    item row, inside delete_item, which noted the item's thread, pieces and facts only after that
    statement: the trigger found nothing noted and the deleted item's log rows survived the commit
    (2 rows left, not 1). delete_item now notes them before the row goes (0076). Set after the
    delete, the pending trigger fires at the SET and forgets them then."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    scope = _two_logged_items(conn, ("mt", f"immediate-{when.replace(', ', '-')}"))
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    if when.startswith("before"):
        s.do(lambda c: c.execute("SET CONSTRAINTS ALL IMMEDIATE"))
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (scope,)))
    if when == "before, two":  # the scope's second delete, after its first fired, is noted afresh
        s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'b')", (scope,)))
    if when == "after":
        s.do(lambda c: c.execute("SET CONSTRAINTS ALL IMMEDIATE"))
        assert _logged_rows(admin_conn, scope) == 2  # not committed yet: the others still see them
    assert s.do(lambda c: c.execute("SELECT current_setting('pgmem.scope')").fetchone()) == (scope,)
    s.commit()
    assert _logged_threads(admin_conn, scope) == ([] if when == "before, two" else [item_thread("b")])


@pytest.mark.parametrize("value", ["", "{}", "not json", "[" * 50_000 + "]" * 50_000])
def test_an_item_logs_setting_emptied_after_a_delete_still_forgets_the_item(
    admin_conn: Conn, conn: Conn, sessions: Any, value: str
) -> None:
    """Found probing 0073: set to '' or '{}' after the delete (RESET, or an application clearing
    what it takes for its own setting), the setting named nothing, the trigger returned at once and
    the deleted item's log rows survived the commit. The trigger now forgets the deleted row's own
    thread whatever the setting holds (0076); unparsable or nested past the stack, the same."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    scope = _two_logged_items(conn, ("mt", "emptied"))
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (scope,)))
    s.do(lambda c: c.execute("SELECT set_config('pgmem.item_logs_at_commit', %s, true)", (value,)))
    s.commit()
    assert _logged_threads(admin_conn, scope) == [item_thread("b")]


def test_a_session_item_logs_setting_on_a_pooled_connection_forgets_nothing_else(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """Found probing 0073: a session-level SET of pgmem.item_logs_at_commit outlives its
    transaction (a pooled connection's next borrower has it), and every later delete_item on the
    connection added to it: the commit of a delete of a forgot b's log rows too, b being still
    stored (0 rows left, not 1). The value carries its transaction's id now (0076), and one of
    another transaction is dropped. Nested past the stack, or numbers beyond bigint, it failed
    every later delete on the connection; dropped too, now."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("mt", "pooled")
    scope = _two_logged_items(conn, ns)
    planted = {scope: {"threads": [item_thread("b")], "piece_ids": [], "fact_ids": []}}
    hostile = [json.dumps(planted), json.dumps({scope: {"threads": [], "piece_ids": [10**30], "fact_ids": []}})]
    s = sessions()
    for value in [*hostile, "[" * 50_000 + "]" * 50_000]:
        s.do(lambda c, v=value: c.execute("SELECT set_config('pgmem.item_logs_at_commit', %s, false)", (v,)))
        PgmemStore(conn, embedder=MODEL).put(ns, "a", {"text": "item a about pallets"})
        recall(conn, scope, "pallets", MODEL, log=True, floor=-1.0, thread=item_thread("a"))
        s.begin(scope, directory=DEFAULT_DIRECTORY)
        assert s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (scope,)).fetchone()) == (True,)
        s.commit()
        assert _logged_threads(admin_conn, scope) == [item_thread("b")]
        assert s.do(lambda c: c.execute("SELECT current_setting('pgmem.scope', true)").fetchone()) in {("",), (None,)}


def test_a_put_after_a_delete_of_its_key_keeps_the_recalls_of_the_new_item(admin_conn: Conn, conn: Conn) -> None:
    """Found probing 0073: a transaction deleting a and putting a again (a store batch of the two,
    or two calls in one transaction), then logging a recall that returned the new a, lost that
    log row at its commit: the trigger forgot a's thread whole, and the new item has the same
    thread. Before 0073 the delete forgot at once and the later row stayed. A thread stored again
    by the commit is forgotten by the deleted pieces' and facts' ids only (0076): the recall that
    returned the old a goes, the one that returned the new a stays."""
    ns = ("mt", "reput")
    scope = _two_logged_items(conn, ns)
    store = PgmemStore(conn, embedder=MODEL)
    old = admin_conn.execute(
        "SELECT recall_id FROM pgmem.recall_log WHERE scope_id = %s AND thread_id = %s", (scope, item_thread("a"))
    ).fetchall()
    with conn.transaction():
        store.delete(ns, "a")
        store.put(ns, "a", {"text": "a new item a about pallets"})
        recall(conn, scope, "pallets", MODEL, log=True, floor=-1.0, thread=item_thread("a"))
    assert _logged_threads(admin_conn, scope) == [item_thread("b"), item_thread("a")]
    kept = admin_conn.execute(
        "SELECT results::text FROM pgmem.recall_log WHERE scope_id = %s AND thread_id = %s", (scope, item_thread("a"))
    ).fetchall()
    assert len(old) == 1 and len(kept) == 1 and "a new item a" in str(kept[0][0])


def test_store_deletes_in_two_scopes_forget_each_scopes_rows_and_leave_the_callers_scope(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """A transaction deleting in one scope, then in another (a store batch switches pgmem.scope
    between namespaces), with its value forged (its own transaction id kept) to name each scope's
    other item b, still stored, and a third scope it deleted nothing in: each scope's deleted
    item's log rows go, b's stay, and the trigger, fired early by SET CONSTRAINTS ALL IMMEDIATE,
    leaves pgmem.scope as the caller had it (the third scope). Would catch: the trigger reading
    another scope's entry, forgetting a stored item's rows, or leaving pgmem.scope set to the last
    scope it forgot in."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    one, two = _two_logged_items(conn, ("mt", "one")), _two_logged_items(conn, ("mt", "two"))
    s = sessions()
    s.begin(one, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (one,)))
    s.do(lambda c: c.execute("SELECT set_config('pgmem.scope', %s, true)", (two,)))
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (two,)))
    value = s.do(lambda c: c.execute("SELECT current_setting('pgmem.item_logs_at_commit')").fetchone())
    assert value is not None
    forged = str(value[0]) + "".join(  # b is not deleted in either scope; nothing is in the third
        json.dumps(sc) + "\t" + json.dumps({"thread": item_thread("b"), "piece_ids": [], "fact_ids": []}) + "\n"
        for sc in (one, two, "mt/elsewhere")
    )
    s.do(lambda c: c.execute("SELECT set_config('pgmem.item_logs_at_commit', %s, true)", (forged,)))
    s.do(lambda c: c.execute("SELECT set_config('pgmem.scope', 'mt/elsewhere', true)"))
    s.do(lambda c: c.execute("SET CONSTRAINTS ALL IMMEDIATE"))
    assert s.do(lambda c: c.execute("SELECT current_setting('pgmem.scope')").fetchone()) == ("mt/elsewhere",)
    s.commit()
    # b's thread, forged into both scopes' entries, is stored still: a thread that exists at the
    # commit is forgotten by the deleted ids only, so b's log rows stay in both.
    assert _logged_threads(admin_conn, one) == [item_thread("b")]
    assert _logged_threads(admin_conn, two) == [item_thread("b")]
    assert s.do(lambda c: c.execute("SELECT current_setting('pgmem.scope', true)").fetchone()) in {("",), (None,)}


def test_store_deletes_with_savepoints_a_put_between_and_a_forget_scope_after(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """Deletes of one transaction whatever comes between them and the commit: a savepoint rolled
    back after a later delete keeps only that delete's rows; a key deleted, put and deleted again
    loses both versions' log rows; a forget_scope after a delete commits (the trigger meets a
    scope with no rows left). Would catch: a trigger whose noted value a savepoint left behind, a
    re-put thread shielding the second delete, a commit failing on a forgotten scope."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("mt", "between")
    scope = _two_logged_items(conn, ns)
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (scope,)))
    s.do(lambda c: c.execute("SAVEPOINT x"))
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'b')", (scope,)))
    s.do(lambda c: c.execute("ROLLBACK TO SAVEPOINT x"))
    s.commit()
    assert _logged_threads(admin_conn, scope) == [item_thread("b")]
    store = PgmemStore(conn, embedder=MODEL)
    with conn.transaction():
        store.delete(ns, "b")
        store.put(ns, "b", {"text": "a new item b about ledgers"})
        recall(conn, scope, "ledgers", MODEL, log=True, floor=-1.0, thread=item_thread("b"))
        store.delete(ns, "b")
    assert _logged_threads(admin_conn, scope) == []
    other = _two_logged_items(conn, ("mt", "between2"))
    s.begin(other, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a')", (other,)))
    s.do(lambda c: c.execute("SELECT * FROM pgmem.forget_scope(%s)", (other,)))
    s.commit()
    assert _logged_rows(admin_conn, other) == 0


@pytest.mark.parametrize(
    "label",
    ['q"uote\ttab', "line\nbreak\u2028sep", "back\\slash", "done", "pgmem 1", "\u202eobrd\U0001f9ea", "x" * 190],
)
def test_store_deletes_in_hostile_scope_names_forget_their_own_rows_only(
    admin_conn: Conn, conn: Conn, label: str
) -> None:
    """Scope names that could be mistaken for the noted value's own syntax (a quote, a tab, a line
    break, a line separator, a backslash, the word marking a scope done, the first line's prefix,
    bidi and astral characters, a long one) beside a plain scope, deleted in one transaction:
    each scope's deleted item's log rows go and its other item's stay. Would catch a value whose
    lines one scope's name could split or impersonate."""
    plain = _two_logged_items(conn, ("mt", "plain"))
    hostile = _two_logged_items(conn, ("mt", label))
    store = PgmemStore(conn, embedder=MODEL)
    with conn.transaction():
        store.batch([PutOp(("mt", "plain"), "a", None), PutOp(("mt", label), "a", None)])
    assert _logged_threads(admin_conn, plain) == [item_thread("b")]
    assert _logged_threads(admin_conn, hostile) == [item_thread("b")]


def test_store_deletes_whose_lines_were_cut_from_the_value_each_forget_their_own_thread(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """The value cut back to its first line after two deletes of one scope (the transaction's own
    id kept, its lines gone): each deleted row's trigger, finding none of its scope's lines, forgets
    its own thread, and marks nothing done, so the second row's thread goes too. Marking the scope
    done at the first row kept the second item's log rows (found writing this test)."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    scope = _two_logged_items(conn, ("mt", "cut"))
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'a'), pgmem.delete_item(%s, 'b')", (scope, scope)))
    s.do(
        lambda c: c.execute(
            "SELECT set_config('pgmem.item_logs_at_commit', split_part(current_setting('pgmem.item_logs_at_commit'),"
            " E'\\n', 1) || E'\\n', true)"
        )
    )
    s.commit()
    assert _logged_threads(admin_conn, scope) == []


def _sealed_chunks(s: Any) -> int:
    """How many chunks of the session's pgmem.item_logs_at_commit its transaction has sealed."""
    row = s.do(lambda c: c.execute("SELECT current_setting('pgmem.item_logs_at_commit_chunks', true)").fetchone())
    value = str(row[0] or "") if row else ""
    return int(value.split("\n")[1]) if "\n" in value else 0


def _many_logged_items(conn: Conn, ns: Namespace, n: int, logged: list[int], width: int = 0) -> str:
    """Items k0..k{n-1} of the namespace (numbers zero-padded to width), those in logged each
    returned by a recall in its thread."""
    scope = namespace_scope(ns)
    store = PgmemStore(conn, embedder=MODEL)
    key = [f"k{str(i).zfill(width)}" for i in range(n)]
    for first in range(0, n, 100):
        store.batch([PutOp(ns, key[i], {"text": f"item {i} about pallets"}) for i in range(first, min(n, first + 100))])
    for i in logged:
        recall(conn, scope, "pallets", MODEL, log=True, floor=-1.0, thread=item_thread(key[i]))
    return scope


def test_a_transaction_s_many_store_deletes_seal_their_notes_and_forget_every_item_s_rows(
    admin_conn: Conn, conn: Conn, sessions: Any
) -> None:
    """0079: past 16 kB a transaction's delete notes move into sealed chunks (a setting copied
    whole at each delete cost each delete the length of every note before it). At the commit every
    deleted item's log rows go, from the first chunk to the last line, and the kept items' stay;
    deletes in a savepoint rolled back, chunks they sealed included, keep theirs. Would catch a
    trigger that reads only the unsealed lines (the first row of the scope marks it done and the
    rows of the sealed items' threads survive), or a chunk a rolled-back savepoint left behind."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("mt", "sealed-" + "x" * 150)  # long lines (220 bytes): a chunk every 75 deletes
    logged = [0, 1, 60, 120, 179, 180, 239, 240, 299]
    scope = _many_logged_items(conn, ns, 300, logged)
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    for i in range(180):
        assert s.do(lambda c, k=f"k{i}": c.execute("SELECT pgmem.delete_item(%s, %s)", (scope, k)).fetchone()) == (
            True,
        )
    sealed = _sealed_chunks(s)
    assert sealed >= 2
    s.do(lambda c: c.execute("SAVEPOINT x"))
    for i in range(180, 240):
        s.do(lambda c, k=f"k{i}": c.execute("SELECT pgmem.delete_item(%s, %s)", (scope, k)))
    assert _sealed_chunks(s) > sealed
    s.do(lambda c: c.execute("ROLLBACK TO SAVEPOINT x"))
    assert _sealed_chunks(s) == sealed
    s.do(lambda c: c.execute("SELECT pgmem.delete_item(%s, 'k299')", (scope,)))
    assert _logged_rows(admin_conn, scope) == len(logged)  # until the commit
    s.commit()
    assert _logged_threads(admin_conn, scope) == [item_thread(f"k{i}") for i in (180, 239, 240)]
    left = admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)).fetchone()
    assert left == (300 - 181,)


@pytest.mark.parametrize("count", ["x", "99", "-1", "1" * 12])
def test_a_forged_count_of_sealed_delete_notes_fails_the_commit_in_one_line(
    admin_conn: Conn, conn: Conn, sessions: Any, count: str
) -> None:
    """pgmem.item_logs_at_commit_chunks set by the caller, with the transaction's own first line,
    to what delete_item never writes (not a count, or more chunks than were sealed): the trigger
    cannot read the notes it names, so the commit fails with one line (22023) and the items and
    their log rows stay, as for a forged pgmem.item_logs_at_commit."""
    from pgmem.integrations.langgraph import DEFAULT_DIRECTORY

    ns = ("mt", "forged-" + "x" * 150)
    scope = _many_logged_items(conn, ns, 100, [0, 99])
    s = sessions()
    s.begin(scope, directory=DEFAULT_DIRECTORY)
    for i in range(100):
        s.do(lambda c, k=f"k{i}": c.execute("SELECT pgmem.delete_item(%s, %s)", (scope, k)))
    assert _sealed_chunks(s) >= 1
    s.do(
        lambda c: c.execute(
            "SELECT set_config('pgmem.item_logs_at_commit_chunks',"
            " split_part(current_setting('pgmem.item_logs_at_commit'), E'\\n', 1) || E'\\n' || %s, true)",
            (count,),
        )
    )
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        s.commit()
    message = str(err.value.diag.message_primary)
    assert "is not what delete_item wrote: it is pgmem's own setting" in message and "\n" not in message
    assert _logged_rows(admin_conn, scope) == 2
    left = admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (scope,)).fetchone()
    assert left == (100,)
