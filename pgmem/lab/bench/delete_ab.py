"""Two databases' store deletes side by side (a benchmark, not a test).

    python -m pgmem.lab.bench.delete_ab URL URL2 [--items 300] [--recalls 60] [--per-transaction 1]
                                        [--order numeric|ascending|descending]

URL and URL2 name two migrated databases as a superuser, each at the revision to compare (a
database migrated by each checkout's `pgmem migrate`). Into a new scope of each, the same `items`
indexed LangGraph store items are put through PgmemStore (word-hash vectors: no model time) and
`recalls` recalls that return them are logged. Then every item is deleted by `pgmem.delete_item`,
`per_transaction` items a transaction (one by default), in `order`: numeric (k0, k1, ..., k10,
the default) or the keys sorted bytewise, ascending or descending, alternating the databases transaction by
transaction and which goes first. Timed: the client's wall clock of the calls and their COMMIT (a
delete's recall-log rows may go at the commit, 0073), on one connection a database, reported per
delete (a transaction's time divided by its deletes); with more than one delete a transaction, the
COMMIT's share too. Both must end with no item and no log row of the scope; the scopes are
forgotten at the end, on error too. Reported: p50 and p95 a side and their ratio."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from pgmem.db import connect
from pgmem.errors import PgmemError
from pgmem.forget import forget_scope
from pgmem.lab.bench.langgraph_batch import HashWords

Conn = psycopg.Connection[tuple[object, ...]]

NAMESPACE = ("bench", "delete-ab")
SCOPE = "bench/delete-ab"


def _fill(conn: Conn, items: int, recalls: int) -> None:
    from langgraph.store.base import PutOp

    from pgmem.integrations.langgraph import PgmemStore, namespace_scope
    from pgmem.recall import recall

    assert namespace_scope(NAMESPACE) == SCOPE
    emb = HashWords()
    store = PgmemStore(conn, embedder=emb)
    for i in range(0, items, 50):
        store.batch(
            [
                PutOp(NAMESPACE, f"k{j}", {"text": f"item {j} about pallets, ledgers and the harbour {j % 7}"})
                for j in range(i, min(items, i + 50))
            ]
        )
    for q in range(recalls):
        recall(conn, SCOPE, f"pallets and ledgers {q}", emb, log=True, floor=-1.0)


def _left(conn: Conn) -> tuple[int, int]:
    conn.execute("SELECT set_config('pgmem.scope', %s, false)", (SCOPE,))
    row = conn.execute(
        """SELECT (SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s),
                  (SELECT count(*) FROM pgmem.recall_log WHERE scope_id = %s)""",
        (SCOPE, SCOPE),
    ).fetchone()
    assert row is not None
    return int(str(row[0])), int(str(row[1]))


@contextlib.contextmanager
def _scopes(conns: list[Conn]) -> Iterator[None]:
    try:
        yield
    finally:
        for c in conns:
            with contextlib.suppress(PgmemError, psycopg.Error):
                forget_scope(c, SCOPE)


def run(
    url: str, url2: str, *, items: int = 300, recalls: int = 60, per_transaction: int = 1, order: str = "numeric"
) -> dict[str, Any]:
    conns = [connect(url)]
    try:
        conns.append(connect(url2))
    except BaseException:
        conns[0].close()
        raise
    times: list[list[float]] = [[], []]
    commits: list[list[float]] = [[], []]
    with _scopes(conns):
        for c in conns:
            forget_scope(c, SCOPE)
            _fill(c, items, recalls)
        ordered = [f"k{i}" for i in range(items)]
        if order != "numeric":
            ordered.sort(key=lambda k: k.encode(), reverse=order == "descending")
        for n, first in enumerate(range(0, items, per_transaction)):
            keys = ordered[first : first + per_transaction]
            for side in (0, 1) if n % 2 else (1, 0):
                c = conns[side]
                t = time.perf_counter()
                with c.transaction():
                    c.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
                    for key in keys:
                        row = c.execute("SELECT pgmem.delete_item(%s, %s)", (SCOPE, key)).fetchone()
                        if row != (True,):
                            raise RuntimeError(f"item {key} was not there to delete in {('URL', 'URL2')[side]}")
                    t_commit = time.perf_counter()
                done = time.perf_counter()
                times[side].append((done - t) * 1000 / len(keys))
                commits[side].append((done - t_commit) / (done - t))
        left = [_left(c) for c in conns]
    for c in conns:
        c.close()
    if left != [(0, 0), (0, 0)]:
        raise RuntimeError(f"items and recall-log rows left after the deletes (URL, URL2): {left}")
    out: dict[str, Any] = {
        "items": items,
        "recalls": recalls,
        "per_transaction": per_transaction,
        "order": order,
    }
    for name, ts, cs in zip(("url", "url2"), times, commits, strict=True):
        out[name] = {
            "p50_ms": round(statistics.median(ts), 3),
            # One transaction a side: its one time.
            "p95_ms": round(statistics.quantiles(ts, n=20)[-1], 3) if len(ts) > 1 else round(ts[0], 3),
            "commit_share": round(statistics.median(cs), 3),
        }
    out["p50_ratio"] = round(out["url2"]["p50_ms"] / out["url"]["p50_ms"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.delete_ab", description=__doc__.split("\n")[0])
    p.add_argument("url")
    p.add_argument("url2")
    p.add_argument("--items", type=int, default=300)
    p.add_argument("--recalls", type=int, default=60)
    p.add_argument("--per-transaction", type=int, default=1, help="deletes a transaction")
    p.add_argument("--order", choices=("numeric", "ascending", "descending"), default="numeric")
    a = p.parse_args(argv)
    if not (2 <= a.items <= 100_000 and 0 <= a.recalls <= 10_000 and 1 <= a.per_transaction <= a.items):
        p.error("--items must be 2..100000, --recalls 0..10000 and --per-transaction 1..items")
    try:
        r = run(a.url, a.url2, items=a.items, recalls=a.recalls, per_transaction=a.per_transaction, order=a.order)
    except (psycopg.Error, OSError, ValueError, RuntimeError, PgmemError) as exc:
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"delete_ab: {line}", file=sys.stderr)
        return 1
    each = ("" if a.per_transaction == 1 else f", {a.per_transaction} a transaction") + (
        "" if a.order == "numeric" else f", keys {a.order}"
    )
    share = (
        ""
        if a.per_transaction == 1
        else f"; COMMIT's share of a transaction: URL {r['url']['commit_share']}, URL2 {r['url2']['commit_share']}"
    )
    print(
        f"delete_item, {r['items']} items{each}, {r['recalls']} logged recalls, calls + commit per delete, wall clock: "
        f"URL p50 {r['url']['p50_ms']} ms (p95 {r['url']['p95_ms']}), "
        f"URL2 p50 {r['url2']['p50_ms']} ms (p95 {r['url2']['p95_ms']}); URL2/URL p50 {r['p50_ratio']}{share}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
