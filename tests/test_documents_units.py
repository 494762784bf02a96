"""Chunking and derived search units, without a database."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgmem.documents.chunking import chunk_markdown, document_title
from pgmem.documents.store import Document, prepare
from pgmem.documents.units import chunk_shape, derive_units, slug_of
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError

DOC = """# Deploying a Service

## Deploying

### To staging

Staging deploys need no approval.

```bash
# deploy.sh expects REGISTRY_TOKEN to be exported
./deploy.sh --env staging
```

- post in #deploys
- watch the dashboard

If it fails, follow [[rollback-procedure]] and ![[missing-page]].

## Verifying

Check the health endpoint on two pods. Then watch the dashboard for thirty minutes.
"""


def _titles(target: str) -> str | None:
    return {"rollback-procedure": "Rolling Back a Deploy"}.get(target)


def test_chunks_keep_heading_paths_and_fenced_hashes_are_not_headings() -> None:
    chunks = chunk_markdown(DOC)
    assert [c.heading_path for c in chunks] == [
        ("Deploying a Service",),
        ("Deploying a Service", "Deploying"),
        ("Deploying a Service", "Deploying", "To staging"),
        ("Deploying a Service", "Verifying"),
    ]
    assert chunks[0].is_empty and chunks[1].is_empty and not chunks[2].is_empty
    assert "# deploy.sh expects" in chunks[2].body
    assert document_title(chunks, "x.md") == "Deploying a Service"
    assert chunk_markdown("no heading at all\n")[0].heading_path == ()


def test_mixed_chunk_yields_one_unit_per_part_with_spans() -> None:
    chunk = chunk_markdown(DOC)[2]
    units = derive_units(chunk, title="t", resolve=_titles)
    kinds = [u.kind for u in units]
    assert kinds == ["heading", "prose", "code", "list", "prose", "transclusion", "transclusion"]
    by_kind = {u.kind: u for u in units}
    assert chunk.body[by_kind["heading"].span_start : by_kind["heading"].span_end] == "### To staging"
    code = by_kind["code"]
    assert chunk.body[code.span_start : code.span_end].startswith("```bash")
    assert code.label.endswith("bash code") and "REGISTRY_TOKEN" in code.text
    links = [u for u in units if u.kind == "transclusion"]
    assert [chunk.body[u.span_start : u.span_end] for u in links] == ["[[rollback-procedure]]", "![[missing-page]]"]
    assert links[0].text.endswith("→ Rolling Back a Deploy")
    assert links[1].text.endswith("→ (no such document)")
    assert all(u.label.startswith("Deploying a Service > Deploying > To staging") for u in units)


def test_homogeneous_prose_stays_one_unit_and_heading_only_embeds_its_path() -> None:
    chunks = chunk_markdown(DOC)
    prose = derive_units(chunks[3], title="t", resolve=_titles)
    assert [u.kind for u in prose] == ["prose"] and chunk_shape(chunks[3]) == "prose-only"
    empty = derive_units(chunks[1], title="t", resolve=_titles)
    assert [(u.kind, u.label, u.text) for u in empty] == [("heading", "Deploying a Service > Deploying", "")]
    assert chunk_shape(chunks[2]) == "mixed"
    base = derive_units(chunks[2], title="t", resolve=_titles, mode="chunk")
    assert [u.kind for u in base] == ["chunk"] and (base[0].span_start, base[0].span_end) == (0, len(chunks[2].body))


def test_unit_over_budget_is_packed_into_pieces_sharing_its_span(embedder: Embedder) -> None:
    code = "\n".join(f"step_{i} = run('command number {i} with some arguments')" for i in range(120))
    doc = Document("big.md", f"# Big\n\n## Script\n\nRun it.\n\n```python\n{code}\n```\n")
    prep = prepare(doc, {}, embedder, max_bytes=1200)
    code_pieces = [p for p in prep.pieces if p.unit.kind == "code"]
    assert len(code_pieces) > 3
    assert len({(p.unit.span_start, p.unit.span_end) for p in code_pieces}) == 1
    assert all(len(p.embed_text.encode()) <= 1200 for p in code_pieces)
    assert max(embedder.count_tokens([p.embed_text for p in code_pieces])) <= embedder.max_input_tokens
    joined = " ".join(" ".join(p.body.split()) for p in code_pieces)
    assert "step_119" in joined and "step_0 " in joined  # nothing dropped


def test_an_empty_heading_is_no_title_and_labels_no_unit_empty() -> None:
    """A heading with no text ("#" alone on a line) was the document's title, an empty one: a
    link to the document then read "→ (no such document)", and a heading-only chunk under it
    was embedded as the empty string (which an OpenAI endpoint refuses, failing the batch).
    Such a document is titled by its id, as one without headings is, and labels its units so."""
    prep = prepare(Document("notes/blank.md", "#\n\nText under an empty heading.\n\n#\n"), {}, None)
    assert prep.title == "notes/blank.md"
    assert all(p.embed_text.strip() for p in prep.pieces), [p.embed_text for p in prep.pieces]
    assert document_title(chunk_markdown("# \n\nx\n\n# Real\n"), "d.md") == "Real"
    titles = {slug_of("notes/blank.md"): document_title(chunk_markdown("#\n\nText."), "notes/blank.md")}
    link = prepare(Document("b.md", "# B\n\nSee ![[blank]] first."), titles, None)
    assert [p.body for p in link.pieces if p.unit.kind == "transclusion"] == ["See ![[blank]] first. → notes/blank.md"]


def test_slugs_and_hash_follow_the_resolved_targets() -> None:
    assert slug_of("guides/Rollback-Procedure.md") == "rollback-procedure"
    doc = Document("d.md", "# D\n\nsee [[e]]\n\n```sql\nselect 1;\n```\n")
    unresolved = prepare(doc, {}, None)
    resolved = prepare(doc, {"e": "E page"}, None)
    assert unresolved.content_hash != resolved.content_hash
    assert prepare(doc, {"e": "E page"}, None).content_hash == resolved.content_hash


def test_markdown_that_used_to_cost_quadratic_time_or_units() -> None:
    """Three inputs whose cost grew with the square of their size: a link unit held its whole
    line when the line had no sentence end (1,000 links on one line: 15,016 pieces, now about one a
    link); an ATX heading followed by a long run of spaces (the heading pattern backtracked);
    and lines split on form feeds, NEL and U+2028, which made a "# ..." after one a heading
    (Markdown ends lines at \\n, \\r\\n and \\r only, and a file with CR line ends has its headings)."""
    from pgmem.documents.chunking import chunk_markdown, heading_of, split_lines
    from pgmem.documents.store import Document, prepare
    from pgmem.documents.units import LINK_CONTEXT_CHARS
    from tests.security_helpers import HashEmbedder

    text = "# Links\n\n" + " ".join(f"word{i} [[t{i}]]" for i in range(1000)) + "\n"
    pieces = prepare(Document("links.md", text), {}, HashEmbedder()).pieces
    links = [p for p in pieces if p.unit.kind == "transclusion"]
    assert len(links) == 1000 and len(pieces) < 1100
    assert max(len(p.body) for p in links) <= 2 * LINK_CONTEXT_CHARS + 40
    cr = chunk_markdown("# A\r\rsee [[b]] here\r# B\rmore\r")
    assert [c.heading_path for c in cr] == [("A",), ("B",)]
    assert heading_of("# a" + " " * 40_000 + "b") == (1, "a" + " " * 40_000 + "b")
    cases: dict[str, tuple[int, str] | None] = {
        "# foo #": (1, "foo"),
        "# foo#": (1, "foo#"),
        "#": (1, ""),
        "# #": (1, ""),
        "#5 bolt": None,
        "   ### bar ###  ": (3, "bar"),
        "####### seven": None,
        "#\tx": (1, "x"),
        "## a ## b": (2, "a ## b"),
    }
    assert {line: heading_of(line) for line in cases} == cases
    assert [line.text for line in split_lines("a\x0c# b\r\nc\u2028d\re")] == ["a\x0c# b", "c\u2028d", "e"]
    assert [c.heading_path for c in chunk_markdown("prose\x0c# fake\n\nmore\u2028# fake\n# Real\n")] == [(), ("Real",)]


def test_read_documents_strips_a_byte_order_mark_and_reports_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    from pgmem.documents.chunking import chunk_markdown, document_title
    from pgmem.documents.store import read_documents

    (tmp_path / "bom.md").write_bytes(b"\xef\xbb\xbf# Runbook\n\nSteps.\n\n## Deploy\n\nRun it.\n")
    (tmp_path / "latin1.md").write_bytes("# Caf\xe9\n".encode("latin-1"))
    failed: list[tuple[str, str]] = []
    docs = read_documents([tmp_path], failed=failed)
    assert [d.id for d in docs] == ["bom.md"] and document_title(chunk_markdown(docs[0].text), "bom.md") == "Runbook"
    assert [(i, "not UTF-8" in e) for i, e in failed] == [("latin1.md", True)]
    with pytest.raises(InputError, match=r"latin1\.md is not UTF-8"):
        read_documents([tmp_path])


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc/self/mem")
def test_read_documents_reports_a_file_it_cannot_read(tmp_path: Path) -> None:
    """A file that is there but cannot be read (no permission, gone since it was listed, an I/O
    error: /proc/self/mem, which fails with EIO even for root, stands for them) raised OSError
    through read_documents, and `pgmem docs add` ended in a traceback with nothing stored. It is
    an InputError naming the file; with `failed`, reported as one document and the others read
    (as read_facts reports a file it cannot read)."""
    from pgmem.documents.store import read_documents

    (tmp_path / "good.md").write_text("# Good\n\nReadable.\n", encoding="utf-8")
    (tmp_path / "bad.md").symlink_to("/proc/self/mem")
    failed: list[tuple[str, str]] = []
    docs = read_documents([tmp_path], failed=failed)
    assert [d.id for d in docs] == ["good.md"]
    assert [(i, "cannot read" in e) for i, e in failed] == [("bad.md", True)]
    with pytest.raises(InputError, match=r"cannot read .*bad\.md"):
        read_documents([tmp_path])


#: Markdown with `#` lines inside HTML blocks (CommonMark 0.31.2, 4.6), and the heading paths
#: its chunks get: no line of an HTML block is a heading, and the block ends where the spec
#: says (types 1 to 5 at the line holding their end marker, blank lines included; 6 and 7
#: before the next blank line).
HTML_BLOCKS: list[tuple[str, list[tuple[str, ...]]]] = [
    # 6: a block tag name; ends before a blank line.
    ("# A\n\n<div>\n# not a heading\n</div>\n\n# B\n", [("A",), ("B",)]),
    ("# A\ntext\n<DIV class='note'>\n## not\n\n## B\n", [("A",), ("A", "B")]),  # interrupts a paragraph
    ("<details>\n<summary>Show</summary>\n# not\n</details>\n\n# B\n", [(), ("B",)]),
    ("</table>\n# not\n\n# B\n", [(), ("B",)]),
    # 1: pre, script, style, textarea (any case); blank lines do not end it, any of the four
    # closing tags does, and the line holding it is the block's last.
    ("# A\n\n<pre>\n# not\n\n# still not\n</pre>\n# B\n", [("A",), ("B",)]),
    ("<script type='module'>\n\n# not\n</SCRIPT>\n# B\n", [(), ("B",)]),
    ("<style>\n# not\n\n</pre>\n# B\n", [(), ("B",)]),
    ("<textarea>\n# not\n</textarea># not either\n# B\n", [(), ("B",)]),
    ("<pre>x</pre>\n# B\n", [(), ("B",)]),  # ends on its first line
    ("<prefix>\n# not: type 7, up to the blank line\n\n# B\n", [(), ("B",)]),
    # 2 to 5: comment, processing instruction, declaration, CDATA.
    ("# A\n<!-- a comment\n\n# not\n-->\n# B\n", [("A",), ("B",)]),
    ("<!-- one line -->\n# B\n", [(), ("B",)]),
    ("<?php\n# not\n?>\n# B\n", [(), ("B",)]),
    ("<!DOCTYPE html>\n# B\n", [(), ("B",)]),
    ("<![CDATA[\n# not\n]]>\n# B\n", [(), ("B",)]),
    ("# A\n<!-- never closed\n\n# not\n# nor this\n", [("A",)]),
    # 7: a complete tag alone on its line, and not after paragraph text.
    ('# A\n\n<span class="x" data-y>\n# not\n\n# B\n', [("A",), ("B",)]),
    ("# A\n<img src='a.png' />\n# not\n", [("A",)]),
    ("# A\ntext\n<span>\n# B\n", [("A",), ("B",)]),  # it cannot interrupt a paragraph
    ("# A\n\n<span>text\n# B\n", [("A",), ("B",)]),  # not alone on its line
    ("# A\n\n<a href='x'\n# B\n", [("A",), ("B",)]),  # not complete
    ("# A\n\n<https://example.com>\n# B\n", [("A",), ("B",)]),  # an autolink
    # Not HTML blocks: indented four spaces, or inside a fence; and a fence inside an HTML
    # block is HTML (it used to open a fence that swallowed the rest of the document).
    ("# A\n\n    <div>\n# B\n", [("A",), ("B",)]),
    ("# A\n```\n<!--\n```\n# B\n", [("A",), ("B",)]),
    ("# A\n<div>\n```\n</div>\n\n# B\n", [("A",), ("B",)]),
]


@pytest.mark.parametrize(("text", "paths"), HTML_BLOCKS)
def test_lines_inside_html_blocks_are_never_headings(text: str, paths: list[tuple[str, ...]]) -> None:
    assert [c.heading_path for c in chunk_markdown(text)] == paths


def test_an_html_block_is_prose_in_units_and_opens_no_list_or_code() -> None:
    chunk = chunk_markdown("# A\n\n<div>\n- a\n- b\n```\n</div>\n\n- c\n")[0]
    units = derive_units(chunk, title="t", resolve=_titles)
    assert [(u.kind, chunk.body[u.span_start : u.span_end]) for u in units] == [
        ("heading", "# A"),
        ("prose", "<div>\n- a\n- b\n```\n</div>"),
        ("list", "- c"),
    ]


def test_html_blocks_are_found_in_linear_time() -> None:
    """Tags that a backtracking pattern would take the square of their length for: every
    attribute and every run of spaces is read once."""
    from pgmem.documents.chunking import html_block_start

    many = "<a" + " b='c'" * 50_000 + ">"
    assert html_block_start(many) == 7 and html_block_start(many + " x") == 0
    assert html_block_start("<a" + " " * 40_000 + "b" + " " * 40_000 + "/>" + " " * 40_000) == 7
    assert html_block_start("<a b='" + "x" * 100_000) == 0  # a quote never closed
    assert html_block_start("<a" + " b" * 50_000 + " =") == 0
    text = "# A\n\n" + "<span>\n" * 20_000 + "\n# B\n" + "<!--" * 20_000 + "\n# C\n"
    assert [c.heading_path for c in chunk_markdown(text)] == [("A",), ("B",)]
