"""memory_recall latency: vector, hybrid on distinctive words (the default), hybrid on every
word (a benchmark, not a test).

    python -m pgmem.lab.bench.hybrid_words LONGMEMEVAL_DIR [--copies 5] [--reps 100] [--paragraph]

Real text, random vectors: the turns of a LongMemEval folder (every question's haystack a
thread) are stored `copies` times, each copy its own scope, with random unit vectors (the
word side is what is measured; vector search cost does not depend on the vectors). Then
each question, split into pgmem's parts, is recalled in the first copy's scope, scope-wide
and in its own thread, in three variants run side by side in rotating order: `vector`,
`hybrid` (pgmem.distinctive_words, pgmem.word_share 0.1) and `hybrid, every word`
(pgmem.word_share = 1: every word found in a piece is searched, which is what hybrid did
before). `--paragraph` appends to each question a long unrelated message (600-2,000
characters from another question's haystack, as `pgmem eval coverage -o paragraph=true`
does): a long message has many distinctive words. Times are read database side (EXPLAIN
ANALYZE's execution time). Runs in a temporary database on the embedded server (or
DATABASE_URL's server)."""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

import numpy as np

from pgmem.config import Settings
from pgmem.db import connect, database_url, scoped
from pgmem.lab.bench.doc_exclusion import DIMS, Conn, db_time_ms, summary, unit_rows
from pgmem.lab.evaluation.common import temporary_database
from pgmem.lab.evaluation.coverage import paragraphs_from
from pgmem.lab.evaluation.longmemeval import load_dir
from pgmem.pieces import turn_pieces
from pgmem.splitting import split_prompt_chunks
from pgmem.sqlfiles import InstallParams

MODEL = "bench-random-unit-vectors"
RECALL = """SELECT * FROM pgmem.memory_recall(%(scope)s, %(parts)s::vector[], %(texts)s, x => 5, floor => -1,
                                              thread => %(thread)s, mode => %(mode)s)"""


Threads = dict[str, list[list[tuple[str, str, int, str]]]]


def load(conn: Conn, scope: str, threads: Threads, rng: np.random.Generator) -> int:
    n = 0
    with scoped(conn, scope), conn.cursor(binary=True) as cur:
        params = []
        for thread, turns in threads.items():
            for index, pieces in enumerate(turns):
                digest = hashlib.sha256(f"{thread}/{index}".encode()).digest()
                params.append(
                    (
                        scope,
                        thread,
                        index,
                        digest,
                        MODEL,
                        [p[0] for p in pieces],
                        [p[2] for p in pieces],
                        [p[1] for p in pieces],
                        [p[3] for p in pieces],
                        list(unit_rows(rng, len(pieces))),
                    )
                )
                n += len(pieces)
        cur.executemany(
            """SELECT pgmem.put_turn(%s, %s, %s, now(), '[]'::jsonb, %s, %s, %s, %s, %s, %s, %s::vector[])""", params
        )
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="a LongMemEval folder (e.g. longmemeval/oracle)")
    ap.add_argument("--copies", type=int, default=5, help="scopes holding a copy of the text")
    ap.add_argument("--reps", type=int, default=100, help="questions timed per variant and target")
    ap.add_argument("--paragraph", action="store_true", help="append a long unrelated message to each question")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    questions = load_dir(args.path)
    threads = {
        q.qid: [[(p.unit_kind, p.label, p.source_index, p.body) for p in turn_pieces(t, None)] for t in q.turns]
        for q in questions
    }
    rng = np.random.default_rng(7)
    asked_qs = questions[: args.reps]
    paragraphs = paragraphs_from(questions[args.reps :]) if args.paragraph else []
    if args.paragraph and not paragraphs:
        raise SystemExit("--paragraph: no message of 600-2,000 characters outside the timed questions")
    asked = [
        (q.qid, split_prompt_chunks(q.question + (f" {paragraphs[i % len(paragraphs)]}" if paragraphs else "")))
        for i, q in enumerate(asked_qs)
    ]
    server = database_url(Settings.from_env())
    with temporary_database(server, InstallParams(DIMS, DIMS)) as url, connect(url) as conn:
        t0 = time.monotonic()
        per_scope = [load(conn, f"copy{c}", threads, rng) for c in range(args.copies)]
        conn.execute("ANALYZE pgmem.piece")
        load_s = time.monotonic() - t0
        variants = {"vector": ("vector", ""), "hybrid": ("hybrid", ""), "hybrid, every word": ("hybrid", "1")}
        times: dict[str, list[float]] = {f"{v}, {w}": [] for v in variants for w in ("scope", "thread")}
        for i, (qid, parts) in enumerate(asked):
            vecs = list(unit_rows(rng, len(parts)))
            order = list(variants.items())
            order = order[i % 3 :] + order[: i % 3]  # rotate, so no variant always runs first
            for where, thread in (("scope", None), ("thread", qid)):
                for name, (mode, share) in order:
                    with scoped(conn, "copy0"):
                        conn.execute("SELECT set_config('pgmem.word_share', %s, true)", (share,))
                        params: dict[str, object] = {
                            "scope": "copy0",
                            "parts": vecs,
                            "texts": parts,
                            "thread": thread,
                            "mode": mode,
                        }
                        times[f"{name}, {where}"].append(db_time_ms(conn, RECALL, params))
    base = {w: statistics.median(times[f"vector, {w}"]) for w in ("scope", "thread")}
    out = {
        k: {**summary(v), "vs_vector": round(statistics.median(v) / base[k.rsplit(", ", 1)[1]], 2)}
        for k, v in times.items()
    }
    result = {
        "pieces_per_scope": per_scope[0],
        "scopes": args.copies,
        "questions": len(asked),
        "paragraph": args.paragraph,
        "load_seconds": round(load_s, 1),
        "variants": out,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    what = "questions with a long paragraph" if args.paragraph else "questions"
    print(f"{per_scope[0]} pieces per scope, {args.copies} scopes, {len(asked)} {what}, loaded in {load_s:.0f} s")
    print("| variant | median ms | p95 ms | median / vector |")
    print("|---|---|---|---|")
    for k, v in out.items():
        print(f"| {k} | {v['median_ms']} | {v['p95_ms']} | {v['vs_vector']} |")


if __name__ == "__main__":
    main()
