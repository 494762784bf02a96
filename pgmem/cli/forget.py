"""`pgmem forget turn|thread|fact|document|scope`: remove memory and what was derived from it."""

from __future__ import annotations

import argparse
import json
import sys

from pgmem.cli.common import open_conn
from pgmem.errors import InputError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    f = sub.add_parser(
        "forget", help="forget a turn, thread, fact, document or whole scope (pieces, facts and recall-log rows too)"
    )
    fsub = f.add_subparsers(dest="forget_command", required=True, metavar="WHAT")

    def what(name: str, text: str) -> argparse.ArgumentParser:
        p = fsub.add_parser(name, help=text)
        p.add_argument("--scope", required=True)
        p.add_argument("--json", action="store_true", help="print the counts as JSON")
        p.set_defaults(func=_forget)
        return p

    t = what("turn", "one turn of a thread")
    t.add_argument("thread")
    t.add_argument("turn_index", type=int)
    what("thread", "a whole thread").add_argument("thread")
    what("fact", "one fact, by its id (fact_id in SQL; piece_id in `pgmem facts search --json`)").add_argument(
        "fact_id", type=int
    )
    what("document", "one document, by its id").add_argument("document_id")
    s = what("scope", "everything of the scope, the scope itself included")
    s.add_argument("--yes", action="store_true", help="required: confirms forgetting the whole scope")


def _forget(args: argparse.Namespace) -> int:
    from pgmem import forget

    if args.forget_command == "scope" and not args.yes:
        raise InputError(f"forgetting the whole scope {args.scope!r} needs --yes")
    with open_conn() as conn:
        if args.forget_command == "turn":
            done = forget.forget_turn(conn, args.scope, args.thread, args.turn_index)
        elif args.forget_command == "thread":
            done = forget.forget_thread(conn, args.scope, args.thread)
        elif args.forget_command == "fact":
            done = forget.forget_fact(conn, args.scope, args.fact_id)
        elif args.forget_command == "document":
            done = forget.forget_document(conn, args.scope, args.document_id)
        else:
            done = forget.forget_scope(conn, args.scope)
    counts = done.as_dict()
    if args.forget_command != "scope":
        del counts["store_items"]  # counted by forget_scope only; the others count an item's turn
    if args.json:
        print(json.dumps(counts))
    else:
        print(", ".join(f"{n} {k.replace('_', '-')}" for k, n in counts.items()) + " forgotten")
    if done.total == 0:
        print(f"pgmem: nothing to forget in scope {args.scope!r}", file=sys.stderr)
        return 1
    return 0
