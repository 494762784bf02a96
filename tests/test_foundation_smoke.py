from __future__ import annotations

import psycopg


def test_schema_installed(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    rows = conn.execute("SELECT column_name, dims FROM pgmem.vector_column ORDER BY 1").fetchall()
    assert rows == [("fact.embedding", 384), ("piece.embedding", 384)]


def test_every_table_column_and_function_is_commented(admin_conn: psycopg.Connection[tuple[object, ...]]) -> None:
    missing = admin_conn.execute(
        """SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
            WHERE p.pronamespace = 'pgmem'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL
           UNION ALL
           SELECT 'table ' || c.relname FROM pg_class c
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
              AND c.relname <> 'alembic_version' AND obj_description(c.oid, 'pg_class') IS NULL
           UNION ALL
           SELECT 'column ' || c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
              AND a.attnum > 0 AND NOT a.attisdropped AND col_description(c.oid, a.attnum) IS NULL"""
    ).fetchall()
    assert missing == []
