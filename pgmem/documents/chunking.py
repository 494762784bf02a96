"""Markdown chunked by headings.

A chunk is one ATX heading line and the text under it, up to the next heading of any
level (a parent does not include its subsections). Text before the first heading, if
any, is a chunk with an empty heading path. Lines inside fenced code blocks and HTML blocks
are never headings (`# comment` in a bash block stays code, `# x` in a `<div>` or `<pre>` stays
HTML): `line_kinds` finds both, as CommonMark does at the top level. Every chunk keeps its
heading path: the headings from the top of the document down to it (Title > Section > Subsection).
Offsets are Python `str` indices, i.e. characters, which is also how Postgres counts
`char_length`/`substr` on text."""

from __future__ import annotations

import re
from collections.abc import Sequence
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


#: CommonMark 0.31.2, 4.6 (HTML blocks): the tag names of start condition 1 (the block ends at
#: a line holding a closing tag of one of them, blank lines included) and of start condition 6
#: (it ends before the next blank line).
HTML_RAW_TAGS = ("pre", "script", "style", "textarea")
HTML_BLOCK_TAGS = frozenset(
    (  # noqa: SIM905 (one string reads as the spec's list)
        "address article aside base basefont blockquote body caption center col colgroup dd details dialog dir div "
        "dl dt fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head header hr html iframe "
        "legend li link main menu menuitem nav noframes ol optgroup option p param search section summary table "
        "tbody td tfoot th thead title tr track ul"
    ).split()
)
#: What ends an HTML block of types 1 to 5: a line that contains one of these (the start line
#: included); types 6 and 7 end before a blank line.
_HTML_ENDS = {1: tuple(f"</{t}>" for t in HTML_RAW_TAGS), 2: ("-->",), 3: ("?>",), 4: (">",), 5: ("]]>",)}
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TAG_NAME = _LETTERS | frozenset("0123456789-")
_ATTR_START = _LETTERS | frozenset("_:")
_ATTR_NAME = _ATTR_START | frozenset("0123456789.-")
_UNQUOTED_STOP = frozenset(" \t\n\"'=<>`")

#: What line_kinds says of each line.
TEXT, FENCE_OPEN, CODE, FENCE_CLOSE, HTML = "text", "fence-open", "code", "fence-close", "html"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _tag_name(s: str, i: int) -> int:
    """The end of the tag name (an ASCII letter, then letters, digits, hyphens) at s[i], or i."""
    if i >= len(s) or s[i] not in _LETTERS:
        return i
    j = i + 1
    while j < len(s) and s[j] in _TAG_NAME:
        j += 1
    return j


def _complete_tag(s: str) -> int:
    """The length of the complete open tag or closing tag `s` starts with (CommonMark 6.6, on
    one line), or 0. One pass, no backtracking: each character is looked at a bounded number of
    times."""
    n = len(s)
    closing = s.startswith("</")
    start = 2 if closing else 1
    i = _tag_name(s, start)
    if i == start:
        return 0
    if closing:
        while i < n and s[i] in " \t":
            i += 1
        return i + 1 if i < n and s[i] == ">" else 0
    while True:
        j = i
        while j < n and s[j] in " \t":
            j += 1
        if j < n and s[j] == ">":
            return j + 1
        if s.startswith("/>", j):
            return j + 2
        if j == i or j >= n or s[j] not in _ATTR_START:
            return 0  # an attribute needs whitespace before it
        j += 1
        while j < n and s[j] in _ATTR_NAME:
            j += 1
        k = j
        while k < n and s[k] in " \t":
            k += 1
        if k < n and s[k] == "=":  # a value: unquoted, 'single' or "double" quoted
            k += 1
            while k < n and s[k] in " \t":
                k += 1
            if k < n and s[k] in "\"'":
                e = s.find(s[k], k + 1)
                if e < 0:
                    return 0
                j = e + 1
            else:
                e = k
                while e < n and s[e] not in _UNQUOTED_STOP:
                    e += 1
                if e == k:
                    return 0
                j = e
        i = j


def html_block_start(line: str, *, in_paragraph: bool = False) -> int:
    """The type (1 to 7) of the CommonMark HTML block `line` starts, or 0: after up to three
    spaces, `<pre`, `<script`, `<style` or `<textarea` (1), `<!--` (2), `<?` (3), `<!` and a
    letter (4), `<![CDATA[` (5), `<` or `</` and a block tag name (6), a complete open or closing
    tag alone on its line (7, which cannot interrupt a paragraph). The spec's type 7 leaves out
    the four names of type 1, which only matters for their closing tags: `</pre>` alone on a line
    is type 7 here, as in cmark, commonmark.js and markdown-it, which render the documents."""
    indent = _indent(line)
    if indent > 3 or not line.startswith("<", indent):
        return 0
    s = line[indent:]
    end = _tag_name(s, 1)
    name = s[1:end].lower()
    if name in HTML_RAW_TAGS and (end == len(s) or s[end] in " \t>"):
        return 1
    if s.startswith("<!--"):
        return 2
    if s.startswith("<?"):
        return 3
    if s.startswith("<!") and _tag_name(s, 2) > 2:
        return 4
    if s.startswith("<![CDATA["):
        return 5
    if s.startswith("</"):
        end = _tag_name(s, 2)
        name = s[2:end].lower()
    if name in HTML_BLOCK_TAGS and (end == len(s) or s[end] in " \t>" or s.startswith("/>", end)):
        return 6
    if in_paragraph:
        return 0
    tag = _complete_tag(s)
    return 7 if tag and not s[tag:].strip(" \t") else 0


def _html_block_ends(line: str, kind: int) -> bool:
    """Whether `line` ends an HTML block of type 1 to 5 (it contains the type's end marker)."""
    text = line.lower() if kind == 1 else line
    return any(marker in text for marker in _HTML_ENDS[kind])


def _leaves_paragraph(line: str, in_paragraph: bool) -> bool:
    """Whether a paragraph is open after `line`, a line outside code and HTML: a type 7 HTML
    block cannot start in one. A blank line, an ATX heading, a thematic break, a setext
    underline and an indented code line leave none. (Containers are not modelled: a list item
    or a quote counts as a paragraph line, as their text mostly is.)"""
    stripped = line.strip(" \t")
    if not stripped or _HEADING_OPEN.match(line):
        return False
    if _indent(line) <= 3:
        bare = stripped.replace(" ", "").replace("\t", "")
        if len(set(bare)) == 1 and bare[0] in "-*_" and len(bare) >= 3:
            return False  # a thematic break (or a setext underline of ---)
        if in_paragraph and len(set(stripped)) == 1 and stripped[0] in "=-":
            return False  # a setext underline
    # Else a paragraph line, unless it is indented code (four columns, a tab stop being four).
    return in_paragraph or len(line[: len(line) - len(line.lstrip(" \t"))].expandtabs(4)) < 4


def line_kinds(lines: Sequence[Line]) -> list[str]:
    """What each line is, at the top level of CommonMark: TEXT, the lines of a fenced code block
    (FENCE_OPEN, CODE, FENCE_CLOSE; a fence never closed runs to the end), or HTML (a line of an
    HTML block, which no heading, fence or list is found in). Linear in the text: each line is
    read a bounded number of times."""
    kinds: list[str] = []
    marker: str | None = None  # the open fence's
    html = 0  # the open HTML block's type
    paragraph = False
    for line in lines:
        text = line.text
        if marker is not None:
            closes = fence_closes(text, marker)
            kinds.append(FENCE_CLOSE if closes else CODE)
            marker = None if closes else marker
            continue
        if html >= 6 and not text.strip(" \t"):
            html = 0  # a blank line ends types 6 and 7 and is not part of the block
        if html:
            kinds.append(HTML)
            if html <= 5 and _html_block_ends(text, html):
                html = 0
            continue
        opened = fence_open(text)
        if opened is not None:
            kinds.append(FENCE_OPEN)
            marker, paragraph = opened[0], False
            continue
        kind = html_block_start(text, in_paragraph=paragraph)
        if kind:
            kinds.append(HTML)
            html = 0 if kind <= 5 and _html_block_ends(text, kind) else kind
            paragraph = False
            continue
        kinds.append(TEXT)
        paragraph = _leaves_paragraph(text, paragraph)
    return kinds


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


#: The longest heading kept in a heading path; a longer one is cut, ending in "…" (its chunk's
#: body keeps it whole). Every chunk under a heading stores it in its path: a 200,000-character
#: title over 300 sections was 57 MB of paths. pgmem.put_document refuses a longer one.
MAX_HEADING_CHARS = 500


def chunk_markdown(text: str) -> list[Chunk]:
    """Chunks of `text` in order; a document without headings is one chunk. A heading of more
    than MAX_HEADING_CHARS characters is cut in the paths."""
    lines = split_lines(text)
    heads: list[tuple[int, int, tuple[str, ...], int]] = []  # line no, level, path, heading end offset
    stack: list[tuple[int, str]] = []
    for no, (line, kind) in enumerate(zip(lines, line_kinds(lines), strict=True)):
        if kind != TEXT:
            continue
        h = heading_of(line.text)
        if h is None:
            continue
        level, title = h
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title if len(title) <= MAX_HEADING_CHARS else title[: MAX_HEADING_CHARS - 1] + "…"))
        heads.append((no, level, tuple(t for _, t in stack), line.end))
    chunks: list[Chunk] = []
    first = lines[heads[0][0]].start if heads else len(text)
    if text[:first].strip():
        chunks.append(Chunk(0, (), text[:first].rstrip(), 0))
    for i, (no, _level, path, head_end) in enumerate(heads):
        start = lines[no].start
        end = lines[heads[i + 1][0]].start if i + 1 < len(heads) else len(text)
        body = text[start:end].rstrip()
        # A heading-only chunk's body ends before its heading line's trailing whitespace.
        chunks.append(Chunk(len(chunks), path, body, min(head_end - start, len(body))))
    return chunks


def document_title(chunks: list[Chunk], default: str) -> str:
    """The first top-level heading with text, or `default` (the document id) when there is none
    (an empty heading, "#" alone, titled links "→ (no such document)")."""
    for c in chunks:
        if c.heading_path and c.heading_path[0].strip():
            return c.heading_path[0]
    return default
