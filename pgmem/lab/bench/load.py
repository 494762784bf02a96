"""Load a synthetic store through pgmem's own SQL ingest functions (put_turn, put_document,
add_facts) with precomputed vectors: what is measured is the database, not an embedder.

Calls are pipelined (psycopg executemany), one transaction per scope and batch; `jobs` connections
write disjoint sets of scopes in parallel, as independent tenants would."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

import psycopg

from pgmem.db import connect
from pgmem.lab.bench.synth import Document, Store, Turn

MODEL_ID = "bench-synthetic"
T = TypeVar("T")

PUT_TURN = """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => NULL,
    messages => %s::jsonb, content_hash => %s, model_id => %s, unit_kinds => %s, source_indexes => %s,
    labels => %s, bodies => %s, vectors => %s::vector[])"""
PUT_DOCUMENT = """SELECT pgmem.put_document(scope => %s, document_id => %s, title => %s, body => %s,
    content_hash => %s, model_id => %s, chunk_heading_paths => %s::jsonb, chunk_bodies => %s,
    unit_chunks => %s, unit_kinds => %s, unit_indexes => %s, span_starts => %s, span_ends => %s,
    labels => %s, bodies => %s, vectors => %s::vector[])"""
ADD_FACTS = """SELECT count(*) FROM pgmem.add_facts(scope => %s, model_id => %s, bodies => %s,
    vectors => %s::vector[])"""


@dataclass
class LoadReport:
    memory_pieces: int = 0
    memory_seconds: float = 0.0
    document_units: int = 0
    document_seconds: float = 0.0
    facts: int = 0
    fact_seconds: float = 0.0
    vacuum_seconds: float = 0.0
    jobs: int = 1

    def rates(self) -> dict[str, float]:
        def r(n: int, s: float) -> float:
            return round(n / s, 1) if s else 0.0

        return {
            "memory_pieces_per_s": r(self.memory_pieces, self.memory_seconds),
            "document_units_per_s": r(self.document_units, self.document_seconds),
            "facts_per_s": r(self.facts, self.fact_seconds),
        }


def _chunks(items: Iterable[T], n: int) -> Iterator[list[T]]:
    it = iter(items)
    while batch := list(islice(it, n)):
        yield batch


def _parallel(url: str, jobs: int, work: Callable[[psycopg.Connection[tuple[object, ...]], int], int]) -> int:
    """Run work(conn, job_no) on `jobs` connections at once; returns the summed counts."""
    counts = [0] * jobs
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            # A transaction writes one scope (row-level security): each worker groups its calls by
            # scope. Commits need not wait for the WAL flush in a bulk load.
            with connect(url, autocommit=False) as conn:
                conn.execute("SET synchronous_commit = off")
                conn.commit()
                counts[i] = work(conn, i)
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


def _document_params(d: Document) -> tuple[object, ...]:
    return (
        d.scope_id,
        d.document_id,
        d.document_id,
        "\n\n".join(d.chunk_bodies),
        d.document_id.encode(),
        MODEL_ID,
        json.dumps([[d.document_id, f"Section {k}"] for k in range(len(d.chunk_bodies))]),
        d.chunk_bodies,
        d.unit_chunks,
        ["prose"] * len(d.bodies),
        list(range(len(d.bodies))),
        [s for s, _ in d.spans],
        [e for _, e in d.spans],
        d.labels,
        d.bodies,
        list(d.vectors),
    )


def load(url: str, store: Store, *, jobs: int = 2, batch: int = 100, progress: bool = True) -> LoadReport:
    report = LoadReport(jobs=jobs)
    owner = {s.scope_id: i % jobs for i, s in enumerate(store.scopes)}
    total = sum(s.memory for s in store.scopes)
    done = [0]
    lock = threading.Lock()
    start = time.monotonic()

    def turns(conn: psycopg.Connection[tuple[object, ...]], job: int) -> int:
        mine = {s for s, j in owner.items() if j == job}
        n = 0
        with conn.cursor(binary=True) as cur:
            for window in _chunks(store.turns(mine), batch * 4):
                # A transaction writes one scope: group the window's turns by scope, one transaction each.
                by_scope: dict[str, list[Turn]] = {}
                for t in window:
                    by_scope.setdefault(t.scope_id, []).append(t)
                for group in by_scope.values():
                    with conn.transaction():
                        cur.executemany(
                            PUT_TURN,
                            [
                                (
                                    t.scope_id,
                                    t.thread_id,
                                    t.turn_index,
                                    t.messages,
                                    t.content_hash,
                                    MODEL_ID,
                                    ["user"] + ["assistant"] * (len(t.bodies) - 1),
                                    list(range(len(t.bodies))),
                                    t.labels,
                                    t.bodies,
                                    list(t.vectors),
                                )
                                for t in group
                            ],
                        )
                group = window
                k = sum(len(t.bodies) for t in group)
                n += k
                with lock:
                    done[0] += k
                    if progress and done[0] // 20_000 != (done[0] - k) // 20_000:
                        rate = done[0] / (time.monotonic() - start)
                        print(f"  memory pieces {done[0]:,}/{total:,} · {rate:,.0f}/s", file=sys.stderr, flush=True)
        return n

    report.memory_pieces = _parallel(url, jobs, turns)
    report.memory_seconds = time.monotonic() - start

    t0 = time.monotonic()

    def documents(conn: psycopg.Connection[tuple[object, ...]], job: int) -> int:
        n = 0
        with conn.cursor(binary=True) as cur:
            for group in _chunks((d for d in store.documents() if owner[d.scope_id] == job), batch):
                by_scope: dict[str, list[Document]] = {}
                for d in group:
                    by_scope.setdefault(d.scope_id, []).append(d)
                for docs in by_scope.values():
                    with conn.transaction():
                        cur.executemany(PUT_DOCUMENT, [_document_params(d) for d in docs])
                n += sum(len(d.bodies) for d in group)
        return n

    report.document_units = _parallel(url, jobs, documents)
    report.document_seconds = time.monotonic() - t0

    t0 = time.monotonic()

    def facts(conn: psycopg.Connection[tuple[object, ...]], job: int) -> int:
        n = 0
        with conn.cursor(binary=True) as cur:
            for scope, bodies, vectors in store.fact_batches():
                if owner[scope] != job:
                    continue
                with conn.transaction():
                    cur.execute(ADD_FACTS, (scope, MODEL_ID, bodies, list(vectors)))
                n += len(bodies)
        return n

    report.facts = _parallel(url, jobs, facts)
    report.fact_seconds = time.monotonic() - t0

    # Index-only scans need the visibility map, and the planner statistics; autovacuum would get
    # there, the bench does not wait. pgmem.piece_word too: without statistics the word side in a
    # thread filtered the thread's pieces by recomputing their word keys (an 8-part message in a
    # thread of a 2,000-piece scope took 932.14 ms, docs/bench/1m-default-mode-unanalyzed.txt).
    t0 = time.monotonic()
    with connect(url) as conn:
        conn.execute("VACUUM (ANALYZE) pgmem.piece")
        conn.execute("VACUUM (ANALYZE) pgmem.piece_word")
        conn.execute("VACUUM (ANALYZE) pgmem.fact")
    report.vacuum_seconds = time.monotonic() - t0
    return report
