"""memory_recall latency with and without document units in the same scope (a benchmark, not a test).

    python -m pgmem.lab.bench.doc_exclusion [--memory 1000] [--ratio 10] [--parts 4] [--reps 200]

Two scopes hold the same memory pieces (same vectors); the second also holds `ratio` times
as many document units in the same plane. memory_recall runs with the same query vectors
on both, interleaved, `reps` times each, and the time is read database side (EXPLAIN
ANALYZE's execution time, so neither the client nor the embedder is measured: every
vector is a precomputed random unit vector). For reference, a third column runs the same
top-x query on the mixed scope without the `kind = 'memory'` predicate: the cost the seed
removed (928 ms -> 30 ms on a 2,942-row scope). Runs in a temporary database on the
embedded server (or DATABASE_URL's server)."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time

import numpy as np
import numpy.typing as npt
import psycopg

from pgmem.config import Settings
from pgmem.db import connect, database_url, scoped
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams

Conn = psycopg.Connection[tuple[object, ...]]
F32 = npt.NDArray[np.float32]
DIMS = 384
MODEL = "bench-random-unit-vectors"

#: The body of memory_recall's vector mode, without its kind predicate (the counterfactual).
NO_PREDICATE = """
SELECT q.part_no, h.piece_id, 1 - h.dist
  FROM unnest(%(parts)s::vector[]) WITH ORDINALITY AS q(vec, part_no)
  CROSS JOIN LATERAL (
        SELECT p.piece_id, p.embedding <=> q.vec AS dist FROM pgmem.piece p
         WHERE p.scope_id = %(scope)s
         ORDER BY p.embedding <=> q.vec, p.piece_id LIMIT %(x)s) h
 WHERE 1 - h.dist >= %(floor)s"""
RECALL = "SELECT * FROM pgmem.memory_recall(%(scope)s, %(parts)s::vector[], x => %(x)s, floor => %(floor)s)"


def unit_rows(rng: np.random.Generator, n: int) -> F32:
    v = rng.standard_normal((n, DIMS)).astype(np.float32)
    out: F32 = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def load_memory(conn: Conn, scope: str, vectors: F32, per_turn: int) -> None:
    for t in range(0, len(vectors), per_turn):
        vs = vectors[t : t + per_turn]
        with scoped(conn, scope):
            conn.execute(
                """SELECT pgmem.put_turn(%s, 'bench', %s, now(), '[]'::jsonb, %s, %s,
                       %s, %s, %s, %s, %s::vector[])""",
                (
                    scope,
                    t // per_turn,
                    t.to_bytes(8, "big"),
                    MODEL,
                    ["user"] * len(vs),
                    [0] * len(vs),
                    [f"[Turn {t // per_turn}]"] * len(vs),
                    [f"memory piece {t + i}" for i in range(len(vs))],
                    list(vs),
                ),
                binary=True,
            )


def load_documents(conn: Conn, scope: str, vectors: F32, per_doc: int, per_chunk: int) -> None:
    for d in range(0, len(vectors), per_doc):
        vs = vectors[d : d + per_doc]
        chunk_of = [i // per_chunk for i in range(len(vs))]
        nchunks = chunk_of[-1] + 1
        with scoped(conn, scope):
            conn.execute(
                """SELECT pgmem.put_document(%s, %s, 'Doc', 'body', %s, %s, %s::jsonb, %s,
                       %s, %s, %s, %s, %s, %s, %s, %s::vector[])""",
                (
                    scope,
                    f"doc-{d}.md",
                    d.to_bytes(8, "big"),
                    MODEL,
                    json.dumps([["Doc", f"Section {c}"] for c in range(nchunks)]),
                    [f"## Section {c}\n\nsome text of the section" for c in range(nchunks)],
                    chunk_of,
                    ["prose"] * len(vs),
                    [i % per_chunk for i in range(len(vs))],
                    [0] * len(vs),
                    [10] * len(vs),
                    ["Doc > Section"] * len(vs),
                    [f"unit {d + i}" for i in range(len(vs))],
                    list(vs),
                ),
                binary=True,
            )


def db_time_ms(conn: Conn, query: str, params: dict[str, object]) -> float:
    row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params, binary=True).fetchone()
    assert row is not None
    plan = row[0]
    if isinstance(plan, str | bytes):
        plan = json.loads(plan)
    return float(plan[0]["Execution Time"])  # type: ignore[index]


def summary(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"median_ms": round(statistics.median(s), 3), "p95_ms": round(s[int(0.95 * (len(s) - 1))], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memory", type=int, default=1000, help="memory pieces per scope")
    ap.add_argument("--ratio", type=int, default=10, help="document units per memory piece in the mixed scope")
    ap.add_argument("--parts", type=int, default=4, help="query parts per recall")
    ap.add_argument("--reps", type=int, default=200, help="recalls timed per variant")
    ap.add_argument("-x", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rng = np.random.default_rng(7)
    mem = unit_rows(rng, args.memory)
    docs = unit_rows(rng, args.memory * args.ratio)
    queries = [unit_rows(rng, args.parts) for _ in range(args.reps)]
    server = database_url(Settings.from_env())
    with temporary_database(server, InstallParams(DIMS, DIMS)) as url, connect(url) as conn:
        t0 = time.monotonic()
        load_memory(conn, "memory-only", mem, per_turn=10)
        load_memory(conn, "with-documents", mem, per_turn=10)
        load_documents(conn, "with-documents", docs, per_doc=100, per_chunk=4)
        conn.execute("ANALYZE pgmem.piece")
        load_s = time.monotonic() - t0
        count_rows = conn.execute(
            "SELECT scope_id || ':' || kind, count(*) FROM pgmem.piece GROUP BY 1 ORDER BY 1"
        ).fetchall()
        counts = {str(k): int(str(v)) for k, v in count_rows}
        variants = {
            "memory_recall, memory only": (RECALL, "memory-only"),
            "memory_recall, with documents": (RECALL, "with-documents"),
            "no kind predicate, with documents": (NO_PREDICATE, "with-documents"),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for q in queries[:10]:  # warm-up: caches, plans
            for query, scope in variants.values():
                db_time_ms(conn, query, {"scope": scope, "parts": list(q), "x": args.x, "floor": -1.0})
        for i, q in enumerate(queries):
            order = list(variants.items())
            order = order[i % 3 :] + order[: i % 3]  # rotate, so no variant always runs first
            for name, (query, scope) in order:
                params = {"scope": scope, "parts": list(q), "x": args.x, "floor": -1.0}
                times[name].append(db_time_ms(conn, query, params))
        plan = conn.execute(
            f"EXPLAIN (COSTS OFF) SELECT p.piece_id FROM pgmem.piece p WHERE p.scope_id = 'with-documents' "
            f"AND p.kind = 'memory' ORDER BY p.embedding <=> %s::vector LIMIT {args.x}",
            (queries[0][0],),
        ).fetchall()
    base = summary(times["memory_recall, memory only"])["median_ms"]
    out = {k: {**summary(v), "vs_memory_only": round(statistics.median(v) / base, 2)} for k, v in times.items()}
    plan_lines = [re.sub(r"'\[[^']*\]'", "'[...]'", str(r[0])) for r in plan]
    result = {
        "rows": counts,
        "parts": args.parts,
        "reps": args.reps,
        "load_seconds": round(load_s, 1),
        "variants": out,
        "memory_scan_plan": plan_lines,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"rows: {counts}  ({args.parts} parts per recall, {args.reps} recalls per variant, interleaved)")
    print(f"{'variant':38} {'median ms':>10} {'p95 ms':>10} {'x memory-only':>14}")
    for name, v in out.items():
        print(f"{name:38} {v['median_ms']:>10.3f} {v['p95_ms']:>10.3f} {v['vs_memory_only']:>14.2f}")
    print("plan of one part's memory scan in the mixed scope:")
    for line in plan_lines:
        print(f"   {line}")


if __name__ == "__main__":
    main()
