"""`pgmem bench`: build a synthetic store, load it through pgmem's SQL, and measure recall."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgmem.cli import LAB_COMMANDS
from pgmem.cli.common import settings
from pgmem.db import connect, database_url, with_database
from pgmem.errors import InputError
from pgmem.lab.bench.default_mode import APP_LOGIN, TextPool, app_connection, default_mode_rows, word_side_sizes
from pgmem.lab.bench.default_mode import render as render_default_mode
from pgmem.lab.bench.load import load
from pgmem.lab.bench.measure import (
    GLOBAL_INDEX,
    GLOBAL_SQL,
    build_global_hnsw,
    build_indexes,
    drop_ann_indexes,
    global_hnsw_run,
    recall_run,
    relation_sizes,
    server_memory,
    uses_index,
)
from pgmem.lab.bench.synth import PRESETS, ScopeSpec, Store
from pgmem.sqlfiles import InstallParams

PIECE_DIMS = 384
FACT_DIMS = 1024


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help=LAB_COMMANDS["bench"][1])
    p.add_argument("--size", choices=sorted(PRESETS), default="100k", help="store size (1m: about 40 minutes here)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--out", type=Path, help="also write the JSON results to this file")
    p.add_argument("--db", help="database name on the server (default pgmem_bench_<size>)")
    p.add_argument("--reuse", action="store_true", help="measure an already loaded --db (skip the load)")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the database this run loaded (default: drop it; a --reuse database is always kept)",
    )
    p.add_argument("--jobs", type=int, default=2, help="loader connections (disjoint scopes)")
    p.add_argument("--min-pieces", type=int, default=5000, help="scopes at or above this get a partial ANN index")
    p.add_argument("--method", choices=("hnsw", "ivfflat"), default="hnsw")
    p.add_argument("--rebuild-indexes", action="store_true", help="drop and rebuild the ANN indexes (with --reuse)")
    p.add_argument("--maintenance-work-mem", default="1GB", help="for the index builds")
    p.add_argument(
        "--ef-search",
        type=int,
        default=None,
        help="hnsw.ef_search for recall (default: pgmem.default_ef_search(), 64)",
    )
    p.add_argument("--messages", type=int, default=10, help="messages per sampled scope and measurement")
    p.add_argument("--scopes-per-bucket", type=int, default=3)
    p.add_argument("-x", type=int, default=5)
    p.add_argument("--floor", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--text",
        type=Path,
        metavar="DIR",
        help="a LongMemEval folder: pieces carry its turns' text, and the default mode (hybrid) is measured "
        "beside vector mode on its questions and long messages",
    )
    p.add_argument(
        "--compare-global",
        action="store_true",
        help="also build one table-wide HNSW index and measure scope-filtered search through it (iterative scans)",
    )
    p.add_argument(
        "--skip-writes",
        action="store_true",
        help="skip the write rows (put_turn into indexed 100,000-piece scopes with and without the tail, bulk)",
    )
    p.set_defaults(func=_bench)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _bench(args: argparse.Namespace) -> int:
    if args.jobs < 1 or args.messages < 1 or args.scopes_per_bucket < 1:
        raise InputError("--jobs, --messages and --scopes-per-bucket must be at least 1")
    server = database_url(settings())
    if args.out is not None:
        from pgmem.lab.evaluation.common import check_output

        check_output(args.out, "--out")  # now, not after the run (1m: 40 minutes of loading)
    name = args.db or f"pgmem_bench_{args.size}"
    url = with_database(server, name)
    pool = _text_pool(args.text)
    store = Store(args.size, PIECE_DIMS, FACT_DIMS, seed=args.seed, bodies=pool.bodies if pool else None)
    results: dict[str, Any] = {
        "config": {
            "size": args.size,
            "rows": store.total_rows,
            "scopes": len(store.scopes),
            "piece_dims": PIECE_DIMS,
            "fact_dims": FACT_DIMS,
            "method": args.method,
            "min_pieces": args.min_pieces,
            "ef_search": args.ef_search or "64 (pgmem.default_ef_search())",
            "x": args.x,
            "floor": args.floor,
            "messages_per_scope": args.messages,
            "database": name,
            "text": pool.source if pool else "synthetic (WORDS)",
        }
    }
    admin = with_database(server, "postgres")
    if not args.reuse:
        from pgmem.migrate import upgrade

        with psycopg.connect(admin, autocommit=True) as c:
            _check_droppable(c, name)
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            c.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(BENCH_MARK)))
        upgrade(url, params=InstallParams(PIECE_DIMS, FACT_DIMS))
        _say(f"loading {store.total_rows:,} rows into {len(store.scopes)} scopes ({args.size}) ...")
        rep = load(url, store, jobs=args.jobs)
        results["load"] = {**rep.__dict__, **rep.rates()}
        _say(f"loaded: {results['load']}")
    try:
        with connect(url) as conn:
            if args.rebuild_indexes:
                drop_ann_indexes(conn)
            t0 = time.perf_counter()
            words: list[dict[str, Any]] = []
            builds = build_indexes(
                conn,
                min_pieces=args.min_pieces,
                method=args.method,
                maintenance_work_mem=args.maintenance_work_mem,
                words=words,
            )
            results["index_builds"] = [b.__dict__ for b in builds]
            results["word_maintenance"] = words
            results["index_build_seconds"] = round(time.perf_counter() - t0, 2)
            results["relation_sizes"] = relation_sizes(conn)
            results["ann_index_bytes"] = sum(b.bytes for b in builds) or _ann_bytes(conn)
            _say(f"indexes: {len(builds)} built in {results['index_build_seconds']} s")
            load_before = [round(v, 1) for v in os.getloadavg()]
            _measure(conn, store, args, results)
            if pool:
                _measure_default_mode(conn, store, pool, args, results)
            if not args.skip_writes:
                from pgmem.lab.bench.writes import writes_run

                # The tiny store is for trying the command: a scope just large enough for an index.
                rows = 8_000 if args.size == "tiny" else 100_000
                results["writes"] = writes_run(conn, rows=rows, maintenance_work_mem=args.maintenance_work_mem)
            # Other work on the machine inflates every latency: say how busy it was.
            results["load_average"] = {
                "before": load_before,
                "after": [round(v, 1) for v in os.getloadavg()],
                "cpus": os.cpu_count(),
            }
            results["server_memory"] = server_memory(conn)
    finally:
        # Only what this run loaded: a --reuse store took its own run to load (40 minutes for 1m).
        if not args.keep and not args.reuse:
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    if args.out:  # after the results are shown: a write that fails then loses none of them
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2))
        except OSError as exc:
            raise InputError(f"cannot write --out {args.out}: {exc.strerror or exc}") from None
    return 0


#: The comment on a database `pgmem bench` loaded: only such a database (or one of the default
#: names, pgmem_bench_<size>, from runs before the comment) is dropped to load it again.
BENCH_MARK = "pgmem bench store (dropped and loaded again by pgmem bench --db)"


def _check_droppable(c: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    """An InputError unless the database `name` is missing or one pgmem bench loaded: a run drops
    its --db and loads it anew, and `--db pgmem` dropped the embedded server's own database, every
    turn, fact and document stored there with it."""
    row = c.execute(
        "SELECT pg_catalog.shobj_description(oid, 'pg_database') FROM pg_catalog.pg_database WHERE datname = %s",
        (name,),
    ).fetchone()
    if row is not None and row[0] != BENCH_MARK and not name.startswith("pgmem_bench_"):
        raise InputError(
            f"--db {name!r} is a database pgmem bench did not load: a run drops its --db and loads it anew; "
            "name a new database (or measure this one with --reuse)"
        )


def _text_pool(path: Path | None) -> TextPool | None:
    if path is None:
        return None
    try:
        return TextPool.from_longmemeval(path)
    except InputError as exc:
        raise InputError(f"--text {exc}") from None


def _measure_default_mode(
    conn: psycopg.Connection[tuple[object, ...]],
    store: Store,
    pool: TextPool,
    args: argparse.Namespace,
    results: dict[str, Any],
) -> None:
    _say("default mode (hybrid) beside vector mode, as a login of pgmem_app ...")
    with app_connection(conn) as app:
        results["default_mode"] = default_mode_rows(
            app, store, pool, messages=args.messages * 2, x=args.x, floor=args.floor, ef_search=args.ef_search, seed=19
        )
    results["default_mode_role"] = APP_LOGIN
    results["word_side_sizes"] = word_side_sizes(conn)


def _ann_bytes(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_relation_size(oid)), 0) FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace "
        "AND relkind = 'i' AND (relname LIKE 'piece\\_ann\\_%' OR relname LIKE 'fact\\_ann\\_%')"
    ).fetchone()
    return int(str(row[0])) if row else 0


def _buckets(store: Store, per: int) -> dict[int, list[ScopeSpec]]:
    by: dict[int, list[ScopeSpec]] = defaultdict(list)
    for s in store.scopes:
        if s.with_documents and len(by[s.rows]) < per:
            by[s.rows].append(s)
    return dict(sorted(by.items()))


def _path(conn: psycopg.Connection[tuple[object, ...]], plane: str, scope: str) -> str:
    row = conn.execute("SELECT pgmem.scope_ann_index(%s, %s) IS NOT NULL", (plane, scope)).fetchone()
    return "index" if row and row[0] else "exact"


def _measure(
    conn: psycopg.Connection[tuple[object, ...]], store: Store, args: argparse.Namespace, results: dict[str, Any]
) -> None:
    kw: dict[str, Any] = {"x": args.x, "floor": args.floor, "ef_search": args.ef_search}
    buckets = _buckets(store, args.scopes_per_bucket)
    for plane in ("memory", "fact"):
        rows = []
        for size, specs in buckets.items():
            entry: dict[str, Any] = {
                "bucket": size,
                "rows_per_scope": size if plane == "memory" else specs[0].facts,
                "scopes": len(specs),
                "path": _path(conn, "piece" if plane == "memory" else "fact", specs[0].scope_id),
            }
            for parts in (1, 8):
                _say(f"{plane}_recall bucket {size:,} · {parts} part(s) ...")
                t = recall_run(
                    conn,
                    store,
                    specs,
                    plane=plane,
                    parts=parts,
                    messages=args.messages,
                    seed=args.seed + size + parts,
                    **kw,
                )
                entry[f"parts_{parts}"] = t.summary()
            rows.append(entry)
        results[f"{plane}_recall"] = rows

    largest = buckets[max(buckets)][0]
    # Why the index: exact search on the largest scope, and the ef_search trade-off there.
    _say("largest scope: exact vs index, ef_search sweep ...")
    exact = recall_run(
        conn,
        store,
        [largest],
        plane="memory",
        parts=8,
        messages=max(3, args.messages // 2),
        seed=7,
        x=args.x,
        floor=args.floor,
        exact=True,
    )
    results["largest_scope_exact"] = {"scope_rows": largest.rows, **exact.summary()}
    sweep = []
    if _path(conn, "piece", largest.scope_id) == "index":
        # The search-width knob of the index kind, set through the pgmem setting the recall functions read.
        knob, setting, values = (
            ("probes", "pgmem.ivfflat_probes", (1, 5, 10, 20, 40))
            if args.method == "ivfflat"
            else ("ef_search", "pgmem.ef_search", (40, 64, 80, 100, 128, 200))
        )
        for value in values:
            conn.execute("SELECT set_config(%s, %s, false)", (setting, str(value)))
            t = recall_run(
                conn,
                store,
                [largest],
                plane="memory",
                parts=8,
                messages=args.messages * 2,
                seed=11,
                x=args.x,
                floor=args.floor,
            )
            sweep.append({knob: value, **t.summary()})
        conn.execute("SELECT set_config(%s, '', false)", (setting,))
    results["ef_search_sweep"] = sweep

    # Issue 4: an 8-part message on 2,000-row scopes (with and without document rows) and on the
    # 100,000-row scope; one SQL call against 8 round trips.
    _say("issue-4 comparison ...")
    issue4 = []
    picks = [s for s in store.scopes if s.rows == 2_000 and s.with_documents][:3]
    nodoc = [s for s in store.scopes if s.rows == 2_000 and not s.with_documents][:3]
    big = [s for s in store.scopes if s.rows == 100_000][:1]
    for label, specs in (
        ("2,000 rows (20% documents)", picks),
        ("2,000 rows (no documents)", nodoc),
        ("100,000 rows (20% documents)", big),
    ):
        if not specs:
            continue
        for trips in (False, True):
            t = recall_run(
                conn,
                store,
                specs,
                plane="memory",
                parts=8,
                messages=args.messages * 2,
                # Other messages for the second mode: the same ones would find the cache warmed by the first.
                seed=13 + int(trips),
                round_trips=trips,
                check_recall=not trips,
                **kw,
            )
            issue4.append(
                {
                    "scope": label,
                    "calls": "8 round trips" if trips else "one SQL call",
                    "path": _path(conn, "piece", specs[0].scope_id),
                    **t.summary(),
                }
            )
    results["issue4"] = issue4
    if args.compare_global:
        _compare_global(conn, store, args, results, picks, big or [largest])


def _compare_global(
    conn: psycopg.Connection[tuple[object, ...]],
    store: Store,
    args: argparse.Namespace,
    results: dict[str, Any],
    small: list[ScopeSpec],
    large: list[ScopeSpec],
) -> None:
    """The road not taken: one HNSW index over all scopes, scope applied as a filter."""
    _say("building one table-wide HNSW index for comparison ...")
    secs = build_global_hnsw(conn, args.maintenance_work_mem)
    conn.execute("ANALYZE pgmem.piece")
    size = conn.execute("SELECT pg_relation_size(%s::regclass)", (f"pgmem.{GLOBAL_INDEX}",)).fetchone()
    out: dict[str, Any] = {"build_seconds": round(secs, 1), "bytes": int(str(size[0])) if size else 0, "runs": []}
    probe = store.queries(small[0], 8, np.random.default_rng(0))
    for label, specs in (("2,000 rows", small), (f"{large[0].rows:,} rows", large)):
        used = uses_index(conn, GLOBAL_SQL, (list(probe), specs[0].scope_id, args.x), GLOBAL_INDEX)
        for iterative, max_tuples in (
            ("off", 20000),
            ("strict_order", 20000),
            ("relaxed_order", 20000),
            ("strict_order", 200000),
        ):
            _say(f"  global index · {label} · iterative {iterative} · max_scan_tuples {max_tuples}")
            t = global_hnsw_run(
                conn,
                store,
                specs,
                iterative=iterative,
                max_scan_tuples=max_tuples,
                ef_search=args.ef_search or 100,
                messages=args.messages,
                x=args.x,
                floor=args.floor,
                seed=17,
            )
            out["runs"].append(
                {
                    "scope": label,
                    "planner_uses_global_index": used,
                    "iterative_scan": iterative,
                    "max_scan_tuples": max_tuples,
                    **t.summary(),
                }
            )
    conn.execute(f"DROP INDEX pgmem.{GLOBAL_INDEX}")
    results["global_hnsw"] = out


def _mb(n: int) -> str:
    return f"{n / 1048576:,.1f} MB"


def render(r: dict[str, Any]) -> str:
    c = r["config"]
    out = [
        f"pgmem bench --size {c['size']}: {c['rows']:,} rows in {c['scopes']} scopes · pieces {c['piece_dims']}-d, "
        f"facts {c['fact_dims']}-d · {c['method']} for scopes >= {c['min_pieces']:,} · ef_search {c['ef_search']} · "
        f"x={c['x']} floor={c['floor']}",
    ]
    if "load" in r:
        ld = r["load"]
        out.append(
            f"load ({ld['jobs']} connections): memory {ld['memory_pieces']:,} pieces in {ld['memory_seconds']:.0f} s "
            f"= {ld['memory_pieces_per_s']:,.0f}/s (put_turn) · documents {ld['document_units']:,} units "
            f"= {ld['document_units_per_s']:,.0f}/s (put_document) · facts {ld['facts']:,} = "
            f"{ld['facts_per_s']:,.0f}/s (add_facts) · VACUUM ANALYZE {ld['vacuum_seconds']:.0f} s"
        )
    out.append(
        f"ANN indexes: {len(r['index_builds'])} built in {r['index_build_seconds']} s, {_mb(r['ann_index_bytes'])}"
        + "".join(
            f"\n  {b['plane']:5} {b['scope_id']:>18} {b['rows']:>8,} rows  {b['seconds']:7.1f} s  {_mb(b['bytes'])}"
            for b in r["index_builds"]
        )
    )
    for action in ("postings", "sample"):
        runs = [w for w in r.get("word_maintenance", []) if w["action"] == action]
        if runs:
            big = max(runs, key=lambda w: w["rows"])
            out.append(
                f"word side, {action}: {len(runs)} sets in {sum(w['seconds'] for w in runs):.1f} s "
                f"(largest: {big['scope_id']}, {big['rows']:,} pieces, {big['seconds']:.1f} s)"
            )
    sizes = r["relation_sizes"]
    out.append("relations: " + ", ".join(f"{k} {_mb(v)}" for k, v in list(sizes.items())[:8]))
    for plane in ("memory", "fact"):
        out.append("")
        out.append(f"{plane}_recall — database side and end to end (same call), ms; recall@{c['x']} vs exact")
        out.append(
            f"{'bucket':>8} {'rows':>7} {'path':>5} | {'1 part: p50':>11} {'p95':>6} {'p99':>6} {'e2e50':>6} "
            f"{'recall':>6} | {'8 parts: p50':>12} {'p95':>6} {'p99':>6} {'e2e50':>6} {'recall':>6} {'hits':>5}"
        )
        for e in r[f"{plane}_recall"]:
            a, b = e["parts_1"], e["parts_8"]
            out.append(
                f"{e['bucket']:>8,} {e['rows_per_scope']:>7,} {e['path']:>5} | {a['db_p50_ms']:>11} "
                f"{a['db_p95_ms']:>6} {a['db_p99_ms']:>6} {a['e2e_p50_ms']:>6} {_rc(a['recall']):>6} | "
                f"{b['db_p50_ms']:>12} {b['db_p95_ms']:>6} {b['db_p99_ms']:>6} {b['e2e_p50_ms']:>6} "
                f"{_rc(b['recall']):>6} {b['hits_per_call']:>5}"
            )
    ex = r["largest_scope_exact"]
    out.append("")
    out.append(
        f"largest scope ({ex['scope_rows']:,} rows), 8 parts, exact scan: db p50 {ex['db_p50_ms']} ms, "
        f"p95 {ex['db_p95_ms']} ms"
    )
    if r["ef_search_sweep"]:
        out.append(
            "sweep on it (8 parts): "
            + " · ".join(
                f"{'ef' if 'ef_search' in s else 'probes'} {s.get('ef_search', s.get('probes'))}: "
                f"p50 {s['db_p50_ms']} ms, recall {_rc(s['recall'])}"
                for s in r["ef_search_sweep"]
            )
        )
    out.append("")
    out.append("issue 4 — 8-part message, database side and end to end (ms)")
    out.append(
        f"{'scope':>30} {'calls':>14} {'path':>5} | {'db p50':>7} {'db p95':>7} | {'e2e p50':>7} "
        f"{'e2e p95':>7} | {'recall':>6}"
    )
    for e in r["issue4"]:
        out.append(
            f"{e['scope']:>30} {e['calls']:>14} {e['path']:>5} | {e['db_p50_ms']:>7} {e['db_p95_ms']:>7} | "
            f"{e['e2e_p50_ms']:>7} {e['e2e_p95_ms']:>7} | {_rc(e['recall']):>6}"
        )
    if "global_hnsw" in r:
        g = r["global_hnsw"]
        out.append("")
        out.append(
            f"alternative: one table-wide HNSW index ({_mb(g['bytes'])}, built in {g['build_seconds']} s), "
            "scope as a filter, 8 parts"
        )
        out.append(
            f"{'scope':>14} {'iterative':>14} {'max_tuples':>10} {'planner':>7} | {'db p50':>7} {'db p95':>7} | "
            f"{'recall':>6} {'hits':>5}"
        )
        for e in g["runs"]:
            out.append(
                f"{e['scope']:>14} {e['iterative_scan']:>14} {e['max_scan_tuples']:>10} "
                f"{'index' if e['planner_uses_global_index'] else 'other':>7} | {e['db_p50_ms']:>7} "
                f"{e['db_p95_ms']:>7} | {_rc(e['recall']):>6} {e['hits_per_call']:>5}"
            )
    if "default_mode" in r:
        out.extend(render_default_mode(r["default_mode"], r.get("word_side_sizes")))
    if "writes" in r:
        from pgmem.lab.bench.writes import render as render_writes

        out += ["", render_writes(r["writes"])]
    m = r["server_memory"]
    if "load_average" in r:
        la = r["load_average"]
        out.append("")
        out.append(
            f"machine load average (1, 5, 15 min) before {la['before']}, after {la['after']} on {la['cpus']} CPUs "
            "(figures above are wall-clock: other processes on the machine inflate them)"
        )
    out.append("")
    out.append(
        (
            f"server: PSS {m['server_pss_mb']} MB over {m.get('server_processes')} processes · "
            if m.get("server_pss_mb") is not None
            else "server: PSS unknown (a remote server, or /proc unreadable) · "
        )
        + f"shared_buffers {m['shared_buffers']} · work_mem {m['work_mem']} · "
        f"effective_cache_size {m['effective_cache_size']}"
    )
    return "\n".join(out)


def _rc(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
