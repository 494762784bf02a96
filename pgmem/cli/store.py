"""`pgmem store import`: copy a LangGraph PostgresStore's items into PgmemStore. LangGraph (the
[langgraph] extra) is imported only when the command runs."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "store", help="the LangGraph store: import a PostgresStore's items (needs the [langgraph] extra)"
    )
    ssub = s.add_subparsers(dest="store_command", required=True, metavar="WHAT")
    p = ssub.add_parser(
        "import",
        help="copy a LangGraph PostgresStore's items into PgmemStore, embedding them (resumable, idempotent)",
    )
    p.add_argument("source", help="conninfo of the PostgresStore's database (a URL or key=value; needs SELECT)")
    p.add_argument(
        "--table", default="store", help="the PostgresStore table, optionally schema-qualified (default: store)"
    )
    p.add_argument("--directory", default="default", help="PgmemStore's namespace directory (default: default)")
    p.add_argument(
        "--field",
        action="append",
        dest="fields",
        metavar="PATH",
        help="an index path (LangGraph's syntax), repeatable; default: the whole value ($)",
    )
    p.add_argument("--page-size", type=int, default=100, help="items read and written per batch (default: 100)")
    p.add_argument("--limit", type=int, default=None, help="stop after reading this many items")
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="FILE",
        help="where the last item written is recorded; a run given the same file continues after it",
    )
    p.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    from pgmem.extras import require

    require("langgraph.store.base", "langgraph", "pgmem store import")
    from pgmem.cli.common import Progress, embedder_for, open_conn, settings, shown
    from pgmem.integrations.langgraph import PgmemStore
    from pgmem.integrations.langgraph_import import ImportReport, import_postgres_store

    s = settings()
    bar = Progress("import", unit="items")

    def progress(r: ImportReport) -> None:
        bar(r.read, max(r.total, r.read), r.imported)

    with open_conn(s) as conn:
        store = PgmemStore(
            conn,
            embedder=embedder_for(conn, s=s),
            directory=args.directory,
            index={"fields": args.fields} if args.fields else None,
        )
        report = import_postgres_store(
            args.source,
            store,
            table=args.table,
            page_size=args.page_size,
            limit=args.limit,
            checkpoint=args.checkpoint,
            progress=progress,
        )
    listed = 100
    for namespace, key, error in report.failed[:listed]:
        print(f"pgmem: failed: namespace {namespace!r:.200} key {key!r:.200}: {shown(error)}", file=sys.stderr)
    if len(report.failed) > listed:
        print(f"pgmem: failed: ... and {len(report.failed) - listed} more", file=sys.stderr)
    more = "" if report.complete else " (stopped by --limit: run again with the same --checkpoint to continue)"
    print(report.summary() + more)
    return 1 if report.failed else 0
