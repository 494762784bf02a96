"""The `pgmem` command. Each subcommand group lives in its own module with `register`."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

import psycopg

from pgmem.errors import ConfigError, DatabaseError, PgmemError
from pgmem.sqlfiles import package_version

#: Modules that add subcommands (each has `register`), in help order.
COMMAND_MODULES = (
    "pgmem.cli.db",
    "pgmem.cli.memory",
    "pgmem.cli.demo",
    "pgmem.cli.reembed",
    "pgmem.cli.docs",
    "pgmem.cli.forget",
    "pgmem.cli.stats",
    "pgmem.cli.mcp",
    "pgmem.cli.store",
    "pgmem.lab.evaluation.cli",
    "pgmem.lab.bench.cli",
    "pgmem.cli.roles",
)

#: The lab's commands: their module and their line in `pgmem --help`. The module is imported
#: only when its command runs, so the library and the rest of the CLI never load pgmem.lab.
LAB_COMMANDS = {
    "eval": ("pgmem.lab.evaluation.cli", "evaluation suites on development data (see docs/evaluation.md)"),
    "bench": ("pgmem.lab.bench.cli", "benchmark recall on a synthetic store (load, index, latency, recall)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error is one line (its usage block, several lines, is what
    --help prints): `pgmem recall: error: argument -x: invalid int value: 'abc' (pgmem recall
    --help)`, exit 2. Subcommands' parsers are of this class too (add_subparsers' default).

    A word starting with `-` and a digit (or `-.` and a digit) is a negative number, not an
    option, as in Python 3.14's argparse (its docs: numbers in scientific notation, with
    underscores): before it, `--floor -1e-3` failed with "expected one argument" (gh-105712).
    No pgmem option looks like a negative number, so none is shadowed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"-\.?\d")  # 3.14's own, for 3.11 to 3.13

    def error(self, message: str) -> NoReturn:
        from pgmem.cli.common import shown  # the message quotes the arguments (unrecognized ones raw)

        self.exit(2, shown(f"{self.prog}: error: {' '.join(message.split())} ({self.prog} --help)\n"))


def build_parser(*, lab: str | None = None) -> argparse.ArgumentParser:
    """The `pgmem` parser. Lab commands are listed by name only, except `lab`, the one about to
    run, whose own arguments are added (importing its module)."""
    parser = _Parser(prog="pgmem", description="Agent memory retrieval inside Postgres.")
    parser.add_argument("--version", action="version", version=f"pgmem {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    lab_modules = {module: (command, text) for command, (module, text) in LAB_COMMANDS.items()}
    for name in COMMAND_MODULES:
        if name in lab_modules and lab_modules[name][0] != lab:
            sub.add_parser(lab_modules[name][0], help=lab_modules[name][1])
        else:
            _command_module(name).register(sub)
    return parser


def _command_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not name.startswith("pgmem.lab.") or exc.name is None or exc.name.split(".")[0] == "pgmem":
            raise
        # A lab command whose extra is not installed: one line, naming the extra.
        missing = f"no package {exc.name!r}"
        raise ConfigError(f"{name} needs the [eval] extra ({missing}): pip install 'pgmem[eval]'") from None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:2] == ["db", "psql"]:
            # Everything after `db psql` belongs to psql (argparse would read `-c` as ours).
            from pgmem.cli.db import run_psql

            return run_psql(argv[2:])
        parser = build_parser(lab=argv[0] if argv and argv[0] in LAB_COMMANDS else None)
        args = parser.parse_args(argv)
        code: int = args.func(args)
        sys.stdout.flush()  # a reader gone (`| head`) is met here, not in the flush at exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader of stdout went away (`pgmem recall ... --json | head -c 100`): nothing is
        # left to say to it, and a traceback said it. Quiet, with a shell's status for SIGPIPE.
        _stdout_to_devnull()
        return 141
    except PgmemError as exc:
        _error(str(exc))
        return 2
    except psycopg.Error as exc:
        # The server's refusal (bad argument, unknown scope, privilege) in one line, never a
        # traceback; the SQLSTATE says which.
        _error(str(DatabaseError.from_driver(exc)))
        return 2
    except KeyboardInterrupt:
        print("pgmem: interrupted", file=sys.stderr)
        return 130


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader is gone (poll says POLLERR or POLLHUP): a
    BrokenPipeError from anything else (an embedding endpoint's socket) is not stdout's."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout replaced (no file descriptor)
        return False


def _stdout_to_devnull() -> None:
    """Point stdout at os.devnull, so that the interpreter's flush at exit of what is still
    buffered does not fail again ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def _error(message: str) -> None:
    """One line on stderr, without the password of DATABASE_URL: libpq quotes a URL it cannot
    parse whole, and a percent-escape it cannot decode. A refusal quotes its input (a file
    name, a scope, a line of a file): its control characters are shown, not acted on."""
    from pgmem.cli.common import shown
    from pgmem.db import redact_secrets

    print(f"pgmem: error: {shown(redact_secrets(message, os.environ.get('DATABASE_URL')))}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
