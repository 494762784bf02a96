"""`pgmem docs add|rm|search`: Markdown documents in a scope."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TextIO

from pgmem.cli.common import Progress, embedder_for, json_line, open_conn, shown
from pgmem.documents.store import (
    DEFAULT_CANDIDATES,
    DEFAULT_DOC_FLOOR,
    DEFAULT_DOC_X,
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_MAX_DOCUMENT_UNITS,
    DocHit,
    DocSearch,
)

#: ANSI reverse video + bold for the matched unit in a terminal; plain markers otherwise.
ANSI_ON, ANSI_OFF = "\x1b[1;7m", "\x1b[0m"
PLAIN_ON, PLAIN_OFF = ">>>[", "]<<<"
#: Markdown's line ends other than \n (docs/documents.md): each ends a printed line, as \n does.
_LINE_END = re.compile(r"\r\n?")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("docs", help="add, remove and search Markdown documents")
    dsub = d.add_subparsers(dest="docs_command", required=True, metavar="ACTION")

    a = dsub.add_parser("add", help="add Markdown files or folders (*.md found recursively)")
    a.add_argument("paths", type=Path, nargs="+", metavar="PATH")
    a.add_argument("--scope", required=True)
    a.add_argument("--mode", choices=("units", "chunk"), default="units", help="derived units, or one vector per chunk")
    a.add_argument("--max-bytes", type=int, default=1200, help="unit piece budget, label included")
    a.add_argument(
        "--max-document-bytes",
        type=int,
        default=DEFAULT_MAX_DOCUMENT_BYTES,
        help="a larger document fails, before any is embedded",
    )
    a.add_argument(
        "--max-document-units",
        type=int,
        default=DEFAULT_MAX_DOCUMENT_UNITS,
        help="a document of more units (texts to embed) fails, before any is embedded",
    )
    a.add_argument("--force", action="store_true", help="rewrite even unchanged documents")
    a.add_argument(
        "--prune",
        action="store_true",
        help="then remove the scope's stored documents these paths no longer hold (renamed or deleted files)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_add)

    r = dsub.add_parser(
        "rm", help="remove a stored document: its chunks and units, the facts about it, the recall-log rows of them"
    )
    r.add_argument("document_id", metavar="ID")
    r.add_argument("--scope", required=True)
    r.set_defaults(func=_rm)

    s = dsub.add_parser("search", help="per-part document search: whole chunks, matched unit highlighted")
    s.add_argument("message")
    s.add_argument("--scope", required=True)
    s.add_argument("-x", type=int, default=DEFAULT_DOC_X, help="chunks kept per part")
    s.add_argument(
        "--floor", type=float, default=None, help=f"raw cosine floor (default: the model's; MiniLM {DEFAULT_DOC_FLOOR})"
    )
    s.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES, help="nearest units read per part (1 to 1000)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_search)


def _add(args: argparse.Namespace) -> int:
    from pgmem.documents.store import add_documents, read_documents

    unreadable: list[tuple[str, str]] = []  # reported with the documents the database refused
    docs = read_documents(args.paths, failed=unreadable)
    with open_conn() as conn:
        emb = embedder_for(conn)
        report = add_documents(
            conn,
            args.scope,
            docs,
            emb,
            mode=args.mode,
            max_bytes=args.max_bytes,
            force=args.force,
            progress=Progress("docs add", "units"),
            prune=args.prune,
            max_document_bytes=args.max_document_bytes,
            max_document_units=args.max_document_units,
            # A file or folder that could not be read keeps what is stored under its id.
            keep=[doc_id for doc_id, _ in unreadable],
        )
    report.failed[:0] = unreadable
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        print(
            f"{report.inserted} inserted, {report.replaced} replaced, {report.unchanged} unchanged, "
            f"{report.empty} empty (skipped), {report.units} units written, {len(report.failed)} failed"
            + (f", {len(report.removed)} removed" if args.prune else "")
        )
        for doc, err in report.failed:
            print(shown(f"  failed {doc}: {err}"), file=sys.stderr)
        for doc in report.removed:
            print(shown(f"  removed {doc}"), file=sys.stderr)
        for doc in report.empty_kept:
            print(
                shown(f"  kept {doc}: the file is empty; its stored version stays searchable (docs rm removes it)"),
                file=sys.stderr,
            )
    return 1 if report.failed else 0


def _rm(args: argparse.Namespace) -> int:
    from pgmem.documents.store import remove_document

    with open_conn() as conn:
        removed = remove_document(conn, args.scope, args.document_id)
    if not removed:
        # Nothing is removed then, not even facts that name the id (`pgmem forget document` does).
        print(f"pgmem: no document {args.document_id!r} in scope {args.scope!r}: nothing removed", file=sys.stderr)
        return 1
    print(f"removed {shown(args.document_id)}")
    return 0


def highlight(hit: DocHit, *, ansi: bool) -> str:
    """The whole chunk with the matched unit marked (ANSI in a terminal, plain markers otherwise).
    Its lines end where Markdown's do (LF, CR LF, CR), each as LF; every other control character
    in it is shown, not acted on (`shown`): the markers are its only escape codes."""
    on, off = (ANSI_ON, ANSI_OFF) if ansi else (PLAIN_ON, PLAIN_OFF)
    b, s, e = hit.chunk_body, hit.span_start, hit.span_end
    before, unit, after = (shown(_LINE_END.sub("\n", part)) for part in (b[:s], b[s:e], b[e:]))
    marked = unit.replace("\n", f"{off}\n{on}") if ansi else unit  # ANSI state ends at each line
    return f"{before}{on}{marked}{off}{after}"


def print_search(result: DocSearch, out: TextIO, *, ansi: bool) -> None:
    for g in result.groups:
        print(f"── part {g.part_no}: {shown(g.part_text)}", file=out)
        if not g.hits:
            print("   (no document above the floor)", file=out)
        for h in g.hits:
            path = shown(" > ".join(h.heading_path)) or "(before the first heading)"
            print(
                f"   {h.rank}. cos {h.cosine:.3f}  {shown(h.document_id)} · {path}  [matched {shown(h.unit_kind)}]",
                file=out,
            )
            for line in highlight(h, ansi=ansi).splitlines():
                print(f"      {line}", file=out)


def _search(args: argparse.Namespace) -> int:
    from pgmem.documents.store import search_documents

    with open_conn() as conn:
        emb = embedder_for(conn)
        result = search_documents(
            conn, args.scope, args.message, emb, x=args.x, floor=args.floor, candidates=args.candidates
        )
    if args.json:
        print(json_line(result.as_dict()))
    elif result.nothing_searched:
        # A misspelt scope is not "nothing above the floor": one line, exit 1, as `pgmem recall`.
        print(f"pgmem: error: {shown(str(result.empty_message))}", file=sys.stderr)
    else:
        print_search(result, sys.stdout, ansi=sys.stdout.isatty())
    return 1 if result.nothing_searched else 0
