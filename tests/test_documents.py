"""Documents on the real database: visibility, code hits, versioning, exclusion from memory recall."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import psycopg
import pytest

from pgmem.cli.docs import PLAIN_OFF, PLAIN_ON, highlight
from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, remove_document, search_documents
from pgmem.embedders.base import Embedder
from pgmem.ingest import ingest_turns
from pgmem.recall import recall
from pgmem.turns import Turn
from tests.helpers import CountingEmbedder

Conn = psycopg.Connection[tuple[object, ...]]

GARDEN = """# Garden Care

## Watering tomatoes

Tomatoes want deep watering twice a week, at the base of the plant, early in the morning.

## Pests

### Aphids on roses

Spray aphids off the roses with a strong jet of water, or release ladybirds in the evening.

### Slugs in lettuce beds

Set beer traps between the lettuce rows and collect slugs by torchlight after rain.
"""

KITCHEN = """# Kitchen Notes

## Baking sourdough bread

Feed the starter the night before. Bake at 250 degrees with steam for the first twenty minutes.

## Knife sharpening

Hold the blade at fifteen degrees on the whetstone and alternate sides every ten strokes.

```python
def sharpen(angle_degrees: float = 15.0, strokes_per_side: int = 10) -> None:
    whetstone.grind(angle=angle_degrees, strokes=strokes_per_side)
```

Keep the stone wet; see [[garden]] for where the hose is.
"""


def _docs() -> list[Document]:
    return [Document("garden.md", GARDEN), Document("kitchen.md", KITCHEN)]


def _chunks(conn: Conn, scope: str) -> list[tuple[int, str, list[str]]]:
    with scoped(conn, scope):
        rows = conn.execute(
            "SELECT chunk_id, document_id, heading_path FROM pgmem.chunk WHERE scope_id = %s ORDER BY chunk_id",
            (scope,),
        ).fetchall()
    return [(int(str(r[0])), str(r[1]), list(r[2])) for r in rows]  # type: ignore[call-overload]


@pytest.mark.parametrize("mode", ["units", "chunk"])
def test_every_chunk_is_found_by_its_own_title(conn: Conn, embedder: Embedder, mode: str) -> None:
    report = add_documents(conn, "s", _docs(), embedder, mode=mode)
    assert report.inserted == 2 and not report.failed
    chunks = _chunks(conn, "s")
    # Heading-only chunks (Garden Care, Pests, Kitchen Notes) are among them.
    assert len(chunks) == 8
    for chunk_id, _doc, path in chunks:
        result = search_documents(conn, "s", path[-1], embedder, x=5, floor=-1.0)
        found = [h.chunk_id for g in result.groups for h in g.hits]
        assert chunk_id in found, f"{path} is invisible to a query equal to its title"
    with scoped(conn, "s"):
        orphans = conn.execute(
            """SELECT count(*) FROM pgmem.chunk c WHERE NOT EXISTS
                 (SELECT 1 FROM pgmem.piece p WHERE p.scope_id = c.scope_id AND p.chunk_id = c.chunk_id)"""
        ).fetchone()
    assert orphans == (0,)


def test_code_hit_returns_the_whole_chunk_with_the_code_span(conn: Conn, embedder: Embedder) -> None:
    add_documents(conn, "s", _docs(), embedder)
    result = search_documents(conn, "s", "sharpen(angle_degrees, strokes_per_side) whetstone.grind", embedder, x=3)
    top = result.groups[0].hits[0]
    assert top.unit_kind == "code"
    assert top.heading_path == ["Kitchen Notes", "Knife sharpening"]
    assert top.chunk_body.startswith("## Knife sharpening") and "Keep the stone wet" in top.chunk_body
    assert top.matched.startswith("```python") and top.matched.rstrip().endswith("```")
    assert "whetstone.grind" in top.matched
    marked = highlight(top, ansi=False)
    assert f"{PLAIN_ON}```python" in marked and f"```{PLAIN_OFF}" in marked
    # Each chunk at most once per part, even when several of its units match.
    for g in result.groups:
        assert len({h.chunk_id for h in g.hits}) == len(g.hits)


def test_transclusion_resolves_to_the_target_title(conn: Conn, embedder: Embedder) -> None:
    add_documents(conn, "s", _docs(), embedder)
    with scoped(conn, "s"):
        row = conn.execute(
            "SELECT body, span_start, span_end FROM pgmem.piece WHERE scope_id = 's' AND unit_kind = 'transclusion'"
        ).fetchone()
    assert row is not None and str(row[0]).endswith("→ Garden Care")


def test_a_document_given_twice_in_a_batch_is_stored_once_and_resolves_as_stored(
    conn: Conn, embedder: Embedder
) -> None:
    """The first of two documents with one id is stored and the second reported; a link to that
    id must resolve to the stored document's title. The refused copy's title was the one links
    resolved to (the last of the batch won), so a unit said "→ Garden Plans" of a document whose
    stored title is "Garden Care"."""
    batch = [
        Document("garden.md", GARDEN),
        Document("kitchen.md", KITCHEN),
        Document("garden.md", "# Garden Plans\n\nx"),
    ]
    report = add_documents(conn, "s", batch, embedder)
    assert (report.inserted, report.failed) == (2, [("garden.md", "document garden.md is given twice")])
    with scoped(conn, "s"):
        title = conn.execute("SELECT title FROM pgmem.document WHERE document_id = 'garden.md'").fetchone()
        link = conn.execute("SELECT body FROM pgmem.piece WHERE unit_kind = 'transclusion'").fetchone()
    assert title == ("Garden Care",)
    assert link is not None and str(link[0]).endswith("→ Garden Care"), link


def test_an_empty_copy_and_a_copy_with_text_of_one_id_the_first_decides(conn: Conn, embedder: Embedder) -> None:
    """Of an empty copy and a copy with text of one id (two folders added at once), the text was
    stored whichever came first, and the empty one still reported "kept": the stored version
    replaced and said to be kept. The first copy decides, as of two copies with text: an empty
    first keeps the stored document (and its title for links), the second is "given twice"."""
    add_documents(conn, "e2", [Document("garden.md", GARDEN)], embedder)
    report = add_documents(conn, "e2", [Document("garden.md", " \n"), Document("garden.md", "# Plans\n\nx")], embedder)
    assert (report.replaced, report.empty, report.empty_kept) == (0, 1, ["garden.md"])
    assert report.failed == [("garden.md", "document garden.md is given twice")]
    with scoped(conn, "e2"):
        assert conn.execute("SELECT title FROM pgmem.document").fetchall() == [("Garden Care",)]
    report = add_documents(conn, "e2", [Document("garden.md", "# Plans\n\nx"), Document("garden.md", "")], embedder)
    assert (report.replaced, report.empty, report.empty_kept) == (1, 0, [])
    assert report.failed == [("garden.md", "document garden.md is given twice")]


def test_re_adding_unchanged_writes_nothing_and_a_change_replaces_in_one_go(conn: Conn, embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    add_documents(conn, "s", _docs(), counting)
    with scoped(conn, "s"):
        before = conn.execute("SELECT piece_id, xmin::text FROM pgmem.piece ORDER BY piece_id").fetchall()
        doc_xmin = conn.execute("SELECT document_id, xmin::text FROM pgmem.document ORDER BY 1").fetchall()
    calls = counting.calls
    again = add_documents(conn, "s", _docs(), counting)
    assert (again.inserted, again.replaced, again.unchanged, again.units) == (0, 0, 2, 0)
    assert counting.calls == calls, "an unchanged document must not be embedded again"
    with scoped(conn, "s"):
        assert conn.execute("SELECT piece_id, xmin::text FROM pgmem.piece ORDER BY piece_id").fetchall() == before
        assert conn.execute("SELECT document_id, xmin::text FROM pgmem.document ORDER BY 1").fetchall() == doc_xmin

    old_kitchen = {c for c, d, _ in _chunks(conn, "s") if d == "kitchen.md"}
    changed = KITCHEN.replace("fifteen degrees", "twenty degrees")
    rep = add_documents(conn, "s", [Document("kitchen.md", changed)], embedder)
    assert (rep.replaced, rep.inserted) == (1, 0)
    new_kitchen = {c for c, d, _ in _chunks(conn, "s") if d == "kitchen.md"}
    assert new_kitchen and not (old_kitchen & new_kitchen)
    with scoped(conn, "s"):
        stale = conn.execute(
            "SELECT count(*) FROM pgmem.piece WHERE chunk_id = ANY(%s)", (list(old_kitchen),)
        ).fetchone()
    assert stale == (0,)
    assert remove_document(conn, "s", "kitchen.md") is True
    assert remove_document(conn, "s", "kitchen.md") is False
    assert {d for _, d, _ in _chunks(conn, "s")} == {"garden.md"}


def test_memory_recall_never_returns_a_document_row(conn: Conn, embedder: Embedder) -> None:
    ingest_turns(
        conn, [Turn("s", "t", 0, None, ({"role": "user", "content": "I adopted a cat named Pixel."},))], embedder
    )
    add_documents(conn, "s", _docs(), embedder)
    # Queries equal to document text: the document units would be perfect matches.
    for message in ("Spray aphids off the roses with a strong jet of water", "Knife sharpening", "Garden Care"):
        result = recall(conn, "s", message, embedder, x=10, floor=-1.0)
        ids = [h.piece_id for g in result.groups for h in g.hits]
        assert ids, "the memory piece itself should still come back"
        with scoped(conn, "s"):
            kinds = conn.execute("SELECT DISTINCT kind FROM pgmem.piece WHERE piece_id = ANY(%s)", (ids,)).fetchall()
        assert kinds == [("memory",)]


def test_put_document_refuses_a_chunk_without_unit(conn: Conn, embedder: Embedder) -> None:
    vec = embedder.embed(["x"])[0]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no search unit"), scoped(conn, "s"):
        conn.execute(
            """SELECT pgmem.put_document('s', 'd.md', 'D', 'b', '\\x00', 'm', '[["D"], ["D", "E"]]'::jsonb,
                   ARRAY['# D', '## E'], ARRAY[0], ARRAY['heading'], ARRAY[0], ARRAY[0], ARRAY[3],
                   ARRAY['D'], ARRAY[''], ARRAY[%s]::vector[])""",
            (vec,),
        )
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="span"), scoped(conn, "s"):
        conn.execute(
            """SELECT pgmem.put_document('s', 'd.md', 'D', 'b', '\\x00', 'm', '[["D"]]'::jsonb,
                   ARRAY['# D'], ARRAY[0], ARRAY['heading'], ARRAY[0], ARRAY[0], ARRAY[30],
                   ARRAY['D'], ARRAY[''], ARRAY[%s]::vector[])""",
            (vec,),
        )
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a document unit kind"), scoped(conn, "s"):
        conn.execute(
            """SELECT pgmem.put_document('s', 'd.md', 'D', 'b', '\\x00', 'm', '[["D"]]'::jsonb,
                   ARRAY['# D'], ARRAY[0], ARRAY['user'], ARRAY[0], ARRAY[0], ARRAY[3],
                   ARRAY['D'], ARRAY[''], ARRAY[%s]::vector[])""",
            (vec,),
        )


#: put_document's arguments after (scope, id, title, body, hash, model), one good chunk and unit,
#: and one of them replaced by each hostile value: (argument position, SQL, what the error names).
_GOOD = [
    "'[[\"D\"]]'::jsonb",
    "ARRAY['# D']",
    "ARRAY[0]",
    "ARRAY['heading']",
    "ARRAY[0]",
    "ARRAY[0]",
    "ARRAY[3]",
    "ARRAY['D']",
    "ARRAY['']",
    "ARRAY[%(v)s]::vector[]",
]
_BAD_DOCUMENT_ARGS = [
    (0, "'[[\"D\", null]]'::jsonb", "chunk_heading_paths[0] must be a JSON array of strings"),
    (0, "'[[\"D\", 3]]'::jsonb", "chunk_heading_paths[0] must be a JSON array of strings"),
    (0, "'[\"D\"]'::jsonb", "chunk_heading_paths[0] must be a JSON array of strings"),
    (0, '\'[{"a": ["D"]}]\'::jsonb', "chunk_heading_paths[0] must be a JSON array of strings"),
    (1, "ARRAY[NULL]::text[]", "chunk_bodies[1] is NULL"),
    (1, "'[0:0]={\"# D\"}'::text[]", "chunk_bodies must be a one-dimensional array"),
    (4, "ARRAY[-1]", "unit_indexes -1, not a position"),
    (4, "ARRAY[NULL]::integer[]", "a NULL unit_indexes entry"),
    (7, "ARRAY[NULL]::text[]", "a NULL label"),
    (8, "ARRAY[NULL]::text[]", "a NULL body"),
    (5, "'{{0}}'::integer[]", "span_starts must be a one-dimensional array"),
    (9, "array_fill(%(v)s::vector, ARRAY[1], ARRAY[2])", "vectors must be a one-dimensional array"),
    (0, "jsonb_build_array(jsonb_build_array(repeat('x', 501)))", "one of more than 500 characters"),
    (0, "jsonb_build_array(to_jsonb(array_fill('x'::text, ARRAY[33])))", "more than 32 headings"),
]


@pytest.mark.parametrize(("at", "value", "named"), _BAD_DOCUMENT_ARGS)
def test_put_document_refuses_hostile_arrays_and_keeps_what_is_stored(
    conn: Conn, embedder: Embedder, at: int, value: str, named: str
) -> None:
    """Called in SQL as the app login: each hostile argument is one 22023 naming it, and the
    document stored before is unchanged."""
    add_documents(conn, "s", [Document("d.md", "# D\n\nDogs are loyal.\n")], embedder)
    with scoped(conn, "s"):
        before = conn.execute("SELECT chunk_id, heading_path, body FROM pgmem.chunk ORDER BY 1").fetchall()
    vec = embedder.embed(["x"])[0]
    args = [*_GOOD]
    args[at] = value
    sql = "SELECT pgmem.put_document('s', 'd.md', 'D', 'b', '\\x01', %(m)s, " + ", ".join(args) + ")"
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err, scoped(conn, "s"):
        conn.execute(sql, {"v": vec, "m": embedder.model_id})
    assert named in str(err.value.diag.message_primary) and "\n" not in str(err.value.diag.message_primary)
    with scoped(conn, "s"):
        assert conn.execute("SELECT chunk_id, heading_path, body FROM pgmem.chunk ORDER BY 1").fetchall() == before


#: A release-notes page as converters and hand edits leave them: a reStructuredText underline
#: turned into an ATX heading, a table's separator row made a heading, a divider of stars. Each
#: "-", "=", "|" or "*" is one token of the model, so each heading path alone is over its limit.
HOSTILE_HEADINGS = (
    "# Release notes 2.3\n\n"
    "## " + "=" * 400 + "\n\n"
    "Restart the ingest worker after upgrading: the queue format changed in 2.3.\n\n"
    "```bash\nsystemctl restart ingest-worker\n```\n\n"
    "### " + "|---" * 150 + "|\n\n"
    "Columns of the migration table: id, checksum, applied_at.\n\n"
    "#### " + "*" * 300 + " Known issues\n\n"
    "Backups taken during the upgrade may miss the last five minutes of writes.\n"
)


def test_a_heading_of_punctuation_is_cut_to_fit_and_the_document_stored(conn: Conn, embedder: Embedder) -> None:
    """A heading of hundreds of "=", "|" or "*" is a token per character: its heading path left no
    room under the model's token limit and the whole document was refused ("label '====…' leaves
    no room under the model's token limit"). The label is now cut, keeping its end (the deepest
    heading), to leave room for the text; the heading path is stored whole up to 500 characters a
    heading, every section is found. A heading of 10,000 characters, 300 nested headings and
    repeated ones are stored as well."""
    others = [
        Document("long.md", "# " + "-|" * 5000 + "\n\nUnder a heading of 10,000 characters.\n"),
        Document("nested.md", "###### deep\n" * 300 + "\nDeep text.\n"),
        Document("same.md", "# A\n\n## A\n\n### A\n\nsame\n\n## A\n\nsame\n\n# A\n\nsame\n"),
    ]
    report = add_documents(conn, "s", [*_docs(), Document("release.md", HOSTILE_HEADINGS), *others], embedder)
    assert (report.inserted, report.failed) == (6, []), report
    with scoped(conn, "s"):
        paths = conn.execute(
            "SELECT heading_path FROM pgmem.chunk WHERE document_id = 'release.md' ORDER BY ordinal"
        ).fetchall()
        labels = [
            str(r[0])
            for r in conn.execute(
                """SELECT p.label FROM pgmem.piece p JOIN pgmem.chunk c USING (scope_id, chunk_id)
                    WHERE c.document_id = 'release.md'"""
            ).fetchall()
        ]
    assert [len(p[0]) for p in paths] == [1, 2, 3, 4]  # type: ignore[arg-type]
    assert paths[3][0][-1] == "*" * 300 + " Known issues"  # type: ignore[index]
    budget = embedder.max_input_tokens - 8
    assert labels and max(embedder.count_tokens(labels)) <= budget, labels
    assert any(label.endswith("* Known issues") for label in labels)
    assert any(label.endswith("= · bash code") for label in labels)
    for question, wanted in (
        ("restart the ingest worker after upgrading", "Restart the ingest worker"),
        ("systemctl restart ingest-worker", "systemctl restart"),
        ("columns of the migration table checksum", "Columns of the migration table"),
        ("backups taken during the upgrade miss writes", "Backups taken during the upgrade"),
    ):
        top = search_documents(conn, "s", question, embedder, x=1).groups[0].hits[0]
        assert top.document_id == "release.md" and wanted in top.chunk_body, (question, top)
    # The other documents of the batch are stored too.
    assert {d for _, d, _ in _chunks(conn, "s")} == {"garden.md", "kitchen.md", "release.md", *(d.id for d in others)}


@pytest.mark.parametrize(
    "text", ["# A  \n\n## B\n\nbirds\n", "# A\t\n## B\n\nbirds\n", "# A  ", "# A #  \n## B\nbirds"]
)
def test_a_heading_line_ending_in_spaces_is_stored(conn: Conn, embedder: Embedder, text: str) -> None:
    """A heading-only section whose heading line ends in spaces or a tab (Markdown's hard line
    break, an editor's leftovers): its heading unit spanned the line's whitespace, past its chunk's
    body (trailing whitespace removed), and put_document refused the whole document ("unit 1 has
    span [0, 5) outside its chunk body (3 characters)"). It is stored, its sections found."""
    report = add_documents(conn, "s", [Document("a.md", text)], embedder)
    assert (report.inserted, report.failed) == (1, []), report
    with scoped(conn, "s"):
        paths = [list(r[0]) for r in conn.execute("SELECT heading_path FROM pgmem.chunk ORDER BY ordinal").fetchall()]  # type: ignore[call-overload]
    assert paths[0] == ["A"]
    if "B" in text:
        assert paths[1] == ["A", "B"]
        top = search_documents(conn, "s", "birds", embedder, x=1).groups[0].hits[0]
        assert top.heading_path == ["A", "B"], top


def test_a_long_heading_is_stored_once_not_once_per_section(conn: Conn, embedder: Embedder) -> None:
    """Every chunk stores its whole heading path, so a heading is stored once for each section
    under it: a 205 kB document with a 200,000-character title over 300 sections stored 57 MB of
    paths. A heading is cut to 500 characters in the paths (ending in "…"); its own chunk's body
    keeps it whole, and the document is found by its sections and by its title's words."""
    rng = random.Random(7)
    title = "Handbook " + "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(200_000)) + " end"
    text = f"# {title}\n\n" + "".join(
        f"## Section {i}\n\nThe code word of section {i} is kestrel{i}.\n\n" for i in range(40)
    )
    report = add_documents(conn, "s", [Document("big.md", text)], embedder)
    assert (report.inserted, report.failed) == (1, []), report
    with scoped(conn, "s"):
        rows = conn.execute(
            """SELECT heading_path, body, pg_column_size(heading_path) FROM pgmem.chunk
                WHERE document_id = 'big.md' ORDER BY ordinal"""
        ).fetchall()
    assert len(rows) == 41
    paths = [list(r[0]) for r in rows]  # type: ignore[call-overload]
    assert paths[0] == [title[:499] + "…"] and paths[7] == [title[:499] + "…", "Section 6"]
    assert str(rows[0][1]) == f"# {title}"  # the title's own chunk keeps it whole
    assert sum(int(str(r[2])) for r in rows) < 41 * 600  # 41 whole titles: 8.2 MB
    top = search_documents(conn, "s", "the code word of section 6 kestrel6", embedder, x=1).groups[0].hits[0]
    assert top.heading_path == [title[:499] + "…", "Section 6"], top


def test_cli_add_search_rm(
    app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "garden.md").write_text(GARDEN, encoding="utf-8")
    (folder / "sub" / "kitchen.md").write_text(KITCHEN, encoding="utf-8")
    (folder / "blank.md").write_text("\n", encoding="utf-8")
    assert main(["docs", "add", str(folder), "--scope", "c"]) == 0
    out = capsys.readouterr().out
    assert "2 inserted" in out and "1 empty (skipped)" in out
    assert main(["docs", "add", str(folder), "--scope", "c"]) == 0
    assert "2 unchanged" in capsys.readouterr().out
    # A stored document whose file is emptied is kept, and the report says so (it was only
    # counted among the empty ones, still searchable without a word).
    (folder / "garden.md").write_text("  \n", encoding="utf-8")
    assert main(["docs", "add", str(folder), "--scope", "c"]) == 0
    out, err = capsys.readouterr()
    assert "2 empty (skipped)" in out and "1 unchanged" in out
    assert (
        err.splitlines()[-1]
        == "  kept garden.md: the file is empty; its stored version stays searchable (docs rm removes it)"
    )
    assert main(["docs", "add", str(folder), "--scope", "c", "--json", "--force"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["empty_kept"] == ["garden.md"] and report["replaced"] == 1
    assert main(["docs", "search", "how do I sharpen a knife on a whetstone", "--scope", "c", "-x", "1"]) == 0
    out = capsys.readouterr().out
    assert "sub/kitchen.md · Kitchen Notes > Knife sharpening" in out and PLAIN_ON in out and "\x1b[" not in out
    assert main(["docs", "rm", "sub/kitchen.md", "--scope", "c"]) == 0
    assert main(["docs", "rm", "sub/kitchen.md", "--scope", "c"]) == 1
    assert main(["docs", "add", str(tmp_path / "missing"), "--scope", "c"]) == 2


def test_identical_units_are_embedded_once_and_share_their_vector(conn: Conn, embedder: Embedder) -> None:
    """A section that repeats one text (the same transclusion line after line: units with one
    label and one body) sends that text to the model once, and every copy is stored with its
    vector (a paid endpoint was sent every copy)."""
    links = "\n\n".join("See [[Setup]]." for _ in range(300))
    doc = Document("repeat.md", "# Repeat\n\n" + links + "\n\n# Setup\n\nInstall the tools.\n")
    counting = CountingEmbedder(embedder)
    add_documents(conn, "rep", [doc], counting)
    with scoped(conn, "rep"):
        rows = conn.execute(
            "SELECT label, body, raw_embedding::text FROM pgmem.piece WHERE kind = 'document'"
        ).fetchall()
    distinct = {(str(r[0]), str(r[1])) for r in rows}
    assert len(rows) >= 300 and counting.inputs <= len(distinct) < 20, (counting.inputs, len(distinct), len(rows))
    vectors: dict[tuple[str, str], set[str]] = {}
    for label, body, raw in rows:
        vectors.setdefault((str(label), str(body)), set()).add(str(raw))
    assert all(len(v) == 1 for v in vectors.values())  # every copy of a text has one vector
