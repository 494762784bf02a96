from __future__ import annotations

import psycopg


def test_schema_installed(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    rows = conn.execute("SELECT column_name, dims FROM pgmem.vector_column ORDER BY 1").fetchall()
    assert rows == [("fact.embedding", 384), ("piece.embedding", 384)]
