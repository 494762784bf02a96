"""`pgmem eval SUITE ... [--json] [--out DIR] [--limit N]`: the evaluation harness.

Every suite runs with the configured embedder (local by default) wrapped in an on-disk
cache under $PGMEM_HOME/cache, so a re-run does not re-embed. Suites that need a
database get the embedded server (or DATABASE_URL) and work in fresh temporary
databases that are dropped afterwards. Progress goes to stderr; `--json` prints one JSON
object on stdout; `--out DIR` writes a Markdown report and PNG plots there.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pgmem.cli import LAB_COMMANDS
from pgmem.cli.common import settings
from pgmem.errors import ConfigError, InputError
from pgmem.lab.evaluation.common import SPLITS, check_output


@dataclass(frozen=True)
class Suite:
    name: str
    module: str
    help: str
    path_kind: str | None  # "file", "dir", "path" or None (no positional path)


SUITES = {
    s.name: s
    for s in (
        Suite("families", "pgmem.lab.evaluation.families", "sentence families: the seed's controlled test", "file"),
        Suite("longmemeval", "pgmem.lab.evaluation.longmemeval", "LongMemEval questions: seven methods", "dir"),
        Suite("locomo", "pgmem.lab.evaluation.locomo", "LoCoMo conversations: seven methods", "file"),
        Suite("toolqa", "pgmem.lab.evaluation.toolqa", "questions on tool-heavy agent trajectories", "file"),
        Suite("coverage", "pgmem.lab.evaluation.coverage", "multi-question messages: one vector vs per-part", "dir"),
        Suite("docs", "pgmem.lab.evaluation.docs_suite", "documents: one vector per chunk vs derived units", None),
        Suite("sweep", "pgmem.lab.evaluation.sweep", "blend weight and floor sweeps on development data", "path"),
        Suite("langgraph", "pgmem.lab.evaluation.langgraph_stores", "LangGraph PostgresStore vs PgmemStore", "dir"),
    )
}


#: Suites with per-question results that `--compare A B` can pair.
PAIRED = ("longmemeval", "locomo", "coverage", "toolqa")


def load_suite(name: str) -> ModuleType:
    """The suite's module, or a clear error naming the missing module."""
    suite = SUITES[name]
    try:
        return importlib.import_module(suite.module)
    except ModuleNotFoundError as exc:
        if exc.name == suite.module:
            raise ConfigError(
                f"the {name!r} suite is not available: module {suite.module} is missing "
                f"(pgmem/lab/evaluation/{suite.module.rsplit('.', 1)[1]}.py)"
            ) from None
        raise ConfigError(
            f"the {name!r} suite needs the [eval] extra (no package {exc.name!r}): pip install 'pgmem[eval]'"
        ) from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    common.add_argument("--out", type=Path, metavar="DIR", help="write a Markdown report and PNG plots here")
    common.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="write the figures (no per-question values) with the command, commit and date to FILE, "
        "the results file the docs' tables are rendered from",
    )
    common.add_argument("--limit", type=int, metavar="N", help="only the first N items (questions, families...)")
    common.add_argument("--seed", type=int, default=0, help="seed for sampled suites (default 0)")
    common.add_argument(
        "--split",
        choices=SPLITS,
        default="all",
        help="score one fixed half of the questions: tune (choose settings there) or confirm (report there)",
    )
    common.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a suite-specific option passed to its run() (VALUE read as JSON when it parses)",
    )

    ev = sub.add_parser("eval", help=LAB_COMMANDS["eval"][1])
    evsub = ev.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for suite in SUITES.values():
        p = evsub.add_parser(suite.name, help=suite.help, parents=[common])
        if suite.path_kind is not None:
            p.add_argument("path", type=Path, metavar=suite.path_kind.upper())
        if suite.name == "families":
            p.add_argument("--distractors", type=Path, required=True, metavar="FILE", help="distractor sentences")
            p.add_argument("--weight", type=float, default=0.8, help="blend weight of the piece (default 0.8)")
        elif suite.name in PAIRED:
            p.add_argument(
                "--compare",
                nargs=2,
                action="append",
                default=[],
                metavar=("A", "B"),
                help="paired comparison of two methods question by question (repeatable); "
                "a side may be FILE.json:METHOD from an earlier run's --json or --out output",
            )
        elif suite.name == "docs":
            p.add_argument("--corpus", type=Path, required=True, metavar="DIR", help="folder of Markdown documents")
            p.add_argument("--questions", type=Path, required=True, metavar="FILE", help="questions JSONL")
        p.set_defaults(func=_run)


def _options(raw: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise InputError(f"--option expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        except (RecursionError, ValueError):  # too deep for Python's parser; an integer of 4,300+ digits
            raise InputError(f"--option {key}: its value is JSON Python cannot read (too deep or too long)") from None
    return out


def _check_path(path: Path, kind: str, what: str) -> None:
    if kind == "file" and not path.is_file():
        raise InputError(f"{what}: no such file: {path}")
    if kind == "dir" and not path.is_dir():
        raise InputError(f"{what}: no such folder: {path}")
    if kind == "path" and not path.exists():
        raise InputError(f"{what}: not found: {path}")


def _check_compare(pairs: list[list[str]]) -> None:
    """Each `FILE.json:METHOD` side of --compare, read now (`longmemeval.compare_file`) and
    holding METHOD; a method of this run is checked when the run has its results."""
    from pgmem.lab.evaluation.longmemeval import compare_file

    for pair in pairs:
        for side in pair:
            path, colon, method = side.rpartition(":")
            if colon and method not in compare_file(path)["per_question"]:
                raise InputError(f"--compare {side}: {path} has no per-question values for method {method!r}")


def _accepts(fn: Callable[..., Any], options: dict[str, Any], suite: str) -> None:
    """Refuse options the suite's function does not name (warn only if it takes **kwargs)."""
    from pgmem.lab.evaluation.common import progress

    params = inspect.signature(fn).parameters
    unknown = sorted(set(options) - {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD})
    if not unknown:
        return
    known = ", ".join(sorted(n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY))
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        progress(f"warning: the {suite!r} suite does not name option(s) {', '.join(unknown)} (its options: {known})")
        return
    raise InputError(f"the {suite!r} suite has no option {', '.join(unknown)}; its options: {known}")


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (for reports)."""
    words = ["pgmem", "eval", args.suite]
    if getattr(args, "path", None) is not None:
        words.append(str(args.path))
    for flag in ("distractors", "corpus", "questions"):
        if getattr(args, flag, None) is not None:
            words += [f"--{flag}", str(getattr(args, flag))]
    if args.suite == "families" and args.weight != 0.8:
        words += ["--weight", str(args.weight)]
    if args.limit is not None:
        words += ["--limit", str(args.limit)]
    if args.seed:
        words += ["--seed", str(args.seed)]
    if getattr(args, "split", "all") != "all":
        words += ["--split", args.split]
    for a, b in getattr(args, "compare", None) or []:
        words += ["--compare", a, b]
    for item in args.option:
        words += ["-o", item]
    if args.out is not None:
        words += ["--out", str(args.out)]
    if getattr(args, "record", None) is not None:
        words += ["--record", str(args.record)]
    return " ".join(shlex.quote(w) for w in words)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM becomes KeyboardInterrupt, so `finally` blocks drop the temporary database.
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _run_suite(args)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run_suite(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_suite(args: argparse.Namespace) -> int:
    from pgmem.embedders import from_settings
    from pgmem.lab import require_eval_extra
    from pgmem.lab.evaluation.common import CachedEmbedder, progress

    require_eval_extra("pgmem eval")
    suite = SUITES[args.suite]
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be at least 1, got {args.limit}")
    if suite.path_kind is not None:
        _check_path(args.path, suite.path_kind, suite.name)
    # Every file the run reads or writes at its end is checked now, not after its hour of work.
    if args.out is not None:
        check_output(args.out, "--out", folder=True)
    if args.record is not None:
        check_output(args.record, "--record")
    _check_compare(getattr(args, "compare", None) or [])
    options = _options(args.option)
    mod = load_suite(suite.name)
    s = settings()
    embedder = CachedEmbedder(from_settings(s, plane="piece"), s.home / "cache")
    progress(f"{suite.name}: embedder {embedder.model_id} ({embedder.dims}-d), cache {embedder.path}")
    t0 = time.monotonic()
    result: dict[str, Any]
    notes: list[str] = []
    if suite.name == "families":
        if args.split != "all":
            raise InputError("the families test has no halves: its 64 record queries are one controlled test")
        _check_path(args.distractors, "file", "--distractors")
        _accepts(mod.evaluate_files, options, suite.name)
        detailed = mod.evaluate_files(
            args.path,
            embedder=embedder,
            distractors=args.distractors,
            limit=args.limit,
            weight=args.weight,
            progress=progress,
            **options,
        )
        result = detailed.as_dict()
        notes = mod.report_notes(detailed)
    elif suite.name == "docs":
        _check_path(args.corpus, "dir", "--corpus")
        _check_path(args.questions, "file", "--questions")
        _accepts(mod.run_docs_eval, options, suite.name)
        result = _run_docs(mod, args, embedder, options)
    else:
        from pgmem.db import database_url

        _accepts(mod.run, options, suite.name)
        if suite.name in PAIRED:
            options["compare"] = args.compare
        result = mod.run(
            args.path,
            server_url=database_url(s),
            embedder=embedder,
            limit=args.limit,
            seed=args.seed,
            split=args.split,
            **options,
        )
    progress(
        f"{suite.name}: done in {time.monotonic() - t0:.1f}s; "
        f"{embedder.embedded} texts embedded, {embedder.cached} read from the cache"
    )
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        from pgmem.lab.evaluation.report import markdown

        print(markdown(result))
    try:
        if args.out is not None:
            _write_out(suite.name, mod, result, args, notes)
        if args.record is not None:
            write_record(
                args.record, result, command=command_line(args), model=embedder.model_id, seconds=time.monotonic() - t0
            )
            progress(f"{suite.name}: figures recorded in {args.record}")
    except OSError as exc:  # checked before the run; the disk may fill or a folder go meanwhile
        raise InputError(f"cannot write {exc.filename or 'the results'}: {exc.strerror or exc}") from None
    return 0


#: Keys of a suite's result that hold per-question values (the sweep's `cosines` too): kept by
#: --out, left out of --record.
PER_QUESTION_KEYS = ("ids", "per_question", "cosines")


def write_record(path: Path, result: dict[str, Any], *, command: str, model: str, seconds: float) -> None:
    """A results file: the run's figures with what reproduces them (command, commit, date, model)."""
    import datetime
    import os
    import subprocess

    from pgmem.lab.evaluation import stats

    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        from importlib.metadata import version

        commit = f"pgmem {version('pgmem')} (not a git checkout)"
    record = {
        "command": command,
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": model,
        "seconds": round(seconds, 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "intervals": {
            "level": stats.LEVEL,
            "resamples": stats.RESAMPLES,
            "seed": stats.SEED,
            "kind": "percentile bootstrap",
        },
        "result": {k: v for k, v in result.items() if k not in PER_QUESTION_KEYS},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def _run_docs(mod: ModuleType, args: argparse.Namespace, embedder: Any, options: dict[str, Any]) -> dict[str, Any]:
    from pgmem.db import connect, database_url
    from pgmem.lab.evaluation.common import temporary_database
    from pgmem.sqlfiles import InstallParams

    params = InstallParams.from_mapping({})
    if params.piece_dims != embedder.dims:
        raise ConfigError(f"the embedder gives {embedder.dims}-d vectors but PGMEM_PIECE_DIMS is {params.piece_dims}")
    with temporary_database(database_url(settings()), params) as url, connect(url) as conn:
        result: dict[str, Any] = mod.run_docs_eval(
            conn, embedder, args.corpus, args.questions, limit=args.limit, split=args.split, **options
        )
    return result


def _write_out(name: str, mod: ModuleType, result: dict[str, Any], args: argparse.Namespace, notes: list[str]) -> None:
    from pgmem.lab.evaluation.common import progress
    from pgmem.lab.evaluation.report import write_report

    out: Path = args.out
    extra: list[Path] = []
    suite_plots = getattr(mod, "plots", None)
    if callable(suite_plots):
        extra = list(suite_plots(result, out))
    (out / f"{name}.json").parent.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    path = write_report(name, result, out, command=command_line(args), extra_plots=extra, notes=notes)
    progress(f"{name}: report written to {path}")


if __name__ == "__main__":  # pragma: no cover
    from pgmem.cli import main

    sys.exit(main(["eval", *sys.argv[1:]]))
