"""The README's examples run (issue 15 item 6), and those of the pages it sends a reader to
first (docs/sql.md, docs/python.md): their ```python blocks and their ```sql psql sessions are
executed against this test's fresh database, and where a ```text block follows one, that is
the output it must print. Regenerate the text blocks after a deliberate change with
PGMEM_REGEN_README=1 and review the diff.

SQL blocks that set `pgmem.scope` run as the application login (what a service is); the others
as a superuser (what `pgmem db psql` is). The first Python block (the Python API: ingest the
example conversation, recall) runs first: the SQL section's first query reads what it stored."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgmem import server
from tests.security_helpers import repo_root

README = repo_root() / "README.md"
#: The pages whose blocks run, in order: the README's Python block stores what the rest read.
PAGES = (README, repo_root() / "docs" / "sql.md", repo_root() / "docs" / "python.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


@dataclass
class Block:
    page: Path
    lang: str
    code: str
    start: int  # offsets of the block in the README
    end: int
    output: Block | None = None


def _blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = [Block(page, m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    out: list[Block] = []
    for i, b in enumerate(found):
        if b.lang == "text":
            continue
        nxt = found[i + 1] if i + 1 < len(found) else None
        if nxt is not None and nxt.lang == "text" and not text[b.end : nxt.start].strip():
            b.output = nxt
        out.append(b)
    return out


def _psql(url: str, code: str) -> str:
    proc = subprocess.run(
        [
            str(server.bin_dir() / "psql"),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "SHOW_CONTEXT=never",
            "-P",
            "pager=off",
            "-d",
            url,
        ],
        input=code,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env={**os.environ, "PGTZ": "UTC", "PGOPTIONS": "-c client_min_messages=warning"},
    )
    return re.sub(r"^psql:<stdin>:\d+: ", "", proc.stdout, flags=re.M)


def _norm(text: str) -> str:
    """Output as the README shows it: no trailing spaces (psql pads its last column), no
    trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n") + "\n"


def _check(block: Block, got: str, fixes: list[tuple[Block, str]]) -> None:
    if block.output is None:
        return
    got = _norm(got)
    if os.environ.get("PGMEM_REGEN_README") == "1":
        fixes.append((block.output, got))
        return
    assert got == _norm(block.output.code), f"{block.page.name} output differs for the block:\n{block.code[:200]}"


def _regen(fixes: list[tuple[Block, str]]) -> None:
    for page in {out.page for out, _ in fixes}:
        text = page.read_text(encoding="utf-8")
        for out, got in sorted((f for f in fixes if f[0].page == page), key=lambda f: -f[0].start):
            text = text[: out.start] + "```text\n" + got + "```\n" + text[out.end :]
        page.write_text(text, encoding="utf-8")


def test_readme_examples_run(db_url: str, app_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [b for page in PAGES for b in _blocks(page)]
    python = [b for b in blocks if b.lang == "python"]
    sql = [b for b in blocks if b.lang == "sql"]
    assert python and len(sql) >= 2
    assert all(any(b.page == page and b.lang in ("python", "sql") for b in blocks) for page in PAGES)
    fixes: list[tuple[Block, str]] = []
    monkeypatch.chdir(repo_root())

    # 1. The Python API block: ingest the example conversation, recall.
    api = python[0]
    assert 'connect("postgresql://...")' in api.code
    ns: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(api.code.replace('"postgresql://..."', repr(app_url)), "README.md", "exec"), ns)
    printed = out.getvalue()
    assert "[Turn 3 · " in printed.splitlines()[1], printed  # the question finds its memory (the export turn)
    _check(api, printed, fixes)

    # 2. The async twin, inside a coroutine as an application would run it.
    for block in python[1:]:
        if "await " in block.code:
            body = textwrap.indent(block.code, "    ")
            code = f"async def _main():\n{body}    return result\n"
            import pgmem.aio  # noqa: F401  (what `pgmem.aio` in the block needs)

            env = ns | {"url": app_url, "psycopg": psycopg}
            exec(compile(code, "README.md", "exec"), env)
            result = asyncio.run(env["_main"]())  # type: ignore[operator]
            assert result.groups and result.groups[0].hits

    # 3. The SQL sessions.
    for block in sql:
        url = app_url if "SET LOCAL pgmem.scope" in block.code else db_url
        got = _psql(url, block.code)
        assert "ERROR" not in got or block.output is not None, got
        _check(block, got, fixes)
    if fixes:
        _regen(fixes)
