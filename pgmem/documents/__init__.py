"""Markdown documents: heading chunks, derived search units, document search (seed 004)."""

from pgmem.documents.store import (
    DocGroup,
    DocHit,
    DocSearch,
    Document,
    DocumentReport,
    add_documents,
    read_documents,
    remove_document,
    search_documents,
    search_vectors,
)

__all__ = [
    "DocGroup",
    "DocHit",
    "DocSearch",
    "Document",
    "DocumentReport",
    "add_documents",
    "read_documents",
    "remove_document",
    "search_documents",
    "search_vectors",
]
