"""`pgmem mcp` (issue 16 items 3 and 4), driven by the MCP SDK's own client over stdio: the
server is spawned as `python -m pgmem mcp --scope ...` with DATABASE_URL naming the test
database as the app login, and the local model embeds (retrieval quality is part of the test)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent, TextResourceContents

from pgmem import cli
from pgmem.sqlfiles import package_version
from tests.security_helpers import APP_LOGIN, role_url

Conn = psycopg.Connection[tuple[object, ...]]
REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")

DOGS = [
    {
        "role": "user",
        "content": "We adopted two puppies this weekend: a beagle named Biscuit and a collie named Pepper.",
    },
    {"role": "assistant", "content": "Congratulations! Biscuit and Pepper are lovely names for a beagle and a collie."},
]
FERRY = [
    {"role": "user", "content": "Book the ferry to the island for Saturday morning."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "book_ferry", "arguments": '{"day": "Saturday"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "Booked: ferry departs the harbour at 9:40 on Saturday, pier 3."},
]


def _params(db_url: str, scope: str, home: Path, *extra: str) -> StdioServerParameters:
    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN), "PGMEM_HOME": str(home)}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "pgmem", "mcp", "--scope", scope, *extra], env=env, cwd=str(REPO)
    )


def _session(params: StdioServerParameters, body: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        async with Client(params, read_timeout_seconds=120) as client:
            return await body(client)

    return asyncio.run(main())


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _turns(group: dict[str, Any]) -> set[tuple[str, int]]:
    return {(h["thread"], h["turn_index"]) for h in group["hits"]}


def test_tools_remember_recall_forget_over_stdio(db_url: str, app_url: str, tmp_path: Path) -> None:
    async def body(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tools = (await client.list_tools()).tools
        out["tools"] = [
            {
                "name": t.name,
                "input": sorted(t.input_schema.get("properties", {})),
                "required": t.input_schema.get("required", []),
            }
            for t in tools
        ]
        out["dogs"] = _data(await client.call_tool("remember", {"messages": DOGS, "thread": "home"}))
        out["ferry"] = _data(await client.call_tool("remember", {"messages": FERRY, "thread": "home"}))
        out["note"] = _data(await client.call_tool("remember", {"note": "The user prefers window seats on trains."}))
        out["recall"] = _data(
            await client.call_tool(
                "recall", {"query": "What are my dogs called? When does the ferry leave on Saturday?"}
            )
        )
        resources = (await client.list_resources()).resources
        out["resources"] = [str(r.uri) for r in resources]
        listing = (await client.read_resource("pgmem://threads")).contents[0]
        assert isinstance(listing, TextResourceContents)
        out["threads"] = json.loads(listing.text)
        out["forget"] = _data(await client.call_tool("forget", {"thread": "home", "turn_index": 0}))
        out["after"] = _data(
            await client.call_tool("recall", {"query": "What are my dogs called?", "x": 50, "floor": -1})
        )
        out["forget_thread"] = _data(await client.call_tool("forget", {"thread": "notes"}))
        listing = (await client.read_resource("pgmem://threads")).contents[0]
        assert isinstance(listing, TextResourceContents)
        out["threads_after"] = json.loads(listing.text)
        return out

    out = _session(_params(db_url, "agent-a", tmp_path), body)
    print("tools as the client saw them:", json.dumps(out["tools"]))
    assert [t["name"] for t in out["tools"]] == ["remember", "recall", "search_documents", "forget"]
    assert all("scope" not in t["input"] for t in out["tools"])  # the scope is the server's, never an argument
    assert out["dogs"] == {"thread": "home", "turn_index": 0, "status": "inserted", "pieces": 2}
    assert out["ferry"]["turn_index"] == 1 and out["ferry"]["pieces"] == 2  # the next index of the thread
    assert out["note"]["thread"] == "notes" and out["note"]["turn_index"] == 0

    groups = out["recall"]["groups"]
    assert [g["part_text"] for g in groups] == ["What are my dogs called?", "When does the ferry leave on Saturday?"]
    assert groups[0]["hits"][0]["thread"] == "home" and groups[0]["hits"][0]["turn_index"] == 0
    assert "Biscuit" in groups[0]["hits"][0]["text"]
    assert groups[1]["hits"][0]["turn_index"] == 1 and ("home", 1) in _turns(groups[1])
    assert all(h["label"].startswith("[Turn ") for g in groups for h in g["hits"])

    assert out["resources"] == ["pgmem://threads"]
    assert out["threads"]["scope"] == "agent-a"
    assert [(t["thread"], t["turns"]) for t in out["threads"]["threads"]] == [("home", 2), ("notes", 1)]
    assert out["forget"]["forgotten"]["turns"] == 1 and out["forget"]["forgotten"]["pieces"] == 2
    remaining = {(h["thread"], h["turn_index"]) for g in out["after"]["groups"] for h in g["hits"]}
    assert ("home", 0) not in remaining and ("home", 1) in remaining
    assert not any("Biscuit" in h["text"] for g in out["after"]["groups"] for h in g["hits"])
    assert out["forget_thread"]["forgotten"]["threads"] == 1
    assert [(t["thread"], t["turns"]) for t in out["threads_after"]["threads"]] == [("home", 1)]


@pytest.mark.long
def test_a_server_of_another_scope_sees_nothing_of_the_first(db_url: str, app_url: str, tmp_path: Path) -> None:
    async def write(client: Client) -> dict[str, Any]:
        return _data(await client.call_tool("remember", {"messages": DOGS, "thread": "home"}))

    async def other(client: Client) -> dict[str, Any]:
        recalled = _data(await client.call_tool("recall", {"query": "What are my dogs called?", "x": 50, "floor": -1}))
        docs = _data(await client.call_tool("search_documents", {"query": "What are my dogs called?"}))
        forgot = _data(await client.call_tool("forget", {"thread": "home"}))
        listing = (await client.read_resource("pgmem://threads")).contents[0]
        assert isinstance(listing, TextResourceContents)
        return {"recall": recalled, "docs": docs, "forget": forgot, "threads": json.loads(listing.text)}

    async def first_again(client: Client) -> dict[str, Any]:
        return {
            "found": _data(await client.call_tool("recall", {"query": "What are my dogs called?"})),
            "high": _data(await client.call_tool("recall", {"query": "Where do penguins nest?", "floor": 0.99})),
            "thread": _data(await client.call_tool("recall", {"query": "What are my dogs called?", "thread": "work"})),
        }

    assert _session(_params(db_url, "agent-a", tmp_path), write)["status"] == "inserted"
    seen = _session(_params(db_url, "agent-b", tmp_path), other)
    assert all(g["hits"] == [] for g in seen["recall"]["groups"])
    # Why it is empty, as the CLI says it: an agent told nothing could not tell a misspelt scope
    # from a question with no memory about it.
    assert seen["recall"]["empty_reason"] == "scope_empty" and "agent-b" in seen["recall"]["empty_message"]
    assert seen["docs"]["empty_reason"] == "scope_empty" and seen["docs"]["empty_message"]
    assert sum(seen["forget"]["forgotten"].values()) == 0
    assert seen["threads"] == {"scope": "agent-b", "threads": [], "more": 0}
    again = _session(_params(db_url, "agent-a", tmp_path), first_again)
    assert "Biscuit" in again["found"]["groups"][0]["hits"][0]["text"]
    assert (again["found"]["empty_reason"], again["found"]["empty_message"]) == (None, None)
    assert again["high"]["empty_reason"] == "below_floor" and again["high"]["empty_message"]
    assert again["thread"]["empty_reason"] == "thread_empty" and "work" in again["thread"]["empty_message"]


_nested: Any = "bottom"
for _ in range(200):
    _nested = {"d": _nested}

HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("remember", {"messages": "not a list"}, "messages must be a list"),
    ("remember", {"messages": [{"role": "user", "content": "nul \x00 here"}]}, "NUL"),
    ("remember", {"messages": [{"content": "no role"}]}, "string role"),
    ("remember", {"messages": [{"role": "user", "content": 5}]}, "content must be"),
    ("remember", {"messages": DOGS, "note": "both"}, "either messages"),
    ("remember", {}, "either messages"),
    ("remember", {"note": "x" * 1_100_000}, "at most 1,000,000"),
    ("remember", {"messages": [{"role": "user", "content": "deep", "x": _nested}]}, "nested"),
    ("remember", {"note": "ok", "turn_index": True}, "turn_index"),
    ("remember", {"note": "ok", "turn_index": -3}, "turn_index"),
    ("remember", {"note": "ok", "thread": 123}, "thread"),
    ("remember", {"note": "ok", "thread": ""}, "thread"),
    ("remember", {"note": "ok", "time": "yesterday"}, "ISO 8601"),
    ("remember", {"note": "ok", "time": "2026-05-01" + "x" * 100_000}, "ISO 8601"),
    ("remember", {"note": "   "}, "note is empty"),
    # A number is no ISO 8601 time: it was read as epoch seconds, 2026 as 1970-01-01T00:33:46Z.
    ("remember", {"note": "ok", "time": 2026}, "time must be an ISO 8601 string, got int"),
    ("recall", {"query": "fine", "since": 20260501}, "since must be an ISO 8601 string, got int"),
    ("recall", {"query": "fine", "until": 1.5e9}, "until must be an ISO 8601 string, got float"),
    ("recall", {"query": 42}, "query must be a string"),
    ("recall", {"query": ""}, "query is empty"),
    ("recall", {"query": "q" * 200_000}, "at most 100,000"),
    ("recall", {"query": "fine", "x": "5"}, "x must be"),
    ("recall", {"query": "fine", "x": 0}, "x must be"),
    ("recall", {"query": "fine", "floor": "NaN"}, "floor"),
    ("recall", {"query": "fine", "floor": 10**400}, "floor must be a raw cosine"),
    ("recall", {"query": "fine", "since": "2026-05-01" + "x" * 100_000}, "ISO 8601"),
    ("recall", {"query": "fine", "thread": ["a"]}, "thread"),
    ("recall", {"query": {"nested": {"deeper": [1, 2]}}}, "query must be a string"),
    ("search_documents", {"query": None}, "query must be a string"),
    ("forget", {"thread": None}, "thread"),
    ("forget", {"thread": "home", "turn_index": 1.5}, "turn_index"),
    ("forget", {"thread": "home", "turn_index": 2**40}, "turn_index"),
]


def test_hostile_tool_inputs_are_one_line_tool_errors(
    db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    async def body(client: Client) -> list[tuple[str, str]]:
        assert _data(await client.call_tool("remember", {"messages": DOGS, "thread": "home"}))["turn_index"] == 0
        errors = []
        for tool, args, _ in HOSTILE:
            errors.append((tool, _error(await client.call_tool(tool, args))))
        # The server is still serving, and what was stored is intact.
        recalled = _data(await client.call_tool("recall", {"query": "What are my dogs called?"}))
        assert "Biscuit" in recalled["groups"][0]["hits"][0]["text"]
        return errors

    errors = _session(_params(db_url, "s", tmp_path), body)
    for (tool, message), (_, _, expected) in zip(errors, HOSTILE, strict=True):
        assert expected in message, (tool, message)
        assert len(message) < 400, message
    stored = admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall()
    assert stored == [("home", 0)]


def test_lone_surrogate_from_the_wire_is_a_tool_error(
    db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """JSON can carry an escaped lone surrogate ("\\udcff"); Postgres text cannot store it. Each
    call is refused before it writes: nothing is stored, and the turn already stored in the thread
    the calls name is neither replaced nor forgotten."""
    from pgmem.config import Settings
    from pgmem.embedders import from_settings
    from pgmem.integrations.mcp import Memory, build_server

    memory = Memory(app_url, "s", from_settings(Settings.from_env({"PGMEM_HOME": str(tmp_path)})))
    kept = "the spare key is under the blue pot"

    async def main() -> list[str]:
        async with Client(build_server(memory)) as client:
            assert _data(await client.call_tool("remember", {"note": kept, "thread": "home"}))["turn_index"] == 0
            out = []
            calls: list[tuple[str, dict[str, Any]]] = [
                ("remember", {"note": "bad \udcff byte"}),
                ("remember", {"note": "bad \udcff byte", "thread": "home", "turn_index": 0}),
                ("remember", {"messages": [{"role": "user", "content": "x\ud800"}], "thread": "home"}),
                ("remember", {"note": "ok", "thread": "home\udcff"}),
                ("recall", {"query": "lone \udcff"}),
                ("forget", {"thread": "home\udcff"}),
                ("forget", {"thread": "home\udcff", "turn_index": 0}),
            ]
            for tool, args in calls:
                out.append(_error(await client.call_tool(tool, args)))
            return out

    errors = asyncio.run(main())
    assert all("lone surrogate" in e for e in errors), errors
    stored = admin_conn.execute("SELECT thread_id, turn_index, messages FROM pgmem.turn").fetchall()
    assert stored == [("home", 0, [{"role": "user", "content": kept}])]


@pytest.mark.long
def test_document_search_tool(db_url: str, app_url: str, tmp_path: Path) -> None:
    doc = tmp_path / "kitchen.md"
    doc.write_text("# Kitchen\n\n## Oven\n\nPreheat the oven to 220 degrees for the sourdough.\n", encoding="utf-8")
    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN), "PGMEM_HOME": str(tmp_path)}
    added = subprocess.run(
        [sys.executable, "-m", "pgmem", "docs", "add", str(doc), "--scope", "s"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert added.returncode == 0, added.stderr

    async def body(client: Client) -> dict[str, Any]:
        return _data(await client.call_tool("search_documents", {"query": "How hot should the oven be for bread?"}))

    found = _session(_params(db_url, "s", tmp_path), body)
    hit = found["groups"][0]["hits"][0]
    assert hit["heading_path"][-1] == "Oven" and "220 degrees" in hit["matched"]


#: In a fresh interpreter: the core CLI parses `pgmem mcp` without loading the MCP SDK or the
#: integration module; both load only when the command runs.
_PROBE = """
import json, sys
import pgmem, pgmem.forget, pgmem.cli
from pgmem.cli import build_parser
args = build_parser().parse_args(["mcp", "--scope", "s"])
print(json.dumps({"command": args.command, "loaded": sorted(m for m in sys.modules
      if m.split(".")[0] in ("mcp", "mcp_types") or m.startswith("pgmem.integrations"))}))
"""


def test_core_never_imports_the_mcp_integration() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, cwd=REPO).stdout
    report = json.loads(out)
    assert report == {"command": "mcp", "loaded": []}


def test_missing_extra_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import now sees it as absent
    monkeypatch.delitem(sys.modules, "pgmem.integrations.mcp", raising=False)
    assert cli.main(["mcp", "--scope", "s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'pgmem[mcp]'" in err


def test_bad_scope_flag_is_refused_before_serving(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mcp", "--scope", " "]) == 2
    assert "--scope must be a non-empty string" in capsys.readouterr().err


def test_the_server_reports_its_version_and_describes_every_argument(db_url: str, app_url: str, tmp_path: Path) -> None:
    async def body(client: Client) -> tuple[object, dict[str, dict[str, Any]]]:
        tools = await client.list_tools()
        return client.server_info, {t.name: t.input_schema for t in tools.tools}

    info, schemas = _session(_params(db_url, "s", tmp_path), body)
    assert getattr(info, "name", None) == "pgmem" and getattr(info, "version", None) == package_version()
    assert set(schemas) == {"remember", "recall", "search_documents", "forget"}
    for tool, schema in schemas.items():
        for arg, prop in schema["properties"].items():
            assert len(str(prop.get("description", ""))) > 15, (tool, arg)


def _memory(app_url: str, home: Path) -> Any:
    from pgmem.config import Settings
    from pgmem.embedders import from_settings
    from pgmem.integrations.mcp import Memory

    return Memory(app_url, "s", from_settings(Settings.from_env({"PGMEM_HOME": str(home)})))


#: Unknown arguments, and NaN or Infinity in a string argument holding JSON (which the SDK
#: parses before the tool sees it): (tool, arguments, expected). The SDK's client itself sends a
#: NaN float as null; raw NaN tokens are written to stdio below.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("recall", {"query": "dogs", "scope": "someone-else"}, "recall: unknown argument 'scope'"),
    ("remember", {"note": "n", "metadata": {"a": 1}}, "remember: unknown argument 'metadata'"),
    ("forget", {"thread": "home", "turn": 0}, "forget: unknown argument 'turn'"),
    ("search_documents", {"query": "q", "thread": "home"}, "unknown argument 'thread'"),
    ("recall", {"query": "q", "x\nl\x00": 1}, "unknown argument 'x\\nl\\x00'"),
    ("remember", {"messages": '[{"role": "user", "content": "hi", "m": {"v": Infinity}}]'}, "messages[0].m.v is inf"),
    ("remember", {"messages": '[{"role": "user", "content": "hi", "m": [1, NaN]}]'}, "messages[0].m[1] is nan"),
    ("recall", {"query": "dogs", "thread": '{"deep": [[{"x": -Infinity}]]}'}, "thread.deep[0][0].x is -inf"),
]


def test_unknown_arguments_and_nan_are_one_line_tool_errors(
    app_url: str, admin_conn: Conn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the SDK's client, in process, with the server's log captured: each call is a tool
    error of one line, nothing is logged above INFO, and what was stored is intact."""
    from pgmem.integrations.mcp import build_server

    async def main() -> list[str]:
        async with Client(build_server(_memory(app_url, tmp_path))) as client:
            assert _data(await client.call_tool("remember", {"messages": DOGS, "thread": "home"}))["pieces"] == 2
            out = [_error(await client.call_tool(tool, args)) for tool, args, _ in REFUSED]
            recalled = _data(await client.call_tool("recall", {"query": "What are my dogs called?"}))
            assert "Biscuit" in recalled["groups"][0]["hits"][0]["text"]
            return out

    with caplog.at_level(logging.DEBUG):
        errors = asyncio.run(main())
    for message, (tool, _, expected) in zip(errors, REFUSED, strict=True):
        assert expected in message, (tool, message)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall() == [("home", 0)]


def _deep(levels: int) -> str:
    """JSON text nested `levels` objects deep (each holding a list), built without recursion."""
    return '{"a": [' * levels + '"x"' + "]}" * levels


def _raw_calls() -> list[tuple[str, str]]:
    """JSON-RPC lines written to the server's stdin as they are, with what each answer holds."""

    def call(rid: int, params: str, extra: str = "") -> str:
        return f'{{"jsonrpc": "2.0", "id": {rid}, "method": "tools/call", "params": {params}{extra}}}'

    dogs = '"arguments": {"query": "What are my dogs called?"}'
    return [
        (call(2, '{"name": "recall", "arguments": {"query": "dogs", "floor": NaN}}'), "recall: floor is nan"),
        (
            call(
                3,
                '{"name": "remember", "arguments": {"messages": [{"role": "user", "content": "x", '
                '"metadata": {"a": [1, Infinity]}}]}}',
            ),
            "remember: messages[0].metadata.a[1] is inf",
        ),
        (call(4, '{"name": "recall", "arguments": {"query": "dogs", "x": -Infinity}}'), "recall: x is -inf"),
        (call(5, '{"name": "forget", "arguments": {"thread": "home", "turn_index": NaN}}'), "turn_index is nan"),
        (call(6, '{"name": "recall", "arguments": {"query": "dogs", "unknown": -Infinity}}'), "unknown argument"),
        (call(7, '{"name": "recall", "_meta": ' + _deep(300) + ", " + dogs + "}"), "Biscuit"),
        (call(8, '{"name": "recall", "_meta": ' + _deep(5000) + ", " + dogs + "}"), "Biscuit"),
        (call(9, '{"name": "recall", ' + dogs + "}", ', "x": ' + _deep(300)), "Biscuit"),
        (call(10, '{"name": "recall", "arguments": {"query": ' + _deep(300) + "}}"), "query must be a string"),
        (call(11, '{"name": "recall", ' + dogs + "}"), "Biscuit"),
        # A lone surrogate escaped on the wire (JavaScript's JSON.stringify of a broken string):
        # the SDK's parser refused the line, and the request was never answered.
        (call(12, '{"name": "recall", "arguments": {"query": "tea \\udcff"}}'), "lone surrogate escape"),
        (call(13, '{"name": "remember", "arguments": {"note": "x", "thread": "t\\ud800"}}'), "lone surrogate"),
        (call(14, '{"name": "recall", "arguments": {"query": "dogs \\ud83d\\udc36"}}'), "Biscuit"),  # a pair
        (call(15, '{"name": "forget", "arguments": {}}'), "forget: missing argument 'thread'"),
        (call(16, '{"name": "remember", "arguments": {}}'), "or note (a string), one of them"),
        # A key given twice: the SDK's parser kept the last silently.
        (call(17, '{"name": "remember", "arguments": {"note": "a", "note": "b"}}'), "give the key 'note' twice"),
        (
            call(
                18,
                '{"name": "remember", "arguments": {"messages": [{"role": "user", "content": "a", "content": "b"}]}}',
            ),
            "give the key 'content' twice",
        ),
        # A key of params given twice: the SDK's parser kept the last silently, so a call that
        # named search_documents first ran forget (and forgot the thread home).
        (call(19, '{"name": "search_documents", "name": "forget", "arguments": {"thread": "home"}}'), "'name' twice"),
        (
            call(20, '{"name": "forget", "arguments": {"thread": "nosuch"}, "arguments": {"thread": "home"}}'),
            "'arguments' twice",
        ),
        (call(21, '{"name": "recall", ' + dogs + "}"), "Biscuit"),
    ]


class _RawServer:
    """`pgmem mcp` as a subprocess, its stdin written line by line as raw bytes (what no SDK
    client would send), its stdout read by a thread; every wait is bounded by one deadline."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        import queue
        import threading

        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.deadline = proc, deadline
        self.lines: queue.Queue[bytes] = queue.Queue()
        stdout = proc.stdout

        def pump() -> None:
            for line in stdout:
                self.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def send(self, message: str | bytes) -> None:
        assert self.proc.stdin is not None
        data = message.encode("utf-8") if isinstance(message, str) else message
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def until(self, rid: int) -> list[dict[str, Any]]:
        """Every message written to stdout up to and including the answer to request `rid`."""
        import queue
        import time

        out: list[dict[str, Any]] = []
        while True:
            remaining = self.deadline - time.monotonic()
            assert remaining > 0, f"request {rid} was left unanswered"
            try:
                message = json.loads(self.lines.get(timeout=remaining))
            except queue.Empty:
                raise AssertionError(f"request {rid} was left unanswered") from None
            out.append(dict(message))
            if message.get("id") == rid and ("result" in message or "error" in message):
                return out

    def answer(self, rid: int) -> dict[str, Any]:
        return self.until(rid)[-1]


@contextlib.contextmanager
def _raw_server(db_url: str, tmp_path: Path, seconds: float = 120) -> Iterator[_RawServer]:
    """A server of scope `s` (thread `home`), initialised; at the end its stderr must hold no
    traceback and no error."""
    import time

    from mcp_types.version import LATEST_HANDSHAKE_VERSION

    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN), "PGMEM_HOME": str(tmp_path)}
    stderr_path = tmp_path / "server.stderr"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgmem", "mcp", "--scope", "s", "--thread", "home"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=str(REPO),
        )
    raw = _RawServer(proc, time.monotonic() + seconds)
    try:
        init = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        raw.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
        assert raw.answer(1)["result"]["serverInfo"]["name"] == "pgmem"
        raw.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield raw
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = stderr_path.read_text()
    assert "Traceback" not in log and "Error" not in log, log[-3000:]


def test_raw_stdio_nan_and_deep_nesting_are_answered_never_left_hanging(
    db_url: str, app_url: str, tmp_path: Path
) -> None:
    """Lines no SDK client would send (NaN tokens, params._meta 300 and 5,000 levels deep, a
    deep member beside params), written to the server's stdin: each is answered within the
    deadline, and the server's stderr has no traceback."""
    with _raw_server(db_url, tmp_path) as raw:
        note = {"name": "remember", "arguments": {"messages": DOGS}}
        raw.send(json.dumps({"jsonrpc": "2.0", "id": 100, "method": "tools/call", "params": note}))
        assert not raw.answer(100)["result"].get("isError")
        for rid, (line, expected) in enumerate(_raw_calls(), start=2):
            raw.send(line)
            got = raw.answer(rid)
            text = json.dumps(got)
            assert expected in text, (rid, text[:500])
            if expected in ("Biscuit",):
                assert not got["result"].get("isError"), text[:500]
            else:
                assert got["result"]["isError"] and "Traceback" not in text, text[:500]


PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602

#: Lines that are not one JSON-RPC request, as raw bytes, and the one error each gets
#: (code, id, part of the message), or None: JSON-RPC answers no notification and no response.
NOT_A_REQUEST: list[tuple[bytes, tuple[int, int | None, str] | None]] = [
    (b'{"jsonrpc": "2.0", "id": 1, "method": ', (PARSE_ERROR, None, "EOF while parsing a value")),
    (b"hello", (PARSE_ERROR, None, "expected value at line 1 column 1")),
    (b"\xff\xfe\xfd not UTF-8", (PARSE_ERROR, None, "not UTF-8 (byte 0xFF at offset 0)")),
    (b'{"jsonrpc": "2.0", "id": 2, "method": "ping"\xc3}', (PARSE_ERROR, None, "not UTF-8 (byte 0xC3 at offset 44)")),
    (b"{}", (INVALID_REQUEST, None, '"jsonrpc" must be "2.0"')),
    (b"[]", (INVALID_REQUEST, None, "an empty batch")),
    (b'[{"jsonrpc": "2.0", "id": 3, "method": "ping"}]', (INVALID_REQUEST, None, "a batch (a JSON array)")),
    (b"[{garbage " * 1_000_000, (PARSE_ERROR, None, "Parse error")),  # 10 MB
    (b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}\x00', (PARSE_ERROR, None, "trailing characters")),
    (b'{"jsonrpc": "2.0", "id": 5, "method": "pi\x00ng"}', (PARSE_ERROR, None, "control character")),
    (b"\x00", (PARSE_ERROR, None, "expected value")),
    (b'"hello"', (INVALID_REQUEST, None, "got a string")),
    (b"42", (INVALID_REQUEST, None, "got a number")),
    (b'{"jsonrpc": "2.0", "id": 7, "method": 5}', (INVALID_REQUEST, 7, '"method" must be a string')),
    (b'{"jsonrpc": "1.0", "id": 8, "method": "ping"}', (INVALID_REQUEST, 8, '"jsonrpc" must be "2.0"')),
    # A request whose id is no MCP id: the SDK took it for a notification and never answered.
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', (INVALID_REQUEST, None, '"id" must be')),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', (INVALID_REQUEST, None, '"id" must be')),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', (INVALID_REQUEST, None, '"id" must be')),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": [1]}', (INVALID_PARAMS, 9, "object")),
    # A number the SDK's parser cannot hold: its parse error went out with id null, and the
    # client waited for the answer to request 11 until its timeout.
    (
        b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "recall", "arguments": '
        b'{"query": "x", "x": ' + b"9" * 5000 + b"}}}",
        (PARSE_ERROR, 11, "number out of range"),
    ),
    (b"", None),
    (b"   \t", None),
    (b'{"jsonrpc": "2.0", "method": "notifications/no_such_thing"}', None),
    (b'{"jsonrpc": "2.0", "method": "notifications/no_such_thing", "params": [1]}', None),
    (b'{"jsonrpc": "2.0", "id": 10, "result": 5}', None),  # a malformed response: never answered
    # A member given twice: the SDK's parser kept the last silently, so this ping ran a forget
    # of thread home.
    (
        b'{"jsonrpc": "2.0", "id": 12, "method": "ping", "method": "tools/call", '
        b'"params": {"name": "forget", "arguments": {"thread": "home"}}}',
        (INVALID_REQUEST, 12, "'method' is given twice"),
    ),
    (b'{"jsonrpc": "2.0", "id": 13, "id": 14, "method": "ping"}', (INVALID_REQUEST, None, "'id' is given twice")),
    (b'{"jsonrpc": "2.0", "\\u0069d": 13, "id": 14, "method": "ping"}', (INVALID_REQUEST, None, "'id' is given twice")),
    (
        b'{"jsonrpc": "2.0", "id": 15, "method": "resources/read", "params": {"uri": "pgmem://x", "uri": "pgmem://y"}}',
        (INVALID_PARAMS, 15, "'uri' is given twice in params"),
    ),
    (b'{"jsonrpc": "2.0", "method": "notifications/initialized", "method": "notifications/x"}', None),
]


@pytest.mark.long
def test_lines_that_are_not_one_request_get_one_error_each_and_the_server_keeps_serving(
    db_url: str, app_url: str, tmp_path: Path
) -> None:
    """JSON-RPC 2.0: a line that is not JSON gets one -32700 error with id null, JSON that is not
    one request object one -32600 (its id when it has one), a notification nothing. Each line is
    followed by a ping, which must be answered, and which shows what the line got before it."""
    got: list[tuple[bytes, list[dict[str, Any]]]] = []
    with _raw_server(db_url, tmp_path) as raw:
        note = {"name": "remember", "arguments": {"messages": DOGS}}
        raw.send(json.dumps({"jsonrpc": "2.0", "id": 900, "method": "tools/call", "params": note}))
        assert not raw.answer(900)["result"].get("isError")
        for n, (line, _) in enumerate(NOT_A_REQUEST):
            raw.send(line)
            raw.send(json.dumps({"jsonrpc": "2.0", "id": 1000 + n, "method": "ping"}))
            *before, pong = raw.until(1000 + n)
            assert pong == {"jsonrpc": "2.0", "id": 1000 + n, "result": {}}, pong
            got.append((line, before))
        raw.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 2000,
                    "method": "tools/call",
                    "params": {"name": "recall", "arguments": {"query": "What are my dogs called?"}},
                }
            )
        )
        recalled = raw.answer(2000)
        # Nothing a refused line named ran: the dogs turn of thread home is still there.
        assert not recalled["result"].get("isError") and "Biscuit" in json.dumps(recalled), recalled
    wrong = [(line[:60], before, expected) for (line, before), (_, expected) in zip(got, NOT_A_REQUEST, strict=True)]
    wrong = [w for w in wrong if not _one_error(w[1], w[2])]
    assert not wrong, f"{len(wrong)} of {len(NOT_A_REQUEST)} lines not answered as JSON-RPC says: {wrong}"


#: Bytes that are not UTF-8: an invalid start byte, a lone continuation byte, an overlong
#: encoding of "/", a UTF-8-encoded surrogate (U+D800), a sequence cut short, and a code point
#: beyond U+10FFFF.
NOT_UTF8 = [b"\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80"]


def _remember_line(rid: bytes, arguments: bytes) -> bytes:
    """A remember call as raw bytes: `rid` and `arguments` are JSON text, written as they are."""
    return b'{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": "remember", "arguments": %s}}' % (
        rid,
        arguments,
    )


def _not_utf8_lines() -> list[tuple[bytes, int | str | None, bytes]]:
    """remember calls, each JSON but for bytes that are not UTF-8 inside a string, as raw bytes,
    with the id the error must carry and the bad bytes (the error names the first and where)."""
    out: list[tuple[bytes, int | str | None, bytes]] = []
    for n, bad in enumerate(NOT_UTF8):
        out += [
            (_remember_line(b"%d" % (10 + n), b'{"note": "caf%s au lait"}' % bad), 10 + n, bad),
            (
                _remember_line(b"%d" % (20 + n), b'{"messages": [{"role": "user", "content": "x%s"}]}' % bad),
                20 + n,
                bad,
            ),
            # Into the thread that holds a turn, as a replacement of it.
            (_remember_line(b"%d" % (30 + n), b'{"note": "%s", "thread": "home", "turn_index": 0}' % bad), 30 + n, bad),
            (_remember_line(b'"r-%d"' % n, b'{"note": "x", "thread": "t%s"}' % bad), f"r-{n}", bad),
            (_remember_line(b"%d" % (40 + n), b'{"note%s": "x"}' % bad), 40 + n, bad),
        ]
    out += [
        # The offset is in bytes: after a character of two bytes, it is not the character count.
        (_remember_line(b"50", b'{"note": "caf\xc3\xa9 \xff"}'), 50, b"\xff"),
        # An id that carries the byte cannot be echoed: null, as for any line whose id is unknown.
        (_remember_line(b'"r\xff"', b'{"note": "x"}'), None, b"\xff"),
        # A notification and a response are not JSON either: one -32700 with id null each.
        (
            b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "\xff"}}',
            None,
            b"\xff",
        ),
        (b'{"jsonrpc": "2.0", "id": 6, "result": {"x": "\xff"}}', None, b"\xff"),
    ]
    return out


def test_raw_stdio_bytes_not_utf8_inside_a_request_are_refused_and_nothing_is_stored(
    db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """A line that is JSON but for a byte that is not UTF-8 inside a string (the SDK's stdin reads
    such a byte as U+FFFD, so the note was stored altered, without a word) is not JSON (RFC 8259
    takes UTF-8 only): it gets one -32700 error naming the byte and its offset, with the request's
    id so the client's call ends at once, and nothing is stored or replaced. Each line is followed
    by a ping that must be answered; the session then stores a valid note, U+FFFD included."""
    kept = "the spare key is under the blue pot"
    got: list[list[dict[str, Any]]] = []
    lines = _not_utf8_lines()
    with _raw_server(db_url, tmp_path) as raw:
        raw.send(_remember_line(b"2", json.dumps({"note": kept}).encode()))
        assert raw.answer(2)["result"]["structuredContent"]["turn_index"] == 0
        for n, (line, _, _) in enumerate(lines):
            raw.send(line)
            raw.send(json.dumps({"jsonrpc": "2.0", "id": 1000 + n, "method": "ping"}))
            *before, pong = raw.until(1000 + n)
            assert pong == {"jsonrpc": "2.0", "id": 1000 + n, "result": {}}, pong
            got.append(before)
        raw.send(_remember_line(b"3", '{"note": "valid \ufffd stays", "thread": "ok"}'.encode()))
        assert raw.answer(3)["result"]["structuredContent"]["thread"] == "ok"
    wrong = []
    for (line, rid, bad), before in zip(lines, got, strict=True):
        expected = (PARSE_ERROR, rid, f"not UTF-8 (byte 0x{bad[0]:02X} at offset {line.index(bad)})")
        if not _one_error(before, expected):
            wrong.append((line[:80], before))
    assert not wrong, f"{len(wrong)} of {len(lines)} lines not refused: {wrong}"
    stored = admin_conn.execute("SELECT thread_id, turn_index, messages FROM pgmem.turn ORDER BY thread_id").fetchall()
    assert stored == [
        ("home", 0, [{"role": "user", "content": kept}]),
        ("ok", 0, [{"role": "user", "content": "valid \ufffd stays"}]),
    ]


def _one_error(before: list[dict[str, Any]], expected: tuple[int, int | str | None, str] | None) -> bool:
    """Whether what a line got is what it should: nothing, or exactly one error response (id,
    code and a one-line message holding the expected words)."""
    if expected is None or len(before) != 1:
        return expected is None and before == []
    code, rid, part = expected
    error, message = before[0], str(before[0].get("error", {}).get("message"))
    return (
        set(error) == {"jsonrpc", "id", "error"}
        and (error["jsonrpc"], error["id"], error["error"]["code"]) == ("2.0", rid, code)
        and part in message
        and "\n" not in message
        and len(message) < 200
    )


def test_the_guard_cuts_only_what_is_too_deep() -> None:
    from pgmem.integrations.mcp import TRIM_DEPTH, guard_line

    shallow = json.dumps({"params": {"arguments": {"messages": [{"role": "user", "content": "{[" * 300}] * 200}}})
    assert guard_line(shallow) == shallow  # brackets inside strings, many siblings: nothing deep
    line = '{"id": 1, "params": {"_meta": ' + _deep(400) + ', "arguments": {"query": "a \\"} [ \\\\"}}}'
    guarded = json.loads(guard_line(line))
    assert guarded["params"]["arguments"] == {"query": 'a "} [ \\'}
    depth, node = 2, guarded["params"]["_meta"]
    while isinstance(node, dict):
        node, depth = node["a"][0], depth + 2
    assert node == "pgmem: cut, nested too deeply" and depth <= TRIM_DEPTH + 1
    assert guard_line("[" * 500 + "not json") == "[" * 500 + "not json"


def test_raw_stdio_a_carriage_return_between_tokens_does_not_split_a_request(
    db_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """JSON allows \\r as whitespace between tokens, and a message ends at \\n: a request with a
    bare \\r inside it is one request, answered once, and so is one whose line ends in \\r\\n.
    Read with universal newlines, the \\r split it into two lines that were not JSON (two parse
    errors, the request never answered), and a remember call's note was lost."""
    with _raw_server(db_url, tmp_path) as raw:
        raw.send('{"jsonrpc": "2.0",\r"id": 7,\r"method": "ping"}')
        replies = raw.until(7)
        assert replies == [{"jsonrpc": "2.0", "id": 7, "result": {}}]
        call = {"name": "remember", "arguments": {"note": "The spare key is under the blue flowerpot."}}
        line = '{"jsonrpc": "2.0", "id": 8,\r"method": "tools/call", "params": ' + json.dumps(call) + "}\r"
        raw.send(line)  # and ends in \r\n
        answer = raw.answer(8)
        assert "error" not in answer and not answer["result"].get("isError"), answer
    bodies = [str(r[0]) for r in admin_conn.execute("SELECT body FROM pgmem.piece WHERE scope_id = 's'")]
    assert any("blue flowerpot" in b for b in bodies), bodies


def test_an_unknown_tool_resource_or_prompt_is_named_in_one_line(
    app_url: str, admin_conn: Conn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK echoed an unknown tool's, resource's or prompt's name whole: 5,000 characters over
    two lines, control characters raw; and an unknown prompt logged a traceback at ERROR. Each
    is one short line now, the name quoted with its control characters escaped."""
    from mcp.shared.exceptions import MCPError

    from pgmem.integrations.mcp import build_server

    name = "nosuch\n" + "x" * 5000 + "\x1b[2J"

    async def main() -> list[str]:
        async with Client(build_server(_memory(app_url, tmp_path))) as client:
            assert _data(await client.call_tool("remember", {"note": "kept", "thread": "home"}))["turn_index"] == 0
            out = [_error(await client.call_tool(name, {"thread": "home"}))]
            with pytest.raises(MCPError) as unknown:
                await client.read_resource("pgmem://threads\n" + "y" * 3000)
            out.append(unknown.value.message)
            with pytest.raises(MCPError) as unknown:
                await client.get_prompt(name)
            out.append(unknown.value.message)
            return out

    with caplog.at_level(logging.DEBUG):
        tool, resource, prompt = asyncio.run(main())
    for message in (tool, resource, prompt):
        assert "\n" not in message and "\x1b" not in message and len(message) < 300, message
    assert tool.startswith("unknown tool 'nosuch\\nxxx") and "remember, recall" in tool, tool
    assert resource.startswith("unknown resource 'pgmem://threads\\nyyy") and resource.endswith("pgmem://threads"), (
        resource
    )
    assert prompt.startswith("unknown prompt 'nosuch\\nxxx") and "no prompts" in prompt, prompt
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall() == [("home", 0)]


def test_remember_after_the_last_turn_index_names_it(app_url: str, admin_conn: Conn, tmp_path: Path) -> None:
    """A thread whose last turn is at 2147483647 has no next index: remember without turn_index
    was refused as `integer out of range (SQLSTATE 22003)`, naming nothing. It names the index
    it would have taken; the turn stored there is kept."""
    from pgmem.integrations.mcp import build_server

    async def main() -> str:
        async with Client(build_server(_memory(app_url, tmp_path))) as client:
            last = {"note": "the last one", "thread": "full", "turn_index": 2**31 - 1}
            assert _data(await client.call_tool("remember", last))["turn_index"] == 2**31 - 1
            return _error(await client.call_tool("remember", {"note": "one more", "thread": "full"}))

    error = asyncio.run(main())
    assert "between 0 and 2147483647, got 2147483648" in error, error
    assert admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall() == [("full", 2**31 - 1)]
