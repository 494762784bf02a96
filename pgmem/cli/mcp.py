"""`pgmem mcp`: serve one scope's memory to an MCP client over stdio. The MCP SDK (the [mcp]
extra) is imported only when the command runs."""

from __future__ import annotations

import argparse
import logging
import sys

from pgmem.text import check_name


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("mcp", help="MCP memory server on stdio for one scope (needs the [mcp] extra)")
    p.add_argument("--scope", required=True, help="the only scope this server reads and writes (tools take no scope)")
    p.add_argument("--thread", default="notes", help="thread of `remember` calls that name none (default: notes)")
    p.set_defaults(func=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    from pgmem.extras import require

    check_name(args.scope, "--scope")
    check_name(args.thread, "--thread")
    require("mcp", "mcp", "pgmem mcp")
    from pgmem import server
    from pgmem.cli.common import embedder_for, open_conn, settings
    from pgmem.db import database_url
    from pgmem.integrations.mcp import serve

    # stdout carries the protocol: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    s = settings()
    # An agent host launches this with no terminal to run `pgmem db start` in: the embedded
    # server is started if needed, and that is said on stderr (stdout is the protocol).
    if not s.database_url and not server.status(s.pgdata).running:
        print(f"pgmem mcp: started the embedded server in {s.pgdata} (`pgmem db stop` stops it)", file=sys.stderr)
    url = database_url(s)
    with open_conn(s) as conn:
        emb = embedder_for(conn, s=s)
    serve(url, args.scope, emb, default_thread=args.thread)
    return 0
