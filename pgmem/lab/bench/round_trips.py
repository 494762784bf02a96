"""pgmem's calls over a slow network: wall time and round trips a call (a benchmark, not a test).

    python -m pgmem.lab.bench.round_trips URL [--delay-ms 0.5] [--calls 40] [--stores] [--out FILE.json]

URL names a server as a superuser. In a temporary database (dropped afterwards), a local TCP
proxy stands between the client and the server and holds every chunk of bytes at least
`delay_ms` in each direction (as a database in the next zone would; asyncio's timers round up,
so the run prints what a round trip cost), and counts the round trips: the client sending after
it waited for an answer starts one (the server's answer ended with ReadyForQuery, or the client's
last bytes were a Flush and the server has answered since). A pipelined client's statements sent
while results it did not wait for arrive do not, nor a Flush alone (psycopg's pipeline sends one
after its Sync, which may reach the server after the answer).
Through it, as a LOGIN member of pgmem_app on an autocommit connection (`pgmem.db.connect`),
side by side in one run with no delay and with the delay:

- `ingest_turns` of one new turn (word-hash vectors: no model time), one call a turn, and with
  `bulk=True` of a new turn in each of 20 threads (a backfill's shape);
- `recall` of a one-part message (its text embedded by the word-hash embedder, then recalled),
  and `recall_vectors` of a 1-part and an 8-part message (precomputed vectors), in the default
  mode (hybrid) and in vector mode;
- with `--stores`, a put and a search of LangGraph's PostgresStore and of PgmemStore with the
  same index config (the drop-in change), each from its own URL through the proxy, as the
  database's owner (PostgresStore's setup creates its tables).

Medians of the wall time a call (client side, all of it) and the round trips a call. Run it on
two checkouts to compare their clients."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import psycopg

import pgmem
from pgmem.db import connect
from pgmem.errors import PgmemError
from pgmem.extras import require
from pgmem.lab.bench.default_mode import app_connection
from pgmem.lab.bench.langgraph_batch import HashWords
from pgmem.lab.evaluation.common import temporary_database
from pgmem.recall import recall_vectors
from pgmem.sqlfiles import InstallParams
from pgmem.turns import Turn

WORDS = ("freezer", "log", "export", "nightly", "garden", "tomato", "dog", "walk", "train", "ticket", "tea", "invoice")
#: The threads of the bulk ingest call, one new turn each.
BULK_THREADS = 20
CALLS = (
    "ingest_turns, one turn",
    f"ingest_turns bulk, {BULK_THREADS} threads",
    "recall a message, 1 part",
    "recall, 1 part",
    "recall, 8 parts",
    "recall, 1 part, vector",
    "recall, 8 parts, vector",
)
#: With --stores: LangGraph's PostgresStore and PgmemStore (its drop-in index config) side by side.
STORE_CALLS = (
    "PostgresStore put",
    "PgmemStore put",
    "PostgresStore search",
    "PgmemStore search",
)


#: The server's ReadyForQuery message: 'Z', its length 5, the transaction status (idle, in a
#: transaction, failed). The server says nothing after it until the client sends.
READY = re.compile(rb"Z\x00\x00\x00\x05[ITE]")
#: The client's Flush message: the server sends what it holds; a pipelined client waits on it.
FLUSH = b"H\x00\x00\x00\x04"


class DelayProxy:
    """A TCP proxy on 127.0.0.1 to the server (TCP or Unix socket) that holds each chunk for
    `delay` seconds in each direction, in order, and counts the client's round trips."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self.round_trips = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _close(self) -> None:
        # The clients have closed their connections: their pipes end; any left are cancelled.
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.close()

    async def _client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        host, port = self.upstream
        if host.startswith("/"):
            s_reader, s_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            s_reader, s_writer = await asyncio.open_connection(host, port)
        last = {"server": b"", "client": b""}
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pipe(c_reader, s_writer, last, "client"), self._pipe(s_reader, c_writer, last, "server")
            )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, last: dict[str, bytes], side: str
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(chunk)
                await writer.drain()
            writer.close()

        sender = asyncio.create_task(send())
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                if side == "server":
                    last["server"] = (last["server"] + chunk)[-6:]
                elif chunk == FLUSH:  # psycopg's pipeline ends with one, after its Sync
                    last["client"] = FLUSH
                else:
                    answered = READY.fullmatch(last["server"]) or (last["server"] and last["client"] == FLUSH)
                    self.round_trips += bool(answered)
                    last["server"], last["client"] = b"", chunk[-5:]
                queue.put_nowait((time.monotonic() + self.delay, chunk))
        queue.put_nowait((0.0, b""))
        with contextlib.suppress(ConnectionError):
            await sender


def _upstream(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    return host, parts.port or int(parse_qs(parts.query).get("port", ["5432"])[0])


def _through(url: str, port: int, user: str) -> str:
    """The URL of the same database as `user` through the proxy."""
    parts = urlsplit(url)
    return f"postgresql://{user}@127.0.0.1:{port}/{parts.path.lstrip('/')}"


def _turn(scope: str, i: int, rng: np.random.Generator, thread: str = "t") -> Turn:
    words = " ".join(str(w) for w in rng.choice(WORDS, size=24))
    return Turn(scope, thread, i, None, ({"role": "user", "content": f"Turn {i}: {words}."},))


def measure(url: str, *, delays_ms: list[float], calls: int, stores: bool = False) -> list[dict[str, Any]]:
    emb = HashWords()
    rng = np.random.default_rng(0)
    out: list[dict[str, Any]] = []
    with temporary_database(url, InstallParams(emb.dims, emb.dims)) as db:
        with psycopg.connect(db, autocommit=True) as admin, app_connection(admin) as app:
            user = str(app.info.user)
        proxies = [DelayProxy(_upstream(db), d / 1000) for d in delays_ms]
        with contextlib.ExitStack() as stack:
            for p in proxies:
                stack.enter_context(p)
            conns = [stack.enter_context(connect(_through(db, p.port, user))) for p in proxies]
            # The stores as LangGraph users open them: from a URL (their tables made by setup(),
            # as the database's owner), each on its own connection through the proxy.
            opened = [_open_stores(stack, _through(db, p.port, _owner(db)), emb) if stores else {} for p in proxies]
            samples: dict[tuple[float, str], list[tuple[float, int]]] = {}
            for i in range(calls + 1):
                # The delays alternate which goes first; each writes its own scope.
                order = list(zip(delays_ms, proxies, conns, opened, strict=True))
                for d, proxy, conn, by_name in order if i % 2 == 0 else order[::-1]:
                    scope = f"rt-{d}"
                    for what in CALLS + (STORE_CALLS if stores else ()):
                        before, t0 = proxy.round_trips, time.perf_counter()
                        if what == CALLS[0]:
                            pgmem.ingest_turns(conn, [_turn(scope, i, rng)], emb)
                        elif what == CALLS[1]:
                            turns = [_turn(scope, i, rng, f"bulk-{t}") for t in range(BULK_THREADS)]
                            pgmem.ingest_turns(conn, turns, emb, bulk=True)
                        elif what == CALLS[2]:
                            words = " ".join(str(w) for w in rng.choice(WORDS, size=6))
                            pgmem.recall(conn, scope, f"When was the {words} noted?", emb)
                        elif what in STORE_CALLS:
                            name, op = what.split(" ")
                            text = " ".join(str(w) for w in rng.choice(WORDS, size=12))
                            if op == "put":
                                by_name[name].put(("rt", str(int(d * 1000))), f"k{i}", {"text": text})
                            else:
                                by_name[name].search(("rt", str(int(d * 1000))), query=text, limit=5)
                        else:
                            parts = 8 if "8 parts" in what else 1
                            _recall(conn, scope, emb, parts, rng, "vector" if what.endswith("vector") else "hybrid")
                        took = time.perf_counter() - t0
                        if i:  # the first call warms the connection (its type lookups)
                            samples.setdefault((d, what), []).append((took * 1000, proxy.round_trips - before))
    for (d, what), vals in samples.items():
        out.append(
            {
                "call": what,
                "delay_ms": d,
                "calls": len(vals),
                "p50_ms": round(statistics.median(v[0] for v in vals), 2),
                "round_trips": statistics.median(v[1] for v in vals),
                "load_average": round(os.getloadavg()[0], 1),
            }
        )
    return out


def per_round_trip(rows: list[dict[str, Any]]) -> float | None:
    """What a round trip cost through the delay: the p50s' difference over the round trips,
    median over the calls (None without both delays)."""
    by = {(r["call"], r["delay_ms"]): r for r in rows}
    delays = sorted({r["delay_ms"] for r in rows})
    costs = [
        (by[(c, delays[-1])]["p50_ms"] - by[(c, delays[0])]["p50_ms"]) / by[(c, delays[-1])]["round_trips"]
        for c in CALLS
        if len(delays) > 1 and (c, delays[0]) in by and (c, delays[-1]) in by and by[(c, delays[-1])]["round_trips"]
    ]
    return round(statistics.median(costs), 2) if costs else None


def _owner(url: str) -> str:
    return urlsplit(url).username or "postgres"


def _open_stores(stack: contextlib.ExitStack, url: str, emb: HashWords) -> dict[str, Any]:
    """PostgresStore and PgmemStore from `url`, each with LangGraph's index config, set up."""
    require("langgraph.store.postgres", "langgraph", "the store rows of the round-trip benchmark")
    from langgraph.store.postgres import PostgresStore

    from pgmem.integrations.langgraph import PgmemStore

    def embed(texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = emb.embed(texts).tolist()
        return out

    index = {"dims": emb.dims, "embed": embed, "fields": ["text"]}
    by_name: dict[str, Any] = {
        "PostgresStore": stack.enter_context(PostgresStore.from_conn_string(url, index=index)),  # type: ignore[arg-type]
        "PgmemStore": stack.enter_context(PgmemStore.from_conn_string(url, index=index)),
    }
    for store in by_name.values():
        store.setup()
    return by_name


def _recall(conn: Any, scope: str, emb: HashWords, parts: int, rng: np.random.Generator, mode: str) -> None:
    texts = [" ".join(str(w) for w in rng.choice(WORDS, size=6)) for _ in range(parts)]
    recall_vectors(conn, scope, texts, emb.embed(texts), mode=mode)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.round_trips", description=__doc__.split("\n")[0])
    p.add_argument("url", help="a server, as a superuser (a temporary database is created and dropped)")
    p.add_argument("--delay-ms", type=float, default=0.5, help="one-way delay of the proxy (default 0.5)")
    p.add_argument("--calls", type=int, default=40, help="calls of each kind (default 40)")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    p.add_argument("--stores", action="store_true", help="also PostgresStore's and PgmemStore's put and search")
    a = p.parse_args(argv)
    if not (0 <= a.delay_ms <= 1000) or not (1 <= a.calls <= 10000):
        p.error("--delay-ms must be in [0, 1000] and --calls in [1, 10000]")
    try:
        rows = measure(a.url, delays_ms=[0.0, a.delay_ms], calls=a.calls, stores=a.stores)
    except (PgmemError, psycopg.Error, OSError) as exc:
        print(f"round_trips: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 1
    for r in sorted(rows, key=lambda r: (r["call"], r["delay_ms"])):
        print(
            f"{r['call']:25} delay {r['delay_ms']:>5} ms one way: p50 {r['p50_ms']:>7} ms,"
            f" {r['round_trips']:g} round trip(s) a call ({r['calls']} calls, load {r['load_average']})"
        )
    cost = per_round_trip(rows)
    if cost is not None:
        print(f"a round trip through the {a.delay_ms} ms delay cost {cost} ms (p50 differences over round trips)")
    if a.out:
        a.out.write_text(json.dumps({"rows": rows, "ms_a_round_trip": cost}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
