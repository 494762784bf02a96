"""Recall over a scope whose store items expired unswept, against the same scope swept (a benchmark, not a test).

    python -m pgmem.lab.bench.expired_recall URL [--items 1000] [--calls 30]

URL names a migrated database as a superuser (the sweep is a DBA's call). A store namespace of
2 x items items is put through PgmemStore with random unit vectors (the vector side is what is
measured), every other one with a TTL of under a second. Once they expired, unswept, 8-part
exact vector recall over the namespace's scope (`pgmem.memory_recall`, as a login member of
pgmem_app, database side) is timed `calls` times; then `pgmem.sweep_expired_items()` removes
them and the same calls are timed again. Prints both p50s and their ratio: recall leaves an
expired item's pieces out (0100), and 0104 made that a hashed lookup (before, every
piece was compared with every expired one, once a part). The namespace is removed at the end."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np
import psycopg

from pgmem.errors import PgmemError

NAMESPACE = ("bench-expired",)
SQL = (
    "SELECT part_no, rank, piece_id FROM pgmem.memory_recall(scope => %s, part_vectors => %s::vector[], "
    "x => 5, floor => -1, mode => 'vector', exact => true)"
)


class RandomVectors:
    """Unit vectors drawn from each batch of texts (the vector side's cost is what is measured)."""

    model_id = "bench-random-384"
    dims = 384
    max_input_tokens = 512

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), self.dims)).astype(np.float32)
        out: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out


def timed(app: psycopg.Connection, scope: str, calls: int, seed: int) -> float:
    from pgmem.db import scoped
    from pgmem.lab.bench.measure import timed_query

    rng = np.random.default_rng(seed)
    times = []
    for _ in range(calls + 1):
        v = rng.standard_normal((8, 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        with scoped(app, scope):
            _, ms, _ = timed_query(app, SQL, (scope, list(v)))
        times.append(ms)
    return statistics.median(times[1:])  # the first warms the connection's plans


def run(url: str, items: int, calls: int) -> str:
    from langgraph.store.base import PutOp

    from pgmem.integrations.langgraph import PgmemStore, namespace_scope
    from pgmem.lab.bench.default_mode import app_connection

    scope = namespace_scope(NAMESPACE)
    with psycopg.connect(url, autocommit=True) as admin, app_connection(admin) as app:
        app.autocommit = True
        store = PgmemStore(app, embedder=RandomVectors())
        for start in range(0, 2 * items, 100):
            store.batch(
                [
                    PutOp(NAMESPACE, f"k{i}", {"text": f"note {i} about subject {i % 97}"}, ttl=0.01 if i % 2 else None)
                    for i in range(start, min(start + 100, 2 * items))
                ]
            )
        time.sleep(1.5)  # 0.01 minutes: every other item has expired
        try:
            unswept = timed(app, scope, calls, 1)
            admin.execute("SELECT * FROM pgmem.sweep_expired_items()").fetchall()
            swept = timed(app, scope, calls, 1)
        finally:
            admin.execute("SELECT pgmem.forget_scope(%s)", (scope,))
    return (
        f"8-part exact vector recall, {2 * items:,} store items of which {items:,} expired: "
        f"unswept p50 {unswept:.2f} ms, swept p50 {swept:.2f} ms, ratio {unswept / swept:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.expired_recall", description=doc.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("--items", type=int, default=1000, help="expired items (as many more do not expire)")
    p.add_argument("--calls", type=int, default=30)
    a = p.parse_args(argv)
    if not 1 <= a.items <= 100_000 or not 1 <= a.calls <= 10_000:
        p.error("--items must be 1 to 100,000 and --calls 1 to 10,000")
    try:
        print(run(a.url, a.items, a.calls))
    except (psycopg.Error, OSError, RuntimeError, ValueError, PgmemError) as exc:
        text = str(exc).strip()
        print(f"expired_recall: {text.splitlines()[0] if text else type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
