"""Two databases' write paths side by side (a benchmark, not a test).

    python -m pgmem.lab.bench.write_ab URL URL2 [--turns 400] [--single 20] [--rounds 5] [--documents 0]
                                          [--facts 0]

URL and URL2 name two migrated databases as a superuser: a copy of a store migrated to a later
revision, say (`CREATE DATABASE b TEMPLATE a`, then `DATABASE_URL=... pgmem migrate`), so that
each side runs its own functions and triggers on the same tables. Each round writes the same
synthetic turns (pgmem/lab/bench/synth.py, six pieces a turn) into a new scope of each database,
alternating which goes first: one `pgmem.put_turns` call of `turns` turns (the bulk path), then
`single` `pgmem.put_turn` calls, one turn each (the path of a sealed turn). Database side: each
statement's own time, as `pgmem bench`'s write rows measure it. Both databases must store the
same rows (each piece's label, body, vectors and words, compared after every round); the scopes
are forgotten at the end, on error too. Medians of pieces a second per path and database, and
their ratio. With `--documents N`, each round also adds N small documents into the scope, one
`pgmem.put_document` call each (a heading unit and two `[[link]]` units: to the document before,
stored, and to the one after, not yet stored), database side as above: documents a second. Their
link units' text may differ between revisions (what a link resolves to), so only their unit
counts are compared. With `--facts N`, each round also adds N facts into the scope in calls of
100 (`pgmem.add_facts`: a third tied to a turn, a third to a section, a third to neither), then
the same calls again (all skipped: the idempotent path): facts a second of each, the stored
facts compared."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg

from pgmem.db import connect
from pgmem.errors import PgmemError
from pgmem.lab.bench.load import MODEL_ID
from pgmem.lab.bench.synth import PIECES_PER_TURN, Turn
from pgmem.lab.bench.write_cost import _turns
from pgmem.lab.bench.writes import put_turn_each, put_turns

Conn = psycopg.Connection[tuple[object, ...]]

PREFIX = "write-ab-"

#: Every stored piece of a scope with its words, in write order: what both sides must agree on.
ROWS = """SELECT p.thread_id, p.turn_index, p.source_index, p.seq, p.unit_kind, p.label, p.body,
                 p.raw_embedding::text, p.embedding::text, w.lexemes
            FROM pgmem.piece p
            LEFT JOIN pgmem.piece_word w ON w.scope_id = p.scope_id AND w.piece_id = p.piece_id
           WHERE p.scope_id = %s
           ORDER BY p.thread_id, p.turn_index, p.source_index, p.seq"""


PUT_DOCUMENT = """SELECT clock_timestamp() - statement_timestamp() FROM pgmem.put_document(
    %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s::vector[])"""


def put_documents(conn: Conn, scope: str, n: int) -> tuple[int, float]:
    """n documents d00000.md ... into scope, one put_document call each (random unit vectors,
    the turns' model): units stored and the calls' database-side seconds summed."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'pgmem.piece'::regclass AND attname = 'embedding'"
    ).fetchone()
    dims = int(str(row[0])) if row else 0
    v = np.random.default_rng(11).standard_normal((3 * n, dims)).astype(np.float32)
    vectors = list(v / np.linalg.norm(v, axis=1, keepdims=True))
    secs = 0.0
    for i in range(n):
        heading, before, after = f"# Doc {i}", f"[[d{i - 1:05}]]", f"[[d{i + 1:05}]]"
        chunk = f"{heading}\n\nRead {before} first. Then {after} later."
        spans = [(0, len(heading))] + [(chunk.index(x), chunk.index(x) + len(x)) for x in (before, after)]
        bodies = [heading, f"Read {before} first. → Doc {i - 1}", f"Then {after} later. → (no such document)"]
        starts, ends = [a for a, _ in spans], [b for _, b in spans]
        kinds = ["heading", "transclusion", "transclusion"]
        doc = (f"d{i:05}.md", f"Doc {i}", chunk, i.to_bytes(8, "big"), MODEL_ID, json.dumps([[f"Doc {i}"]]), [chunk])
        units = ([0, 0, 0], kinds, [0, 0, 1], starts, ends, [f"Doc {i}"] * 3, bodies, vectors[3 * i : 3 * i + 3])
        args = (scope, *doc, *units)
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            took = conn.execute(PUT_DOCUMENT, args, binary=True).fetchone()
        if took is None or not isinstance(took[0], timedelta):
            raise RuntimeError(f"put_document returned {took}")
        secs += took[0].total_seconds()
    row = conn.execute(
        "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'document'", (scope,)
    ).fetchone()
    return int(str(row[0])) if row else 0, secs


ADD_FACTS = """SELECT clock_timestamp() - statement_timestamp(), count(*) FROM pgmem.add_facts(
    %s, %s, %s, %s::vector[], %s, %s, %s)"""

#: Every stored fact of a scope, in a stable order: what both sides must agree on.
FACT_ROWS = """SELECT thread_id, turn_index, section, body, embedding::text FROM pgmem.fact
                WHERE scope_id = %s ORDER BY body, section NULLS FIRST"""


def add_facts(conn: Conn, scope: str, n: int, turns: list[Turn]) -> tuple[int, float, float]:
    """n facts into scope in calls of 100, then the same calls again: facts stored, and the
    database-side seconds of the first calls and of the repeated ones."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'pgmem.fact'::regclass AND attname = 'embedding'"
    ).fetchone()
    dims = int(str(row[0])) if row else 0
    v = np.random.default_rng(13).standard_normal((n, dims)).astype(np.float32)
    vectors = list(v / np.linalg.norm(v, axis=1, keepdims=True))
    calls = []
    for lo in range(0, n, 100):
        idx = range(lo, min(n, lo + 100))
        tied = [turns[i % len(turns)] if i % 3 == 0 else None for i in idx]
        calls.append((
            [f"fact {i} of the bench: the ferry leaves at {i % 24}:00" for i in idx], [vectors[i] for i in idx],
            [t.thread_id if t else None for t in tied], [t.turn_index if t else None for t in tied],
            [f"d{i:05}.md#part" if i % 3 == 1 else None for i in idx],
        ))  # fmt: skip
    stored, secs = 0, [0.0, 0.0]
    for again in (0, 1):
        for bodies, vecs, threads, indexes, sections in calls:
            with conn.transaction():
                conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
                took = conn.execute(
                    ADD_FACTS, (scope, MODEL_ID, bodies, vecs, threads, indexes, sections), binary=True
                ).fetchone()
            if took is None or not isinstance(took[0], timedelta):
                raise RuntimeError(f"add_facts returned {took}")
            secs[again] += took[0].total_seconds()
            stored += int(str(took[1])) if not again else 0
    return stored, secs[0], secs[1]


def _in_scope(turns: list[Turn], scope: str) -> list[Turn]:
    return [dataclasses.replace(t, scope_id=scope) for t in turns]


def _forget(conn: Conn, scope: str) -> None:
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        conn.execute("SELECT * FROM pgmem.forget_scope(%s)", (scope,))


@contextlib.contextmanager
def _scopes(conns: list[Conn]) -> Iterator[list[str]]:
    """The scopes written, forgotten on the way out (so a failed run leaves nothing behind)."""
    made: list[str] = []
    try:
        yield made
    finally:
        for conn in conns:
            for scope in made:
                _forget(conn, scope)


def run(
    url: str, url2: str, *, turns: int = 400, single: int = 20, rounds: int = 5, documents: int = 0, facts: int = 0
) -> dict[str, Any]:
    """The module docstring's rounds: per side and path, each round's pieces a second."""
    by = _turns(turns + single, 0)["cost-source"]
    bulk, each = by[:turns], by[turns : turns + single]
    rates: dict[str, dict[str, list[float]]] = {
        side: {"put_turns": [], "put_turn": [], "put_document": [], "add_facts": [], "add_facts again": []}
        for side in ("database", "against")
    }
    with connect(url) as c1, connect(url2) as c2:
        for c in (c1, c2):
            c.autocommit = True
            row = c.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
            if not row or not row[0]:
                raise PgmemError("write_ab needs superuser connections (it writes and forgets its own scopes)")
        sides = [("database", c1), ("against", c2)]
        for c in (c1, c2):  # left by a run killed before its clean-up
            for r in range(rounds):
                _forget(c, f"{PREFIX}{r}")
        with _scopes([c1, c2]) as made:
            made.append(f"{PREFIX}warm")
            for c in (c1, c2):  # registered and planned before the first timed call, as in a service
                put_turns(c, _in_scope(by[:2], f"{PREFIX}warm"))
            for r in range(rounds):
                scope = f"{PREFIX}{r}"
                made.append(scope)
                for side, conn in sides if r % 2 == 0 else sides[::-1]:
                    for path, (n, secs) in (
                        ("put_turns", put_turns(conn, _in_scope(bulk, scope))),
                        ("put_turn", put_turn_each(conn, _in_scope(each, scope))),
                    ):
                        if n != PIECES_PER_TURN * (turns if path == "put_turns" else single) or secs <= 0:
                            raise RuntimeError(f"{side}: {path} stored {n} pieces in {secs} s")
                        rates[side][path].append(n / secs)
                    if documents:
                        units, secs = put_documents(conn, scope, documents)
                        if units != 3 * documents or secs <= 0:
                            raise RuntimeError(f"{side}: put_document stored {units} units in {secs} s")
                        rates[side]["put_document"].append(documents / secs)
                    if facts:
                        stored, first, again = add_facts(conn, scope, facts, bulk)
                        if stored != facts or first <= 0 or again <= 0:
                            raise RuntimeError(f"{side}: add_facts stored {stored} of {facts} facts")
                        rates[side]["add_facts"].append(facts / first)
                        rates[side]["add_facts again"].append(facts / again)
                rows = [c.execute(ROWS, (scope,)).fetchall() for c in (c1, c2)]
                rows = [[r for r in side_rows if r[0] is not None] for side_rows in rows]  # memory pieces
                if rows[0] != rows[1]:
                    raise RuntimeError(f"round {r + 1}: the two databases stored different rows")
                if facts and c1.execute(FACT_ROWS, (scope,)).fetchall() != c2.execute(FACT_ROWS, (scope,)).fetchall():
                    raise RuntimeError(f"round {r + 1}: the two databases stored different facts")
    out: dict[str, Any] = {
        "turns": turns, "single": single, "rounds": rounds, "documents": documents, "facts": facts, "paths": {}
    }  # fmt: skip
    paths = ("put_turns", "put_turn") + (("put_document",) if documents else ()) + (
        ("add_facts", "add_facts again") if facts else ())  # fmt: skip
    for path in paths:
        a, b = (statistics.median(rates[s][path]) for s in ("database", "against"))
        out["paths"][path] = {
            "database_per_s": round(a),
            "against_per_s": round(b),
            "against_vs_database": round(b / a, 3),
            "runs": {s: [round(x) for x in rates[s][path]] for s in rates},
        }
    out["load_average"] = [round(v, 1) for v in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.write_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("url2")
    p.add_argument("--turns", type=int, default=400, help="turns of the put_turns call (six pieces a turn)")
    p.add_argument("--single", type=int, default=20, help="put_turn calls a round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--documents", type=int, default=0, help="put_document calls a round (0: none)")
    p.add_argument("--facts", type=int, default=0, help="facts added a round, in calls of 100 (0: none)")
    a = p.parse_args(argv)
    if not (
        1 <= a.turns <= 5000 and 1 <= a.single <= 1000 and 1 <= a.rounds <= 50
        and 0 <= a.documents <= 20000 and 0 <= a.facts <= 100000
    ):  # fmt: skip
        p.error("--turns must be 1..5000, --single 1..1000, --rounds 1..50, --documents 0..20000, --facts 0..100000")
    try:
        r = run(a.url, a.url2, turns=a.turns, single=a.single, rounds=a.rounds, documents=a.documents, facts=a.facts)
    except (psycopg.Error, OSError, ValueError, RuntimeError, PgmemError) as exc:
        print(
            f"write_ab: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}", file=sys.stderr
        )
        return 1
    print(
        f"database side, pieces (documents) a second, median of {a.rounds} rounds "
        "(the same turns into a new scope of each, "
        f"alternating which goes first), URL's (database) and URL2's (against)"
    )
    for path, v in r["paths"].items():
        what = {
            "put_turns": f"one call of {a.turns} turns",
            "put_turn": f"{a.single} calls, one turn each",
            "put_document": f"{a.documents} documents of 3 units, one call each",
            "add_facts": f"{a.facts} facts, calls of 100",
            "add_facts again": f"the same {a.facts} facts again, all skipped",
        }[path]
        print(
            f"{path} ({what}): database {v['database_per_s']:,}, against {v['against_per_s']:,}, "
            f"ratio {v['against_vs_database']} (load average {r['load_average'][0]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
