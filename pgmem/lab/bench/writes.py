"""Write throughput into an indexed scope and the bulk path, in one run (a benchmark, not a test).

    pgmem bench --size 100k                        (runs this after the recall measurements)
    python -m pgmem.lab.bench.writes [--rows 100000] [--rounds 3] [--db NAME]

Two scopes of synthetic turns (pgmem/lab/bench/synth.py, six pieces a turn): one small and
unindexed, and one of `rows` memory pieces with its partial HNSW index (m 24, ef_construction
400) built with the write tail (the default, `scope_index_plan(tail => true)`: later pieces are
not inserted into the graph). Each round puts the same number of turns into both with
`pgmem.put_turn`, one call per turn, and one `pgmem.put_turns` batch into the indexed scope.
Then an index without the tail (`tail => false`, as before the tail: every write goes into
the graph) is built beside it on the same scope, and the same put_turn rounds run again into
the scope. Database side: the statement's own time, from its arrival to its last row
(clock_timestamp() - statement_timestamp(), summed over the calls), commits excluded. 8-part
vector recall on the indexed scope against exact search, right after the build and with the
tail the writes left. The build of the tail index is what a fold of the tail costs (the same
statement with a new bound)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np
import psycopg

from pgmem.lab.bench.load import MODEL_ID
from pgmem.lab.bench.measure import build_indexes, recall_run
from pgmem.lab.bench.synth import PIECES_PER_TURN, ScopeSpec, Store, Turn

Conn = psycopg.Connection[tuple[object, ...]]

PUT_TURN = """SELECT s.pieces, extract(epoch FROM clock_timestamp() - statement_timestamp())
    FROM pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => NULL,
         messages => %s::jsonb, content_hash => %s, model_id => %s, unit_kinds => %s, source_indexes => %s,
         labels => %s, bodies => %s, vectors => %s::vector[]) s"""
PUT_TURNS = """SELECT sum(s.pieces), extract(epoch FROM max(clock_timestamp()) - statement_timestamp())
    FROM pgmem.put_turns(scope => %s, model_id => %s, threads => %s, turn_indexes => %s,
         turn_times => %s::timestamptz[], messages => %s::jsonb[], content_hashes => %s, piece_counts => %s,
         unit_kinds => %s, source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[]) s"""

PLAIN, TAIL = "w-unindexed", "w-tail"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _kinds(t: Turn) -> list[str]:
    return ["user"] + ["assistant"] * (len(t.bodies) - 1)


def put_turns(conn: Conn, turns: list[Turn]) -> tuple[int, float]:
    """One pgmem.put_turns call for turns of one scope: (pieces stored, database-side seconds)."""
    params = (
        turns[0].scope_id,
        MODEL_ID,
        [t.thread_id for t in turns],
        [t.turn_index for t in turns],
        [None] * len(turns),
        [t.messages for t in turns],
        [t.content_hash for t in turns],
        [len(t.bodies) for t in turns],
        [k for t in turns for k in _kinds(t)],
        [i for t in turns for i in range(len(t.bodies))],
        [x for t in turns for x in t.labels],
        [x for t in turns for x in t.bodies],
        [v for t in turns for v in t.vectors],
    )
    row = conn.execute(PUT_TURNS, params, binary=True).fetchone()
    assert row is not None
    return int(str(row[0] or 0)), float(str(row[1]))


def put_turn_each(conn: Conn, turns: list[Turn]) -> tuple[int, float]:
    """One pgmem.put_turn call (and transaction) per turn: (pieces, summed database-side seconds)."""
    n, secs = 0, 0.0
    for t in turns:
        row = conn.execute(
            PUT_TURN,
            (
                t.scope_id,
                t.thread_id,
                t.turn_index,
                t.messages,
                t.content_hash,
                MODEL_ID,
                _kinds(t),
                list(range(len(t.bodies))),
                t.labels,
                t.bodies,
                list(t.vectors),
            ),
            binary=True,
        ).fetchone()
        assert row is not None
        n += int(str(row[0]))
        secs += float(str(row[1]))
    return n, secs


def _tail_size(conn: Conn, scope: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'memory'"
        " AND piece_id > coalesce(pgmem.ann_index_through(pgmem.scope_ann_index('piece', %s)), 9223372036854775807)",
        (scope, scope),
    ).fetchone()
    return int(str(row[0])) if row else 0


def _recall(conn: Conn, store: Store, spec: ScopeSpec, messages: int, seed: int, label: str) -> dict[str, Any]:
    t = recall_run(conn, store, [spec], plane="memory", parts=8, messages=messages, x=5, floor=0.3, seed=seed)
    e = recall_run(
        conn,
        store,
        [spec],
        plane="memory",
        parts=8,
        messages=max(3, messages // 4),
        x=5,
        floor=0.3,
        seed=seed,
        exact=True,
    )
    s = t.summary()
    return {
        "scope": spec.scope_id,
        "when": label,
        "tail_pieces": _tail_size(conn, spec.scope_id),
        "db_p50_ms": s["db_p50_ms"],
        "db_p95_ms": s["db_p95_ms"],
        "exact_db_p50_ms": e.summary()["db_p50_ms"],
        "recall": s["recall"],
        "samples": s["samples"],
    }


def _load(conn: Conn, turns: list[Turn], upto: int) -> None:
    """The scope's first `upto` turns, 1,000 a call; turns a previous run stored are not sent again."""
    row = conn.execute("SELECT count(*) FROM pgmem.turn WHERE scope_id = %s", (turns[0].scope_id,)).fetchone()
    for i in range(int(str(row[0])) if row else 0, upto, 1000):
        put_turns(conn, turns[i : min(i + 1000, upto)])


def writes_run(
    conn: Conn,
    *,
    rows: int = 100_000,
    rounds: int = 3,
    turns: int = 10,
    bulk_turns: int = 400,
    messages: int = 20,
    seed: int = 0,
    maintenance_work_mem: str = "1GB",
    keep: bool = False,
) -> dict[str, Any]:
    """The write rows of the bench (see the module docstring), on a superuser connection to a
    migrated database; the two scopes are deleted afterwards unless `keep`."""
    store = Store("tiny", 384, 384, seed=seed)
    rng = np.random.default_rng(seed + 5)
    extra = rounds * (2 * turns + bulk_turns) * PIECES_PER_TURN
    specs = {}
    for name, size in ((PLAIN, 2_000), (TAIL, rows)):
        topics = rng.choice(4000, size=200, replace=False).astype(np.int64)
        w = 1.0 / np.arange(1, 201) ** 0.8
        specs[name] = ScopeSpec(name, size + extra, False, topics, w / w.sum())
    store.scopes = list(specs.values())
    by_scope: dict[str, list[Turn]] = {name: [] for name in specs}
    for t in store.turns():
        by_scope[t.scope_id].append(t)
    base = {name: (spec.rows - extra) // PIECES_PER_TURN for name, spec in specs.items()}

    _say(f"writes: loading {sum(base.values()) * PIECES_PER_TURN:,} pieces with put_turns ...")
    for name, ts in by_scope.items():
        _load(conn, ts, base[name])
    conn.execute("VACUUM (ANALYZE) pgmem.piece")
    _say("writes: building the scope index (with the tail) ...")
    builds = build_indexes(
        conn, min_pieces=5000, method="hnsw", maintenance_work_mem=maintenance_work_mem, scopes=[TAIL]
    )
    recall = [_recall(conn, store, specs[TAIL], messages, seed + 1, "after the build")]

    cursor = dict(base)
    rates: dict[str, list[float]] = {
        "put_turn, unindexed scope": [],
        "put_turn, indexed, with tail": [],
        "put_turns (bulk), indexed, with tail": [],
        "put_turn, indexed, no tail": [],
    }

    def put(label: str, name: str) -> None:
        batch = by_scope[name][cursor[name] : cursor[name] + turns]
        cursor[name] += turns
        n, secs = put_turn_each(conn, batch)
        rates[label].append(n / secs)

    for r in range(rounds):
        _say(f"writes: round {r + 1}/{rounds} ...")
        put("put_turn, unindexed scope", PLAIN)
        put("put_turn, indexed, with tail", TAIL)
        batch = by_scope[TAIL][cursor[TAIL] : cursor[TAIL] + bulk_turns]
        cursor[TAIL] += bulk_turns
        n, secs = put_turns(conn, batch)
        rates["put_turns (bulk), indexed, with tail"].append(n / secs)
    conn.execute("ANALYZE pgmem.piece")
    recall.append(_recall(conn, store, specs[TAIL], messages, seed + 2, "with the tail the writes left"))

    # Before the tail: an index on the same scope that every write goes into, built beside it
    # (the plan's first rebuild statement), then the same put_turn rounds.
    _say("writes: building an index without the tail beside it ...")
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
    ddl = conn.execute(
        "SELECT ddl FROM pgmem.scope_index_plan(5000, concurrent => false, tail => false)"
        " WHERE scope_id = %s AND action = 'rebuild' ORDER BY ddl LIKE 'CREATE%%' DESC LIMIT 1",
        (TAIL,),
    ).fetchone()
    assert ddl is not None
    t0 = time.perf_counter()
    conn.execute(str(ddl[0]))  # DDL text generated by pgmem.scope_index_plan
    no_tail_build = round(time.perf_counter() - t0, 1)
    for r in range(rounds):
        _say(f"writes: round {r + 1}/{rounds} without the tail ...")
        put("put_turn, unindexed scope", PLAIN)
        put("put_turn, indexed, no tail", TAIL)
    rebuilt = conn.execute(
        "SELECT format('DROP INDEX pgmem.%I', relname) FROM pg_class"
        " WHERE relnamespace = 'pgmem'::regnamespace AND relname LIKE 'piece\\_ann\\_%\\_rebuild'"
    ).fetchall()
    for (drop,) in rebuilt:
        conn.execute(str(drop))
    writes = [
        {
            "path": k,
            "pieces_per_s_median": round(statistics.median(v), 1),
            "pieces_per_s": [round(x, 1) for x in v],
        }
        for k, v in rates.items()
    ]
    if not keep:
        for name in specs:
            conn.execute("DELETE FROM pgmem.scope WHERE scope_id = %s", (name,))
        for (drop,) in conn.execute(
            "SELECT ddl FROM pgmem.scope_index_plan(5000, concurrent => false) WHERE action = 'drop'"
        ).fetchall():
            conn.execute(str(drop))
    return {
        "rows_per_indexed_scope": rows,
        "turns_per_round": turns,
        "bulk_turns_per_round": bulk_turns,
        "rounds": rounds,
        "index_builds": [b.__dict__ for b in builds],
        "no_tail_index_build_seconds": no_tail_build,
        "writes": writes,
        "recall": recall,
    }


def render(w: dict[str, Any]) -> str:
    out = [
        f"writes — a {w['rows_per_indexed_scope']:,}-piece indexed scope (HNSW m 24, ef_construction 400), "
        f"{w['rounds']} rounds of {w['turns_per_round']} turns per put_turn row and {w['bulk_turns_per_round']} "
        "per bulk call; database side, pieces/s (median, per round)",
    ]
    for e in w["writes"]:
        out.append(
            f"{e['path']:>40} | {e['pieces_per_s_median']:>9,.0f} | {', '.join(f'{x:,.0f}' for x in e['pieces_per_s'])}"
        )
    out.append("8-part vector recall on the tail scope, recall@5 against exact search")
    out.append(f"{'when':>40} {'tail':>6} | {'db p50':>7} {'db p95':>7} | {'exact p50':>9} | {'recall':>6}")
    for e in w["recall"]:
        out.append(
            f"{e['when']:>40} {e['tail_pieces']:>6,} | {e['db_p50_ms']:>7} {e['db_p95_ms']:>7} | "
            f"{e['exact_db_p50_ms']:>9} | {e['recall']:>6}"
        )
    builds = ", ".join(f"{b['rows']:,} rows {b['seconds']} s" for b in w["index_builds"])
    out.append(
        f"index build with the tail (what a fold costs): {builds}; "
        f"without the tail: {w['no_tail_index_build_seconds']} s"
    )
    return "\n".join(out)


def main() -> int:
    from pgmem.config import Settings
    from pgmem.db import connect, database_url, with_database
    from pgmem.lab.evaluation.common import temporary_database
    from pgmem.sqlfiles import InstallParams

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="memory pieces of each indexed scope")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=10, help="put_turn calls per scope and round")
    ap.add_argument("--bulk-turns", type=int, default=400, help="turns per put_turns call")
    ap.add_argument("--messages", type=int, default=20)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--db", help="a migrated database on the server to use and keep (default: a temporary one)")
    args = ap.parse_args()
    kw: dict[str, Any] = {
        "rows": args.rows,
        "rounds": args.rounds,
        "turns": args.turns,
        "bulk_turns": args.bulk_turns,
        "messages": args.messages,
    }
    server = database_url(Settings.from_env())
    if args.db:
        with connect(with_database(server, args.db)) as conn:
            w = writes_run(conn, keep=True, **kw)
    else:
        with temporary_database(server, InstallParams(384, 1024)) as url, connect(url) as conn:
            w = writes_run(conn, **kw)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(w, f, indent=2)
    print(render(w))
    return 0


if __name__ == "__main__":
    sys.exit(main())
