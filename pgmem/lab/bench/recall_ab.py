"""The checkout's recall functions against the database's, side by side (a benchmark, not a test).

    python -m pgmem.lab.bench.recall_ab URL LONGMEMEVAL_DIR SCOPE [SCOPE ...] [--messages 20]
                                        [--against URL2 | --setting pgmem.NAME=VALUE ...]

On a loaded store (`pgmem bench --keep` leaves one; URL names its database as a superuser), the
checkout's recall functions (`memory_recall`, `word_candidates`, `_word_postings`,
`_memory_candidates`, `_window_candidates`, `empty_recall_reason`, `expired_item_pieces`:
sql/idempotent/030_recall.sql;
`document_search`: 040_documents.sql)
are installed beside the database's under the suffix `_ab` (each calling the checkout's others),
and dropped at the end. Each message (LongMemEval questions for 1 part, pgmem's split of its
long messages for 8; part vectors near stored pieces, chosen by a seeded generator) runs through
both, scope-wide and in thread t0, as a login member of pgmem_app, in hybrid and vector mode,
alternating which goes first, each call followed by the same call with exact => true (untimed,
as `pgmem bench` checks recall: a service's connection runs both kinds). On a scope holding at
least 8 document units, 1- and 8-part messages (vectors near its units) also run through
`document_search` in hybrid mode (lines marked `documents`). Both must return the same rows;
database-side medians, one line per scope, place, parts and mode.

With --against, nothing is installed: the second side is URL2's own functions, on its own
store (a copy of URL's database migrated to a later revision, say, to measure a change of
storage: `CREATE DATABASE b TEMPLATE a`, then `DATABASE_URL=... pgmem migrate`). The part
vectors are drawn from URL's pieces; both stores must hold the same pieces.

With --setting, nothing is installed either: the second side is the database's own functions
on a second connection with those pgmem.* settings (a cap, say). Its rows may differ; each line
then gives the share of the first side's (part, piece) hits the second side returned too."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import psycopg

from pgmem.db import scoped
from pgmem.errors import PgmemError
from pgmem.lab.bench.default_mode import TextPool, app_connection
from pgmem.lab.bench.measure import timed_query
from pgmem.sqlfiles import InstallParams, idempotent_files, render

FUNCTIONS = (
    "expired_item_pieces",
    "_memory_candidates",
    "_window_candidates",
    "empty_recall_reason",
    "_word_postings",
    "word_candidates",
    "memory_recall",
    "document_search",
)
#: Where each function is defined (sql/idempotent).
FILES = {"document_search": "040_documents.sql"}
SQL = """SELECT part_no, rank, piece_id, cosine, word_rank FROM pgmem.{fn}(
    scope => %s, part_vectors => %s::vector[], part_texts => %s::text[], x => 5, floor => 0.3,
    mode => %s, thread => %s, exact => %s)"""
#: Document search (040_documents.sql), on a scope holding document units: same messages.
DOC_SQL = """SELECT part_no, rank, piece_id, cosine, chunk_id FROM pgmem.{fn}(
    scope => %s, part_vectors => %s::vector[], part_texts => %s::text[], x => 5, floor => 0.3, mode => %s)"""
SIDES = ("database", "checkout")


def _checkout_functions(params: InstallParams) -> list[str]:
    """The checkout's CREATE statements of FUNCTIONS, renamed with the suffix _ab."""
    texts = {p.name: render(p.read_text(encoding="utf-8"), params) for p in idempotent_files()}
    out = []
    for fn in FUNCTIONS:
        text = texts[FILES.get(fn, "030_recall.sql")]
        start = text.index(f"CREATE OR REPLACE FUNCTION pgmem.{fn}(")
        body = text[start : text.index("\n$$;", start) + 4]
        for name in FUNCTIONS:
            body = re.sub(rf"\b{name}\b", f"{name}_ab", body)
        out.append(body)
    return out


def _vectors(
    admin: psycopg.Connection[tuple[object, ...]], scope: str, ids: list[int], parts: int, rng: np.random.Generator
) -> list[str]:
    """Part vectors near stored pieces (ids drawn by rng), blended with their mean (weight 0.8), as text."""
    picked = [int(i) for i in rng.choice(ids, size=parts, replace=False)]
    rows = admin.execute(
        "SELECT piece_id, embedding::text FROM pgmem.piece WHERE scope_id = %s AND piece_id = ANY(%s)", (scope, picked)
    ).fetchall()
    by_id = {int(str(i)): np.array(str(e).strip("[]").split(","), dtype=np.float64) for i, e in rows}
    raw = np.array([by_id[i] for i in picked])
    raw += rng.normal(0, 0.03, raw.shape)
    raw /= np.linalg.norm(raw, axis=1, keepdims=True)
    whole = raw.mean(axis=0)
    whole /= np.linalg.norm(whole)
    vecs = 0.8 * raw + 0.2 * whole
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return ["[" + ",".join(f"{x:.7f}" for x in v) + "]" for v in vecs]


def run(
    url: str,
    text: Path,
    scopes: list[str],
    *,
    messages: int,
    against: str | None = None,
    settings: dict[str, str] | None = None,
) -> list[dict[str, object]]:
    pool = TextPool.from_longmemeval(text)
    out: list[dict[str, object]] = []
    sides = ("database", "against") if against else ("database", "setting") if settings else SIDES
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(psycopg.connect(url, autocommit=True))
        if sides == SIDES:
            dims = admin.execute("SELECT vector_dims(embedding) FROM pgmem.piece LIMIT 1").fetchone()
            params = InstallParams(int(str(dims[0])) if dims else 384, 1024)
            for create in _checkout_functions(params):
                admin.execute(create)
            stack.callback(_drop_checkout_functions, admin)
            for fn in FUNCTIONS:
                # Owned as the database's are (_word_postings is SECURITY DEFINER).
                admin.execute(f"ALTER FUNCTION pgmem.{fn}_ab OWNER TO pgmem_owner")
                admin.execute(f"GRANT EXECUTE ON FUNCTION pgmem.{fn}_ab TO pgmem_app")
        app = stack.enter_context(app_connection(admin))
        # Each side: its connection and the suffix of its functions' names.
        calls = {sides[0]: (app, "")}
        if against is not None:
            other = stack.enter_context(psycopg.connect(against, autocommit=True))
            calls[sides[1]] = (stack.enter_context(app_connection(other)), "")
        elif settings:
            tuned = stack.enter_context(app_connection(admin))
            for name, value in settings.items():
                tuned.execute("SELECT set_config(%s, %s, false)", (name, value))
            tuned.commit()
            calls[sides[1]] = (tuned, "")
        else:
            calls[sides[1]] = (app, "_ab")
        for scope in scopes:
            ids = {
                kind: [
                    int(str(r[0]))
                    for r in admin.execute(
                        "SELECT piece_id FROM pgmem.piece WHERE scope_id = %s AND kind = %s ORDER BY 1", (scope, kind)
                    ).fetchall()
                ]
                for kind in ("memory", "document")
            }
            if len(ids["memory"]) < 8:
                raise ValueError(f"scope {scope!r} has {len(ids['memory'])} memory pieces; an 8-part message needs 8")
            # (thread, parts, mode): memory_recall's cases, then document_search's (hybrid, the
            # default) on a scope with at least 8 document units.
            cases = [*itertools.product((None, "t0"), (1, 8), ("hybrid", "vector"))]
            if len(ids["document"]) >= 8:
                cases += [(None, 1, "documents"), (None, 8, "documents")]
            for thread, parts, mode in cases:
                docs = mode == "documents"
                rng = np.random.default_rng(parts)
                times: dict[str, list[float]] = {s: [] for s in sides}
                same = hits = 0
                for i in range(messages + 1):
                    vecs = _vectors(admin, scope, ids["document" if docs else "memory"], parts, rng)
                    args = (scope, vecs, pool.message(parts, rng), "hybrid" if docs else mode)
                    found = []
                    for side in sides if i % 2 == 0 else sides[::-1]:
                        conn, suffix = calls[side]
                        call: tuple[object, ...] = args if docs else (*args, thread, False)
                        sql_text = (DOC_SQL if docs else SQL).format(
                            fn=("document_search" if docs else "memory_recall") + suffix
                        )
                        with scoped(conn, scope):
                            rows, db_ms, _ = timed_query(conn, sql_text, call)
                        if not docs:
                            # Then exactly, untimed, as pgmem bench checks recall: a service's
                            # connection runs both kinds of search.
                            with scoped(conn, scope):
                                conn.execute(sql_text, (*args, thread, True)).fetchall()
                        if i:  # the first message warms the caches
                            times[side].append(db_ms)
                        found.append(sorted(rows))
                    if found[0] != found[1] and not settings:
                        raise RuntimeError(f"{scope}, {thread}, {mode}, message {i}: different rows")
                    if i:
                        by_side = dict(zip(sides if i % 2 == 0 else sides[::-1], found, strict=True))
                        base, other_hits = ({(r[0], r[2]) for r in by_side[s]} for s in sides)
                        same, hits = same + len(base & other_hits), hits + len(base)
                p50 = {s: round(statistics.median(v), 2) for s, v in times.items()}
                out.append(
                    {
                        "scope": scope,
                        "thread": thread,
                        "parts": parts,
                        "mode": mode,
                        "messages": messages,
                        "p50_ms": p50,
                        f"{sides[1]}_vs_database": round(p50[sides[1]] / p50["database"], 3),
                        "same_hits": round(same / hits, 3) if hits else None,
                        "load_average": round(os.getloadavg()[0], 1),
                    }
                )
    return out


def _drop_checkout_functions(admin: psycopg.Connection[tuple[object, ...]]) -> None:
    for fn in reversed(FUNCTIONS):
        admin.execute(f"DROP FUNCTION IF EXISTS pgmem.{fn}_ab")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.recall_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("text", type=Path)
    p.add_argument("scopes", nargs="+")
    p.add_argument("--messages", type=int, default=20)
    p.add_argument("--against", metavar="URL2", help="compare with URL2's own functions and store instead")
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="pgmem.NAME=VALUE",
        help="compare with the database's functions under these settings instead (repeatable)",
    )
    a = p.parse_args(argv)
    if a.messages < 1:
        p.error(f"--messages must be at least 1, got {a.messages}")
    settings = {}
    for item in a.setting:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"pgmem\.[a-z_]+", name):
            p.error(f"--setting expects pgmem.NAME=VALUE, got {item!r}")
        settings[name] = value
    if settings and a.against:
        p.error("--setting and --against are two different comparisons: give one")
    try:
        results = run(a.url, a.text, a.scopes, messages=a.messages, against=a.against, settings=settings)
    except (psycopg.Error, OSError, ValueError, RuntimeError, PgmemError) as exc:
        print(
            f"recall_ab: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    second = "against" if a.against else "setting" if settings else "checkout"
    print(
        "memory_recall and document_search as a pgmem_app login, database p50 ms of "
        + (
            "URL's and URL2's (against)"
            if a.against
            else f"the database's functions without and with {', '.join(a.setting)} (setting)"
            if settings
            else "the database's functions and the checkout's"
        )
    )
    for r in results:
        p50 = r["p50_ms"]
        assert isinstance(p50, dict)
        where = f", thread {r['thread']}" if r["thread"] else ""
        print(
            f"{r['scope']}{where}, {r['parts']} part(s), {r['mode']}, {r['messages']} messages: "
            f"database {p50['database']} ms, {second} {p50[second]} ms, ratio {r[f'{second}_vs_database']}"
            + (f", same hits {r['same_hits']}" if settings else "")
            + f" (load average {r['load_average']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
