"""Large batches through a pool, PgmemStore beside LangGraph's PostgresStore on the same server
(a benchmark, not a test).

    python -m pgmem.lab.bench.langgraph_batch [--clients 4] [--ops 2000] [--batch 100] [--puts 40]
        [--embedder local|hash] [--reput 0.5] [--out docs/bench/langgraph-batch.json]

In one fresh database of DATABASE_URL's server (or the embedded one of PGMEM_HOME), each store
gets the same work, the stores taking turns:

- **Throughput**: `clients` threads share one pool (max_size = clients); each sends `ops`
  operations in batches of `batch` (60% puts of 50 keys shared by every client, each client in
  its own order, 20% deletes, 10% gets, 10% searches with a query), so concurrent batches write
  the same items. Reported: operations per second over the wall clock of the slowest client,
  and the errors (a deadlock that was not retried would be one).
- **Put latency**: `puts` single `store.put` calls of a new item of ~40 words each, wall clock,
  alternating stores put by put; p50 and p95.
- **Re-puts** (`--reput SHARE`, default 0): that share of the puts writes a value the item
  already holds (an agent saving the same memory again). In the latency phase such a put
  rewrites the previous new item with its own value, timed apart (`reput`); in the throughput
  phase it writes its key's one fixed value, so it is unchanged unless another client's put or
  delete of the key came in between.

The stores: PostgresStore with `index={"dims", "embed", "fields": ["text"]}`; PgmemStore with the
same `index` (its field vectors, PostgresStore's representation); PgmemStore with pgmem's own
pieces (`index={"fields": ["text"]}`, the default path). Every store embeds with the same model
(`--embedder local`: pgmem's MiniLM; `hash`: word hashes, to time the database alone). Run it from
another checkout (PYTHONPATH) to measure that checkout's PgmemStore: a store the checkout cannot
build is reported as skipped."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from pgmem.extras import require

WORDS = [
    "harbour",
    "ferry",
    "budget",
    "deploy",
    "oven",
    "garden",
    "invoice",
    "train",
    "meeting",
    "doctor",
    "recipe",
    "tomato",
    "laptop",
    "battery",
    "window",
    "printer",
    "concert",
    "ticket",
    "holiday",
    "passport",
    "bicycle",
    "helmet",
    "lesson",
    "piano",
    "report",
    "deadline",
]


def _text(i: int, words: int = 40) -> str:
    rng = np.random.default_rng(i)
    return " ".join(str(w) for w in rng.choice(WORDS, size=words)) + f" note {i}."


def _is_reput(i: int, share: float) -> bool:
    """Whether the i-th put is a re-put: spread evenly, `share` of them (none for 0)."""
    return int((i + 1) * share) > int(i * share)


def _client_ops(root: str, client: int, n: int, batch: int, reput: float = 0.0) -> list[list[Any]]:
    from langgraph.store.base import GetOp, PutOp, SearchOp

    ops: list[Any] = []
    for i in range(n):
        k = (i * (client + 1)) % 50
        key = f"k{k}"
        ns = (root, f"n{i % 3}")
        kind = i % 10
        if kind < 6 and _is_reput(i, reput):
            # The key's one fixed value: what every client's re-put of it writes.
            ops.append(PutOp(ns, key, {"text": _text(100_000 + 3 * k + i % 3, 12)}))
        elif kind < 6:
            ops.append(PutOp(ns, key, {"text": _text(1000 * client + i, 12), "client": client}))
        elif kind < 8:
            ops.append(PutOp(ns, key, None))
        elif kind == 8:
            ops.append(GetOp(ns, key))
        else:
            ops.append(SearchOp((root,), query=_text(i, 4), limit=5))
    return [ops[i : i + batch] for i in range(0, n, batch)]


class HashWords:
    """Unit vectors from word hashes: no model time, so the database's share is what is timed."""

    model_id = "bench:hash-words"
    dims = 384
    max_input_tokens = 100_000

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, hash(w) % self.dims] += 1.0
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


def _embedder(name: str) -> Any:
    if name == "hash":
        return HashWords()
    from pgmem.embedders.local import LocalEmbedder

    return LocalEmbedder()


def _stores(url: str, embedder: Any, clients: int) -> dict[str, Callable[[], AbstractContextManager[Any]]]:
    from langgraph.store.postgres import PostgresStore

    from pgmem.integrations.langgraph import PgmemStore

    def embed(texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = embedder.embed(list(texts)).tolist()
        return out

    index = {"dims": embedder.dims, "embed": embed, "fields": ["text"]}
    pool = {"min_size": 1, "max_size": clients}
    return {
        "PostgresStore": lambda: PostgresStore.from_conn_string(url, index=index, pool_config=pool),  # type: ignore[arg-type]
        "PgmemStore (field vectors)": lambda: PgmemStore.from_conn_string(url, index=index, pool_config=pool),
        "PgmemStore (pieces)": lambda: PgmemStore.from_conn_string(
            url, embedder=embedder, index={"fields": ["text"]}, pool_config=pool
        ),
    }


def _throughput(store: Any, root: str, clients: int, ops: int, batch: int, reput: float) -> dict[str, Any]:
    errors: list[str] = []
    plans = [_client_ops(root, c, ops, batch, reput) for c in range(clients)]

    def client(c: int) -> None:
        for b in plans[c]:
            try:
                store.batch(b)
            except Exception as exc:  # counted and reported
                errors.append(f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    return {
        "ops": clients * ops,
        "seconds": round(seconds, 1),
        "ops_per_s": round(clients * ops / seconds, 1),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "p50_ms": round(statistics.median(xs) * 1000, 1),
        "p95_ms": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))] * 1000, 1),
    }


@contextmanager
def _opened(makers: dict[str, Callable[[], AbstractContextManager[Any]]]) -> Iterator[dict[str, Any]]:
    from contextlib import ExitStack

    from pgmem.errors import PgmemError

    with ExitStack() as stack:
        opened: dict[str, Any] = {}
        for name, make in makers.items():
            try:
                opened[name] = stack.enter_context(make())
            except PgmemError as exc:  # a checkout without this store's index config
                print(f"{name}: skipped ({exc})", file=sys.stderr)
        yield opened


def run(*, clients: int, ops: int, batch: int, puts: int, embedder_name: str, reput: float = 0.0) -> dict[str, Any]:
    require("langgraph.store.postgres", "langgraph", "the LangGraph batch benchmark")
    from pgmem.db import database_url
    from pgmem.lab.evaluation.common import temporary_database
    from pgmem.sqlfiles import InstallParams

    embedder = _embedder(embedder_name)
    out: dict[str, Any] = {
        "clients": clients, "ops_per_client": ops, "batch": batch, "embedder": embedder.model_id, "reput": reput,
    }  # fmt: skip
    with temporary_database(database_url(), InstallParams(embedder.dims, embedder.dims)) as url:
        makers = _stores(url, embedder, clients)
        with _opened(makers) as stores:
            for store in stores.values():
                store.setup()
            rows: dict[str, Any] = {name: {} for name in stores}
            # Each store its own namespaces: one pgmem namespace is pieces or field vectors, not both.
            roots = {name: f"s{j}" for j, name in enumerate(stores)}
            latency: dict[str, list[float]] = {name: [] for name in stores}
            again: dict[str, list[float]] = {name: [] for name in stores}
            last = -1  # the latest new item: what a re-put writes again, value unchanged
            for i in range(puts):  # side by side, put by put, the order turning
                names = list(stores)[i % len(stores) :] + list(stores)[: i % len(stores)]
                is_reput = last >= 0 and _is_reput(i, reput)
                j = last if is_reput else i
                for name in names:
                    t = time.perf_counter()
                    stores[name].put((roots[name], "latency"), f"p{j}", {"text": _text(j)})
                    (again if is_reput else latency)[name].append(time.perf_counter() - t)
                last = j
            for name in stores:
                rows[name]["put"] = _ms(latency[name])
                if again[name]:
                    rows[name]["reput"] = _ms(again[name])
            for name, store in stores.items():
                rows[name]["throughput"] = _throughput(store, roots[name], clients, ops, batch, reput)
                print(name, json.dumps(rows[name]), file=sys.stderr)
    base = rows.get("PostgresStore")
    if base:  # each store against PostgresStore of the same run
        for row in rows.values():
            row["vs_postgres"] = {
                "put_p50": round(row["put"]["p50_ms"] / base["put"]["p50_ms"], 2),
                "ops_per_s": round(row["throughput"]["ops_per_s"] / base["throughput"]["ops_per_s"], 2),
            }
            if "reput" in row and "reput" in base:
                row["vs_postgres"]["reput_p50"] = round(row["reput"]["p50_ms"] / base["reput"]["p50_ms"], 2)
    out["stores"] = rows
    return out


def _commit() -> str:
    """The commit of the pgmem being measured (another checkout's, when PYTHONPATH names one)."""
    import pgmem

    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, check=True, cwd=Path(pgmem.__file__).parent,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.langgraph_batch", description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--ops", type=int, default=2000, help="operations per client")
    p.add_argument("--batch", type=int, default=100, help="operations per batch")
    p.add_argument("--puts", type=int, default=40, help="single puts timed per store")
    p.add_argument("--embedder", choices=("local", "hash"), default="local")
    p.add_argument(
        "--reput", type=float, default=0.0, help="share of puts (0 to 1) that write a value the item already holds"
    )
    p.add_argument("--out", type=Path, help="write the figures with the command, commit and date here")
    args = p.parse_args(argv)
    if not 0.0 <= args.reput <= 1.0:
        p.error(f"--reput is a share between 0 and 1, got {args.reput}")
    t0 = time.perf_counter()
    result = run(
        clients=args.clients, ops=args.ops, batch=args.batch, puts=args.puts, embedder_name=args.embedder,
        reput=args.reput,
    )  # fmt: skip
    record = {
        "command": "python -m pgmem.lab.bench.langgraph_batch " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(time.perf_counter() - t0, 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "result": result,
    }
    text = json.dumps(record, indent=1, sort_keys=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
