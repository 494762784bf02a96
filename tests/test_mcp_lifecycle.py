"""`pgmem mcp` over a session's life, as the MCP SDK's own client meets it: a server started with
a model the scope does not store, the database ending the server's connection between two
calls, a failure while the threads resource is read, and a client that gives up on a slow
`remember` (its timeout sends `notifications/cancelled`).

Real Postgres, the app login; the hash embedder where no retrieval quality is asserted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextResourceContents

from pgmem import ingest_turns
from pgmem.db import connect
from tests.helpers import send
from tests.security_helpers import APP_LOGIN, HashEmbedder, hash_vector, make_turn, role_url
from tests.test_mcp_server import DOGS, REPO, _data, _params, _session

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.mark.long
def test_a_server_whose_model_is_not_the_scopes_does_not_start(db_url: str, app_url: str, tmp_path: Path) -> None:
    """Scope `s` stores vectors of another model than the server's (here the hash embedder's,
    `test:hash`; in life `PGMEM_EMBEDDER=e5` over a MiniLM scope): every call of such a server
    failed, recall and remember alike, while the server had started as if all was well. It now
    refuses to start, in one line naming both models, as it does for a schema of the wrong
    dimension; a server of a scope that stores nothing yet starts."""
    with connect(app_url) as conn:
        assert ingest_turns(conn, [make_turn("s", "home", 0, "a turn of another model")], HashEmbedder()).inserted == 1
    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN), "PGMEM_HOME": str(tmp_path)}

    def start(scope: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgmem", "mcp", "--scope", scope],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            cwd=str(REPO),
            timeout=300,
        )

    refused = start("s")
    assert refused.returncode == 2, (refused.returncode, refused.stderr[-2000:])
    assert refused.stdout == ""  # nothing on the protocol's stream
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgmem: error: "), refused.stderr[-2000:]
    assert "scope s stores piece vectors from model test:hash" in lines[0], lines[0]
    assert "all-MiniLM-L6-v2" in lines[0] and "Traceback" not in refused.stderr

    fresh = start("empty")
    assert fresh.returncode == 0, fresh.stderr[-2000:]


def _terminate_app_sessions(admin_conn: Conn) -> int:
    """End every session of the app login on this database, waiting until each has exited (a
    restart, a failover, an administrator's pg_terminate_backend, idle_session_timeout)."""
    row = admin_conn.execute(
        """SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
            WHERE usename = %s AND datname = current_database() AND pid <> pg_backend_pid()""",
        (APP_LOGIN,),
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


@pytest.mark.long
def test_a_connection_the_database_ended_between_calls_fails_no_call(
    db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """The server keeps one connection for its whole session, which an agent host keeps open
    for days. When the database ended it while idle, the next call of every tool failed
    (`recall: consuming input failed: server closed the connection unexpectedly`, `forget:
    terminating connection due to administrator command`, the threads resource's bare 'Error
    reading resource') and only the call after it reconnected. Each call now finds such a
    connection dead before using it and opens another."""

    async def body(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["remember"] = _data(await client.call_tool("remember", {"messages": DOGS, "thread": "home"}))
        out["ended"] = [_terminate_app_sessions(admin_conn)]
        out["recall"] = _data(await client.call_tool("recall", {"query": "What are my dogs called?"}))
        out["ended"].append(_terminate_app_sessions(admin_conn))
        listing = (await client.read_resource("pgmem://threads")).contents[0]
        assert isinstance(listing, TextResourceContents)
        out["threads"] = json.loads(listing.text)
        out["ended"].append(_terminate_app_sessions(admin_conn))
        out["note"] = _data(await client.call_tool("remember", {"note": "The vet is on Elm Street."}))
        out["ended"].append(_terminate_app_sessions(admin_conn))
        out["documents"] = _data(await client.call_tool("search_documents", {"query": "dogs"}))
        out["ended"].append(_terminate_app_sessions(admin_conn))
        out["forget"] = _data(await client.call_tool("forget", {"thread": "home"}))
        return out

    out = _session(_params(db_url, "s", tmp_path), body)
    assert out["ended"] == [1, 1, 1, 1, 1]  # the server's one connection, each time
    assert out["remember"]["status"] == "inserted"
    assert "Biscuit" in out["recall"]["groups"][0]["hits"][0]["text"]
    assert [t["thread"] for t in out["threads"]["threads"]] == ["home"]
    assert out["note"]["thread"] == "notes" and out["note"]["status"] == "inserted"
    assert out["documents"]["empty_reason"] == "scope_empty"
    assert out["forget"]["forgotten"]["turns"] == 1
    rows = admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn ORDER BY 1").fetchall()
    assert rows == [("notes", 0)]


def test_a_failure_reading_the_threads_resource_is_one_line_with_its_reason(
    app_url: str, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A read of pgmem://threads that the database refused (here a lock a DBA's migration holds,
    with the server's lock_timeout) reached the client as 'Error reading resource
    pgmem://threads', without the reason, and the SDK logged it at ERROR with a Python
    traceback. The client now reads the database's line, the server logs no traceback, and the
    next read works."""
    from pgmem.integrations.mcp import Memory, build_server

    url = app_url + ("&" if "?" in app_url else "?") + "options=-c%20lock_timeout%3D200"
    memory = Memory(url, "s", HashEmbedder())

    async def main() -> tuple[str, list[Any]]:
        async with Client(build_server(memory)) as client:
            assert _data(await client.call_tool("remember", {"note": "kept", "thread": "home"}))["turn_index"] == 0
            with psycopg.connect(db_url) as dba:
                dba.execute("LOCK TABLE pgmem.thread IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(MCPError) as failed:
                    await client.read_resource("pgmem://threads")
                dba.rollback()
            listing = (await client.read_resource("pgmem://threads")).contents[0]
            assert isinstance(listing, TextResourceContents)
            return failed.value.error.message, json.loads(listing.text)["threads"]

    with caplog.at_level(logging.DEBUG):
        message, threads = asyncio.run(main())
    assert "lock timeout" in message and "55P03" in message, message
    assert "\n" not in message and "Traceback" not in message
    assert [t["thread"] for t in threads] == ["home"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_the_threads_resource_lists_the_threads_with_the_latest_turns_and_counts_the_rest(
    app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pgmem://threads listed every thread: a store namespace of 100,000 items was 100,000 threads,
    some 10 MB of JSON to an agent. It lists THREADS_LISTED (here 3) with the latest turns, by
    name, and `more` counts the others."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from pgmem.integrations import mcp as pgmem_mcp

    monkeypatch.setattr(pgmem_mcp, "THREADS_LISTED", 3)
    with connect(app_url) as conn:
        turns = [make_turn("s", f"t{i}", 0, f"note {i}") for i in range(5)]
        turns = [replace(t, time=datetime(2026, 1, 1 + i, tzinfo=UTC)) for i, t in enumerate(turns)]
        assert not ingest_turns(conn, turns[::-1], HashEmbedder()).failed
    memory = pgmem_mcp.Memory(app_url, "s", HashEmbedder())

    async def main() -> dict[str, Any]:
        async with Client(pgmem_mcp.build_server(memory)) as client:
            listing = (await client.read_resource("pgmem://threads")).contents[0]
            assert isinstance(listing, TextResourceContents)
            return dict(json.loads(listing.text))

    out = asyncio.run(main())
    assert [t["thread"] for t in out["threads"]] == ["t2", "t3", "t4"] and out["more"] == 2, out
    monkeypatch.setattr(pgmem_mcp, "THREADS_LISTED", 5)
    assert [t["thread"] for t in asyncio.run(main())["threads"]] == ["t0", "t1", "t2", "t3", "t4"]


@contextlib.contextmanager
def _slow_endpoint(seconds_per_input: float) -> Iterator[tuple[str, list[int]]]:
    """An OpenAI-compatible embedding endpoint on 127.0.0.1 at a slow model's pace: it answers
    each request after `seconds_per_input` per input, with the hash embedder's vectors. Yields its
    base URL and the number of inputs of each request it answered."""
    inputs: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = body["input"]
            time.sleep(seconds_per_input * len(texts))
            inputs.append(len(texts))
            data = [
                {"object": "embedding", "index": i, "embedding": hash_vector(t).tolist()} for i, t in enumerate(texts)
            ]
            send(self, 200, json.dumps({"object": "list", "data": data, "model": body["model"], "usage": {}}).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", inputs
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.long
def test_a_remember_the_client_gave_up_on_stores_nothing_and_frees_the_server(
    db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """A long turn (up to 1 MB: some 1,800 pieces, minutes of MiniLM on two cores) outlasts a
    client's request timeout, and the SDK's client then sends `notifications/cancelled`. The
    server went on embedding every piece, every later call of the session waiting behind it,
    and stored the turn the client had been told failed: an agent that tried again stored it
    twice. The server now stops embedding once its request is cancelled, stores nothing, and
    answers the next call."""
    note = " ".join(f"Sentence {i} of a long tool result, {'padding ' * 120}." for i in range(400))

    async def body(client: Client) -> dict[str, Any]:
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool("remember", {"note": note, "thread": "long"}, read_timeout_seconds=2)
        return _data(await client.call_tool("recall", {"query": "a long tool result"}))

    with _slow_endpoint(0.02) as (url, inputs):
        params = _params(db_url, "s", tmp_path)
        params.env = {
            **(params.env or {}),
            "PGMEM_EMBEDDER": "openai",
            "OPENAI_BASE_URL": url,
            "OPENAI_API_KEY": "sk-test",
            "PGMEM_PIECE_DIMS": "384",
        }
        recalled = _session(params, body)
    assert recalled["empty_reason"] == "scope_empty", recalled
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (0,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)
    # Stopped early: the 400 pieces were not all sent to the model (the recall's query was).
    assert sum(inputs) < 400, inputs


def test_a_client_gone_from_the_servers_stdout_ends_it_quietly(db_url: str, app_url: str, tmp_path: Path) -> None:
    """The client's end of the server's stdout closed (the client crashed or was killed, while its
    end of stdin stays open a moment): the server's next answer failed with BrokenPipeError, and
    it exited with status 1 and a multi-line ExceptionGroup traceback in the log an agent host
    keeps of its stderr. It now exits quietly with a shell's status for SIGPIPE, 141, as the CLI
    does when the reader of its output goes away."""
    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN), "PGMEM_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgmem", "mcp", "--scope", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(REPO),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.close()  # the client is gone from the other end
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "gone", "version": "0"}}
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode() + b"\n")
    proc.stdin.flush()
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    log = stderr.decode()
    assert proc.returncode == 141, (proc.returncode, log[-3000:])
    assert "Traceback" not in log and "Error" not in log, log[-3000:]


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "embedding"])
def test_ctrl_c_ends_the_server(db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path, busy: bool) -> None:
    """Ctrl-C (SIGINT) to `pgmem mcp` run by hand in a terminal, idle or embedding a long
    `remember`: nothing happened, and a second one printed 'pgmem: interrupted' and still did not
    exit. Each waited for the thread reading stdin, blocked until the next line or the end of
    input. The server now ends at the first: status 130, that one line, nothing stored."""
    import signal

    note = " ".join(f"Sentence {i} of a long tool result, {'padding ' * 120}." for i in range(400))
    with _slow_endpoint(0.02) as (url, inputs):
        env = {
            **os.environ,
            "DATABASE_URL": role_url(db_url, APP_LOGIN),
            "PGMEM_HOME": str(tmp_path),
            "PGMEM_EMBEDDER": "openai",
            "OPENAI_BASE_URL": url,
            "OPENAI_API_KEY": "sk-test",
            "PGMEM_PIECE_DIMS": "384",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgmem", "mcp", "--scope", "s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(REPO),
            # Ctrl-C's default, as in a terminal, whatever this run inherited: a runner started
            # in the background by a shell (`.ci/run &`) ignores SIGINT, and so did the server.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert proc.stdin is not None and proc.stdout is not None
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "tty", "version": "0"}}
        lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}]
        lines.append({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if busy:
            call = {"name": "remember", "arguments": {"note": note, "thread": "long"}}
            lines.append({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        for line in lines:
            proc.stdin.write(json.dumps(line).encode() + b"\n")
        proc.stdin.flush()  # stdin stays open, as a terminal's does
        assert b'"id":1' in proc.stdout.readline()
        if busy:
            deadline = time.monotonic() + 60
            while not inputs and time.monotonic() < deadline:  # the model is at work
                time.sleep(0.05)
            assert inputs
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)  # stdin still open: communicate() would close it
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("the server did not end within 30 s of SIGINT")
        _, stderr = proc.communicate()
    assert proc.returncode == 130, (proc.returncode, stderr.decode()[-3000:])
    assert stderr.decode().strip() == "pgmem: interrupted", stderr.decode()[-3000:]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (0,)


def test_requests_piped_in_are_answered_before_the_server_ends(
    db_url: str, app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """Requests written to the server's stdin, then the end of input (`pgmem mcp <
    requests.jsonl`; MCP's stdio shutdown: the client closes stdin and waits for the exit): the
    SDK cancels what is in flight when its input ends, so the last requests went unanswered, a
    `remember` stored all the same (its thread could not be stopped). The input now ends once
    every request passed on is answered, or cancelled by the client: a cancelled one does not
    hold the exit."""
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "0"}}
    note = "The ferry to the island leaves from pier 3 at 9:40. " * 100

    def call(rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": arguments}}

    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call(2, "remember", {"messages": DOGS, "thread": "home"}),
        call(3, "remember", {"note": note, "thread": "cancelled"}),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        call(4, "remember", {"note": "The vet is on Elm Street.", "thread": "notes"}),
        call(5, "recall", {"query": "Where is the vet?"}),
    ]
    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN), "PGMEM_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem", "mcp", "--scope", "s"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines()) if "id" in m}
    assert {1, 2, 4, 5} <= set(answers), done.stdout[-3000:]
    for rid in (2, 4, 5):
        assert not answers[rid]["result"].get("isError"), answers[rid]
    stored = admin_conn.execute(
        "SELECT thread_id, turn_index FROM pgmem.turn WHERE thread_id <> 'cancelled' ORDER BY 1"
    )
    assert stored.fetchall() == [("home", 0), ("notes", 0)]
