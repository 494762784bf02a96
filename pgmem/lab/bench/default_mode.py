"""The default recall mode (hybrid: vector + word search, what Python, the CLI, MCP and the
LangGraph store run) side by side with vector mode, for `pgmem bench` (issue 26).

Words need real text: with `--text DIR` (a LongMemEval folder) the store's pieces carry the
bodies of that folder's turns (split as pgmem splits them), its questions are the 1-part
messages and its long user messages, split by pgmem's splitter, the 8-part ones. Vectors stay
the synthetic ones (vector search cost does not depend on what they mean). Each message runs
in both modes, alternating which goes first, scope-wide and in one thread; database-side
p50/p95/p99, and recall against the same mode with exact => true (for hybrid: the same fusion
over exact vector candidates; the word side is exact in both). Then the sizes of the piece
table and of each of its indexes (the word index among them), per 100,000 pieces."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgmem.db import scoped
from pgmem.errors import InputError
from pgmem.lab.bench.measure import Conn, Timings, ids_by_part, timed_query
from pgmem.lab.bench.synth import F32, ScopeSpec, Store

RECALL_SQL = """SELECT part_no, rank, piece_id FROM pgmem.memory_recall(
    scope => %s, part_vectors => %s::vector[], part_texts => %s::text[], x => %s, floor => %s,
    thread => %s, mode => %s, exact => %s, ef_search => %s)"""
MODES = ("vector", "hybrid")
#: The login the default mode is measured as: a member of pgmem_app, the role a service uses, so
#: row-level security applies as it does in production (as a superuser it does not).
APP_LOGIN = "pgmem_bench_app"


@contextlib.contextmanager
def app_connection(admin: Conn) -> Iterator[Conn]:
    """A connection to the admin connection's database as APP_LOGIN (created if missing, a LOGIN
    member of pgmem_app; the embedded server trusts local logins)."""
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_LOGIN,)).fetchone() is None:
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(APP_LOGIN)))
    admin.execute(sql.SQL("GRANT pgmem_app TO {}").format(sql.Identifier(APP_LOGIN)))
    from pgmem.db import connect

    params = admin.info.get_parameters()
    params["user"] = APP_LOGIN
    conn = connect(psycopg.conninfo.make_conninfo(**params))
    try:
        yield conn
    finally:
        conn.close()


@dataclass(frozen=True)
class TextPool:
    """Piece bodies, questions and long messages of a LongMemEval folder."""

    source: str
    bodies: list[str]
    questions: list[str]
    long_messages: list[str]

    @classmethod
    def from_longmemeval(cls, path: Path) -> TextPool:
        from pgmem.lab.evaluation.coverage import paragraphs_from
        from pgmem.lab.evaluation.longmemeval import load_dir
        from pgmem.pieces import turn_pieces

        questions = load_dir(path)  # refuses a missing folder or one without question files
        bodies = [p.body for q in questions for t in q.turns for p in turn_pieces(t, None) if p.body.strip()]
        pool = cls(str(path), bodies, [q.question for q in questions], paragraphs_from(questions))
        if not pool.bodies or not pool.questions or not pool.long_messages:
            raise InputError(f"{path}: no LongMemEval turns, questions or long messages (600-2,000 characters) there")
        return pool

    def message(self, parts: int, rng: np.random.Generator) -> list[str]:
        """A message of exactly `parts` parts: a question, or pgmem's split of long messages."""
        from pgmem.splitting import split_prompt_chunks

        if parts == 1:
            return [self.questions[int(rng.integers(len(self.questions)))]]
        out: list[str] = []
        while len(out) < parts:
            out.extend(split_prompt_chunks(self.long_messages[int(rng.integers(len(self.long_messages)))]))
        return out[:parts]


def _run(
    conn: Conn,
    store: Store,
    pool: TextPool,
    spec: ScopeSpec,
    *,
    parts: int,
    thread: str | None,
    messages: int,
    x: int,
    floor: float,
    ef_search: int | None,
    seed: int,
) -> dict[str, Timings]:
    rng = np.random.default_rng(seed)
    out = {m: Timings() for m in MODES}
    for i in range(messages + 1):
        vecs: F32 = store.queries(spec, parts, rng)
        texts = pool.message(parts, rng)
        order = MODES if i % 2 == 0 else MODES[::-1]
        for mode in order:
            args = (spec.scope_id, list(vecs), texts, x, floor, thread, mode, False, ef_search)
            with scoped(conn, spec.scope_id):
                rows, db, e2e = timed_query(conn, RECALL_SQL, args)
            if i == 0:
                continue  # warm-up
            t = out[mode]
            t.db_ms.append(db)
            t.e2e_ms.append(e2e)
            t.hits += len(rows)
            t.calls += 1
            with scoped(conn, spec.scope_id):
                truth = conn.execute(RECALL_SQL, (*args[:-2], True, None), binary=True).fetchall()
            got, want = ids_by_part(rows, parts), ids_by_part(truth, parts)
            t.found += sum(len(g & w) for g, w in zip(got, want, strict=True))
            t.expected += sum(len(w) for w in want)
    return out


def default_mode_rows(
    conn: Conn,
    store: Store,
    pool: TextPool,
    *,
    messages: int,
    x: int,
    floor: float,
    ef_search: int | None,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per scope size (2,000 pieces, 100,000, and the 1m store's 200,000), parts
    (1, 8) and where (scope-wide, one thread): both modes' figures and their p50 ratio."""
    picks: dict[int, ScopeSpec] = {}
    for s in store.scopes:
        if s.rows in (2_000, 100_000, 200_000) and s.with_documents and s.rows not in picks:
            picks[s.rows] = s
    rows = []
    for size, spec in sorted(picks.items()):
        with scoped(conn, spec.scope_id):
            path = conn.execute("SELECT pgmem.scope_ann_index('piece', %s) IS NOT NULL", (spec.scope_id,)).fetchone()
        for where, thread in (("scope", None), ("thread", "t0")):
            for parts in (1, 8):
                t = _run(
                    conn,
                    store,
                    pool,
                    spec,
                    parts=parts,
                    thread=thread,
                    messages=messages,
                    x=x,
                    floor=floor,
                    ef_search=ef_search,
                    seed=seed + size + parts + (0 if thread is None else 1),
                )
                v, h = t["vector"].summary(), t["hybrid"].summary()
                rows.append(
                    {
                        "scope_rows": size,
                        "memory_pieces": spec.memory,
                        "where": where,
                        "path": "index" if path and path[0] and thread is None else "exact",
                        "parts": parts,
                        "vector": v,
                        "hybrid": h,
                        "hybrid_vs_vector_p50": round(h["db_p50_ms"] / v["db_p50_ms"], 2) if v["db_p50_ms"] else None,
                    }
                )
    return rows


def word_side_sizes(conn: Conn) -> dict[str, Any]:
    """On-disk sizes of the piece table, of the word side's tables (pgmem.piece_word: each
    piece's words; pgmem.word_fold and word_fold_head: the folded postings and the samples) and
    of each of their indexes, in all and per 100,000 pieces. The word side is those tables and
    their indexes (the GIN word index keyed by scope, piece_word_words_idx, among them). A
    relation cached in shared buffers (or the page cache) takes its on-disk pages, so these are
    also what each takes in memory once cached."""
    row = conn.execute("SELECT count(*) FROM pgmem.piece").fetchone()
    pieces = int(str(row[0])) if row else 0
    rels = conn.execute(
        """WITH r(oid) AS (SELECT unnest(ARRAY['pgmem.piece', 'pgmem.piece_word', 'pgmem.word_fold',
                                                 'pgmem.word_fold_head']::regclass[]))
           SELECT c.relname, c.relkind::text, pg_total_relation_size(c.oid) - pg_indexes_size(c.oid),
                  coalesce(i.indrelid, c.oid) <> 'pgmem.piece'::regclass
             FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
            WHERE c.oid IN (SELECT oid FROM r) OR i.indrelid IN (SELECT oid FROM r)
            ORDER BY 3 DESC"""
    ).fetchall()
    per = 100_000 / pieces if pieces else 0.0
    out: dict[str, Any] = {"pieces": pieces, "relations": []}
    for name, kind, size, words in rels:
        b = int(str(size))
        out["relations"].append(
            {
                "relation": str(name),
                "kind": "index" if kind == "i" else "table",
                "words": bool(words),
                "bytes": b,
                "bytes_per_100k_pieces": round(b * per),
            }
        )
    table = next((r["bytes"] for r in out["relations"] if r["relation"] == "piece"), 0)
    words = sum(r["bytes"] for r in out["relations"] if r["words"])
    index = sum(r["bytes"] for r in out["relations"] if r["relation"] == "piece_word_words_idx")
    out["word_side_bytes"] = words
    out["word_side_vs_piece_table"] = round(words / table, 4) if table else None
    out["word_index_bytes"] = index
    out["word_index_vs_piece_table"] = round(index / table, 4) if table else None
    return out


def render(rows: Sequence[dict[str, Any]], sizes: dict[str, Any] | None) -> list[str]:
    out = ["", "default mode (hybrid) vs vector — database side, ms; recall@x vs exact (same mode, exact => true)"]
    out.append(
        f"{'scope':>8} {'where':>6} {'path':>5} {'parts':>5} | {'vector p50':>10} {'p95':>6} {'p99':>6} "
        f"{'recall':>6} | {'hybrid p50':>10} {'p95':>6} {'p99':>6} {'recall':>6} | {'ratio':>5}"
    )
    for r in rows:
        v, h = r["vector"], r["hybrid"]
        out.append(
            f"{r['scope_rows']:>8,} {r['where']:>6} {r['path']:>5} {r['parts']:>5} | {v['db_p50_ms']:>10} "
            f"{v['db_p95_ms']:>6} {v['db_p99_ms']:>6} {_rc(v['recall']):>6} | {h['db_p50_ms']:>10} "
            f"{h['db_p95_ms']:>6} {h['db_p99_ms']:>6} {_rc(h['recall']):>6} | {r['hybrid_vs_vector_p50']:>5}"
        )
    if sizes:
        out.append("")
        out.append(
            f"piece plane sizes ({sizes['pieces']:,} pieces): the word side "
            "(piece_word, word_fold, indexes: *) "
            f"{sizes['word_side_bytes'] / 1048576:,.1f} MB = {sizes['word_side_vs_piece_table']:.1%} of the piece "
            f"table, its word index {sizes['word_index_bytes'] / 1048576:,.1f} MB = "
            f"{sizes['word_index_vs_piece_table']:.1%}"
        )
        out.append(f"{'relation':>32} {'kind':>5} | {'MB':>8} {'MB per 100k pieces':>18}")
        for r in sizes["relations"]:
            out.append(
                f"{r['relation'] + (' *' if r['words'] else ''):>32} {r['kind']:>5} | {r['bytes'] / 1048576:>8,.1f} "
                f"{r['bytes_per_100k_pieces'] / 1048576:>18,.1f}"
            )
    return out


def _rc(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
