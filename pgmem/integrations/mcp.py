"""`pgmem mcp`: an MCP server (stdio) over one scope of pgmem memory.

Tools: `remember` (seal a turn or a note into a thread, through `pgmem.ingest_turns`),
`recall` (`pgmem.recall`: one group per part of the query, labelled with the part),
`search_documents`, `forget` (a turn or a whole thread); resource `pgmem://threads` (the
scope's threads and their turn counts). The scope is fixed when the server starts
(`--scope`): no tool takes a scope, so an agent reaches only the memory it was given.

Every tool argument is checked here and a bad one is a tool error of one line (the server
keeps serving); the SDK's own argument validation accepts any JSON value, so its multi-line
messages never reach the client. Before a tool runs, an argument it does not have and NaN or
Infinity anywhere in the arguments are refused (`check_arguments`); before the SDK parses a
line, anything nested too deeply for its parser is cut (`guard_line`), and a line that is not one
JSON-RPC message gets the one error JSON-RPC 2.0 prescribes (`screen_line`): the SDK drops such a
line unanswered, and would read a byte that is not UTF-8 as U+FFFD (a note stored altered).

Over a session's life: the server does not start with a model the scope does not store
(`Memory.check`); each call replaces a connection the database ended since the last one
(`Memory._drop_if_ended`); a `remember` whose request is cancelled stops embedding and stores
nothing (`_Cancellable`)."""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, TypeVar, cast

from pgmem.extras import require

require("mcp", "mcp", "pgmem mcp")

import anyio  # noqa: E402
import anyio.from_thread  # noqa: E402
import anyio.lowlevel  # noqa: E402
import numpy as np  # noqa: E402
import psycopg  # noqa: E402
import pydantic_core  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402
from mcp.types import (  # noqa: E402
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    ToolAnnotations,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError, WithJsonSchema  # noqa: E402

from pgmem.db import check_model, connect, scoped  # noqa: E402
from pgmem.documents.store import search_documents  # noqa: E402
from pgmem.embedders.base import Embedder, FloatArray, WrappedEmbedder  # noqa: E402
from pgmem.errors import DatabaseError, ModelMismatchError, PgmemError  # noqa: E402
from pgmem.forget import forget_thread, forget_turn  # noqa: E402
from pgmem.ingest import ingest_turns  # noqa: E402
from pgmem.recall import recall  # noqa: E402
from pgmem.text import as_float, check_name, check_text  # noqa: E402
from pgmem.turns import MAX_DEPTH, parse_time, turn_from_dict  # noqa: E402

log = logging.getLogger("pgmem.mcp")

#: Bounds on what one tool call may carry: a remembered turn (its messages as JSON), a query.
MAX_TURN_BYTES = 1_000_000
MAX_MESSAGES = 1_000
MAX_QUERY_BYTES = 100_000
MAX_X = 50
#: How often `remember` takes the next index again when another writer stored a turn at the one
#: it read (each try embeds the note again).
NEXT_INDEX_TRIES = 20
#: `pgmem://threads` lists at most this many threads (those with the latest turns), and how many
#: more the scope holds (`more`).
THREADS_LISTED = 1000

#: `remember` embeds a turn's pieces in batches of about this many seconds of the model (the
#: pace of the batch before; 8 to 512 pieces), looking between two batches whether its request
#: was cancelled: a turn of 1 MB is some 1,800 pieces, minutes of the local model on two cores.
EMBED_BATCH_SECONDS = 1.0
EMBED_BATCH_MIN = 8
EMBED_BATCH_MAX = 512
DEFAULT_THREAD = "notes"
THREADS_URI = "pgmem://threads"

T = TypeVar("T")


# Parameters the SDK passes through as any JSON value while advertising a JSON schema: the
# checks (and their one-line errors) are pgmem's own, below.
Str = Annotated[object, WithJsonSchema({"type": "string"})]
OptStr = Annotated[object, WithJsonSchema({"type": ["string", "null"]})]
OptIndex = Annotated[object, WithJsonSchema({"type": ["integer", "null"], "minimum": 0})]
OptX = Annotated[object, WithJsonSchema({"type": ["integer", "null"], "minimum": 1, "maximum": 50})]
OptFloor = Annotated[object, WithJsonSchema({"type": ["number", "null"], "minimum": -1, "maximum": 1})]
Messages = Annotated[
    object,
    WithJsonSchema(
        {
            "type": ["array", "null"],
            "items": {"type": "object"},
            "description": "OpenAI chat messages: {role, content, tool_calls?, tool_call_id?}",
        }
    ),
]
Time = Annotated[object, WithJsonSchema({"type": ["string", "null"], "description": "ISO 8601; default now"})]


Query = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": "string"},
            "description": "The message or question to search with, as plain text (split into parts).",
        }
    ),
]

Note = Annotated[
    object,
    WithJsonSchema(
        {**{"type": ["string", "null"]}, "description": "A plain-text note to remember instead of messages."}
    ),
]

PutThread = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["string", "null"]},
            "description": "Thread to store the turn in (e.g. a conversation id); default: the server's thread.",
        }
    ),
]

RecallThread = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["string", "null"]},
            "description": "Search only this thread's turns; omit to search every thread of the scope.",
        }
    ),
]

ForgetThread = Annotated[
    object,
    WithJsonSchema({**{"type": "string"}, "description": "The thread to forget, or the thread of the turn to forget."}),
]

PutIndex = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["integer", "null"], "minimum": 0},
            "description": "Turn number in the thread (0-based); omit for the next; an existing one is replaced.",
        }
    ),
]

ForgetIndex = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["integer", "null"], "minimum": 0},
            "description": "The turn number to forget; omit to forget the whole thread.",
        }
    ),
]

HitsX = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["integer", "null"], "minimum": 1, "maximum": 50},
            "description": "How many hits to keep for each part of the query, 1 to 50; omit for 5.",
        }
    ),
]

Since = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["string", "null"]},
            "description": "Only turns at or after this time (ISO 8601, e.g. 2026-05-01T09:30Z; no zone: UTC).",
        }
    ),
]

Until = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["string", "null"]},
            "description": "Only turns before this time (ISO 8601; no zone: UTC).",
        }
    ),
]

Floor = Annotated[
    object,
    WithJsonSchema(
        {
            **{"type": ["number", "null"], "minimum": -1, "maximum": 1},
            "description": "Lowest raw cosine (-1 to 1) a hit needs; omit for the model's calibrated default.",
        }
    ),
]


class _IndexTaken(Exception):
    """A turn of another writer holds the index `remember` read as the thread's next."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_cancelled() -> None:
    """In the worker thread the SDK runs a tool in: raise the request's cancellation when its
    client has cancelled it (`notifications/cancelled`, which the SDK's client sends when its
    timeout passes) or gone. The SDK waits for the thread to finish all the same: until then a
    cancelled `remember` went on to store the turn its client was told had failed, and every
    later call waited for it. Nothing to do outside such a thread (a direct call)."""
    with contextlib.suppress(anyio.NoEventLoopError):
        anyio.from_thread.check_cancelled()


class _Cancellable(WrappedEmbedder):
    """An embedder that embeds about EMBED_BATCH_SECONDS of texts at a time and stops once the
    request is cancelled (`_check_cancelled`), before anything is stored: `ingest_turns` embeds a
    turn's pieces, then writes. Batches grow with a fast model (an endpoint answers many inputs
    in one request) and stay small with a slow one, so a cancelled call frees the session soon."""

    def embed(self, texts: Sequence[str]) -> FloatArray:
        parts: list[FloatArray] = []
        at, n = 0, EMBED_BATCH_MIN
        while at < len(texts):
            _check_cancelled()
            started = time.monotonic()
            parts.append(self.inner.embed(texts[at : at + n]))
            took = max(time.monotonic() - started, 1e-3)
            at += n
            n = max(EMBED_BATCH_MIN, min(EMBED_BATCH_MAX, int(n * EMBED_BATCH_SECONDS / took)))
        _check_cancelled()
        if not parts:
            return self.inner.embed(texts)
        out: FloatArray = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return out


class Memory:
    """What the tools do, on one database and one scope. One connection, opened lazily and
    reopened after a failure; calls are serialised (the SDK runs sync tools in threads)."""

    def __init__(self, url: str, scope: str, embedder: Embedder, *, default_thread: str = DEFAULT_THREAD) -> None:
        self.url = url
        self.scope = check_name(scope, "--scope")
        self.default_thread = check_name(default_thread, "--thread")
        self.embedder = embedder
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._lock = threading.Lock()

    def conn(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.url)
        return self._conn

    def _drop_if_ended(self) -> None:
        """Close the connection when the database has ended it since its last use (a restart, a
        failover, pg_terminate_backend, idle_session_timeout): the session keeps one connection
        for as long as the agent host runs, and such a connection fails only at its next
        statement, which was the next tool call's. One round trip before each call."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return
        try:
            conn.execute("SELECT 1")
        except psycopg.OperationalError:
            conn.close()
            self._conn = None

    def check(self) -> None:
        """Fail at start, not at the first call, when the schema or the model does not fit: the
        schema's dimension, and the model whose vectors the scope stores (pgmem.model_refusal,
        what a write of the scope would raise; a query of another model is refused too)."""
        conn = self.conn()
        check_model(conn, plane="piece", model_id=self.embedder.model_id, dims=self.embedder.dims)
        with scoped(conn, self.scope):
            row = conn.execute(
                "SELECT pgmem.model_refusal(%s, %s, %s, 'piece')",
                (self.scope, self.embedder.model_id, self.embedder.dims),
            ).fetchone()
        if row is not None and row[0] is not None:
            raise ModelMismatchError(
                f"{row[0]}: serve the scope with its model (PGMEM_EMBEDDER), or move the scope to this one "
                f"(pgmem reembed --to MODEL --scope SCOPE)"
            )

    def run(self, what: str, fn: Callable[[], T]) -> T:
        """Run one tool body: every failure becomes a one-line ToolError. A call whose request was
        cancelled while it waited for the one before it does not run."""
        with self._lock:
            try:
                _check_cancelled()
                self._drop_if_ended()
                return fn()
            except ToolError:
                raise
            except PgmemError as exc:
                raise ToolError(_one_line(str(exc))) from None
            except psycopg.Error as exc:
                if self._conn is not None and (self._conn.broken or self._conn.closed):
                    self._conn = None
                raise ToolError(_one_line(str(DatabaseError.from_driver(exc)))) from None
            except RecursionError:
                raise ToolError(f"{what}: input nested too deeply") from None
            except Exception as exc:  # a bug: one line to the client, the traceback to stderr
                log.exception("%s failed", what)
                raise ToolError(f"{what}: internal error ({type(exc).__name__})") from None

    # -- remember -----------------------------------------------------------------------------

    def remember(
        self, messages: object, note: object, thread: object, turn_index: object, time: object
    ) -> dict[str, Any]:
        th = self.default_thread if thread is None else check_name(thread, "thread")
        if (messages is None) == (note is None):
            raise ToolError(
                "give either messages (a list of OpenAI chat messages) or note (a string), "
                + ("not both" if messages is not None else "one of them")
            )
        if note is not None:
            body = check_text(note, "note")
            if not body.strip():
                raise ToolError("note is empty")
            if len(body.encode("utf-8")) > MAX_TURN_BYTES:
                raise ToolError(f"note is {len(body.encode('utf-8')):,} bytes; at most {MAX_TURN_BYTES:,}")
            msgs: object = [{"role": "user", "content": body}]
        else:
            msgs = messages
        if not isinstance(msgs, list):
            raise ToolError(f"messages must be a list of OpenAI chat messages, got {type(msgs).__name__}")
        if not msgs or len(msgs) > MAX_MESSAGES:
            raise ToolError(f"messages must hold 1 to {MAX_MESSAGES:,} messages, got {len(msgs):,}")
        _check_depth(msgs, "messages")
        size = len(json.dumps(msgs, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass"))
        if size > MAX_TURN_BYTES:
            raise ToolError(f"messages are {size:,} bytes as JSON; at most {MAX_TURN_BYTES:,} per turn")
        when = _time(time, "time") or datetime.now(UTC)
        if turn_index is not None and (
            not isinstance(turn_index, int) or isinstance(turn_index, bool) or not 0 <= turn_index <= 2**31 - 1
        ):
            raise ToolError(f"turn_index must be an integer between 0 and 2147483647, got {turn_index!r:.40}")
        conn = self.conn()
        embedder = _Cancellable(self.embedder)
        # The next index of the thread is read and written under one lock per (scope, thread),
        # so two servers on one scope never give two turns the same index (one would replace
        # the other). Another writer of the thread (an application's put_turn, `pgmem ingest`)
        # takes no such lock: a turn it stored at that index between the read and the write
        # was replaced by the note, and lost (rt59). A next index is written in a transaction
        # that is rolled back when it replaced a turn, and the note takes the index after.
        key = f"pgmem.remember:{self.scope}:{th}"
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        try:
            for _ in range(NEXT_INDEX_TRIES):
                index = turn_index if turn_index is not None else self._next_index(conn, th)
                turn = turn_from_dict(
                    {"thread": th, "turn": index, "messages": msgs, "time": when.isoformat()},
                    scope=self.scope,
                    where="turn",
                )
                if turn_index is not None:  # the caller's index: the same index again replaces it
                    report = ingest_turns(conn, [turn], embedder)
                    break
                try:
                    with conn.transaction():
                        report = ingest_turns(conn, [turn], embedder)
                        if report.replaced:
                            raise _IndexTaken
                    break
                except _IndexTaken:
                    continue
            else:
                raise ToolError(
                    f"remember: thread {th!r:.80} got {NEXT_INDEX_TRIES} new turns from other writers while this "
                    "one was written; try again"
                )
        finally:
            # A connection lost meanwhile released the session's lock with it; unlocking there
            # raised "the connection is closed" in place of the error that ended the write.
            if not (conn.closed or conn.broken):
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
        if report.failed:
            raise ToolError(_one_line(report.failed[0][1]))
        status = "inserted" if report.inserted else "replaced" if report.replaced else "unchanged"
        return {"thread": th, "turn_index": index, "status": status, "pieces": report.pieces}

    def _next_index(self, conn: psycopg.Connection[tuple[object, ...]], thread: str) -> int:
        with scoped(conn, self.scope):
            row = conn.execute(
                """SELECT coalesce(max(turn_index)::bigint + 1, 0)
                     FROM pgmem.turn WHERE scope_id = %s AND thread_id = %s""",
                (self.scope, thread),
            ).fetchone()
        assert row is not None
        return int(str(row[0]))

    # -- recall, search_documents ---------------------------------------------------------------

    def recall(
        self, query: object, thread: object, x: object, floor: object, since: object = None, until: object = None
    ) -> dict[str, Any]:
        q = _query(query)
        th = None if thread is None else check_name(thread, "thread")
        n = _x(x)
        fl = _floor(floor)
        # The query is asked now: its dates ("yesterday", "last week") rank the turns of then first,
        # read as days of this machine's zone (the user's, for a server on stdio).
        result = recall(
            self.conn(),
            self.scope,
            q,
            self.embedder,
            x=n,
            floor=fl,
            thread=th,
            message_time=datetime.now().astimezone(),
            since=_time(since, "since"),
            until=_time(until, "until"),
        )
        return {
            "query": q,
            "groups": [
                {
                    "part": g.part_no,
                    "part_text": g.part_text,
                    "hits": [
                        {
                            "rank": h.rank,
                            "thread": h.thread_id,
                            "turn_index": h.turn_index,
                            "label": h.label,
                            "text": h.body,
                            "cosine": round(h.cosine, 4),
                        }
                        for h in g.hits
                    ],
                }
                for g in result.groups
            ],
            # Why nothing came back (an agent cannot tell a misspelt scope from a floor otherwise).
            "empty_reason": result.empty_reason,
            "empty_message": result.empty_message,
        }

    def search_documents(self, query: object, x: object, floor: object) -> dict[str, Any]:
        q = _query(query)
        result = search_documents(self.conn(), self.scope, q, self.embedder, x=_x(x), floor=_floor(floor))
        return {
            "query": q,
            "groups": [
                {
                    "part": g.part_no,
                    "part_text": g.part_text,
                    "hits": [
                        {
                            "rank": h.rank,
                            "document_id": h.document_id,
                            "heading_path": h.heading_path,
                            "chunk": h.chunk_body,
                            "matched": h.matched,
                            "cosine": round(h.cosine, 4),
                        }
                        for h in g.hits
                    ],
                }
                for g in result.groups
            ],
            "empty_reason": result.empty_reason,
            "empty_message": result.empty_message,
        }

    # -- forget, threads ----------------------------------------------------------------------------

    def forget(self, thread: object, turn_index: object) -> dict[str, Any]:
        th = check_name(thread, "thread")
        if turn_index is None:
            done = forget_thread(self.conn(), self.scope, th)
        else:
            if not isinstance(turn_index, int) or isinstance(turn_index, bool) or not 0 <= turn_index <= 2**31 - 1:
                raise ToolError(f"turn_index must be an integer between 0 and 2147483647, got {turn_index!r:.40}")
            done = forget_turn(self.conn(), self.scope, th, turn_index)
        return {"thread": th, "turn_index": turn_index, "forgotten": done.as_dict()}

    def threads(self) -> dict[str, Any]:
        conn = self.conn()
        with scoped(conn, self.scope):
            rows = conn.execute(
                # Not the thread of an expired store item that the sweep has not removed yet
                # (expired by the clock, as pgmem.store_get judges): recall leaves it out too
                # (pgmem.expired_item_pieces), and the thread's name holds the item's key.
                # The THREADS_LISTED with the latest turns (a store namespace of 100,000 items
                # listed 100,000 threads, some 10 MB of JSON to an agent), by name.
                """SELECT thread_id, turns, last_turn_time, listable FROM (
                   SELECT th.thread_id, count(t.turn_index) AS turns, max(t.turn_time) AS last_turn_time,
                          count(*) OVER () AS listable
                     FROM pgmem.thread th
                     LEFT JOIN pgmem.turn t ON t.scope_id = th.scope_id AND t.thread_id = th.thread_id
                    WHERE th.scope_id = %s
                      AND NOT EXISTS (SELECT 1 FROM pgmem.store_item i
                                       WHERE i.scope_id = th.scope_id AND i.thread_id = th.thread_id
                                         AND i.expires_at <= clock_timestamp())
                    GROUP BY th.thread_id
                    ORDER BY max(t.turn_time) DESC NULLS LAST, th.thread_id
                    LIMIT %s) latest
                   ORDER BY thread_id""",
                (self.scope, THREADS_LISTED),
            ).fetchall()
        return {
            "scope": self.scope,
            "threads": [
                {
                    "thread": str(r[0]),
                    "turns": int(str(r[1])),
                    "last_turn_time": r[2].isoformat() if isinstance(r[2], datetime) else None,
                }
                for r in rows
            ],
            "more": max(0, int(str(rows[0][3])) - len(rows)) if rows else 0,
        }


def _query(value: object) -> str:
    q = check_text(value, "query")
    if not q.strip():
        raise ToolError("query is empty")
    size = len(q.encode("utf-8"))
    if size > MAX_QUERY_BYTES:
        raise ToolError(f"query is {size:,} bytes; at most {MAX_QUERY_BYTES:,}")
    return q


def _time(value: object, name: str) -> datetime | None:
    """A time argument: an ISO 8601 string, as the tool's schema says, or None. parse_time also
    reads a number as epoch seconds (a turns file's `time`): an agent's 2026 or 20260501 was
    read so, as a moment of 1970, without a word."""
    if value is not None and not isinstance(value, str):
        raise ToolError(f"{name} must be an ISO 8601 string, got {type(value).__name__}")
    return parse_time(value, name)


def _x(value: object) -> int:
    if value is None:
        return 5
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_X:
        raise ToolError(f"x must be an integer between 1 and {MAX_X}, got {value!r:.40}")
    return value


def _floor(value: object) -> float | None:
    """A caller's floor, or None: the model's (pgmem.model_settings)."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not -1.0 <= as_float(value) <= 1.0:
        raise ToolError(f"floor must be a raw cosine between -1 and 1, got {value!r:.40}")
    return float(value)


def _check_depth(value: object, what: str) -> None:
    """Refuse JSON nested deeper than the turn checks accept, without recursing on it."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ToolError(f"{what} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(v, dict):
            stack.extend((c, depth + 1) for c in v.values())
        elif isinstance(v, list):
            stack.extend((c, depth + 1) for c in v)


def check_arguments(
    tool: str, known: Iterable[str], arguments: Mapping[str, Any], required: Iterable[str] = ()
) -> None:
    """Refuse, in one line, an argument the tool does not have, a required one missing, and NaN
    or Infinity anywhere in the arguments (JSON has neither; Python's parser, and the SDK's, read
    them anyway), and a lone surrogate escape on the wire (guard_line marks it). A string
    argument is also read as the JSON it may hold, as the SDK's pre-parse reads it."""
    names = list(known)
    if DUPLICATE_KEY in arguments:
        raise ToolError(f"{tool}: the arguments give the key {str(arguments[DUPLICATE_KEY])!r:.60} twice")
    unknown = [str(k) for k in arguments if k not in names]
    if unknown:
        raise ToolError(f"{tool}: unknown argument {unknown[0]!r:.60}; its arguments are {', '.join(names) or 'none'}")
    missing = [str(r) for r in required if r not in arguments]
    if missing:
        raise ToolError(f"{tool}: missing argument {missing[0]!r}; its arguments are {', '.join(names)}")
    for name, value in arguments.items():
        if isinstance(value, str) and value[:1] in ("[", "{"):
            with contextlib.suppress(ValueError, RecursionError):
                value = json.loads(value)
        stack: list[tuple[object, str]] = [(value, str(name))]
        while stack:
            v, where = stack.pop()
            if isinstance(v, float) and not math.isfinite(v):
                raise ToolError(f"{tool}: {_printable(where)} is {v}: JSON has no NaN or Infinity")
            if isinstance(v, str) and LONE_SURROGATE in v:
                raise ToolError(
                    f"{tool}: {_printable(where)} contains an invalid UTF-8 byte (a lone surrogate escape, "
                    f"\\ud800 to \\udfff, at offset {v.index(LONE_SURROGATE)}): Postgres text cannot store it"
                )
            if isinstance(v, dict):
                stack.extend((c, f"{where}.{k}"[:200]) for k, c in v.items())
                stack.extend((str(k), f"a key of {where}"[:200]) for k in v)
            elif isinstance(v, list):
                stack.extend((c, f"{where}[{i}]"[:200]) for i, c in enumerate(v))


def _printable(text: str) -> str:
    """`text` on one line, any unprintable character (newline, NUL, a lone surrogate) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:200])


class _Server(MCPServer):
    """MCPServer whose tool calls are checked first (`check_arguments`): the SDK drops an
    unknown argument silently and passes NaN on to the tool."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tools = {t.name: t for t in await self.list_tools()}
        arguments = arguments or {}  # "arguments": null
        if name not in tools:
            # The SDK's message quoted the name whole, over lines, its control characters raw.
            raise ToolError(f"unknown tool {name!r:.80}; the tools are {', '.join(tools)}")
        schema = tools[name].input_schema or {}
        check_arguments(name, schema.get("properties", {}), arguments, schema.get("required", ()))
        return await super().call_tool(name, arguments, context)

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        if str(uri) != THREADS_URI:
            raise ResourceNotFoundError(f"unknown resource {str(uri)!r:.120}; the resource is {THREADS_URI}")
        return await super().read_resource(uri, context)

    async def get_prompt(self, name: str, arguments: Any = None, context: Any = None) -> Any:
        # The SDK raised a ValueError, logged with its traceback at ERROR, and echoed the name whole.
        raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r:.80}: this server has no prompts")


def build_server(memory: Memory) -> MCPServer:
    """The MCP server of one scope: four tools and the threads resource."""
    from pgmem.sqlfiles import package_version

    server: MCPServer = _Server(
        name="pgmem",
        version=package_version(),
        instructions=(
            f"Long-term memory of scope {memory.scope!r} in Postgres. `remember` stores a finished turn "
            "(OpenAI-format messages) or a note; `recall` returns, for each part of your query, the "
            "stored pieces that match it; `forget` removes a turn or a thread for good."
        ),
    )

    @server.tool(
        description=(
            "Remember a sealed turn (a list of OpenAI chat messages: user, assistant with tool_calls, tool) "
            "or a plain note, in a thread of this server's scope. The turn gets the thread's next index "
            "unless turn_index is given (the same index again replaces that turn). Returns the thread, "
            "the turn index and how many pieces were stored."
        ),
        structured_output=True,
    )
    def remember(
        messages: Messages = None,
        note: Note = None,
        thread: PutThread = None,
        turn_index: PutIndex = None,
        time: Time = None,
    ) -> dict[str, Any]:
        return memory.run("remember", lambda: memory.remember(messages, note, thread, turn_index, time))

    @server.tool(
        description=(
            "Recall memory for a message. The message is split into parts (sentences, at most 8); each "
            "part is searched on its own and returns its own group of up to x hits above a cosine floor, "
            "labelled with the part's text. Groups are never merged: read each group for its part. "
            "Dates in the message ('yesterday', 'last week', 'in March') rank the turns of that time first; "
            "since / until keep only the turns between them."
        ),
        structured_output=True,
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def recall(
        query: Query,
        thread: RecallThread = None,
        x: HitsX = None,
        floor: Floor = None,
        since: Since = None,
        until: Until = None,
    ) -> dict[str, Any]:
        return memory.run("recall", lambda: memory.recall(query, thread, x, floor, since, until))

    @server.tool(
        description=(
            "Search this scope's Markdown documents (added with `pgmem docs add`). Per part of the query, "
            "up to x whole sections, each with the text that matched."
        ),
        structured_output=True,
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def search_documents(
        query: Query,
        x: HitsX = None,
        floor: Floor = None,
    ) -> dict[str, Any]:
        return memory.run("search_documents", lambda: memory.search_documents(query, x, floor))

    @server.tool(
        description=(
            "Forget a turn (thread and turn_index) or, without turn_index, a whole thread: its pieces, the "
            "facts about it and the logged recalls that returned it are deleted. Cannot be undone."
        ),
        structured_output=True,
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True),
    )
    def forget(thread: ForgetThread, turn_index: ForgetIndex = None) -> dict[str, Any]:
        return memory.run("forget", lambda: memory.forget(thread, turn_index))

    @server.resource(
        THREADS_URI,
        name="threads",
        description="The threads of this server's scope, with their turn counts and latest turn time.",
        mime_type="application/json",
    )
    def threads() -> str:
        try:
            return json.dumps(memory.run("threads", memory.threads))
        except ToolError as exc:
            # A ResourceError reaches the client with its line; anything else, as "Error reading
            # resource pgmem://threads" alone, and the SDK logged its traceback at ERROR.
            raise ResourceError(str(exc)) from None

    return server


#: Containers nested deeper than this (counted from the JSON-RPC message itself) are cut from
#: an incoming line before the SDK parses it: its JSON parser stops at about 200 levels and then
#: drops the request unanswered (the client waits until its timeout). Anything that deep inside
#: `arguments` is refused by the checks anyway (MAX_DEPTH); elsewhere (`params._meta`, a member
#: of the message) it carries nothing pgmem reads.
TRIM_DEPTH = 100
TOO_DEEP = '"pgmem: cut, nested too deeply"'
#: What an escaped lone surrogate ("\\udcff", which a JavaScript client's JSON.stringify writes for
#: a broken string) becomes before the SDK parses a line: its parser refuses the whole line and
#: the request is never answered. A Unicode noncharacter, "for internal use"; check_arguments
#: refuses it as the lone surrogate it stands for (one line, as for a lone surrogate in-process).
LONE_SURROGATE = "\ufdd0"
#: A tool call whose arguments give a key twice (the SDK's parser keeps the last, silently) gets
#: this member added, naming the key; check_arguments refuses it in one line.
DUPLICATE_KEY = "\ufdd0duplicate"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A whole JSON string (skipped in one step), a bracket, or a quote that opens no whole string.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]]|"', re.S)


def guard_line(line: str) -> str:
    """One incoming JSON-RPC line as the SDK can parse and answer it (a tool call then gets its
    one-line error): every container nested more than TRIM_DEPTH levels deep replaced by a
    string (`_cut_deep`), and every escaped lone surrogate by LONE_SURROGATE. A line that is not
    JSON passes unchanged (screen_line answers it)."""
    line = _cut_deep(line)
    if not _SURROGATE_ESCAPE.search(line) and '"arguments"' not in line:
        return line
    repeated: list[tuple[str, dict[str, Any]]] = []  # each key given twice, and its object

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                repeated.append((k, out))
            out[k] = v
        return out

    try:
        # Python's parser reads lone surrogates (the SDK's refuses the line) and reports keys
        # given twice (the SDK's keeps the last).
        message = json.loads(line, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return line
    marked = _mark_surrogates(message)
    given = message.get("params") if isinstance(message, dict) else None
    params = marked.get("params") if isinstance(marked, dict) else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    # A key of the arguments, or of params itself (its name or its arguments: a call that named
    # one tool first ran the last one named).
    twice = [k for k, obj in repeated if obj is given or (isinstance(arguments, dict) and _holds_key(arguments, k))]
    if twice and isinstance(arguments, dict):
        arguments[DUPLICATE_KEY] = twice[0]
    # Escaped surrogate pairs only (an emoji) are whole characters once parsed: nothing to mark.
    return line if marked == message and not twice else json.dumps(marked, ensure_ascii=False)


def _holds_key(value: object, key: str) -> bool:
    """Whether `key` is a key of an object anywhere in `value` (parsed JSON, shallow once cut)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if key in v:
                return True
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def _mark_surrogates(value: object) -> object:
    """`value` (parsed JSON, at most TRIM_DEPTH levels once cut) with each lone surrogate in its
    strings and keys replaced by LONE_SURROGATE."""
    if isinstance(value, str):
        return _SURROGATE.sub(LONE_SURROGATE, value)
    if isinstance(value, dict):
        return {_SURROGATE.sub(LONE_SURROGATE, k): _mark_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mark_surrogates(v) for v in value]
    return value


def _cut_deep(line: str) -> str:
    """`line` with every container nested more than TRIM_DEPTH levels deep replaced by a string.
    A scan of the text, not a parse: it does not recurse, at any depth."""
    if line.count("{") + line.count("[") <= TRIM_DEPTH:
        return line
    out: list[str] = []
    kept = 0  # line[kept:] is not yet in out
    depth = 0
    cut_at = -1  # where the container being cut began
    for m in _JSON_TOKENS.finditer(line):
        c = m.group()
        if c in ("{", "["):
            depth += 1
            if depth == TRIM_DEPTH + 1:
                cut_at = m.start()
        elif c in ("}", "]"):
            if depth == TRIM_DEPTH + 1:
                out += [line[kept:cut_at], TOO_DEEP]
                kept = m.end()
            depth -= 1
        elif c == '"':
            return line  # a string that never ends: not JSON
    if depth != 0 or not out:
        return line  # unbalanced, or nothing to cut
    out.append(line[kept:])
    return "".join(out)


#: A byte that is not UTF-8, as the stdin decoder (errors="surrogateescape") hands it over.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def screen_line(raw: str) -> tuple[str | None, JSONRPCError | None]:
    """One line read from stdin (decoded with surrogateescape) as (the line the SDK is to parse,
    or None; the error response it gets instead, or None). The SDK drops a line it cannot read
    as one JSON-RPC message without a word, and takes a request whose id is not a string or an
    integer for a notification: the client waits for an answer that never comes. JSON-RPC 2.0
    answers a line that is not JSON with -32700 and id null, and JSON that is not a request
    object with -32600 (id null unless it has a usable one); it never answers a notification
    or a response, and a blank line is no message at all. A line with a byte that is not UTF-8
    anywhere is not JSON: -32700, with the request's id when the rest of it is a request."""
    line, reply, _ = _screen(raw)
    return line, reply


def _screen(raw: str) -> tuple[str | None, JSONRPCError | None, object]:
    """screen_line, and the message the SDK will parse from the line it passes on (else None)."""
    if not raw.strip():
        return None, None, None
    bad = _ESCAPED_BYTE.search(raw)
    if bad:
        # JSON text is UTF-8 (RFC 8259, 8.1): such a line is not JSON, even when the byte is
        # inside a string. Read as U+FFFD (as the SDK's own stdin reads it), a remembered note
        # was stored altered without a word; now nothing of the line is run.
        at = len(raw[: bad.start()].encode("utf-8", "surrogateescape"))
        reason = f"the line is not UTF-8 (byte 0x{ord(bad.group()) - 0xDC00:02X} at offset {at})"
        return None, _error_reply(_request_id(raw), PARSE_ERROR, f"Parse error: {reason}"), None
    twice = _repeated_member(raw)
    if twice is not None:
        # The SDK's parser keeps the last of a member given twice, silently: a line naming ping
        # then tools/call ran the call. RFC 8259 leaves such an object's meaning to the reader.
        # A notification is never answered (nor run).
        where, key, rid, answered = twice
        if not answered:
            log.info("dropped a message without an id or a method giving %r twice", key)
            return None, None, None
        if where == "params":
            return None, _error_reply(rid, INVALID_PARAMS, f"Invalid params: {key!r} is given twice in params"), None
        return None, _error_reply(rid, INVALID_REQUEST, f"Invalid Request: {key!r} is given twice"), None
    line = guard_line(raw)
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if errors and errors[0]["type"] == "json_invalid":
            # Python's parser may read what the SDK's cannot (a number beyond its range): the
            # request's id, then, ends the client's wait for its answer.
            reason = str((errors[0].get("ctx") or {}).get("error", "not JSON"))
            return None, _error_reply(_request_id(line), PARSE_ERROR, f"Parse error: {_one_line(reason)[:150]}"), None
        return None, _invalid_reply(pydantic_core.from_json(line)), None
    if isinstance(message, JSONRPCNotification) and '"id"' in line:
        # A notification has no id member at all (JSON-RPC 2.0, 4.1); the SDK's model ignores one.
        value = pydantic_core.from_json(line)
        if isinstance(value, dict) and "id" in value:
            return None, _invalid_reply(value), None
    return line, None, message


def _repeated_member(raw: str) -> tuple[str, str, object, bool] | None:
    """("message", key, id, answered) when a member of the line's message is given twice,
    ("params", key, id, answered) when a member of its params is (but for a tool call's
    arguments, which guard_line makes a tool error), else None. id is the request's (None when
    it is the member given twice); answered is False for what JSON-RPC never answers, a message
    without an id or without a method (a notification, a response)."""
    repeated: dict[int, str] = {}  # id() of a parsed object -> its first key given twice

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                repeated.setdefault(id(out), k)
            out[k] = v
        return out

    try:
        value = json.loads(_cut_deep(raw), object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    params = value.get("params")
    if id(value) in repeated:
        where, key = "message", repeated[id(value)]
    elif isinstance(params, dict) and id(params) in repeated and not isinstance(params.get("arguments"), dict):
        where, key = "params", repeated[id(params)]
    else:
        return None
    answered = "id" in value and "method" in value
    return where, key, None if key == "id" else _request_id(raw), answered


def _request_id(raw: str) -> object:
    """The id of a line that is a request but for bytes that are not UTF-8 (as surrogateescape
    hands them over, which Python's parser keeps in strings) or what the SDK's parser cannot
    read (a number beyond its range), so that the request's error ends
    the client's wait for it (JSON-RPC 2.0 wants null only when the id cannot be read): a string
    or an integer holding no such byte. Else None: not a request, or an id not to be trusted."""
    try:
        # An integer of more than 4,300 digits is read as None (int() refuses it): no id.
        value = json.loads(_cut_deep(raw), parse_int=lambda s: int(s) if len(s) <= 4300 else None)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0" or not isinstance(value.get("method"), str):
        return None
    rid = value.get("id")
    if isinstance(rid, str) and not _ESCAPED_BYTE.search(rid):
        return rid
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


def _invalid_reply(value: object) -> JSONRPCError | None:
    """The error for JSON that is not one JSON-RPC 2.0 message as MCP takes it, or None when
    JSON-RPC gives it no answer: a notification, or a response (to a request never sent)."""
    if isinstance(value, list):
        what = "a batch (a JSON array)" if value else "an empty batch"
        return _error_reply(None, INVALID_REQUEST, f"Invalid Request: {what}; send one JSON-RPC message a line")
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), "a number")
        return _error_reply(None, INVALID_REQUEST, f"Invalid Request: a JSON-RPC message is an object, got {kind}")
    rid = value.get("id")
    usable = isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))
    method, params = value.get("method"), value.get("params")
    if "method" not in value and ("result" in value or "error" in value):
        return None
    if value.get("jsonrpc") != "2.0":
        reason = '"jsonrpc" must be "2.0"'
    elif not isinstance(method, str):
        reason = '"method" must be a string'
    elif "id" in value and not usable:
        reason = f'"id" must be a string or an integer, got {_JSON_TYPES.get(type(rid), "a number")}'
    elif isinstance(params, list):
        # By-position parameters: a JSON-RPC request, but no MCP method takes them.
        if "id" not in value:
            return None
        return _error_reply(rid, INVALID_PARAMS, 'Invalid params: "params" must be an object')
    elif params is not None and not isinstance(params, dict):
        reason = '"params" must be an object'
    else:
        reason = "not a JSON-RPC 2.0 request"
    return _error_reply(rid if usable else None, INVALID_REQUEST, f"Invalid Request: {reason}")


def _error_reply(rid: object, code: int, message: str) -> JSONRPCError:
    log.info("answered a line that is not one JSON-RPC request: %s", message)
    try:
        return JSONRPCError(jsonrpc="2.0", id=cast(Any, rid), error=ErrorData(code=code, message=message))
    except ValidationError:  # an id the SDK cannot echo (an integer beyond its range)
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))


class _Replies(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


class _GuardedLines:
    """stdin as the SDK's stdio transport reads it (`async for line in ...`), through
    screen_line: a line that is not one JSON-RPC message is answered on the transport's own
    write stream (its one writer to stdout, so frames never interleave) and not passed on.

    The lines are read by a daemon thread of this object's own: the SDK reads them in an AnyIO
    worker thread, which no cancellation reaches while it waits for a line and which the
    interpreter waits for at exit, so Ctrl-C did nothing (a second printed 'pgmem: interrupted'
    and the process still did not exit) until the next line or the end of input came."""

    def __init__(self, inner: Iterable[str]) -> None:
        self.inner = inner
        self.replies: _Replies | None = None
        self.attached = anyio.Event()
        # The requests passed on and not yet answered (nor cancelled by the client): at the
        # end of input the SDK cancels whatever is in flight, unanswered. The input ends only
        # once they are answered, as a client that closes stdin and waits for the exit (MCP's
        # stdio shutdown; `pgmem mcp < requests.jsonl`) expects.
        self.pending: set[tuple[bool, object]] = set()
        self.idle = anyio.Event()
        self.idle.set()

    def attach(self, replies: _Replies) -> None:
        self.replies = replies
        self.attached.set()

    def _started(self, message: object) -> None:
        if isinstance(message, JSONRPCRequest):
            self.pending.add(_id_key(message.id))
            self.idle = anyio.Event()
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            params = message.params or {}
            self.answered(params.get("requestId") if isinstance(params, dict) else None)

    def answered(self, rid: object) -> None:
        self.pending.discard(_id_key(rid))
        if not self.pending:
            self.idle.set()

    async def _lines(self) -> AsyncIterator[str]:
        send, receive = anyio.create_memory_object_stream[str](0)
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            try:
                try:
                    for raw in self.inner:
                        anyio.from_thread.run(send.send, raw, token=token)
                except (OSError, ValueError) as exc:  # stdin unreadable: the end of input
                    log.warning("stdin: %s", exc)
                anyio.from_thread.run_sync(send.close, token=token)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
                pass  # the server stopped reading (it is ending), or its event loop is gone
            except BaseException as exc:  # a send cancelled as the event loop shuts down
                log.debug("stdin reader stopped: %r", exc)

        threading.Thread(target=pump, name="pgmem-mcp-stdin", daemon=True).start()
        async with receive:
            async for raw in receive:
                yield raw

    async def __aiter__(self) -> AsyncIterator[str]:
        async for raw in self._lines():
            line, reply, message = _screen(raw)
            if reply is not None:
                await self.attached.wait()
                assert self.replies is not None
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await self.replies.send(SessionMessage(reply))
            if line is not None:
                self._started(message)
                yield line
        await self.idle.wait()


def _id_key(rid: object) -> tuple[bool, object]:
    return isinstance(rid, str), rid


class _Answers:
    """The transport's write stream, telling `lines` the id of each response sent."""

    def __init__(self, inner: Any, lines: _GuardedLines) -> None:
        self.inner = inner
        self.lines = lines

    async def send(self, item: SessionMessage, /) -> None:
        await self.inner.send(item)
        if isinstance(item.message, JSONRPCResponse | JSONRPCError):
            self.lines.answered(item.message.id)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _Answers:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return cast("bool | None", await self.inner.__aexit__(*exc))


def _read_lines(fd: int) -> Iterator[str]:
    """The lines of file descriptor `fd`, each with its \n (the last may have none), read with
    os.read: a thread blocked in a read of sys.stdin's buffered reader holds its lock, and at
    exit the interpreter, closing sys.stdin, aborted ("Fatal Python error: _enter_buffered_busy").
    surrogateescape: a byte that is not UTF-8 can be named in the parse error (screen_line). A
    message ends at \n only (MCP's stdio transport): a \r is JSON whitespace, and universal
    newlines split a request holding one into two lines that are not JSON."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    pending: list[str] = []
    while True:
        chunk = os.read(fd, 1 << 16)
        *whole, rest = decoder.decode(chunk, final=not chunk).split("\n")
        for part in whole:
            pending.append(part)
            yield "".join(pending) + "\n"
            pending = []
        if rest:
            pending.append(rest)
        if not chunk:
            if pending:
                yield "".join(pending)
            return


async def _run_stdio(server: MCPServer) -> None:
    guarded = _GuardedLines(_read_lines(sys.stdin.fileno()))
    async with stdio_server(stdin=cast("anyio.AsyncFile[str]", guarded)) as (read_stream, write_stream):
        guarded.attach(write_stream)
        # MCPServer.run_stdio_async, with the guarded stdin (the SDK takes no other hook for it).
        low = server._lowlevel_server
        await low.run(read_stream, cast(Any, _Answers(write_stream, guarded)), low.create_initialization_options())


def serve(url: str, scope: str, embedder: Embedder, *, default_thread: str = DEFAULT_THREAD) -> None:
    """Check the database and the model, then serve MCP on stdin/stdout until the client closes."""
    memory = Memory(url, scope, embedder, default_thread=default_thread)
    memory.check()
    try:
        anyio.run(_run_stdio, build_server(memory))
    except BaseExceptionGroup as group:
        # The client gone from stdout (crashed, killed): the SDK's writer fails with
        # BrokenPipeError inside its task group. As a plain one, the CLI ends quietly (141)
        # where a multi-line ExceptionGroup traceback went to the agent host's log.
        gone, rest = group.split(BrokenPipeError)
        if gone is not None and rest is None:
            raise BrokenPipeError("the client closed the server's stdout") from None
        raise
