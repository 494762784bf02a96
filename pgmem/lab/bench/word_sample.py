"""The word side with its sample counted or stored (a benchmark, not a test).

    python -m pgmem.lab.bench.word_sample URL LONGMEMEVAL_DIR SCOPE [SCOPE ...] [--messages 20]

On a loaded store (`pgmem bench --keep` leaves one; URL names its database as a superuser):
`pgmem.word_candidates` as a login member of pgmem_app, for the same messages (LongMemEval
questions for 1 part, pgmem's split of its long messages for 8), once with the scope's sample
counted by the word side (no stored sample) and once read from `pgmem.word_sample` (stored by
`pgmem.refresh_word_sample`, as index maintenance stores it), alternating which goes first.
The two must find the same pieces. Database-side medians, one line per scope and parts."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

from pgmem.db import scoped
from pgmem.lab.bench.default_mode import TextPool, app_connection

SQL = "SELECT part_no, piece_id, word_rank FROM pgmem.word_candidates(%s, %s::text[])"
WAYS = ("counted", "stored")


def _set(admin: psycopg.Connection[tuple[object, ...]], scope: str, way: str) -> None:
    if way == "stored":
        admin.execute("SELECT pgmem.refresh_word_sample(%s)", (scope,))
    else:
        admin.execute("DELETE FROM pgmem.word_sample WHERE scope_id = %s AND kind = 'memory'", (scope,))


def run(url: str, text: Path, scopes: list[str], *, messages: int) -> list[dict[str, object]]:
    pool = TextPool.from_longmemeval(text)
    out: list[dict[str, object]] = []
    with psycopg.connect(url, autocommit=True) as admin, app_connection(admin) as app:
        for scope in scopes:
            for parts in (1, 8):
                rng = np.random.default_rng(parts)
                times: dict[str, list[float]] = {w: [] for w in WAYS}
                for i in range(messages + 1):
                    m = pool.message(parts, rng)
                    found = []
                    for way in WAYS if i % 2 == 0 else WAYS[::-1]:
                        _set(admin, scope, way)
                        with scoped(app, scope):
                            t0 = time.perf_counter()
                            rows = app.execute(SQL, (scope, m)).fetchall()
                            ms = 1000 * (time.perf_counter() - t0)
                        if i:  # the first message warms the caches
                            times[way].append(ms)
                        found.append(sorted(rows))
                    if found[0] != found[1]:
                        raise RuntimeError(f"{scope}, message {i}: the two ways found different pieces")
                _set(admin, scope, "stored")
                out.append(
                    {
                        "scope": scope,
                        "parts": parts,
                        "messages": messages,
                        "p50_ms": {w: round(statistics.median(v), 1) for w, v in times.items()},
                        "load_average": round(os.getloadavg()[0], 1),
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.word_sample", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("text", type=Path)
    p.add_argument("scopes", nargs="+")
    p.add_argument("--messages", type=int, default=20)
    a = p.parse_args(argv)
    print("word_candidates as a pgmem_app login, database p50 ms, same pieces found both ways")
    for r in run(a.url, a.text, a.scopes, messages=a.messages):
        p50 = r["p50_ms"]
        assert isinstance(p50, dict)
        print(
            f"{r['scope']}, {r['parts']} part(s), {r['messages']} messages: sample counted {p50['counted']} ms, "
            f"stored {p50['stored']} ms (load average {r['load_average']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
