"""Sealed turns as agents log them, and the sources a turn splits into.

A turn is: scope, thread id, turn index, time, and its messages in OpenAI
chat-completions format (user / assistant with `tool_calls` / `tool` with
`tool_call_id`). JSONL input holds one turn per line:

    {"scope": "demo", "thread": "t1", "turn": 4, "time": "2026-10-16T14:02:00Z",
     "messages": [{"role": "user", "content": "..."}, ...]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgmem.errors import InputError


@dataclass(frozen=True)
class Turn:
    scope: str
    thread: str
    index: int
    time: datetime | None
    messages: tuple[Mapping[str, Any], ...]

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scope, self.thread, self.index)


@dataclass(frozen=True)
class Source:
    """One role-split source of a turn: the user message, an assistant step, a tool call."""

    kind: str  # user | assistant | tool | system
    name: str  # "User", "Assistant step 2", "Tool logistics_export"
    text: str
    index: int  # position among the turn's sources


def _name(value: object, what: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: {what} must be a non-empty string, got {value!r}")
    if len(value) > 200:
        raise InputError(f"{where}: {what} is {len(value)} characters; at most 200")
    if "\x00" in value:
        raise InputError(f"{where}: {what} contains a NUL character")
    return value


def parse_time(value: object, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        t = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        t = datetime.fromtimestamp(value, tz=UTC)
    elif isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{where}: time {value!r} is not ISO 8601") from None
    else:
        raise InputError(f"{where}: time must be an ISO 8601 string or epoch seconds")
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def turn_from_dict(obj: Mapping[str, Any], *, scope: str | None = None, where: str = "turn") -> Turn:
    """Validate one JSON turn. `scope` overrides (or supplies) the turn's scope."""
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: a turn must be a JSON object")
    sc = _name(scope if scope is not None else obj.get("scope"), "scope", where)
    thread = _name(obj.get("thread", obj.get("thread_id")), "thread", where)
    idx = obj.get("turn", obj.get("turn_index"))
    if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0 or idx > 2**31 - 1:
        raise InputError(f"{where}: turn must be a non-negative integer, got {idx!r}")
    messages = obj.get("messages")
    if not isinstance(messages, list):
        raise InputError(f"{where}: messages must be a list of OpenAI chat messages")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InputError(f"{where}: messages[{i}] must be an object with a string role")
    return Turn(sc, thread, idx, parse_time(obj.get("time"), where), tuple(messages))


def read_jsonl(path: Path, *, scope: str | None = None) -> Iterator[Turn]:
    """Turns from a JSONL file, one per line; errors name the line."""
    with path.open(encoding="utf-8", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
            yield turn_from_dict(obj, scope=scope, where=where)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_storable(turn: Turn) -> None:
    """Refuse a turn Postgres cannot store faithfully, naming the field and offset.

    Postgres text and jsonb cannot hold NUL (U+0000), and text must be valid UTF-8: an
    invalid byte read from a file (decoded as a lone surrogate) has no faithful form.
    pgmem never rewrites such text silently; the caller decides (strip NUL, or decode the
    tool output with errors="replace"). The key is checked too: a Turn built directly in
    Python has not been through turn_from_dict."""
    where = f"turn {turn.key!r}"
    _name(turn.scope, "scope", where)
    _name(turn.thread, "thread", where)
    idx = turn.index
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx <= 2**31 - 1:
        raise InputError(f"{where}: turn index must be an integer between 0 and 2147483647, got {idx!r}")
    for i, m in enumerate(turn.messages):
        found = _find_unstorable(m, f"messages[{i}]")
        if found is not None:
            where, offset, char = found
            what = (
                "a NUL character (U+0000)"
                if char == "\x00"
                else f"an invalid UTF-8 byte (lone surrogate U+{ord(char):04X})"
            )
            raise InputError(
                f"{where} contains {what} at offset {offset}: Postgres text cannot store it; "
                "strip NUL characters or decode the text with errors='replace' before ingest"
            )


def _find_unstorable(value: object, where: str) -> tuple[str, int, str] | None:
    if isinstance(value, str):
        m = _UNSTORABLE.search(value)
        return (where, m.start(), m.group()) if m else None
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _find_unstorable(k, f"{where} key") or _find_unstorable(v, f"{where}.{k}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for j, v in enumerate(value):
            found = _find_unstorable(v, f"{where}[{j}]")
            if found:
                return found
    return None


def content_text(content: object) -> str:
    """Text of a message `content`: a string, or a list of parts with `text`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False)


def split_sources(messages: Sequence[Mapping[str, Any]]) -> list[Source]:
    """Split a turn by role: each user message, each assistant step, and each tool call
    (name, whole arguments, whole result) become separate sources, in message order."""
    sources: list[Source] = []
    calls: dict[str, tuple[str, str]] = {}  # tool_call_id -> (name, arguments)
    answered: set[str] = set()
    step = 0

    def add(kind: str, name: str, text: str) -> None:
        if text.strip():
            sources.append(Source(kind, name, text, len(sources)))

    for m in messages:
        role = m.get("role")
        if role == "assistant":
            step += 1
            add("assistant", f"Assistant step {step}", content_text(m.get("content")))
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                calls[str(call.get("id"))] = (str(fn.get("name") or "tool"), _arguments(fn))
        elif role == "tool":
            call_id = str(m.get("tool_call_id"))
            name, args = calls.get(call_id, (str(m.get("name") or "tool"), ""))
            answered.add(call_id)
            result = content_text(m.get("content"))
            add("tool", f"Tool {name}", f"{name}({args})\n{result}" if args else f"{name}\n{result}")
        elif role == "user":
            add("user", "User", content_text(m.get("content")))
        else:  # system / developer / anything else is kept, not dropped
            add("system", str(role).capitalize(), content_text(m.get("content")))
    for call_id, (name, args) in calls.items():
        if call_id not in answered:  # a call whose result was never logged
            add("tool", f"Tool {name}", f"{name}({args})")
    return sources


def _arguments(fn: Mapping[str, Any]) -> str:
    args = fn.get("arguments")
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def format_label(turn_index: int, source_name: str, time: datetime | None) -> str:
    """`[Turn 4 · Tool logistics_export · Oct 16, 2:02 PM]` (time in the turn's own offset)."""
    if time is None:
        return f"[Turn {turn_index} · {source_name}]"
    hour = time.hour % 12 or 12
    stamp = f"{time:%b} {time.day}, {hour}:{time:%M} {'AM' if time.hour < 12 else 'PM'}"
    return f"[Turn {turn_index} · {source_name} · {stamp}]"
