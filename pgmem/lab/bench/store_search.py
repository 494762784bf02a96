"""PgmemStore.search by query, alone and beside a conversation of its scope (a benchmark, not a test).

    python -m pgmem.lab.bench.store_search URL --prepare
    python -m pgmem.lab.bench.store_search URL [--searches 60]
    PYTHONPATH=OTHER_CHECKOUT python pgmem/lab/bench/store_search.py URL   # that checkout's store

URL names a migrated database as a login of pgmem_app. `--prepare` stores two namespaces with
pgmem's local model: ("items",), 200 items; ("mixed",), 200 items whose scope also holds a
300-turn conversation on the same subjects (a namespace is an ordinary pgmem scope, where an
application may keep its chat). Then each run times `searches` searches of each namespace
(limit 5, after two to warm up), wall clock, and prints one JSON line: per namespace the p50
in ms and the items found per search. Run the checkouts to compare alternately, on a quiet
machine: the conversation crowded the items out of the recall before rt59's search fix."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import psycopg

from pgmem.errors import PgmemError

QUERIES = (
    "what does the dog dislike",
    "when is the planning meeting",
    "which tea do I drink",
    "who repairs the boat",
    "where are the spare keys",
    "what did the doctor say",
    "which train on tuesday",
    "what is the wifi password",
)
SUBJECTS = (
    "dog", "planning meeting", "green tea", "boat repair", "spare keys", "doctor visit", "train to Utrecht",
    "wifi password", "garden", "car insurance", "birthday gift", "piano lessons", "tax return", "kitchen tiles",
    "running shoes", "flight to Lisbon",
)  # fmt: skip
NAMESPACES = (("items",), ("mixed",))


def _note(rng: random.Random, i: int) -> str:
    return (
        f"Note {i}: about the {rng.choice(SUBJECTS)}, and a little about the {rng.choice(SUBJECTS)}; "
        f"remember the details for later, item {i}."
    )


def prepare(url: str) -> None:
    from langgraph.store.base import PutOp

    from pgmem import Turn, ingest_turns
    from pgmem.embedders.local import LocalEmbedder
    from pgmem.integrations.langgraph import PgmemStore

    rng = random.Random(7)
    emb = LocalEmbedder()
    with psycopg.connect(url, autocommit=True) as conn:
        store = PgmemStore(conn, embedder=emb)
        for ns in NAMESPACES:
            for start in range(0, 200, 50):
                store.batch([PutOp(ns, f"k{j}", {"text": _note(rng, j)}) for j in range(start, start + 50)])
        chat = [
            Turn("mixed", "chat", i, None, ({"role": "user", "content": f"Chat {i}: {_note(rng, 1000 + i)}"},))
            for i in range(300)
        ]
        report = ingest_turns(conn, chat, emb)
        if report.failed:
            raise RuntimeError(f"the conversation was not stored: {report.failed[0][1]}")


def measure(url: str, searches: int) -> dict[str, tuple[float, float]]:
    from pgmem.embedders.local import LocalEmbedder
    from pgmem.integrations.langgraph import PgmemStore

    out: dict[str, tuple[float, float]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        store = PgmemStore(conn, embedder=LocalEmbedder())
        for ns in NAMESPACES:
            for q in QUERIES[:2]:
                store.search(ns, query=q, limit=5)
            times: list[float] = []
            found: list[int] = []
            for i in range(searches):
                t0 = time.perf_counter()
                hits = store.search(ns, query=QUERIES[i % len(QUERIES)], limit=5)
                times.append((time.perf_counter() - t0) * 1000)
                found.append(len(hits))
            out["/".join(ns)] = (round(statistics.median(times), 2), round(sum(found) / len(found), 2))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.store_search", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("--prepare", action="store_true", help="store the two namespaces (once, into a migrated database)")
    p.add_argument("--searches", type=int, default=60)
    a = p.parse_args(argv)
    if a.searches < 1:
        p.error(f"--searches must be at least 1, got {a.searches}")
    try:
        if a.prepare:
            prepare(a.url)
        else:
            print(json.dumps(measure(a.url, a.searches)))
    except (psycopg.Error, OSError, RuntimeError, ValueError, PgmemError) as exc:
        text = str(exc).strip()
        print(f"store_search: {text.splitlines()[0] if text else type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
