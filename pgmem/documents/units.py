"""Derived search units of a chunk (seed 004).

From a chunk: its heading path, each prose run (consecutive prose paragraphs between
other blocks; tables, quotes and HTML blocks count as prose), each fenced code block with its
language, each list, and each transclusion (`[[target]]` or `![[target]]`, outside
code), resolved to the target document's title when that document exists. A chunk of
homogeneous prose (one prose run, nothing else) stays one unit; a heading-only chunk is
one heading unit, so no chunk is ever without a unit. Every unit carries its character
span in the chunk body, which is what a search hit marks.

`mode="chunk"` is the baseline: one unit per chunk (its whole content), the heading
path still embedded so that heading-only chunks stay findable."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pgmem.documents.chunking import CODE, FENCE_OPEN, TEXT, Chunk, fence_open, line_kinds, split_lines

UNIT_KINDS = ("heading", "prose", "code", "list", "transclusion", "chunk")
MODES = ("units", "chunk")

_LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
_TRANSCLUSION = re.compile(r"!?\[\[([^\[\]|#\n]+)(?:[#|][^\[\]\n]*)?\]\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

#: Resolves a transclusion target (a slug) to the title of its document, or None.
Resolver = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Block:
    kind: str  # prose, code or list
    start: int  # span in the chunk body
    end: int
    lang: str = ""
    inner: str = ""  # code without its fences


@dataclass(frozen=True)
class Unit:
    kind: str
    index: int  # position of the unit in its chunk
    span_start: int
    span_end: int
    label: str
    text: str  # what is embedded after the label (may be empty: a heading unit)


def heading_label(chunk: Chunk, default: str) -> str:
    """Title > Section > Subsection, or `default` (the document title) for text before any heading
    and under headings without text (a heading-only chunk would be embedded as the empty string)."""
    label = " > ".join(chunk.heading_path)
    return label if label.strip() else default


def blocks(chunk: Chunk) -> list[Block]:
    """Prose runs, fenced code blocks and lists of the chunk content, in order."""
    out: list[Block] = []
    lines = split_lines(chunk.body)
    if chunk.heading_end > 0:
        lines = lines[1:]  # the heading line itself
    # As chunk_markdown reads them (a chunk starts where nothing is open): in an HTML block no
    # line opens a fence or a list.
    kinds = line_kinds(lines)
    i = 0
    cur: tuple[str, int, int] | None = None  # kind, start, end of the open prose/list block

    def close() -> None:
        nonlocal cur
        if cur is not None:
            out.append(Block(cur[0], cur[1], cur[2]))
            cur = None

    while i < len(lines):
        line = lines[i]
        text = line.text
        opened = fence_open(text) if kinds[i] == FENCE_OPEN else None
        if opened is not None:
            close()
            lang = opened[1]
            j = i + 1
            while j < len(lines) and kinds[j] == CODE:
                j += 1
            last = lines[min(j, len(lines) - 1)]
            inner = "\n".join(ln.text for ln in lines[i + 1 : j])
            out.append(Block("code", line.start, last.end, lang, inner))
            i = j + 1
            continue
        if not text.strip():
            i += 1
            continue
        if kinds[i] == TEXT and _LIST_ITEM.match(text):
            if cur is None or cur[0] != "list":
                close()
                cur = ("list", line.start, line.end)
            else:
                cur = ("list", cur[1], line.end)
        elif cur is not None and cur[0] == "list" and text[:1] in (" ", "\t"):
            cur = ("list", cur[1], line.end)  # continuation of a list item
        elif cur is not None and cur[0] == "prose":
            cur = ("prose", cur[1], line.end)
        else:
            close()
            cur = ("prose", line.start, line.end)
        i += 1
    close()
    return out


#: How much of a link's line its transclusion unit reads on each side of the link: a long line
#: with no sentence end was the "sentence" of every link on it, and each link's unit copied it
#: (1,000 links on one 21 KB line: 15,016 pieces to embed, docs/bench/markdown-linear-0040.txt). A line ends at
#: \n or \r (a file with CR line ends was one line). At 500 no unit of the development documents
#: changed (the Ray docs and the handbook, 457 documents).
LINK_CONTEXT_CHARS = 500
#: The most of a linked document's title a transclusion unit carries.
LINK_TITLE_CHARS = 200


def _sentence_around(body: str, start: int, end: int) -> str:
    """The sentence (within its line, and at most LINK_CONTEXT_CHARS on each side of the span)
    that holds the span [start, end). Reads only that window, whatever the line's length."""
    lo_bound = max(0, start - LINK_CONTEXT_CHARS)
    lo = max(lo_bound, body.rfind("\n", lo_bound, start) + 1, body.rfind("\r", lo_bound, start) + 1)
    hi_bound = min(len(body), end + LINK_CONTEXT_CHARS)
    ends = [i for i in (body.find("\n", end, hi_bound), body.find("\r", end, hi_bound)) if i >= 0]
    hi = min(ends) if ends else hi_bound
    line = body[lo:hi]
    pos = 0
    for sent in _SENTENCE_END.split(line):
        s = line.find(sent, pos)
        e = s + len(sent)
        if s <= start - lo and end - lo <= e + 1:
            return sent.strip()
        pos = e
    return line.strip()


def transclusions(chunk: Chunk, blocks_: list[Block]) -> list[tuple[int, int, str]]:
    """(start, end, target) of every [[target]] / ![[target]] outside code."""
    found: list[tuple[int, int, str]] = []
    for b in blocks_:
        if b.kind == "code":
            continue
        for m in _TRANSCLUSION.finditer(chunk.body, b.start, b.end):
            found.append((m.start(), m.end(), m.group(1).strip()))
    return found


def slug_of(document_id: str) -> str:
    """What `[[target]]` names: the file name without directory and .md extension, lowercased."""
    name = document_id.rsplit("/", 1)[-1]
    for ext in (".markdown", ".md"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
    return name.strip().lower()


def derive_units(chunk: Chunk, *, title: str, resolve: Resolver, mode: str = "units") -> list[Unit]:
    """The search units of `chunk` (see the module docstring). `title` labels text before any heading."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    label = heading_label(chunk, title)
    head = Unit("heading", 0, 0, chunk.heading_end, label, "")
    if chunk.is_empty:
        return [head]
    if mode == "chunk":
        return [Unit("chunk", 0, 0, len(chunk.body), label, chunk.content.strip())]
    bl = blocks(chunk)
    links = transclusions(chunk, bl)
    if len(bl) == 1 and bl[0].kind == "prose" and not links:
        b = bl[0]
        return [Unit("prose", 0, b.start, b.end, label, chunk.body[b.start : b.end])]
    units: list[Unit] = [head] if chunk.heading_end > 0 else []
    for b in bl:
        if b.kind == "code":
            lab = f"{label} · {b.lang} code" if b.lang else f"{label} · code"
            units.append(Unit("code", len(units), b.start, b.end, lab, b.inner))
        else:
            units.append(Unit(b.kind, len(units), b.start, b.end, label, chunk.body[b.start : b.end]))
    for s, e, target in links:
        resolved = resolve(target)
        where = f"→ {resolved[:LINK_TITLE_CHARS]}" if resolved else "→ (no such document)"
        text = f"{_sentence_around(chunk.body, s, e)} {where}"
        units.append(Unit("transclusion", len(units), s, e, label, text))
    return units


def chunk_shape(chunk: Chunk) -> str:
    """heading-only, prose-only (homogeneous prose) or mixed: used to break results down."""
    if chunk.is_empty:
        return "heading-only"
    bl = blocks(chunk)
    if len(bl) == 1 and bl[0].kind == "prose" and not transclusions(chunk, bl):
        return "prose-only"
    return "mixed"
