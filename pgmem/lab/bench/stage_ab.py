"""Two databases' model-change staging side by side (a benchmark, not a test).

    python -m pgmem.lab.bench.stage_ab URL URL2 [--turns 5000] [--page 256] [--rounds 5]

URL and URL2 name two migrated databases as a superuser, each at the revision to compare (a
database migrated by each checkout's `pgmem migrate`). Into a new scope of each, the same `turns`
turns are stored (a user message and an answer: two pieces a turn; word-hash vectors, no model
time). Then, `rounds` times, every piece of the scope is staged for a second model by
`pgmem.stage_vectors`, `page` pieces a call in piece order (as `pgmem.reembed` stages the pages of
`reembed_pending`), one transaction a call, alternating the databases page by page and which goes
first; the vectors are the same seeded random ones on both sides. Between rounds the staged rows
are deleted and pgmem.staged_vector vacuumed (not timed). Timed, on one connection a database:
the function's own time in the server (pg_stat_get_xact_function_total_time, track_functions =
pl: no parsing, no transfer of the vectors), and the client's wall clock of the call and its
COMMIT. Every call must stage its whole page; the scopes are forgotten at the end, on error too.
Reported: per round and over all calls, the median a side and URL2/URL."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg

from pgmem.db import connect
from pgmem.errors import PgmemError
from pgmem.forget import forget_scope
from pgmem.ingest import ingest_turns
from pgmem.lab.bench.langgraph_batch import HashWords
from pgmem.turns import Turn

Conn = psycopg.Connection[tuple[object, ...]]

SCOPE = "bench/stage-ab"
MODEL = "bench:stage-ab"
STAGE = "pgmem.stage_vectors(text,text,bigint[],vector[])"
TIMES = ("function_ms", "call_ms", "call_commit_ms")


def _turns(n: int) -> list[Turn]:
    words = ["pallet", "ledger", "harbour", "ferry", "invoice", "deadline", "printer", "garden"]
    return [
        Turn(
            SCOPE,
            f"t{i // 50}",
            i % 50,
            None,
            (
                {"role": "user", "content": f"Where is pallet {i} of the {words[i % 8]} order?"},
                {"role": "assistant", "content": f"Pallet {i} waits at the {words[(i + 3) % 8]} dock."},
            ),
        )
        for i in range(n)
    ]


def _fill(conn: Conn, turns: int) -> list[int]:
    forget_scope(conn, SCOPE)
    ingest_turns(conn, _turns(turns), HashWords(), bulk=True)
    conn.execute("SET track_functions = 'pl'")
    rows = conn.execute("SELECT piece_id FROM pgmem.piece WHERE scope_id = %s ORDER BY piece_id", (SCOPE,)).fetchall()
    conn.commit()
    return [int(str(r[0])) for r in rows]


def _unstage(conn: Conn) -> None:
    conn.execute("DELETE FROM pgmem.staged_vector WHERE scope_id = %s", (SCOPE,))
    conn.commit()
    conn.autocommit = True
    try:
        conn.execute("VACUUM (ANALYZE) pgmem.staged_vector")
    finally:
        conn.autocommit = False


def _stage(conn: Conn, ids: list[int], vectors: list[Any]) -> tuple[int, float, float, float]:
    """Stage one page in its own transaction: (rows written, function ms, call ms, call + commit ms)."""
    # The counter holds the backend's pending total (since its last report to the statistics),
    # not the transaction's alone: read before and after the call.
    before = conn.execute(
        """SELECT set_config('pgmem.scope', %s, true),
                  coalesce(pg_stat_get_xact_function_total_time(%s::regprocedure), 0)""",
        (SCOPE, STAGE),
    ).fetchone()
    t0 = time.perf_counter()
    row = conn.execute("SELECT pgmem.stage_vectors(%s, %s, %s, %b::vector[])", (SCOPE, MODEL, ids, vectors)).fetchone()
    t1 = time.perf_counter()
    fn = conn.execute("SELECT pg_stat_get_xact_function_total_time(%s::regprocedure)", (STAGE,)).fetchone()
    t2 = time.perf_counter()
    conn.commit()
    t3 = time.perf_counter()
    assert row is not None and fn is not None and before is not None
    return int(str(row[0])), float(str(fn[0])) - float(str(before[1])), (t1 - t0) * 1000, (t1 - t0 + t3 - t2) * 1000


@contextlib.contextmanager
def _scopes(conns: list[Conn]) -> Iterator[None]:
    try:
        yield
    finally:
        for c in conns:
            with contextlib.suppress(PgmemError, psycopg.Error):
                c.rollback()
                c.autocommit = False
                forget_scope(c, SCOPE)


def _medians(times: list[dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, side in zip(("url", "url2"), times, strict=True):
        out[name] = {k: round(statistics.median(side[k]), 3) for k in TIMES}
    out["ratio"] = {k: round(out["url2"][k] / out["url"][k], 3) for k in TIMES}
    return out


def run(url: str, url2: str, *, turns: int = 5000, page: int = 256, rounds: int = 5) -> dict[str, Any]:
    conns = [connect(url, autocommit=False)]
    try:
        conns.append(connect(url2, autocommit=False))
    except BaseException:
        conns[0].close()
        raise
    try:
        with _scopes(conns):
            ids = [_fill(c, turns) for c in conns]
            if len(ids[0]) != len(ids[1]) or not ids[0]:
                raise RuntimeError(f"the scopes hold {len(ids[0])} and {len(ids[1])} pieces, not the same")
            n = len(ids[0])
            rng = np.random.default_rng(7)
            vecs = rng.standard_normal((n, 384)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            pages = [(i, min(n, i + page)) for i in range(0, n, page)]
            for side, c in enumerate(conns):  # the model's registration and a warm cache, not timed
                _stage(c, ids[side][: pages[0][1]], list(vecs[: pages[0][1]]))
                _unstage(c)
            per_round: list[dict[str, Any]] = []
            every: list[dict[str, list[float]]] = [{k: [] for k in TIMES} for _ in conns]
            for r in range(rounds):
                times: list[dict[str, list[float]]] = [{k: [] for k in TIMES} for _ in conns]
                for j, (a, b) in enumerate(pages):
                    for side in (0, 1) if (r + j) % 2 else (1, 0):
                        written, *ms = _stage(conns[side], ids[side][a:b], list(vecs[a:b]))
                        if written != b - a:
                            raise RuntimeError(f"{('URL', 'URL2')[side]} staged {written} of {b - a} pieces")
                        for k, v in zip(TIMES, ms, strict=True):
                            times[side][k].append(v)
                            every[side][k].append(v)
                per_round.append(_medians(times))
                for c in conns:
                    _unstage(c)
    finally:
        for c in conns:
            c.close()
    return {"pieces": n, "page": page, "calls": len(pages), "rounds": per_round, "all": _medians(every)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.stage_ab", description=__doc__.split("\n")[0])
    p.add_argument("url")
    p.add_argument("url2")
    p.add_argument("--turns", type=int, default=5000, help="turns stored (two pieces each)")
    p.add_argument("--page", type=int, default=256, help="pieces a stage_vectors call (reembed's page: 256)")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    if not (1 <= a.turns <= 1_000_000 and 1 <= a.page <= 10_000 and 1 <= a.rounds <= 1000):
        p.error("--turns must be 1..1000000, --page 1..10000 and --rounds 1..1000")
    try:
        r = run(a.url, a.url2, turns=a.turns, page=a.page, rounds=a.rounds)
    except (psycopg.Error, OSError, ValueError, RuntimeError, PgmemError) as exc:
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"stage_ab: {line}", file=sys.stderr)
        return 1
    print(f"stage_vectors, {r['pieces']} pieces, {r['page']} a call ({r['calls']} calls a round), medians in ms:")
    for name, m in [*((f"round {i + 1}", m) for i, m in enumerate(r["rounds"])), ("all rounds", r["all"])]:
        print(
            f"{name}: function URL {m['url']['function_ms']} URL2 {m['url2']['function_ms']} "
            f"(URL2/URL {m['ratio']['function_ms']}); call URL {m['url']['call_ms']} URL2 {m['url2']['call_ms']} "
            f"({m['ratio']['call_ms']}); call + commit URL {m['url']['call_commit_ms']} "
            f"URL2 {m['url2']['call_commit_ms']} ({m['ratio']['call_commit_ms']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
