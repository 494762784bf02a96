"""The `pgmem` command. Each subcommand group lives in its own module with `register`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import psycopg

from pgmem.errors import DatabaseError, PgmemError

#: Modules under pgmem.cli that add subcommands, in help order.
COMMAND_MODULES = ("db", "memory", "docs", "evaluate", "bench", "roles")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgmem", description="Agent memory retrieval inside Postgres.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"pgmem.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pgmem.cli.{name}":
                continue  # a command group not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["db", "psql"]:
        # Everything after `db psql` belongs to psql (argparse would read `-c` as ours).
        from pgmem.cli.db import run_psql

        return run_psql(argv[2:])
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except PgmemError as exc:
        print(f"pgmem: error: {exc}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:
        # The server's refusal (bad argument, unknown scope, privilege) in one line, never a
        # traceback; the SQLSTATE says which.
        print(f"pgmem: error: {DatabaseError.from_driver(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pgmem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
