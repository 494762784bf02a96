"""`pgmem store import`: copy a LangGraph PostgresStore's items into PgmemStore. LangGraph (the
[langgraph] extra) is imported only when the command runs."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from pgmem.errors import ConfigError


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
    p.add_argument(
        "--index",
        default=None,
        metavar="MODULE:NAME",
        help="the application's LangGraph index (a dict with embed, dims, fields), imported from a Python module "
        "(the current folder is searched first): items are stored with its field vectors, as the application "
        "opens the store; default: pgmem's pieces, with the configured model",
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

    index = app_index(args.index, args.fields)
    with open_conn(s) as conn:
        own_embed = index is not None and index.get("embed") is not None
        store = PgmemStore(
            conn, embedder=None if own_embed else embedder_for(conn, s=s), directory=args.directory, index=index
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


def app_index(spec: str | None, fields: list[str] | None) -> dict[str, Any] | None:
    """The store's index: the application's (`--index MODULE:NAME`, a dict as LangGraph's
    IndexConfig, read from an importable module, the current folder first, as `python -m` reads
    it), or only `--field`'s paths, or none. One ConfigError line for what cannot be had."""
    from pgmem.cli.common import shown

    if spec is None:
        return {"fields": fields} if fields else None
    if fields:
        raise ConfigError("give the fields in --index's dict or with --field, not both")
    module_name, _, name = spec.partition(":")
    if (
        not module_name
        or not name
        or not all(part.isidentifier() for part in (*module_name.split("."), *name.split(".")))
    ):
        raise ConfigError(f"--index must be MODULE:NAME (e.g. myapp.store:INDEX), got {spec!r:.80}")
    # The current folder first, as `python -m` reads a module, for this import only: left on the
    # path, the application's modules could shadow the ones pgmem imports later.
    added = "" not in sys.path and os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        value: object = importlib.import_module(module_name)
    except Exception as exc:  # the module is the application's: any error it raises is one line
        raise ConfigError(
            f"--index: cannot import {module_name!r}: {type(exc).__name__}: {shown(' '.join(str(exc).split())[:240])}"
        ) from None
    finally:
        if added and os.getcwd() in sys.path:
            sys.path.remove(os.getcwd())
    for attr in name.split("."):
        if not hasattr(value, attr):
            raise ConfigError(f"--index: {module_name!r} has no {name!r}")
        value = getattr(value, attr)
    if not isinstance(value, Mapping):
        raise ConfigError(f"--index: {spec} is a {type(value).__name__}, not a dict (dims, embed, fields)")
    return dict(value)
