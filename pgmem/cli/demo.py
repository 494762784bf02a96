"""`pgmem demo`: the quickstart from the wheel alone.

It ingests the bundled example conversation (examples/conversation.jsonl, shipped in the wheel
as `pgmem.examples`) into a scope and recalls the bundled voice message
(examples/voice_message.txt) with `--compare`: exactly `pgmem ingest FILE --scope S` followed
by `pgmem recall --compare "$(cat VOICE)" --scope S`, with files no user has to fetch."""

from __future__ import annotations

import argparse
import importlib.resources

from pgmem.cli.common import shown
from pgmem.cli.memory import ingest_command, recall_command
from pgmem.text import check_name

EXAMPLES = "pgmem.examples"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo", help="ingest the bundled example conversation and recall the bundled voice message (--compare)"
    )
    p.add_argument("--scope", default="demo", help="the scope to ingest into (default demo)")
    p.add_argument("--json", action="store_true", help="print the ingest report and the recall as JSON lines")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    check_name(args.scope, "--scope")
    examples = importlib.resources.files(EXAMPLES)
    voice = examples.joinpath("voice_message.txt").read_text(encoding="utf-8").strip()
    with importlib.resources.as_file(examples.joinpath("conversation.jsonl")) as conversation:
        code = ingest_command(conversation, scope=args.scope, as_json=args.json)
    if code != 0:
        return code
    if not args.json:
        print(f"# Recall of the voice message ({len(voice.split())} words) in scope {shown(args.scope)}:")
    return recall_command(voice, scope=args.scope, compare=True, as_json=args.json)
