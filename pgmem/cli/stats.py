"""`pgmem stats`: per-scope counts, index health and recent recalls (pgmem.stats())."""

from __future__ import annotations

import argparse
import json
import sys

import psycopg

from pgmem.cli.common import open_conn, settings, shown
from pgmem.text import check_name

#: The table's column headings, in the order of the row cells below.
HEADINGS = (
    "scope",
    "threads",
    "turns",
    "pieces",
    "doc pieces",
    "facts",
    "docs",
    "items",
    "piece index",
    "fact index",
    "recalls 1h",
    "recalls 24h",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "stats",
        help="per-scope counts, ANN index health and recent recalls (pgmem.stats(); needs a running server)",
    )
    p.add_argument("--scope", help="one scope (the application login sees only the scope it names)")
    p.add_argument("--json", action="store_true", help="one JSON object per scope")
    p.set_defaults(func=_stats)


def _size(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # not reached


def _index(state: str, size: int | None) -> str:
    return state if state == "none" else f"{state} {_size(size)}"


def _sees_every_scope(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether pgmem.stats() shows this login every scope: a superuser or BYPASSRLS, or a login
    member of pgmem_owner without SET ROLE (as the function decides)."""
    row = conn.execute(
        """SELECT r.rolsuper OR r.rolbypassrls
                  OR (pg_catalog.pg_has_role(session_user, 'pgmem_owner', 'USAGE')
                      AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE'))
             FROM pg_catalog.pg_roles r WHERE r.rolname = current_user"""
    ).fetchone()
    return bool(row and row[0])


def _stats(args: argparse.Namespace) -> int:
    from pgmem.stats import stats

    if args.scope is not None:
        check_name(args.scope, "--scope")
    # A monitoring command reports on a running server; it never starts one (open_conn).
    with open_conn(settings()) as conn:
        rows = stats(conn, args.scope)
        sees_every_scope = not rows and _sees_every_scope(conn)
    if not rows:
        # The same status with --json (no line on stdout), so a script sees the miss either way.
        if sees_every_scope:  # nothing is hidden from it: there is nothing (it said "does not see")
            what = f"no scope {args.scope!r} is stored" if args.scope else "no scope is stored in this database"
            print(f"pgmem: no rows: {shown(what)}", file=sys.stderr)
            return 1
        if args.scope:
            # The application login reads whichever scope it names: no row is a scope not stored
            # (misspelt, or forgotten), as a recall says, or one row-level security hides.
            what = f"no scope {args.scope!r} is stored that this login may read (check the scope name)"
        else:
            what = "this login does not see any scope (docs/operations.md, Monitoring)"
        print(f"pgmem: no rows: {shown(what)}", file=sys.stderr)
        return 1
    if args.json:
        for r in rows:
            d = r.as_dict()
            d["last_recall_at"] = r.last_recall_at.isoformat() if r.last_recall_at else None
            print(json.dumps(d))
        return 0
    cells = [
        [
            shown(r.scope_id),
            *(str(n) for n in (r.threads, r.turns, r.memory_pieces, r.document_pieces, r.facts, r.documents)),
            str(r.store_items),
            _index(r.piece_index_state, r.piece_index_bytes),
            _index(r.fact_index_state, r.fact_index_bytes),
            str(r.recalls_last_hour),
            str(r.recalls_last_day),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADINGS)]
    for line in (list(HEADINGS), *cells):
        # The scope name left-aligned, the figures right-aligned.
        padded = (v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(line, widths, strict=True)))
        print("  ".join(padded))
    return 0
