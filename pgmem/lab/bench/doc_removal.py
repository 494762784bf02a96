"""A large document replaced and forgotten right after it was written, on stale and on fresh
statistics, in one or two databases side by side (a benchmark, not a test).

    python -m pgmem.lab.bench.doc_removal TEMPLATE [TEMPLATE2] [--units 4000] [--per-chunk 4]
                                          [--cycles 2] [--rounds 3] [--states stale,analyzed]

TEMPLATE (and TEMPLATE2) name migrated databases that nothing else is connected to, as a
superuser: a copy of one migrated to a later revision, say. Each round copies each template
once a state (CREATE DATABASE ... TEMPLATE), rotating the order, and drops the copies. In a
copy autovacuum is off on piece, chunk, piece_word and document (so the state is the one
chosen), and each of `cycles` cycles writes one document of `units` units (`per_chunk` a chunk;
precomputed random unit vectors), replaces it (put_document with another hash) and forgets it
(forget_document). States: stale, no ANALYZE (the planner knows the tables by their size on
disk, as right after a write autovacuum has not seen); analyzed, ANALYZE of the four tables
before each replace and forget; emptied, ANALYZE while no document is stored (at the start and
after each forget), so every write and removal runs on statistics that say the tables are
empty. Times are the client's, one call each over the local socket. Medians of milliseconds
per template, state, step and cycle; the ratios stale / analyzed and TEMPLATE2 / TEMPLATE."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgmem.db import connect, scoped, with_database
from pgmem.errors import PgmemError

Conn = psycopg.Connection[tuple[object, ...]]

MODEL = "bench-random-unit-vectors"
SCOPE = "doc-removal"
TABLES = ("piece", "chunk", "piece_word", "document")
STEPS = ("put", "replace", "forget")
STATES = ("stale", "analyzed", "emptied")
ANALYZE = "ANALYZE pgmem.piece, pgmem.chunk, pgmem.piece_word, pgmem.document"


def _unit_rows(n: int, dims: int) -> list[Any]:
    v = np.random.default_rng(7).standard_normal((n, dims)).astype(np.float32)
    return list(v / np.linalg.norm(v, axis=1, keepdims=True))


def _put(conn: Conn, vectors: list[Any], per_chunk: int, version: int) -> None:
    n = len(vectors)
    chunk_of = [i // per_chunk for i in range(n)]
    nchunks = chunk_of[-1] + 1
    with scoped(conn, SCOPE):
        conn.execute(
            """SELECT pgmem.put_document(%s, 'big.md', 'Doc', 'body', %s, %s, %s::jsonb, %s,
                   %s, %s, %s, %s, %s, %s, %s, %s::vector[])""",
            (
                SCOPE,
                version.to_bytes(8, "big"),
                MODEL,
                json.dumps([["Doc", f"Section {c}"] for c in range(nchunks)]),
                [f"## Section {c}\n\nsome text of the section" for c in range(nchunks)],
                chunk_of,
                ["prose"] * n,
                [i % per_chunk for i in range(n)],
                [0] * n,
                [10] * n,
                ["Doc > Section"] * n,
                [f"unit {i} of version {version}" for i in range(n)],
                vectors,
            ),
            binary=True,
        )


def _forget(conn: Conn) -> None:
    with scoped(conn, SCOPE):
        row = conn.execute("SELECT pieces, documents FROM pgmem.forget_document(%s, 'big.md')", (SCOPE,)).fetchone()
    if not row or row[1] != 1:
        raise RuntimeError(f"forget_document forgot {row}")


@contextlib.contextmanager
def _copy(server: Any, template: str) -> Iterator[str]:
    """A new database copied from `template`, dropped on the way out."""
    name = f"pgmem_docrm_{secrets.token_hex(4)}"
    with psycopg.connect(with_database(server, "postgres"), autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    try:
        yield with_database(server, name)
    finally:
        with psycopg.connect(with_database(server, "postgres"), autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _cycles(url: str, *, units: int, per_chunk: int, cycles: int, state: str) -> list[dict[str, float]]:
    """Milliseconds of each step of each cycle in a new copy."""
    out: list[dict[str, float]] = []
    with connect(url) as conn:
        conn.autocommit = True
        row = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'pgmem.piece'::regclass AND attname = 'embedding'"
        ).fetchone()
        assert row is not None
        vectors = _unit_rows(units, int(str(row[0])))
        for t in TABLES:
            conn.execute(sql.SQL("ALTER TABLE pgmem.{} SET (autovacuum_enabled = off)").format(sql.Identifier(t)))
        if state == "emptied":
            conn.execute(ANALYZE)
        for c in range(cycles):
            ms: dict[str, float] = {}
            for step in STEPS:
                if state == "analyzed" and step != "put":
                    conn.execute(ANALYZE)
                t0 = time.perf_counter()
                if step == "forget":
                    _forget(conn)
                else:
                    _put(conn, vectors, per_chunk, 2 * c + (step == "replace"))
                ms[step] = (time.perf_counter() - t0) * 1000
            if state == "emptied":
                conn.execute(ANALYZE)
            out.append(ms)
    return out


def run(
    templates: list[str],
    *,
    units: int = 4000,
    per_chunk: int = 4,
    cycles: int = 2,
    rounds: int = 3,
    states: tuple[str, ...] = ("stale", "analyzed"),
) -> dict[str, Any]:
    """The module docstring's rounds: per template, state, step and cycle, each round's ms."""
    server = templates[0]
    names = []
    for t in templates:
        with psycopg.connect(t, autocommit=True) as conn:
            who = conn.execute(
                "SELECT current_database(), rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
        if not who or not who[1]:
            raise PgmemError("doc_removal needs superuser connections (it copies and drops databases)")
        names.append(str(who[0]))
    ms: dict[str, list[float]] = {}
    cells = [(i, state) for i in range(len(names)) for state in states]
    for r in range(rounds):
        order = cells[r % len(cells) :] + cells[: r % len(cells)]
        for i, state in order if r % 2 == 0 else order[::-1]:
            with _copy(server, names[i]) as url:
                got = _cycles(url, units=units, per_chunk=per_chunk, cycles=cycles, state=state)
            for n, steps in enumerate(got, 1):
                for step, v in steps.items():
                    ms.setdefault(f"{i}/{state}/{step}/{n}", []).append(v)
    med = {k: statistics.median(v) for k, v in ms.items()}
    rows = []
    for c in range(1, cycles + 1):
        for step in STEPS:
            row: dict[str, Any] = {"cycle": c, "step": step}
            for i in range(len(names)):
                for state in states:
                    row[f"t{i + 1}_{state}_ms"] = round(med[f"{i}/{state}/{step}/{c}"], 1)
                if "stale" in states and "analyzed" in states:
                    row[f"t{i + 1}_stale_vs_analyzed"] = round(
                        med[f"{i}/stale/{step}/{c}"] / med[f"{i}/analyzed/{step}/{c}"], 2
                    )
            for state in states if len(names) == 2 else ():
                row[f"t2_vs_t1_{state}"] = round(med[f"1/{state}/{step}/{c}"] / med[f"0/{state}/{step}/{c}"], 3)
            rows.append(row)
    return {
        "templates": names,
        "units": units,
        "per_chunk": per_chunk,
        "rounds": rounds,
        "states": list(states),
        "rows": rows,
        "runs_ms": {k: [round(x, 1) for x in v] for k, v in ms.items()},
        "load_average": [round(v, 1) for v in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.doc_removal", description=__doc__.split("\n\n")[0])
    p.add_argument("template")
    p.add_argument("template2", nargs="?")
    p.add_argument("--units", type=int, default=4000, help="search units of the document")
    p.add_argument("--per-chunk", type=int, default=4, help="units a chunk")
    p.add_argument("--cycles", type=int, default=2, help="put, replace, forget cycles in each copy")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--states", default="stale,analyzed", help="comma-separated: stale, analyzed, emptied (default stale,analyzed)"
    )
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    a = p.parse_args(argv)
    states = tuple(a.states.split(","))
    if not states or not set(states) <= set(STATES) or len(set(states)) != len(states):
        p.error(f"--states takes distinct names among {', '.join(STATES)}")
    if not (1 <= a.per_chunk <= a.units <= 100_000 and 1 <= a.cycles <= 10 and 1 <= a.rounds <= 50):
        p.error("need 1 <= --per-chunk <= --units <= 100000, --cycles 1..10 and --rounds 1..50")
    try:
        r = run(
            [a.template, *([a.template2] if a.template2 else [])],
            units=a.units,
            per_chunk=a.per_chunk,
            cycles=a.cycles,
            rounds=a.rounds,
            states=states,
        )
    except (psycopg.Error, OSError, ValueError, RuntimeError, PgmemError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"doc_removal: {msg}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    print(
        f"ms, median of {a.rounds} rounds; one document of {a.units} units, {a.per_chunk} a chunk; "
        f"t1 = {r['templates'][0]}" + (f", t2 = {r['templates'][1]}" if a.template2 else "")
    )
    for row in r["rows"]:
        print("  ".join(f"{k} {v}" for k, v in row.items()))
    print(f"load average {r['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
