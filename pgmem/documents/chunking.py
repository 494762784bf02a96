"""Markdown chunked by headings.

A chunk is one ATX heading line and the text under it, up to the next heading of any
level (a parent does not include its subsections). Text before the first heading, if
any, is a chunk with an empty heading path. Lines inside fenced code blocks are never
headings (`# comment` in a bash block stays code). Every chunk keeps its heading path:
the headings from the top of the document down to it (Title > Section > Subsection).
Offsets are Python `str` indices, i.e. characters, which is also how Postgres counts
`char_length`/`substr` on text."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HEADING_OPEN = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
#: A line with its ending: \n, \r\n or \r (Markdown's line endings), or the last line without one.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


@dataclass(frozen=True)
class Line:
    start: int  # offset of the first character
    end: int  # offset just past the text, line break excluded
    text: str


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    heading_path: tuple[str, ...]
    body: str  # heading line included, trailing whitespace removed
    heading_end: int  # end of the heading line in `body` (0 when the chunk has no heading)

    @property
    def content(self) -> str:
        """The body without its heading line."""
        return self.body[self.heading_end :]

    @property
    def is_empty(self) -> bool:
        """True for a heading-only chunk: its content lives in the subsections below it."""
        return not self.content.strip()


def split_lines(text: str) -> list[Line]:
    """The lines as Markdown has them: ended by \n, \r\n or \r only (str.splitlines also
    breaks on a form feed, NEL or U+2028, which made a "# ..." after one a heading)."""
    out: list[Line] = []
    for m in _LINE.finditer(text):
        raw = m.group()
        stripped = raw.rstrip("\r\n")
        out.append(Line(m.start(), m.start() + len(stripped), stripped))
    return out


def fence_open(line: str) -> tuple[str, str] | None:
    """(fence marker, language) when `line` opens a fenced block. MyST's
    ```{code-block} python gives python; a directive without a language gives ''."""
    m = _FENCE.match(line)
    if m is None:
        return None
    marker, info = m.group(1), m.group(2).strip()
    if marker[0] == "`" and "`" in info:
        return None  # an inline code span, not a fence
    words = info.split()
    if words and words[0].startswith("{"):
        words = words[1:]
    lang = words[0] if words else ""
    return marker, re.sub(r"[^\w+#.-]", "", lang)[:40]


def fence_closes(line: str, marker: str) -> bool:
    s = line.strip()
    return len(line) - len(line.lstrip(" ")) <= 3 and s.startswith(marker) and set(s) == {marker[0]}


def heading_of(line: str) -> tuple[int, str] | None:
    """(level, text) of an ATX heading: up to three spaces, one to six #, then a space, a tab
    or the end; an optional closing run of # after a space or tab is not text. In linear time:
    the one regular expression this replaces backtracked through runs of spaces (a 40,000-space
    line took 22.15 s, docs/bench/markdown-linear-0040.txt)."""
    m = _HEADING_OPEN.match(line)
    if m is None:
        return None
    text = line[m.end(1) :].strip(" \t")
    closed = text.rstrip("#")
    if closed != text and (not closed or closed[-1] in " \t"):
        text = closed.rstrip(" \t")
    return len(m.group(1)), text.strip()


def chunk_markdown(text: str) -> list[Chunk]:
    """Chunks of `text` in order; a document without headings is one chunk."""
    lines = split_lines(text)
    heads: list[tuple[int, int, tuple[str, ...], int]] = []  # line no, level, path, heading end offset
    stack: list[tuple[int, str]] = []
    marker: str | None = None
    for no, line in enumerate(lines):
        if marker is not None:
            if fence_closes(line.text, marker):
                marker = None
            continue
        opened = fence_open(line.text)
        if opened is not None:
            marker = opened[0]
            continue
        h = heading_of(line.text)
        if h is None:
            continue
        level, title = h
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        heads.append((no, level, tuple(t for _, t in stack), line.end))
    chunks: list[Chunk] = []
    first = lines[heads[0][0]].start if heads else len(text)
    if text[:first].strip():
        chunks.append(Chunk(0, (), text[:first].rstrip(), 0))
    for i, (no, _level, path, head_end) in enumerate(heads):
        start = lines[no].start
        end = lines[heads[i + 1][0]].start if i + 1 < len(heads) else len(text)
        body = text[start:end].rstrip()
        chunks.append(Chunk(len(chunks), path, body, head_end - start))
    return chunks


def document_title(chunks: list[Chunk], default: str) -> str:
    """The first heading, or `default` (the document id) when there is none."""
    for c in chunks:
        if c.heading_path:
            return c.heading_path[0]
    return default
