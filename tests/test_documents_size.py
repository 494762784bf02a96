"""A document over max_document_bytes fails before anything is embedded; the others are stored
(a 50 MB file took 2.8 GB and had not finished in 24 minutes)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgmem.documents.store import Document, add_documents
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from tests.helpers import CountingEmbedder

Conn = psycopg.Connection[tuple[object, ...]]


def test_a_document_over_the_cap_fails_unembedded_and_the_others_are_stored(conn: Conn, embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    small = Document("small.md", "# Small\n\nThe kettle is descaled every month with citric acid.\n")
    # 100 wide characters of 3 bytes: 300 bytes, over a cap of 299 whatever len() says.
    wide = Document("wide.md", "# Wide\n\n" + "€" * 100)
    report = add_documents(conn, "z", [small, wide], counting, max_document_bytes=299)
    assert report.inserted == 1
    assert report.failed == [
        ("wide.md", "document wide.md is 308 bytes, over the 299 a document may hold (max_document_bytes): split it")
    ]
    alone = CountingEmbedder(embedder)  # the small one's units only were embedded
    add_documents(conn, "z0", [small], alone)
    assert counting.inputs == alone.inputs > 0
    # At the cap it is stored.
    assert add_documents(conn, "z", [wide], embedder, max_document_bytes=308).inserted == 1
    for bad in (0, -1, True, "4", 1.5):
        with pytest.raises(InputError, match="max_document_bytes"):
            add_documents(conn, "z", [small], embedder, max_document_bytes=bad)  # type: ignore[arg-type]


def test_cli_docs_add_reports_a_document_over_the_cap_in_one_line(
    app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    (tmp_path / "big.md").write_text("# Big\n\n" + "word " * 1000, encoding="utf-8")
    assert main(["docs", "add", str(tmp_path / "big.md"), "--scope", "z2", "--max-document-bytes", "1000"]) == 1
    out, err = capsys.readouterr()
    assert "0 inserted" in out and "1 failed" in out
    assert f"  failed {tmp_path / 'big.md'}: document {tmp_path / 'big.md'} is 5,007 bytes, over the 1,000" in err
    assert "Traceback" not in err


def test_a_document_of_more_units_than_the_cap_fails_unembedded_and_the_others_are_stored(
    conn: Conn, embedder: Embedder
) -> None:
    """The byte cap did not bound the units: 100,000 one-line headings (0.9 MB) were 100,000
    texts to embed, and 4 MB of them about 450,000, each embedded before the document was stored.
    A document of more units than max_document_units fails before it is embedded; the others are
    stored, and at the cap it is stored too."""
    counting = CountingEmbedder(embedder)
    small = Document("small.md", "# Small\n\nThe kettle is descaled every month with citric acid.\n")
    headings = Document("headings.md", "".join(f"# Heading {i}\n" for i in range(12)))
    report = add_documents(conn, "u", [headings, small], counting, max_document_units=11)
    assert report.inserted == 1
    assert report.failed == [
        (
            "headings.md",
            "document headings.md has 12 units to embed, over the 11 a document may have "
            "(max_document_units): split it",
        )
    ]
    alone = CountingEmbedder(embedder)  # the small one's units only were embedded
    add_documents(conn, "u0", [small], alone)
    assert counting.inputs == alone.inputs > 0
    assert add_documents(conn, "u", [headings], embedder, max_document_units=12).inserted == 1
    for bad in (0, True, "4", 1.5):
        with pytest.raises(InputError, match="max_document_units"):
            add_documents(conn, "u", [small], embedder, max_document_units=bad)  # type: ignore[arg-type]
