"""Where a bulk write's time goes, per piece (a benchmark, not a test).

    python -m pgmem.lab.bench.write_cost [--turns 400] [--reps 3] [--rounds 3] [--out FILE]

In a temporary database (superuser, dropped afterwards): one `pgmem.put_turns` call of
`turns` synthetic turns (pgmem/lab/bench/synth.py, six pieces a turn) stores a scope, and its
pieces are copied to a staging table. Then the piece insert that `put_turns` ends with (the
same columns and expressions: `l2_normalize` of the raw vector, `pgmem.blend` with the turn's
context) is run again into a fresh scope, `reps` times, with the parts of the write taken away
one at a time, each step keeping the previous ones away: the blend, the normalisation, the
`scope_no` trigger (the number given instead), the word index (`piece_word_words_idx`), the
other secondary indexes, the words (`pgmem.piece_word` rows), and the foreign-key checks. Each step's
median against the step before it is what that part costs, in microseconds a piece. The whole
`put_turns` call is timed the same way beside them, so the per-call work shows too. The steps
cannot be undone, so the whole sequence runs `rounds` times, each in a new database, and each
median is over every round's runs (a burst of load on a shared machine then moves one sample,
not a step)."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import psycopg

from pgmem.lab.bench.synth import PIECES_PER_TURN, ScopeSpec, Store, Turn
from pgmem.lab.bench.writes import put_turns

Conn = psycopg.Connection[tuple[object, ...]]

INSERT = """INSERT INTO pgmem.piece (scope_id, kind, unit_kind, thread_id, turn_index, source_index, seq, label,
                         body, raw_embedding, embedding, model_key{cols})
SELECT 'cost-target', 'memory', s.unit_kind, s.thread_id, s.turn_index, s.source_index, s.seq, s.label, s.body,
       {raw}, {emb}, s.model_key{vals}
  FROM cost_stage s ORDER BY s.piece_id"""

#: Each step takes one more part of the write away: (label, what changes, SQL run before it).
STEPS: list[tuple[str, dict[str, str], list[str]]] = [
    ("the piece insert of put_turns", {}, []),
    ("without pgmem.blend (the stored vector copied)", {"emb": "s.embedding"}, []),
    ("without l2_normalize", {"raw": "s.raw_embedding"}, []),
    (
        "without the scope_no trigger (number given)",
        {"cols": ", scope_no", "vals": ", {scope_no}"},
        ["ALTER TABLE pgmem.piece DISABLE TRIGGER scope_no_on_insert"],
    ),
    ("without the word index", {}, ["DROP INDEX pgmem.piece_word_words_idx"]),
    ("without the other secondary indexes", {}, ["{drop_secondary}"]),
    (
        "without the words (no pgmem.piece_word rows)",
        {},
        ["ALTER TABLE pgmem.piece DISABLE TRIGGER piece_words_on_insert"],
    ),
    ("without the foreign-key checks", {}, ["ALTER TABLE pgmem.piece DISABLE TRIGGER ALL"]),
]


def _turns(n: int, seed: int) -> dict[str, list[Turn]]:
    store = Store("tiny", 384, 384, seed=seed)
    rng = np.random.default_rng(seed + 5)
    topics = rng.choice(4000, size=200, replace=False).astype(np.int64)
    w = 1.0 / np.arange(1, 201) ** 0.8
    names = ("cost-warm", "cost-source", "cost-call")
    store.scopes = [ScopeSpec(s, n * PIECES_PER_TURN, False, topics, w / w.sum()) for s in names]
    by: dict[str, list[Turn]] = {s: [] for s in names}
    for t in store.turns():
        by[t.scope_id].append(t)
    return by


def _same_rows_as_put_turns(conn: Conn) -> None:
    """The timed insert must do put_turns' work: its rows equal the ones put_turns stored (vectors
    to a float's last bits: l2_normalize of a stored unit vector may move one)."""
    row = conn.execute(
        """SELECT count(*) FILTER (WHERE s.piece_id IS NULL OR (s.embedding <-> p.embedding) > 1e-6
                                     OR w.lexemes IS DISTINCT FROM s.lexemes
                                     OR (s.raw_embedding <-> p.raw_embedding) > 1e-6),
                  count(*)
             FROM pgmem.piece p
             LEFT JOIN pgmem.piece_word w ON w.scope_id = p.scope_id AND w.piece_id = p.piece_id
             LEFT JOIN cost_stage s ON (s.thread_id, s.turn_index, s.source_index, s.seq)
                                     = (p.thread_id, p.turn_index, p.source_index, p.seq)
            WHERE p.scope_id = 'cost-target'"""
    ).fetchone()
    assert row is not None
    if int(str(row[0])) or not int(str(row[1])):
        raise RuntimeError(f"the timed insert stored {row[1]} pieces, {row[0]} unlike put_turns' rows")


def cost_run(conn: Conn, *, turns: int = 400, reps: int = 5, seed: int = 0) -> dict[str, Any]:
    """One round of the module docstring's steps (raw runs; `combine` pools rounds), on a
    superuser connection to a scratch database (it
    drops indexes and triggers of pgmem.piece: never run it on a database you keep)."""
    conn.autocommit = True
    by = _turns(turns, seed)
    put_turns(conn, by["cost-warm"][:20])  # the model registered, the plans cached
    pieces, _ = put_turns(conn, by["cost-source"][:turns])
    conn.execute(
        "CREATE TABLE cost_stage AS SELECT p.*, w.lexemes, t.context FROM pgmem.piece p"
        " JOIN pgmem.piece_word w ON w.scope_id = p.scope_id AND w.piece_id = p.piece_id"
        " JOIN pgmem.turn t ON t.scope_id = p.scope_id AND t.thread_id = p.thread_id AND t.turn_index = p.turn_index"
        " WHERE p.scope_id = 'cost-source'"
    )

    def one_call() -> float:
        batch = by["cost-call"][:turns]
        conn.execute("DELETE FROM pgmem.piece WHERE scope_id = 'cost-call'")
        conn.execute("DELETE FROM pgmem.turn WHERE scope_id = 'cost-call'")
        conn.execute("VACUUM pgmem.piece")
        _, secs = put_turns(conn, batch)
        return secs

    call_ms = [1000 * one_call() for _ in range(reps)]
    # The target scope's turns exist (the pieces' foreign key); its pieces are put back each rep.
    conn.execute(
        "INSERT INTO pgmem.scope (scope_id, piece_model_key)"
        " SELECT 'cost-target', piece_model_key FROM pgmem.scope WHERE scope_id = 'cost-source'"
    )
    conn.execute("SELECT set_config('pgmem.scope', 'cost-target', false)")
    conn.execute(
        "INSERT INTO pgmem.thread (scope_id, thread_id) SELECT 'cost-target', thread_id FROM pgmem.thread"
        " WHERE scope_id = 'cost-source'"
    )
    conn.execute(
        "INSERT INTO pgmem.turn (scope_id, thread_id, turn_index, turn_time, messages, content_hash, context,"
        " blend_weight, model_key, metadata) SELECT 'cost-target', thread_id, turn_index, turn_time, messages,"
        " content_hash, context, blend_weight, model_key, metadata FROM pgmem.turn WHERE scope_id = 'cost-source'"
    )
    row = conn.execute("SELECT scope_no FROM pgmem.scope WHERE scope_id = 'cost-target'").fetchone()
    assert row is not None
    secondary = [
        str(r[0])
        for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgmem' AND tablename IN ('piece', 'piece_word')"
            " AND indexname NOT IN ('piece_pkey', 'piece_word_pkey', 'piece_word_words_idx')"
        ).fetchall()
    ]
    fmt = {"scope_no": str(row[0]), "drop_secondary": "; ".join(f"DROP INDEX pgmem.{i}" for i in secondary)}

    parts = {"raw": "l2_normalize(s.raw_embedding)", "emb": "pgmem.blend(s.raw_embedding, s.context, s.blend_weight)"}
    parts.update(cols="", vals="")
    conn.execute("ALTER TABLE cost_stage ADD COLUMN blend_weight double precision DEFAULT 0.8")
    rows: list[dict[str, Any]] = []
    for label, change, before in STEPS:
        for stmt in before:
            conn.execute(stmt.format(**fmt))
        parts.update({k: v.format(**fmt) for k, v in change.items()})
        ms = []
        for _ in range(reps):
            conn.execute("DELETE FROM pgmem.piece WHERE scope_id = 'cost-target'")
            conn.execute("VACUUM pgmem.piece")
            t0 = time.perf_counter()
            conn.execute(INSERT.format(**parts))
            ms.append(1000 * (time.perf_counter() - t0))
        if not rows:
            _same_rows_as_put_turns(conn)
        rows.append({"step": label, "runs_ms": [round(x, 1) for x in ms]})
    return {
        "pieces": pieces,
        "turns": turns,
        "reps": reps,
        "put_turns_call_runs_ms": [round(x, 1) for x in call_ms],
        "steps": rows,
    }


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' runs pooled: each median over all the rounds' samples."""
    first = runs[0]
    calls = [x for r in runs for x in r["put_turns_call_runs_ms"]]
    steps = []
    for i, s in enumerate(first["steps"]):
        ms = [x for r in runs for x in r["steps"][i]["runs_ms"]]
        steps.append({"step": s["step"], "median_ms": round(statistics.median(ms), 1), "runs_ms": ms})
    for prev, cur in itertools.pairwise(steps):
        cur["saves_us_per_piece"] = round(1000 * (prev["median_ms"] - cur["median_ms"]) / first["pieces"], 1)
    return {
        **first,
        "rounds": len(runs),
        "put_turns_call_median_ms": round(statistics.median(calls), 1),
        "put_turns_call_runs_ms": calls,
        "steps": steps,
        "load_average": [round(v, 1) for v in os.getloadavg()],
    }


def render(r: dict[str, Any]) -> str:
    n = r["pieces"]
    call = r["put_turns_call_median_ms"]
    out = [
        f"one put_turns call of {r['turns']} turns ({n} pieces), median of {r['rounds']} x {r['reps']}: {call} ms, "
        f"{n / call * 1000:,.0f} pieces/s (load average {r['load_average'][0]} at the end)",
        "step (each keeps the previous ones away) | median ms | µs a piece | pieces/s | that part costs, µs a piece",
    ]
    for s in r["steps"]:
        saves = s.get("saves_us_per_piece", "")
        ms = s["median_ms"]
        out.append(f"{s['step']} | {ms} | {1000 * ms / n:.1f} | {n / ms * 1000:,.0f} | {saves}")
    return "\n".join(out)


def main() -> int:
    from pgmem.config import Settings
    from pgmem.db import connect, database_url
    from pgmem.lab.evaluation.common import temporary_database
    from pgmem.sqlfiles import InstallParams

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="the whole sequence, each time in a new database")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    if not (1 <= args.turns <= 5000 and 1 <= args.reps <= 50 and 1 <= args.rounds <= 20):
        print("--turns must be 1..5000, --reps 1..50 and --rounds 1..20", file=sys.stderr)
        return 2
    runs = []
    for _ in range(args.rounds):
        server = database_url(Settings.from_env())
        with temporary_database(server, InstallParams(384, 1024)) as url, connect(url) as conn:
            runs.append(cost_run(conn, turns=args.turns, reps=args.reps))
    r = combine(runs)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(r, f, indent=2)
    print(render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
