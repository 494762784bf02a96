"""Ways to sum the word side's postings, side by side on the same postings (a benchmark, not a test).

    python -m pgmem.lab.bench.word_sums URL LONGMEMEVAL_DIR SCOPE [--messages 5] [--repeat 5]

On a loaded store (`pgmem bench --keep` leaves one; URL names its database as a superuser): the
postings `pgmem._word_postings` returns for 8-part messages (pgmem's split of LongMemEval's long
messages), read as a login member of pgmem_app, are copied into a temporary table, and each way
of ranking every part's top 20 pieces by their summed word weights runs on them in turn:

- `bigint`: the weights in whole nano-units summed as bigint (`pgmem.word_candidates` before 0034);
- `double`: the same whole numbers summed as double precision (since 0034);
- `maxscore`: exact pruning. The heaviest words' postings (up to 2,000) give a 20th-best score;
  the lightest words whose weights add up to less than it cannot lift a piece none of the others
  holds into the top 20, so their postings are only looked up for the pieces that can still
  reach the 20th score of the others.

All three must rank the same pieces. One line a message: its postings and each way's median ms
over --repeat runs, with its ratio to `bigint`."""

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
from pgmem.errors import PgmemError
from pgmem.lab.bench.default_mode import TextPool, app_connection

K = 20
#: The heaviest words' postings that give maxscore its first 20th-best score.
BUDGET = 2000

_EACH_PART = """SELECT pt.part_no, t.piece_id FROM (SELECT DISTINCT part_no FROM w) pt CROSS JOIN LATERAL ({top}) t
 ORDER BY 1, 2"""
WAYS = {
    "bigint": _EACH_PART.format(
        top=f"""SELECT u.id AS piece_id, sum(u.nano)::bigint AS score
          FROM (SELECT unnest(ww.piece_ids) AS id, ww.nano::bigint AS nano FROM w ww WHERE ww.part_no = pt.part_no) u
         GROUP BY u.id ORDER BY 2 DESC, 1 LIMIT {K}"""
    ),
    "double": _EACH_PART.format(
        top=f"""SELECT u.id AS piece_id, sum(u.nano) AS score
          FROM (SELECT unnest(ww.piece_ids) AS id, ww.nano FROM w ww WHERE ww.part_no = pt.part_no) u
         GROUP BY u.id ORDER BY 2 DESC, 1 LIMIT {K}"""
    ),
    "maxscore": _EACH_PART.format(
        top=f"""WITH ws AS MATERIALIZED (
            SELECT ww.nano, ww.piece_ids AS ids,
                   coalesce(sum(cardinality(ww.piece_ids)) OVER (ORDER BY ww.nano DESC, ww.lex
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before,
                   sum(ww.nano) OVER (ORDER BY ww.nano, ww.lex DESC) AS upto
              FROM w ww WHERE ww.part_no = pt.part_no
        ), e0 AS MATERIALIZED (
            SELECT u.id, sum(u.nano) AS s
              FROM (SELECT unnest(ws.ids) AS id, ws.nano FROM ws WHERE ws.before < {BUDGET}) u GROUP BY u.id
        ), th0 AS MATERIALIZED (
            SELECT coalesce((SELECT e0.s FROM e0 ORDER BY e0.s DESC OFFSET {K - 1} LIMIT 1), 0) AS v
        ), split AS MATERIALIZED (
            SELECT ws.*, (ws.before >= {BUDGET} AND ws.upto < (SELECT th0.v FROM th0)) AS light FROM ws
        ), pe AS MATERIALIZED (
            SELECT g.id, sum(g.s) AS s FROM (
                SELECT e0.id, e0.s FROM e0
                UNION ALL
                SELECT unnest(sp.ids), sp.nano FROM split sp WHERE NOT sp.light AND sp.before >= {BUDGET}) g
             GROUP BY g.id
        ), the AS MATERIALIZED (
            SELECT coalesce((SELECT pe.s FROM pe ORDER BY pe.s DESC OFFSET {K - 1} LIMIT 1), 0) AS v
        ), cand AS MATERIALIZED (
            SELECT pe.id, pe.s FROM pe
             WHERE pe.s + (SELECT coalesce(sum(sp.nano), 0) FROM split sp WHERE sp.light) >= (SELECT the.v FROM the)
        ), light AS (
            SELECT u.id, sum(u.nano) AS s
              FROM (SELECT unnest(sp.ids) AS id, sp.nano FROM split sp WHERE sp.light) u
             WHERE u.id IN (SELECT cand.id FROM cand) GROUP BY u.id
        )
        SELECT c.id AS piece_id, c.s + coalesce(l.s, 0) AS score
          FROM cand c LEFT JOIN light l ON l.id = c.id ORDER BY 2 DESC, 1 LIMIT {K}"""
    ),
}


def run(url: str, text: Path, scope: str, *, messages: int, repeat: int) -> list[dict[str, object]]:
    pool = TextPool.from_longmemeval(text)
    rng = np.random.default_rng(8)
    out: list[dict[str, object]] = []
    with psycopg.connect(url, autocommit=True) as admin, app_connection(admin) as app:
        admin.execute("SET work_mem = '32MB'")  # as pgmem.word_candidates sets it
        count = "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'memory'"
        row = admin.execute(count, (scope,)).fetchone()
        if not row or not int(str(row[0])):
            raise ValueError(f"scope {scope!r} has no memory pieces")
        for i in range(messages):
            parts = pool.message(8, rng)
            with scoped(app, scope):
                rows = app.execute(
                    "SELECT part_no, lexeme, round(weight * 1e9), piece_ids FROM pgmem._word_postings(%s, %s::text[])",
                    (scope, parts),
                ).fetchall()
            admin.execute("DROP TABLE IF EXISTS w")
            admin.execute(
                "CREATE TEMPORARY TABLE w (part_no integer, lex text, nano double precision, piece_ids bigint[])"
            )
            with admin.cursor() as cur:
                cur.executemany("INSERT INTO w VALUES (%s, %s, %s, %s)", rows)
            admin.execute("ANALYZE w")
            total = admin.execute("SELECT coalesce(sum(cardinality(piece_ids)), 0) FROM w").fetchone()
            times: dict[str, list[float]] = {way: [] for way in WAYS}
            found: dict[str, list[tuple[object, ...]]] = {}
            for r in range(repeat + 1):
                for way, sql in WAYS.items() if r % 2 == 0 else reversed(WAYS.items()):
                    t0 = time.perf_counter()
                    found[way] = admin.execute(sql).fetchall()
                    if r:  # the first run warms the caches
                        times[way].append(1000 * (time.perf_counter() - t0))
            if len({tuple(v) for v in found.values()}) != 1:
                raise RuntimeError(f"message {i}: the ways ranked different pieces")
            out.append(
                {
                    "message": i,
                    "words": len(rows),
                    "postings": int(str(total[0])) if total else 0,
                    "p50_ms": {way: round(statistics.median(v), 1) for way, v in times.items()},
                    "load_average": round(os.getloadavg()[0], 1),
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.word_sums", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("text", type=Path)
    p.add_argument("scope")
    p.add_argument("--messages", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    if a.messages < 1 or a.repeat < 1:
        p.error("--messages and --repeat must be at least 1")
    try:
        results = run(a.url, a.text, a.scope, messages=a.messages, repeat=a.repeat)
    except (psycopg.Error, OSError, ValueError, RuntimeError, PgmemError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"word_sums: {first}", file=sys.stderr)
        return 1
    print(f"each part's top {K} by summed word weights, the same pieces every way; p50 ms (ratio to bigint)")
    for r in results:
        p50 = r["p50_ms"]
        assert isinstance(p50, dict)
        ways = ", ".join(f"{w} {p50[w]} ms ({p50[w] / p50['bigint']:.2f})" for w in WAYS if p50["bigint"])
        print(
            f"{a.scope}, message {r['message']}: {r['postings']:,} postings of {r['words']} part words: "
            f"{ways} (load average {r['load_average']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
