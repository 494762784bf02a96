"""Chunking and derived search units, without a database."""

from __future__ import annotations

from pgmem.documents.chunking import chunk_markdown, document_title
from pgmem.documents.store import Document, prepare
from pgmem.documents.units import chunk_shape, derive_units, slug_of
from pgmem.embedders.base import Embedder

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


def test_slugs_and_hash_follow_the_resolved_targets() -> None:
    assert slug_of("guides/Rollback-Procedure.md") == "rollback-procedure"
    doc = Document("d.md", "# D\n\nsee [[e]]\n\n```sql\nselect 1;\n```\n")
    unresolved = prepare(doc, {}, None)
    resolved = prepare(doc, {"e": "E page"}, None)
    assert unresolved.content_hash != resolved.content_hash
    assert prepare(doc, {"e": "E page"}, None).content_hash == resolved.content_hash
