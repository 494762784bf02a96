"""Document search's word side (issue 29, item 4), on the real database with the real model:
a rare word in one section finds that section even when many sections mean the same; the word
statistics count document units only; every new argument is checked in SQL."""

from __future__ import annotations

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.embedders.base import Embedder
from pgmem.errors import PgmemError
from pgmem.ingest import ingest_turns
from pgmem.turns import Turn

Conn = psycopg.Connection[tuple[object, ...]]

#: Sixty sections on deploy failures, and one that names an error code in another context
#: entirely: by meaning it is far from a question about a failed deploy, by its word it is not.
CAUSES = ["token", "image", "disk", "timeout", "config", "quota", "certificate", "dns", "secret", "probe"]
SECTIONS = [
    (f"Failure {i}", f"Deploy attempt {i} failed because the {CAUSES[i % 10]} check on runner {i} did not pass.")
    for i in range(60)
] + [("Lunch codes", "At the canteen, QX7731 is the code for the vegetarian lunch on Fridays.")]
RUNBOOK = "# Runbook\n\n" + "".join(f"## {h}\n\n{b}\n\n" for h, b in SECTIONS)
QUESTION = "why did my deploy fail with QX7731?"


def _rank(conn: Conn, embedder: Embedder, mode: str) -> int | None:
    result = search_documents(conn, "docs", QUESTION, embedder, x=12, floor=-1.0, mode=mode)
    paths = [h.heading_path[-1] for h in result.groups[0].hits]
    return paths.index("Lunch codes") + 1 if "Lunch codes" in paths else None


def test_a_rare_word_finds_its_section_among_sections_that_mean_the_same(conn: Conn, embedder: Embedder) -> None:
    add_documents(conn, "docs", [Document("runbook.md", RUNBOOK)], embedder)
    # By vector alone the section is not among the twelve nearest; the word side brings it up, to
    # the top two (a unit only the word side found counts its word rank at most once).
    assert _rank(conn, embedder, "vector") is None
    hybrid = _rank(conn, embedder, "hybrid")
    assert hybrid is not None and hybrid <= 2
    with scoped(conn, "docs"):
        words = conn.execute(
            "SELECT lexeme, pieces FROM pgmem.distinctive_words('docs', %s, kind => 'document')", (QUESTION,)
        ).fetchall()
    assert ("qx7731", 1) in words and not any(w == "deploy" for w, _ in words)  # in every section: not distinctive


def test_word_statistics_count_only_their_own_kind(conn: Conn, embedder: Embedder) -> None:
    add_documents(conn, "mixed", [Document("runbook.md", RUNBOOK)], embedder)
    turns = [Turn("mixed", "t", 0, None, ({"role": "user", "content": "My QX7731 deploy failed again."},))]
    assert not ingest_turns(conn, turns, embedder).failed
    with scoped(conn, "mixed"):
        memory = conn.execute("SELECT lexeme, pieces FROM pgmem.distinctive_words('mixed', 'QX7731')").fetchall()
        docs = conn.execute(
            "SELECT lexeme, pieces FROM pgmem.distinctive_words('mixed', 'QX7731', kind => 'document')"
        ).fetchall()
    assert memory == [("qx7731", 1)] and docs == [("qx7731", 1)]


@pytest.mark.parametrize(
    ("sql", "args", "message", "sqlstate"),
    [
        ("SELECT * FROM pgmem.document_search('docs', ARRAY[%s::vector], ARRAY['q'], mode => 'words')", 1,
         "mode must be vector or hybrid", "22023"),
        ("SELECT * FROM pgmem.document_search('docs', ARRAY[%s::vector], NULL, mode => 'hybrid')", 1,
         "hybrid mode needs part_texts", "22004"),
        ("SELECT * FROM pgmem.document_search('docs', ARRAY[%s::vector], ARRAY['q'], rrf_k => -1)", 1,
         "rrf_k must be between 0 and 10000", "22023"),
        ("SELECT * FROM pgmem.distinctive_words('docs', 'q', kind => 'fact')", 0, "kind must be memory or document",
         "22023"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_clear_error(conn: Conn, sql: str, args: int, message: str, sqlstate: str) -> None:
    vec = "[" + ",".join(["0.1"] * 384) + "]"
    with scoped(conn, "docs"), pytest.raises(psycopg.Error, match=message) as err:
        conn.execute(sql, (vec,) * args)
    assert err.value.sqlstate == sqlstate and "\n" not in str(err.value.diag.message_primary)


def test_a_bad_word_weight_setting_is_refused(conn: Conn, embedder: Embedder) -> None:
    add_documents(conn, "docs", [Document("runbook.md", RUNBOOK)], embedder)
    conn.execute("SELECT set_config('pgmem.doc_word_weight', '-1', false)")
    try:
        with pytest.raises(PgmemError, match=r"pgmem\.doc_word_weight must be between 0 and 100"):
            search_documents(conn, "docs", QUESTION, embedder, mode="hybrid")
    finally:
        conn.execute("RESET pgmem.doc_word_weight")
    assert _rank(conn, embedder, "hybrid") is not None  # nothing stored was touched
