"""Sealed turns as agents log them, and the sources a turn splits into.

A turn is: scope, thread id, turn index, time, and its messages in OpenAI
chat-completions format (user / assistant with `tool_calls` / `tool` with
`tool_call_id`). JSONL input holds one turn per line:

    {"scope": "demo", "thread": "t1", "turn": 4, "time": "2026-10-16T14:02:00Z",
     "messages": [{"role": "user", "content": "..."}, ...]}
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgmem.errors import InputError
from pgmem.text import check_name, describe, json_loads_once, read_lines, unstorable


@dataclass(frozen=True)
class Turn:
    scope: str
    thread: str
    index: int
    time: datetime | None
    messages: tuple[Mapping[str, Any], ...]
    #: Where the turn came from (`file:line`), for reports; not part of its identity.
    origin: str | None = field(default=None, compare=False)
    #: A small JSON object stored once per turn (e.g. {"channel": "voice"}); recall can filter on it.
    metadata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # numpy's integers are integers, as for a fact's turn and every other call's numbers
        # (pgmem.text.check_int): held as an int, which the database driver adapts. Any other
        # type stays for check_storable to refuse in one line.
        if isinstance(self.index, numbers.Integral) and not isinstance(self.index, bool | int):
            object.__setattr__(self, "index", int(self.index))

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scope, self.thread, self.index)

    @property
    def where(self) -> str:
        return self.origin or f"turn {self.key!r}"


@dataclass(frozen=True)
class Source:
    """One role-split source of a turn: the user message, an assistant step, a tool call."""

    kind: str  # user | assistant | tool | system
    name: str  # "User", "Assistant step 2", "Tool logistics_export"
    text: str
    index: int  # position among the turn's sources


def iso_time(text: str) -> datetime:
    """`text` as ISO 8601 / RFC 3339 (ValueError otherwise): Python's reading, with RFC 3339's
    lower-case "z" for UTC too (refused until rt70's finding; "Z" and a lower-case "t" were read)."""
    text = text.strip()
    return datetime.fromisoformat(text[:-1] + "Z" if text.endswith("z") else text)


def parse_time(value: object, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        t = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            t = datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, ValueError, OSError):
            raise InputError(f"{where}: time {value!r:.80} is not a valid epoch time in seconds") from None
    elif isinstance(value, str):
        try:
            t = iso_time(value)
        except ValueError:
            raise InputError(f"{where}: time {value!r:.80} is not ISO 8601") from None
    else:
        raise InputError(f"{where}: time must be an ISO 8601 string or epoch seconds, got {type(value).__name__}")
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def check_one_name_each(obj: Mapping[str, object], where: str) -> None:
    """A line names the thread as thread or thread_id and the turn as turn or turn_index (a turn's
    line, a fact's): given under both names, one was kept silently; an InputError now."""
    for a, b in (("thread", "thread_id"), ("turn", "turn_index")):
        if a in obj and b in obj:
            raise InputError(f"{where}: give {a} or {b}, not both")


def turn_from_dict(obj: object, *, scope: str | None = None, where: str = "turn", origin: str | None = None) -> Turn:
    """Validate one JSON turn. `scope` overrides (or supplies) the turn's scope."""
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: a turn must be a JSON object, got {type(obj).__name__}")
    sc = check_name(scope if scope is not None else obj.get("scope"), f"{where}: scope")
    check_one_name_each(obj, where)
    thread = check_name(obj.get("thread", obj.get("thread_id")), f"{where}: thread")
    idx = obj.get("turn", obj.get("turn_index"))
    if isinstance(idx, numbers.Integral) and not isinstance(idx, bool):
        idx = int(idx)  # numpy's integers too (a dict built in Python)
    if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0 or idx > 2**31 - 1:
        raise InputError(f"{where}: turn must be an integer between 0 and 2147483647, got {idx!r:.40}")
    messages = obj.get("messages")
    if not isinstance(messages, list):
        raise InputError(f"{where}: messages must be a list of OpenAI chat messages")
    check_messages(messages, where)
    metadata = check_metadata(obj.get("metadata"), where)
    return Turn(sc, thread, idx, parse_time(obj.get("time"), where), tuple(messages), origin, metadata)


def read_jsonl(
    path: Path | str, *, scope: str | None = None, failed: list[tuple[str, str]] | None = None
) -> Iterator[Turn]:
    """Turns from a JSONL file, one per line; errors name the line and the field.

    Without `failed`, the first bad line raises `InputError`. With it, each bad line is
    appended as `(path:line, reason)` and reading goes on, so one malformed turn never
    costs the good turns after it."""
    if not isinstance(path, str | Path):
        raise InputError(f"path must be a path, got {type(path).__name__}")
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            turn = turn_from_dict(_parse_line(line, where), scope=scope, where=where, origin=where)
        except InputError as exc:
            if failed is None:
                raise
            failed.append((where, str(exc)))
            continue
        yield turn


def _parse_line(line: str, where: str) -> object:
    try:
        return json_loads_once(line, where)
    except InputError:  # a key given twice: valid JSON, and the message names `where` already
        raise
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{where}: not valid JSON ({exc})") from None


#: Deepest nesting accepted inside a message (Python and Postgres both recurse on it); SQL's
#: pgmem._messages_problem refuses deeper too (0091): change both together.
MAX_DEPTH = 64
#: Integers from this one up (more than 4,300 digits) are refused in a stored value: json.loads
#: fails the whole read of one (Python's limit on converting long integers). SQL's
#: pgmem._unreadable_number is the same rule (0091, 0093), and refuses a fraction beyond the
#: largest double too (read back as infinity), which Python cannot hold. A smaller integer beyond
#: a double reads back exactly and is stored.
UNREADABLE_INT = 10**4300
#: What a stored value holding such a number is told, here and by SQL.
UNREADABLE_NUMBER = (
    "holds a number Python cannot read back (an integer of more than 4,300 digits, or a fraction beyond the range "
    "of a double)"
)
#: Largest metadata object, as JSON (the SQL side refuses larger ones too).
MAX_METADATA_BYTES = 4096


def check_metadata(metadata: object, where: str) -> Mapping[str, Any] | None:
    """A turn's metadata: absent, or a JSON object of at most MAX_METADATA_BYTES."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InputError(f"{where}: metadata must be a JSON object, got {type(metadata).__name__}")
    if _depth(metadata) > MAX_DEPTH:
        raise InputError(f"{where}: metadata nests more than {MAX_DEPTH} levels")
    if _huge_number(metadata):
        raise InputError(f"{where}: metadata {UNREADABLE_NUMBER}")
    bad, key = _non_string_key(metadata)
    if bad:
        raise InputError(
            f"{where}: metadata has a key that is not a string ({key!r:.40}); JSON object keys are strings"
        )
    try:
        text = json.dumps(metadata, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: metadata is not JSON: {exc}") from None
    found = _find_unstorable(metadata, "metadata")
    if found is not None:
        raise InputError(f"{where}: {found[0]} contains {describe(found[2])} at offset {found[1]}")
    size = len(text.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise InputError(f"{where}: metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES}")
    return metadata


def check_messages(messages: Sequence[object], where: str) -> None:
    """The shapes pgmem reads: every message an object with a string role; `tool_calls` a list
    of objects whose `function` is an object with a string `name`; nothing nested deeper
    than MAX_DEPTH; everything JSON (no NaN, no non-JSON types)."""
    for i, m in enumerate(messages):
        at = f"{where}: messages[{i}]"
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InputError(f"{at} must be an object with a string role")
        content = m.get("content")
        if not (content is None or isinstance(content, str | list | Mapping)):
            raise InputError(
                f"{at}.content must be a string, a list of parts, an object (stored as its JSON) or null, "
                f"got {type(content).__name__}"
            )
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise InputError(f"{at}.tool_calls must be a list of tool calls, got {type(calls).__name__}")
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                    raise InputError(
                        f"{at}.tool_calls[{j}] must be an object whose function is an object with a string name"
                    )
                args = fn.get("arguments")
                if not (args is None or isinstance(args, str | Mapping | list)):
                    raise InputError(f"{at}.tool_calls[{j}].function.arguments must be a string or JSON")
        if _depth(m) > MAX_DEPTH:
            # pgmem._messages_problem's words (the SQL rule): _depth stops counting at 65.
            raise InputError(f"{at} nests more than {MAX_DEPTH} levels deep; at most {MAX_DEPTH}")
        bad, key = _non_string_key(m)
        if bad:
            raise InputError(f"{at} has a key that is not a string ({key!r:.40}); JSON object keys are strings")
        if _huge_number(m):
            raise InputError(f"{at} {UNREADABLE_NUMBER}")
        try:
            json.dumps(m, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{at} is not JSON: {exc}") from None


def _non_string_key(value: object) -> tuple[bool, object]:
    """(True, key) for the first object key that is not a string, else (False, None); without
    recursion. JSON keys are strings: json.dumps would turn 5 into "5" silently (and fail on a
    mix of both when sorting keys, as the content hash does)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            for k, x in v.items():
                if not isinstance(k, str):
                    return True, k
                stack.append(x)
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False, None


def _huge_number(value: object) -> bool:
    """Whether an integer of UNREADABLE_INT or more (in magnitude) is inside `value` (a float
    never is: infinity is refused as no JSON); without recursion."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= UNREADABLE_INT:
            return True
    return False


def _depth(value: object) -> int:
    """Nesting depth of lists/objects, without recursion (so any depth is measured)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, Mapping):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list | tuple):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v)
        if deepest > MAX_DEPTH:
            break
    return deepest


def check_storable(turn: Turn) -> None:
    """Refuse a turn Postgres cannot store faithfully, naming the field and offset.

    Postgres text and jsonb cannot hold NUL (U+0000), and text must be valid UTF-8: an
    invalid byte read from a file (decoded as a lone surrogate) has no faithful form.
    pgmem never rewrites such text silently; the caller decides (strip NUL, or decode the
    tool output with errors="replace"). The key is checked too: a Turn built directly in
    Python has not been through turn_from_dict."""
    where = turn.where
    check_name(turn.scope, f"{where}: scope")
    check_name(turn.thread, f"{where}: thread")
    idx = turn.index
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx <= 2**31 - 1:
        raise InputError(f"{where}: turn index must be an integer between 0 and 2147483647, got {idx!r:.40}")
    if turn.time is not None and not isinstance(turn.time, datetime):
        raise InputError(f"{where}: time must be a datetime or None, got {type(turn.time).__name__}")
    if not isinstance(turn.messages, list | tuple):
        raise InputError(f"{where}: messages must be a list of chat messages, got {type(turn.messages).__name__}")
    check_messages(turn.messages, where)
    check_metadata(turn.metadata, where)
    for i, m in enumerate(turn.messages):
        found = _find_unstorable(m, f"messages[{i}]")
        if found is not None:
            field_name, offset, char = found
            # Named by `where` as every other refusal of the turn is: a file's line (`path:line`).
            raise InputError(
                f"{where}: {field_name} contains {describe(char)} at offset {offset}: Postgres text cannot store it; "
                "strip NUL characters or decode the text with errors='replace' before ingest"
            )


def _find_unstorable(value: object, where: str) -> tuple[str, int, str] | None:
    if isinstance(value, str):
        hit = unstorable(value)
        return (where, *hit) if hit else None
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


#: Content parts that carry media, not text (OpenAI's chat parts): left out of a message's text.
MEDIA_PARTS = ("image_url", "input_audio", "file", "image", "audio")


def content_text(content: object) -> str:
    """Text of a message `content`: a string, or a list of parts: each part's `text` (or an
    assistant's `refusal`), a string part as it is, a media part (MEDIA_PARTS) left out, and any
    other part as its JSON. Another value (an object) is its JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, Mapping) and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
            elif isinstance(part, str):
                texts.append(part)
            elif part is None or (isinstance(part, Mapping) and part.get("type") in MEDIA_PARTS):
                continue
            else:
                # A tool's result given as a list of records ([{"sku": "A1", "qty": 3}]), a number,
                # a nested list: stored as JSON, as a whole object is. It was dropped, and the
                # tool's source held its name and arguments only.
                texts.append(json.dumps(part, ensure_ascii=False))
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False)


#: The id split_sources gives an assistant's function_call (OpenAI's older form), with its name:
#: a "function" message of that name answers it. No tool_call_id can start with a NUL.
_LEGACY_CALL = "\x00function_call:"


def split_sources(messages: Sequence[Mapping[str, Any]]) -> list[Source]:
    """Split a turn by role: each user message, each assistant step, and each tool call
    (name, whole arguments, whole result) become separate sources, in message order."""
    sources: list[Source] = []
    # Every call in order, [tool_call_id, name, arguments, answered]. A result takes the first
    # unanswered call of its id: calls sharing an id (none given, or "" from some servers) were
    # kept in a dict by id, so each call overwrote the one before, whose name and arguments then
    # went nowhere (every result labelled with the last call's), and of such calls never answered
    # only the last was kept.
    calls: list[list[Any]] = []
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
                calls.append([str(call.get("id")), str(fn.get("name") or "tool"), _arguments(fn), False])
            # OpenAI's older form: one function_call, answered by a "function" message naming it.
            # Its name and arguments were in no source.
            fc = m.get("function_call")
            if isinstance(fc, Mapping):
                name = str(fc.get("name") or "tool")
                calls.append([_LEGACY_CALL + name, name, _arguments(fc), False])
        elif role in ("tool", "function"):
            call_id = str(m.get("tool_call_id")) if role == "tool" else _LEGACY_CALL + str(m.get("name") or "tool")
            same = [c for c in calls if c[0] == call_id]
            # The first call of the id not answered yet; a second result of an answered call is
            # labelled with it again (the last of the id, as before).
            call = next((c for c in same if not c[3]), same[-1] if same else None)
            if call is None:
                name, args = str(m.get("name") or "tool"), ""
            else:
                call[3] = True
                name, args = call[1], call[2]
            result = content_text(m.get("content"))
            add("tool", f"Tool {name}", f"{name}({args})\n{result}" if args else f"{name}\n{result}")
        elif role == "user":
            add("user", "User", content_text(m.get("content")))
        else:  # system / developer / anything else is kept, not dropped
            add("system", str(role).capitalize(), content_text(m.get("content")))
    for _, name, args, answered in calls:
        if not answered:  # a call whose result was never logged
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
