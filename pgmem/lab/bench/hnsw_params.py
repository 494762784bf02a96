"""HNSW build parameters against search width on one large scope of a loaded bench store
(a benchmark, not a test).

    pgmem bench --size 1m --keep                       # once: load the store (about 40 minutes)
    python -m pgmem.lab.bench.hnsw_params [--size 1m] [--scope s200000-0] \\
        [--params 24:128,24:400,32:256] [--ef 64,80,100,128] [--seeds 7,200008] [--messages 40]

For each m:ef_construction pair it builds a partial HNSW index on the scope's memory pieces (the
same predicate and operator class pgmem.scope_index_plan uses), then, inside a transaction that
drops every other index on that scope so the planner must use the one under test (rolled back
afterwards: nothing of the store changes), runs 8-part messages through the same lateral top-5
search pgmem._memory_candidates runs, at each ef_search. Each message set (`--seeds`: messages
drawn like `pgmem bench` draws them) is measured on every index, so the rows of the table
compare side by side. Recall@5 is against pgmem.memory_recall(..., exact => true) with floor
0.3. `--halfvec` adds the same graph over `embedding::halfvec` (half the index size).
Latency is database side (statement arrival to last row), the median of the second of two
passes over the messages, so both passes find the index pages in shared_buffers."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from pgmem.db import database_url, with_database
from pgmem.lab.bench.measure import MEMORY_SQL, ids_by_part, timed_query
from pgmem.lab.bench.synth import PRESETS, Store

Conn = psycopg.Connection[tuple[object, ...]]
X, FLOOR = 5, 0.3


def _scope_no(conn: Conn, scope: str) -> int:
    """The scope's number: partial indexes are keyed on it (pgmem.scope_index_plan)."""
    row = conn.execute("SELECT pgmem.scope_no(%s)", (scope,)).fetchone()
    if row is None or row[0] is None:
        raise SystemExit(f"scope {scope} does not exist")
    return int(str(row[0]))


def _search_sql(conn: Conn, scope: str, halfvec: bool) -> str:
    """The query memory_recall runs on a scope's index: scope and number as literals."""
    order = "c.embedding::halfvec(384) <#> q.vec::halfvec(384)" if halfvec else "c.embedding <#> q.vec"
    return f"""SELECT q.part_no, h.piece_id, h.ip FROM unnest(%s::vector[]) WITH ORDINALITY q(vec, part_no)
      CROSS JOIN LATERAL (SELECT c.piece_id, c.embedding <#> q.vec AS ip FROM pgmem.piece c
        WHERE c.scope_id = {psycopg.sql.quote(scope)} AND c.scope_no = {_scope_no(conn, scope)}
          AND c.kind = 'memory' ORDER BY {order} LIMIT {X}) h"""


def _other_indexes(conn: Conn, scope: str, keep: str) -> list[str]:
    """Partial ANN indexes keyed on this scope's number, except the one under test."""
    rows = conn.execute(
        """SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'pgmem.piece'::regclass AND c.relname <> %s
              AND pg_get_expr(i.indpred, i.indrelid) LIKE '%%(scope_no = ' || %s || ')%%'""",
        (keep, str(_scope_no(conn, scope))),
    ).fetchall()
    return [str(r[0]) for r in rows]


def measure(
    conn: Conn,
    scope: str,
    index: str,
    halfvec: bool,
    messages: list[np.ndarray],
    truth: list[list[set[int]]],
    ef: int,
    iterative: str,
) -> tuple[float, float, float]:
    sql = _search_sql(conn, scope, halfvec)
    with conn.transaction(force_rollback=True):
        for other in _other_indexes(conn, scope, index):
            conn.execute(psycopg.sql.SQL("DROP INDEX pgmem.{}").format(psycopg.sql.Identifier(other)))
        conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), set_config('jit', 'off', true), "
            "set_config('hnsw.iterative_scan', %s, true)",
            (str(ef), iterative),
        )
        plan = conn.execute("EXPLAIN " + sql, (list(messages[0]),), binary=True).fetchall()
        if index not in " ".join(str(r[0]) for r in plan):
            raise SystemExit(f"the planner did not use {index}")
        for _ in range(2):  # the second pass is measured
            times: list[float] = []
            found = expected = 0
            for q, want in zip(messages, truth, strict=True):
                rows, db_ms, _ = timed_query(conn, sql, (list(q),))
                times.append(db_ms)
                got: list[set[int]] = [set() for _ in range(8)]
                for part, pid, ip in rows:
                    if -float(str(ip)) >= FLOOR:
                        got[int(str(part)) - 1].add(int(str(pid)))
                found += sum(len(g & w) for g, w in zip(got, want, strict=True))
                expected += sum(len(w) for w in want)
    return float(np.median(times)), float(np.percentile(times, 95)), found / expected


def _print_row(
    conn: Conn,
    scope: str,
    index: str,
    halfvec: bool,
    sets: dict[int, tuple[list[Any], list[Any]]],
    ef: int,
    iterative: str,
) -> None:
    cells = []
    for seed, (msgs, truth) in sets.items():
        p50, p95, rec = measure(conn, scope, index, halfvec, msgs, truth, ef, iterative)
        cells.append(f"set {seed}: p50 {p50:6.2f} ms p95 {p95:6.2f} recall {rec:.4f}")
    print(f"  ef {ef:4d} | " + " | ".join(cells) + f" | load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(PRESETS), default="1m")
    ap.add_argument("--db", help="database of the loaded store (default pgmem_bench_<size>)")
    ap.add_argument("--scope", default=None, help="scope to index (default: the largest of the store)")
    ap.add_argument("--params", default="24:128,24:400,32:256", help="m:ef_construction pairs")
    ap.add_argument("--ef", default="64,80,100,128", help="ef_search values")
    ap.add_argument("--seeds", default="7,200008", help="one message set per seed")
    ap.add_argument("--messages", type=int, default=40, help="8-part messages per set")
    ap.add_argument("--halfvec", action="store_true", help="also build each graph over embedding::halfvec")
    ap.add_argument(
        "--current",
        action="store_true",
        help="measure the scope's own pgmem index instead of building (--params ignored)",
    )
    ap.add_argument("--maintenance-work-mem", default="1500MB")
    ap.add_argument(
        "--iterative-scan",
        choices=("off", "strict_order", "relaxed_order"),
        default="strict_order",
        help="as the recall functions set it (strict_order)",
    )
    args = ap.parse_args()
    try:
        efs = [int(e) for e in args.ef.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        pairs = [(int(p.split(":")[0]), int(p.split(":")[1])) for p in args.params.split(",")]
    except (ValueError, IndexError):
        ap.error(
            f"--ef and --seeds take integers, --params m:ef_construction pairs (24:400,32:256); got "
            f"--ef {args.ef!r} --seeds {args.seeds!r} --params {args.params!r}"
        )

    store = Store(args.size, 384, 1024, seed=0)
    by_id = {s.scope_id: s for s in store.scopes}
    if args.scope and args.scope not in by_id:
        ap.error(f"--scope {args.scope!r} is not a scope of the {args.size} store")
    spec = by_id[args.scope] if args.scope else max(store.scopes, key=lambda s: s.rows)
    url = with_database(database_url(), args.db or f"pgmem_bench_{args.size}")
    conn: Conn = psycopg.connect(url, autocommit=True)
    register_vector(conn)
    sets = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        msgs = [store.queries(spec, 8, rng) for _ in range(args.messages)]
        exact = (conn.execute(MEMORY_SQL, (spec.scope_id, list(q), X, FLOOR, True, None), binary=True) for q in msgs)
        truth = [ids_by_part(cur.fetchall(), 8) for cur in exact]
        sets[seed] = (msgs, truth)
    print(f"scope {spec.scope_id}: {spec.memory:,} memory pieces; {args.messages} messages of 8 parts per set")
    row = conn.execute("SELECT current_setting('shared_buffers')").fetchone()
    print(f"shared_buffers {row[0] if row else '?'} · hnsw.iterative_scan {args.iterative_scan}")
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (args.maintenance_work_mem,))
    if args.current:
        row = conn.execute("SELECT pgmem.scope_ann_index('piece', %s)::text", (spec.scope_id,)).fetchone()
        if not row or row[0] is None:
            raise SystemExit(f"scope {spec.scope_id} has no pgmem index")
        index = str(row[0]).split(".")[-1]
        print(f"\n{index} (the scope's own index)")
        for ef in efs:
            _print_row(conn, spec.scope_id, index, False, sets, ef, args.iterative_scan)
        return
    variants = [(m, efc, h) for m, efc in pairs for h in ((False, True) if args.halfvec else (False,))]
    for m, efc, halfvec in variants:
        index = f"bench_hnsw_m{m}_efc{efc}" + ("_half" if halfvec else "")
        expr = "(embedding::halfvec(384)) halfvec_ip_ops" if halfvec else "embedding vector_ip_ops"
        t0 = time.perf_counter()
        conn.execute(
            psycopg.sql.SQL(
                "CREATE INDEX {} ON pgmem.piece USING hnsw (" + expr + ") WITH (m = {}, ef_construction = {}) "
                "WHERE scope_no = {} AND kind = 'memory'"
            ).format(
                psycopg.sql.Identifier(index),
                psycopg.sql.Literal(m),
                psycopg.sql.Literal(efc),
                psycopg.sql.Literal(_scope_no(conn, spec.scope_id)),
            )
        )
        build = time.perf_counter() - t0
        size = conn.execute("SELECT pg_relation_size(%s::regclass)", (f"pgmem.{index}",)).fetchone()
        print(f"\n{index}: built in {build:.0f} s, {int(str(size[0])) / 2**20 if size else 0:.0f} MB")
        try:
            for ef in efs:
                _print_row(conn, spec.scope_id, index, halfvec, sets, ef, args.iterative_scan)
        finally:
            conn.execute(psycopg.sql.SQL("DROP INDEX pgmem.{}").format(psycopg.sql.Identifier(index)))


if __name__ == "__main__":
    main()
