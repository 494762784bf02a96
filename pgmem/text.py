"""Checks on text before it is sent to Postgres, which stores neither NUL (U+0000) nor
invalid UTF-8. In Python an invalid byte read with errors="surrogateescape" (or passed in by
a caller) is a lone surrogate; encoding it later fails deep inside psycopg. These checks fail
first, with an `InputError` naming the field and the offset."""

from __future__ import annotations

import json
import math
import numbers
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from pgmem.errors import InputError

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(value: str) -> tuple[int, str] | None:
    """Offset and character of the first NUL or lone surrogate in `value`, if any."""
    m = _UNSTORABLE.search(value)
    return (m.start(), m.group()) if m else None


def describe(char: str) -> str:
    if char == "\x00":
        return "a NUL character (U+0000)"
    return f"an invalid UTF-8 byte (lone surrogate U+{ord(char):04X})"


def check_text(value: object, what: str) -> str:
    """`value` if it is a str Postgres can store; else an InputError naming `what`."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    found = unstorable(value)
    if found is not None:
        offset, char = found
        raise InputError(f"{what} contains {describe(char)} at offset {offset}: Postgres text cannot store it")
    return value


def check_number(value: object, what: str, lo: float, hi: float) -> float:
    """`value` as a float if it is a real number (numpy's included) in [lo, hi]; else an
    InputError naming `what` (a bool, a string, None or NaN is no number here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{what} must be a number between {lo:g} and {hi:g}, got {type(value).__name__}")
    v = as_float(value)
    if not lo <= v <= hi:
        raise InputError(f"{what} must be between {lo:g} and {hi:g}, got {v:g}")
    return v


def as_float(value: float | numbers.Real) -> float:
    """A real number as a float; one too large for a float (an integer of 309 digits or more)
    is infinite, so a range check refuses it instead of float() raising OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf


def check_int(value: object, what: str, lo: int, hi: int) -> int:
    """`value` as an int if it is an integer (numpy's included) in [lo, hi]; else an InputError
    naming `what` (a bool or a float such as 2.5 is no integer here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{what} must be an integer from {lo:,} to {hi:,}, got {type(value).__name__}")
    v = int(value)
    if not lo <= v <= hi:
        raise InputError(f"{what} must be an integer from {lo:,} to {hi:,}, got {v:,}")
    return v


def check_bool(value: object, what: str) -> bool:
    """`value` if it is True or False; else an InputError naming `what`: any truthy value (the
    string "no" too) would be taken for True, and an int reached SQL as no boolean."""
    if not isinstance(value, bool):
        raise InputError(f"{what} must be True or False, got {type(value).__name__}")
    return value


def check_name(value: object, what: str, *, max_chars: int = 200) -> str:
    """A scope, thread or document name: a non-empty storable string of at most `max_chars`."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > max_chars:
        raise InputError(f"{what} is {len(value)} characters; at most {max_chars}")
    return check_text(value, what)


def json_loads_once(text: str, what: str, *, allow_nan: bool = True) -> object:
    """`json.loads(text)`, refusing an object that gives a key twice (json.loads keeps the last
    silently), and with `allow_nan` false NaN and Infinity: an InputError naming `what`. Other
    errors are json.loads' own (ValueError, RecursionError)."""

    def no_constant(name: str) -> object:
        raise InputError(f"{what} holds {name}, which JSON does not allow")

    def no_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for k, v in pairs:
            if k in seen:
                raise InputError(f"{what} gives the key {k!r:.40} twice")
            seen[k] = v
        return seen

    if allow_nan:
        return json.loads(text, object_pairs_hook=no_repeats)
    return json.loads(text, object_pairs_hook=no_repeats, parse_constant=no_constant)


#: How deep a JSON value given as an argument may nest (a filter is a few levels at most).
MAX_JSON_DEPTH = 32


def check_json_text(value: object, what: str, _depth: int = 0) -> None:
    """Every key and string inside a JSON-like `value` is text Postgres can store (no NUL, no
    lone surrogate: jsonb refuses them with a bare 22P05) and every number is finite (JSON has no
    infinity: `1e400` reads as one); else an InputError naming `what` and the path inside it, e.g.
    `metadata_filter["tags"][2]`."""
    if _depth > MAX_JSON_DEPTH:
        raise InputError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, what)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{what} is {value}, a number JSON cannot carry")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str):
                check_text(k, f"a key of {what}")
            check_json_text(v, f"{what}[{k!r:.40}]", _depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_json_text(v, f"{what}[{i}]", _depth + 1)


def read_lines(path: Path | str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file given by a person (a JSONL file of turns or
    facts), a leading byte order mark dropped: an invalid byte is kept as a lone surrogate, for
    `check_text` to name. A path that is not a regular file (a folder; a FIFO, which would wait
    for a writer; a device) or cannot be read (no such file, no permission, an I/O error) is an
    InputError of one line naming it. Lines end at LF only (CR LF too: JSON reads the CR as
    space), as read_json_lines splits them: a lone CR is JSON whitespace inside a line, and split
    there a valid line was read as two broken ones, numbered apart from the file's own lines."""
    try:
        _regular_file(path)
        # utf-8-sig: a byte order mark (as some Windows editors write) is no text; `docs add`
        # reads Markdown the same way.
        with Path(path).open(encoding="utf-8-sig", errors="surrogateescape", newline="\n") as f:
            yield from enumerate(f, 1)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _regular_file(path: Path | str) -> None:
    """An InputError unless `path` is a regular file (a folder; a FIFO, which would wait for a
    writer; a device); OSError when it cannot be looked at (the caller's one line names it)."""
    mode = Path(path).stat().st_mode
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a file"
        raise InputError(f"cannot read {path}: not a regular file ({kind})")


def read_text(path: Path | str) -> str:
    """The whole text of a UTF-8 file given by a person (a data set, a list of questions), a
    leading byte order mark dropped. A path that is no regular file or cannot be read, or bytes
    that are not UTF-8, are an InputError of one line naming the path (and the byte's offset)."""
    try:
        _regular_file(path)
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path} is not UTF-8 text: byte {exc.start} ({exc.object[exc.start : exc.start + 1]!r}) {exc.reason}"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_json(text: str, where: str) -> object:
    """`text` as JSON (json.loads), its failures an InputError of one line naming `where`: the
    parser's message with its line and column, nesting too deep for Python's parser (a
    RecursionError), an integer of more than 4,300 digits (a ValueError)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON ({' '.join(str(exc).split())[:200]})") from None


def read_json_file(path: Path | str) -> object:
    """The JSON value of a UTF-8 file given by a person (`read_text`, then `read_json`)."""
    return read_json(read_text(path), str(path))


def read_json_lines(path: Path | str) -> Iterator[tuple[str, object]]:
    """(`path:line`, value) of each non-blank line of a JSON Lines file (`read_text`, then
    `read_json` per line, its error naming the line). Lines end at LF only (CR LF too: JSON
    reads the CR as space): str.splitlines also ends one at U+2028 or U+0085, which a JSON
    string may hold as they are."""
    for lineno, line in enumerate(read_text(path).split("\n"), 1):
        if line.strip():
            where = f"{path}:{lineno}"
            yield where, read_json(line, where)
