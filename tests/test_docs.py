"""The docs a newcomer reads (issue 30): within their lengths, their figures from results files,
their commands real.

- The README is at most 300 lines, every page of docs/ at most 600.
- Every figures table is what its results file renders, and every figure quoted in prose is a
  number of one of the page's results files (`pgmem.lab.evaluation.figures`): a stale number
  fails here.
- Every `pgmem ...` command the README and docs show parses with the real CLI parser, every
  `python -m pgmem...` module they name exists, and every results file's command parses too.
  (The README's blocks run in tests/test_readme.py and tests/test_wheel.py.)"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import pytest

from pgmem.cli import build_parser
from pgmem.lab.evaluation import figures
from tests.security_helpers import repo_root

ROOT = repo_root()
PAGES = figures.pages(ROOT)


def test_every_page_is_within_its_length() -> None:
    lengths = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in PAGES}
    assert lengths["README.md"] <= 300, lengths
    too_long = {p: n for p, n in lengths.items() if p != "README.md" and n > 600}
    assert not too_long, too_long


@pytest.mark.long
def test_every_figure_matches_a_results_file() -> None:
    assert (ROOT / figures.RESULTS).is_dir()
    assert figures.check(ROOT) == []


def _repo(tmp_path: Path, page: str, result: Mapping[str, object]) -> Path:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    record = {"command": "pgmem eval x", "commit": "abc", "date": "2026-12-03 10:00 UTC", "seconds": 1.0,
              "load_average": [1.0], "result": result}  # fmt: skip
    (tmp_path / "docs" / "results" / "run.json").write_text(json.dumps(record), encoding="utf-8")
    (tmp_path / "README.md").write_text(page, encoding="utf-8")
    return tmp_path


def test_the_check_fails_a_stale_table_and_an_unmatched_figure(tmp_path: Path) -> None:
    result = {
        "results": {"hybrid": {"top1": 0.6313, "mrr": 0.7683}, "per_message": {"top1": 0.5, "mrr": 0.6857}},
        "ci": {
            m: {"top1_low": 0.5, "top1_high": 0.7, "mrr_low": 0.6, "mrr_high": 0.8} for m in ("hybrid", "per_message")
        },
    }
    page = (
        "# T\n\nHybrid finds 63.1% (MRR 0.768) on Python 3.11 with pgvector 0.8.5.\n\n"
        "<!-- figures methods run -->\n<!-- /figures -->\n"
    )
    root = _repo(tmp_path, page, result)
    problems = figures.check(root)
    assert problems == ["README.md: a figures table differs from its results file (render with --write)"]
    assert figures.main(["--root", str(root), "--write"]) == 0
    rendered = (root / "README.md").read_text(encoding="utf-8")
    assert "| **hybrid (the default)** | 63.1% [50.0, 70.0] | 0.768 [0.600, 0.800] |" in rendered
    assert "`pgmem eval x` · commit abc" in rendered
    assert figures.check(root) == []
    # A number edited by hand in the table, or in prose, no longer matches.
    (root / "README.md").write_text(rendered.replace("63.1% [50.0", "64.1% [50.0"), encoding="utf-8")
    assert figures.check(root) == ["README.md: a figures table differs from its results file (render with --write)"]
    (root / "README.md").write_text(rendered.replace("Hybrid finds 63.1%", "Hybrid finds 64.1%"), encoding="utf-8")
    assert figures.check(root) == ["README.md:3: 64.1% is in no results file of this page"]


def test_figures_are_matched_at_the_precision_shown() -> None:
    numbers = {0.63135, 947.64, 0.1101}
    assert figures.matches("63.1%", numbers) and figures.matches("0.631", numbers) and figures.matches("63%", numbers)
    assert figures.matches("+11.0", numbers) and figures.matches("947.6", numbers)
    assert not figures.matches("63.2%", numbers) and not figures.matches("0.632", numbers)
    quoted = [f for _, f in figures.quoted_figures("Python 3.11, `x 0.5`, [a](#s-2.5), 4 of 5, 2.1× and 12.5%.\n")]
    assert quoted == ["2.1×", "12.5%"]


def test_a_block_naming_a_missing_file_or_renderer_is_one_line(tmp_path: Path) -> None:
    root = _repo(tmp_path, "<!-- figures methods nosuch -->\n<!-- /figures -->\n", {})
    assert figures.check(root) == ["README.md: no results file docs/results/nosuch.json"]
    (root / "README.md").write_text("<!-- figures nosuch run -->\n<!-- /figures -->\n", encoding="utf-8")
    assert figures.check(root)[0].startswith("README.md: unknown figures block 'nosuch'")


#: `pgmem ...` command lines in the docs' sh blocks (continuation lines joined).
COMMAND = re.compile(r"^(?:\$ )?(pgmem [^\n#]*)", re.M)
PLACEHOLDERS = {"DIR": "d", "FILE": "f", "FILE.jsonl": "f.jsonl", "S": "s", "T": "t", "W": "0.5", "N": "1"}


def _doc_commands() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(commands of sh blocks, commands of inline code), each as (page, line)."""
    blocks: list[tuple[str, str]] = []
    inline: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```$", text, re.S | re.M):
            blocks += [(page.name, line.strip()) for line in COMMAND.findall(block.replace("\\\n", " "))]
        inline += [(page.name, " ".join(c.split())) for c in re.findall(r"`(pgmem [^`]+)`", text)]
    return blocks, inline


def _subparser(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of the (sub)command `words` start with, and the words after it."""
    lab = words[0] if words and words[0] in ("eval", "bench") else None
    parser = build_parser(lab=lab)
    while words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or words[0] not in subs[0].choices:
            break
        parser, words = subs[0].choices[words[0]], words[1:]
    return parser, words


def _parses(line: str) -> str | None:
    """None if the CLI parser takes the command line, else why not."""
    line = re.sub(r"\$\([^)]*\)", "x", line).split(" && ")[0].split(" > ")[0]
    try:
        words = [PLACEHOLDERS.get(w, w) for w in shlex.split(line)[1:]]
    except ValueError as exc:
        return f"cannot split: {exc}"
    lab = words[0] if words and words[0] in ("eval", "bench") else None
    try:
        build_parser(lab=lab).parse_args(words)
    except SystemExit as exc:
        return None if exc.code == 0 else "refused by the parser"
    return None


def _unknown_options(snippet: str) -> list[str]:
    """Options an inline mention (`pgmem recall --log`, a synopsis) names that its command lacks."""
    words = snippet.split()[1:]
    parser, rest = _subparser([w for w in words if not w.startswith("-")][:3])
    known = {s for a in parser._actions for s in a.option_strings}
    return [w for w in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(rest or words)) if w not in known]


def test_every_pgmem_command_in_the_docs_parses(capsys: pytest.CaptureFixture[str]) -> None:
    blocks, inline = _doc_commands()
    assert len(blocks) > 10 and len(inline) > 20  # the check reads the docs' commands at all
    bad = [(page, line, why) for page, line in blocks if (why := _parses(line))]
    assert not bad, (bad, capsys.readouterr().err[-2000:])
    unknown = [(page, snippet, u) for page, snippet in inline if (u := _unknown_options(snippet))]
    assert not unknown, unknown


def test_every_results_file_names_a_command_that_parses() -> None:
    records = sorted((ROOT / figures.RESULTS).glob("*.json"))
    assert records
    for path in records:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["command"].startswith("pgmem eval ") and record["commit"] and record["date"]
        assert _parses(record["command"]) is None, record["command"]


def test_every_lab_module_the_docs_name_exists() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    modules = set(re.findall(r"python -m (pgmem(?:\.\w+)*)", text))
    assert modules
    missing = [m for m in sorted(modules) if importlib.util.find_spec(m) is None]
    assert not missing, missing


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], set[str]]]:
    """Every (sub)command without subcommands of its own, with its options."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(path, {s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")})]
    return [leaf for name, sp in subs[0].choices.items() for leaf in _leaves(sp, (*path, name))]


def test_the_cli_synopsis_names_every_option_of_every_command() -> None:
    """docs/python.md's CLI block is the synopsis a user reads for `pgmem --help`: it left out
    options the commands have (`recall --since/--until/--message-time`, `migrate --revision`,
    `store import --page-size`, `docs add --mode/--force`, ...). Lab commands (eval, bench) have
    their own page."""
    text = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    block = text.split("## CLI\n", 1)[1].split("```", 2)[1]
    missing = []
    for path, options in _leaves(build_parser()):
        if path[0] in ("eval", "bench"):
            continue
        lines = " ".join(line for line in block.splitlines() if line.startswith(f"pgmem {path[0]}"))
        assert lines, f"no synopsis line for pgmem {path[0]}"
        named = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", lines))
        missing += [f"pgmem {' '.join(path)} {o}" for o in sorted(options - named)]
    assert not missing, missing
