"""The word side as each role runs it (a benchmark, not a test).

    python -m pgmem.lab.bench.word_roles URL SCOPE LONGMEMEVAL_DIR [--messages 5] [--parts 8]

On a loaded store (`pgmem bench --keep` leaves one; URL names its database as a superuser):
`pgmem.word_candidates` for the same messages (pgmem's split of LongMemEval long messages),
alternating a superuser's session and a login member of pgmem_app's (created if missing), the
role a service uses, so row-level security applies to the second only. Database-side
medians, one line each; the pieces found must be the same for both. Measured on both sides of
migration 0024 (docs/scaling.md): before it, the word index could not be used under row-level
security."""

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


def run(url: str, scope: str, text: Path, *, messages: int, parts: int) -> dict[str, object]:
    pool = TextPool.from_longmemeval(text)
    rng = np.random.default_rng(7)
    msgs = [pool.message(parts, rng) for _ in range(messages)]
    times: dict[str, list[float]] = {"superuser": [], "pgmem_app": []}
    with psycopg.connect(url, autocommit=True) as admin, app_connection(admin) as app:
        for i, m in enumerate(msgs):
            order = [("superuser", admin), ("pgmem_app", app)]
            found = []
            for name, conn in order if i % 2 == 0 else order[::-1]:
                with scoped(conn, scope):
                    t0 = time.perf_counter()
                    rows = conn.execute(SQL, (scope, m)).fetchall()
                    times[name].append(1000 * (time.perf_counter() - t0))
                found.append(sorted(rows))
            if found[0] != found[1]:
                raise RuntimeError(f"message {i}: the two roles found different pieces")
    return {
        "scope": scope,
        "parts": parts,
        "messages": messages,
        "p50_ms": {k: round(statistics.median(v), 1) for k, v in times.items()},
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.word_roles", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("scope")
    p.add_argument("text", type=Path)
    p.add_argument("--messages", type=int, default=5)
    p.add_argument("--parts", type=int, default=8)
    a = p.parse_args(argv)
    r = run(a.url, a.scope, a.text, messages=a.messages, parts=a.parts)
    p50 = r["p50_ms"]
    assert isinstance(p50, dict)
    print(
        f"word_candidates, {a.parts}-part messages, scope {a.scope}, {a.messages} messages each, same pieces found; "
        f"p50 superuser {p50['superuser']} ms, pgmem_app login {p50['pgmem_app']} ms "
        f"(load average {r['load_average'][0]})"  # type: ignore[index]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
