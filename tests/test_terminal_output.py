"""Text stored by one party and printed by the CLI for another cannot act on the reader's
terminal. A turn's text, a tool's name, a fact, a document's heading and body, a thread or scope
name are stored through the public API as the application login, as an agent's tool result or
a web page put into memory would be; the real CLI (`pgmem.cli.main` against the test's server)
then prints them. Its human output must hold no raw C0 or C1 control (tab and newline aside) and
no bidirectional override or isolate: each is shown as an escape (`\\x1b`, `\\x9b`, `\\u202e`).
Its JSON output must still give the stored text exactly."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psycopg
import pytest

from pgmem.cli import main
from pgmem.cli.docs import ANSI_OFF, ANSI_ON
from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents
from pgmem.embedders.base import Embedder
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from pgmem.turns import turn_from_dict

Conn = psycopg.Connection[tuple[object, ...]]

#: What a web page or a tool result can carry to the terminal of whoever reads it back.
HOSTILE = (
    "Biscuit and Juniper are my dogs. "
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]8;;https://evil.example/\x07click here\x1b]8;;\x07 "  # OSC 8 hyperlink
    "\x1b]52;c;cm0gLXJmIH4=\x07 "  # OSC 52: write the clipboard
    "\x9b31mred\x9b0m \x9d0;title\x9c "  # C1 CSI, OSC and ST (one character each)
    "fake\rreal\x08\x08\x7f "  # overwrite the line
    "\u202etxt.exe\u202c \u2066isolated\u2069 Biscuit sleeps a lot."  # bidi override, isolate
)

#: Characters that must never reach the terminal raw: C0 but tab and newline, DEL, C1, the
#: bidirectional embeddings, overrides and isolates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

THREAD = "t\x1b[31m"
TOOL = "fetch\x1b]0;owned\x07"


def inert(text: str) -> None:
    found = UNSAFE.findall(text)
    assert not found, f"raw control characters in the output: {found!r}\n{text!r}"


@pytest.fixture
def cli(app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI connects as the application login to this test's database."""
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))


def store_turn(conn: Conn, embedder: Embedder, scope: str = "s") -> None:
    turn = turn_from_dict(
        {
            "scope": scope,
            "thread": THREAD,
            "turn": 0,
            "messages": [
                {"role": "user", "content": HOSTILE},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": TOOL, "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "page: " + HOSTILE},
            ],
        }
    )
    assert ingest_turns(conn, [turn], embedder).inserted == 1


@pytest.mark.parametrize("compare", [False, True], ids=["recall", "recall-compare"])
def test_recall_prints_stored_control_characters_escaped(
    conn: Conn, embedder: Embedder, cli: None, capsys: pytest.CaptureFixture[str], compare: bool
) -> None:
    store_turn(conn, embedder)
    message = "which dogs \x1b[5mdo I have\u202e?"  # the caller's own message is quoted too
    args = ["recall", message, "--scope", "s", "--floor", "-1"]
    assert main(args + (["--compare"] if compare else [])) == 0
    out, err = capsys.readouterr()
    inert(out + err)
    assert "\\x1b[2J" in out and "\\x9b31m" in out and "\\u202e" in out  # shown, not dropped
    assert "Tool fetch\\x1b]0;owned\\x07" in out and "do I have\\u202e?" in out
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    inert(out)  # C1 and bidi are JSON escapes there: the text parses back exactly
    hits = [h for g in json.loads(out)["groups"] for h in g["hits"]]
    with scoped(conn, "s"):  # the JSON gives the stored pieces exactly (a piece ends lines with \n)
        stored = set(conn.execute("SELECT label, body FROM pgmem.piece WHERE scope_id = 's'").fetchall())
    assert {(h["label"], h["body"]) for h in hits} == stored and len(stored) == 2
    assert HOSTILE.replace("\r", "\n") in [h["body"] for h in hits]
    assert any(TOOL in h["label"] for h in hits)


def test_recall_error_quoting_a_thread_is_escaped(
    conn: Conn, embedder: Embedder, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    store_turn(conn, embedder)
    assert main(["recall", "dogs", "--scope", "s", "--thread", "nosuch\x1b]52;c;eA==\x07"]) == 1
    out, err = capsys.readouterr()
    inert(out + err)
    assert "nosuch\\x1b]52;c;eA==\\x07" in err
    # facts search's refusal quotes a scope that holds no fact the same way.
    assert main(["facts", "search", "dogs", "--scope", "nofacts\x1b]52;c;eA==\x07"]) == 1
    out, err = capsys.readouterr()
    inert(out + err)
    assert "nofacts\\x1b]52;c;eA==\\x07" in err


def test_facts_search_prints_stored_control_characters_escaped(
    conn: Conn, embedder: Embedder, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    add_facts(conn, "s", [Fact(HOSTILE, thread=THREAD)], embedder)
    args = ["facts", "search", "which dogs do I have", "--scope", "s", "--floor", "-1"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    inert(out + err)
    assert "\\x1b]8;;https://evil.example/\\x07" in out
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    inert(out)  # C1 and bidi are JSON escapes there: the text parses back exactly
    hits = [h for g in json.loads(out)["groups"] for h in g["hits"]]
    assert [h["body"] for h in hits] == [HOSTILE]


DOC_ID = "notes/\x1b[8mdogs.md"
HEADING = "Dogs \x1b]0;pwned\x07\u202eflipped"
DOC = f"# {HEADING}\r\n\r\n{HOSTILE}\r\nThey like long walks.\r\n"


@pytest.mark.parametrize("tty", [False, True], ids=["plain", "terminal"])
def test_docs_search_prints_stored_control_characters_escaped(
    conn: Conn,
    embedder: Embedder,
    cli: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tty: bool,
) -> None:
    assert add_documents(conn, "s", [Document(DOC_ID, DOC)], embedder).inserted == 1
    message = "which dogs \x1b[5mdo I have\u202e?"  # the caller's own message is quoted too
    args = ["docs", "search", message, "--scope", "s", "-x", "1", "--floor", "-1"]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert (ANSI_ON in out) == tty
    # In a terminal the matched unit is marked with pgmem's own two sequences: nothing else.
    out = out.replace(ANSI_ON, "").replace(ANSI_OFF, "")
    inert(out + err)
    assert "notes/\\x1b[8mdogs.md · Dogs \\x1b]0;pwned\\x07\\u202eflipped" in out
    assert "which dogs \\x1b[5mdo I have\\u202e?" in out
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in out
    # Markdown's line ends (\r\n, and a lone \r) still end the printed lines, as before.
    assert "\\r" not in out
    assert any(line.startswith("      real\\x08\\x08\\x7f \\u202etxt.exe") for line in out.splitlines())
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    inert(out)  # C1 and bidi are JSON escapes there: the text parses back exactly
    hit = json.loads(out)["groups"][0]["hits"][0]
    assert hit["document_id"] == DOC_ID and hit["heading_path"] == [HEADING] and HOSTILE in hit["chunk_body"]


def test_docs_rm_prints_the_document_id_escaped(
    conn: Conn, embedder: Embedder, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add_documents(conn, "s", [Document(DOC_ID, DOC)], embedder).inserted == 1
    assert main(["docs", "rm", DOC_ID, "--scope", "s"]) == 0
    out, err = capsys.readouterr()
    inert(out + err)
    assert out == "removed notes/\\x1b[8mdogs.md\n"


def test_stats_prints_a_scope_name_escaped(
    conn: Conn, embedder: Embedder, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    scope = "s\x1b[31m\u202e"
    store_turn(conn, embedder, scope)
    assert main(["stats", "--scope", scope]) == 0
    out, err = capsys.readouterr()
    inert(out + err)
    assert out.splitlines()[1].startswith("s\\x1b[31m\\u202e ")
    # recall --log quotes the scope in the psql line it suggests.
    assert main(["recall", "dogs", "--scope", scope, "--floor", "-1", "--log"]) == 0
    out, err = capsys.readouterr()
    inert(out + err)
    assert "pgmem.explain_logged_recall('s\\x1b[31m\\u202e', " in out
    # A quote in the scope is doubled, so the suggested line runs as it is printed.
    quoted = "o'brien"
    store_turn(conn, embedder, quoted)
    assert main(["recall", "dogs", "--scope", quoted, "--floor", "-1", "--log"]) == 0
    out, err = capsys.readouterr()
    line = out.strip().splitlines()[-1]
    assert "pgmem.explain_logged_recall('o''brien', " in line
    sql = line[line.index("SELECT") : line.rindex(";")]
    with conn.transaction(), scoped(conn, quoted):
        assert conn.execute(sql).fetchall()


def test_failure_lines_quoting_input_are_escaped(cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ingest's and docs add's failure lines quote the file's name (the `file:line` of a line not
    read, of a turn refused and of a turn superseded; a document's id): shown, not acted on."""
    turns = tmp_path / "turns\x1b[2J.jsonl"
    empty = {"scope": "s", "thread": THREAD, "turn": 0, "messages": [{"role": "user", "content": " "}]}
    again = {**empty, "turn": 1, "messages": [{"role": "user", "content": "Biscuit sleeps."}]}
    turns.write_text("\n".join(["not json", json.dumps(empty), json.dumps(again), json.dumps(again)]) + "\n")
    assert main(["ingest", str(turns)]) == 1
    out, err = capsys.readouterr()
    inert(out + err)
    assert "failed " + str(tmp_path) + "/turns\\x1b[2J.jsonl:1: not valid JSON" in err  # a line unread
    assert "failed turn ('s', 't\\x1b[31m', 0): " in err  # a turn refused, its thread quoted
    assert "superseded turn ('s', 't\\x1b[31m', 1): " in err
    doc = tmp_path / "notes\u202e.md"
    doc.write_bytes(b"# Dogs\n\n\xff\xfe not UTF-8\n")
    assert main(["docs", "add", str(doc), "--scope", "s"]) == 1
    out, err = capsys.readouterr()
    inert(out + err)
    assert "failed " + str(tmp_path) + "/notes\\u202e.md: " in err


def test_error_lines_quoting_input_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    # A refusal that quotes its input (here a file name), and argparse's usage error.
    assert main(["ingest", "/nonexistent/\x1b[2Jturns\u202e.jsonl", "--scope", "s"]) == 2
    out, err = capsys.readouterr()
    inert(out + err)
    assert "cannot read /nonexistent/\\x1b[2Jturns\\u202e.jsonl: No such file or directory" in err
    with pytest.raises(SystemExit):
        main(["recall", "dogs", "--scope", "s", "\x1b]52;c;eA==\x07"])
    out, err = capsys.readouterr()
    inert(out + err)
    assert "unrecognized arguments: \\x1b]52;c;eA==\\x07" in err
