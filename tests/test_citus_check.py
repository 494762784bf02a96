"""Distributable by scope: the check behind sql/citus/distribute.sql, run without Citus.

Citus can co-locate tables distributed by scope_id only if every primary key, unique constraint
and foreign key between them includes scope_id, and it can route a function call to one shard
only if every statement in it is pinned to the call's scope. This reads the installed catalog
(constraints, indexes, function bodies) of a freshly migrated database."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]

#: Tables without scope_id: Citus reference tables (copied to every node) or coordinator-local.
REFERENCE = {"embedding_model", "vector_column", "store_namespace", "model_setting", "forgotten_scope"}
LOCAL = {"alembic_version"}
#: Functions that read every scope on purpose (maintenance, run on the coordinator; Citus fans
#: them out to every shard). They aggregate per scope and never join rows of two scopes.
CROSS_SCOPE_MAINTENANCE = {
    "scope_index_plan",
    "index_large_scopes",
    "apply_retention",
    "maintenance_scopes",
    "sweep_expired_items",
}
#: Functions that only validate or compute (no table access) or read the reference tables.
SQL_KEYWORDS = {
    "where", "on", "set", "using", "join", "left", "right", "full", "inner", "cross", "order", "group", "limit",
    "returning", "select", "values", "for", "as", "natural", "lateral", "union", "with", "and", "or", "then",
    "when", "end", "into", "from", "having", "window", "offset", "fetch", "except", "intersect", "do", "default",
}  # fmt: skip


def _names(value: object) -> list[str]:
    """A text[] from the catalog as a list of str."""
    assert isinstance(value, list)
    return [str(v) for v in value]


def _scoped_tables(conn: Conn) -> set[str]:
    rows = conn.execute(
        """SELECT c.relname FROM pg_class c
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
              AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'scope_id'
                                                         AND NOT a.attisdropped)"""
    ).fetchall()
    return {str(r[0]) for r in rows}


def test_every_table_is_scoped_reference_or_local(admin_conn: Conn) -> None:
    tables = {
        str(r[0])
        for r in admin_conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace AND relkind IN ('r', 'p')"
        )
    }
    scoped = _scoped_tables(admin_conn)
    assert tables - scoped - REFERENCE - LOCAL == set(), "a table without scope_id must be declared a reference table"
    assert {"scope", "thread", "turn", "piece", "fact", "document", "chunk", "recall_log"} <= scoped


def test_unique_constraints_and_indexes_include_scope_id(admin_conn: Conn) -> None:
    scoped = _scoped_tables(admin_conn)
    rows = admin_conn.execute(
        """SELECT c.relname, i.relname, ARRAY(SELECT a.attname FROM unnest(x.indkey) k
                                            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k)
             FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
            WHERE c.relnamespace = 'pgmem'::regnamespace AND x.indisunique"""
    ).fetchall()
    checked = 0
    for table, index, cols in rows:
        if str(table) in scoped:
            checked += 1
            assert "scope_id" in _names(cols), f"unique index {index} on {table} does not include scope_id: {cols}"
    assert checked >= 8


def test_foreign_keys_are_colocated_or_point_at_reference_tables(admin_conn: Conn) -> None:
    scoped = _scoped_tables(admin_conn)
    rows = admin_conn.execute(
        """SELECT conname, conrelid::regclass::text, confrelid::regclass::text,
                  ARRAY(SELECT a.attname FROM unnest(conkey) k JOIN pg_attribute a
                          ON a.attrelid = conrelid AND a.attnum = k),
                  ARRAY(SELECT a.attname FROM unnest(confkey) k JOIN pg_attribute a
                          ON a.attrelid = confrelid AND a.attnum = k)
             FROM pg_constraint WHERE connamespace = 'pgmem'::regnamespace AND contype = 'f'"""
    ).fetchall()
    assert rows
    for name, src, dst, cols, ref_cols in rows:
        src_t, dst_t = str(src).split(".")[-1], str(dst).split(".")[-1]
        if src_t in scoped and dst_t in REFERENCE:
            continue  # distributed -> reference: supported by Citus
        assert src_t in scoped and dst_t in scoped, f"{name}: {src_t} -> {dst_t} is neither co-located nor reference"
        pairs = list(zip(_names(cols), _names(ref_cols), strict=True))
        assert ("scope_id", "scope_id") in pairs, f"foreign key {name} ({src_t} -> {dst_t}) does not match on scope_id"


def _code(body: str) -> str:
    """The body without comments and single-quoted literals (messages, setting names such as
    'pgmem.scope'); dollar-quoted dynamic SQL is kept and checked like the rest."""
    body = re.sub(r"--[^\n]*", " ", body)
    body = re.sub(r"#variable_conflict\s+\w+", " ", body)
    return re.sub(r"'(?:[^']|'')*'", "''", body)


def _statements(body: str) -> list[str]:
    body = _code(body)
    return [s for s in body.split(";") if s.strip()]


#: A PL/pgSQL variable declared with a table's row type (`DECLARE r pgmem.retention;`).
ROWTYPE_DECLARATION = re.compile(r"^\s*(?:DECLARE\s+)?[a-z_][a-z0-9_]*\s+pgmem\.[a-z_]+(?:\[\])?\s*$", re.I | re.S)


def unscoped_references(body: str, scoped: set[str]) -> list[str]:
    """References to scoped tables in `body` that no scope_id condition pins: each FROM/JOIN/
    UPDATE/DELETE alias must appear as alias.scope_id in its statement, each INSERT must write
    scope_id. A heuristic over the text, strict enough to catch a join that forgets the scope."""
    names = "|".join(sorted(scoped, key=len, reverse=True))
    ref = re.compile(rf"\b(INSERT\s+INTO\s+)?pgmem\.({names})\b(?:\s+(?:AS\s+)?([a-z_][a-z0-9_]*))?", re.I)
    bad = []
    for stmt in _statements(body):
        if ROWTYPE_DECLARATION.match(stmt):  # `r pgmem.retention;` names a row type, reads nothing
            continue
        for m in ref.finditer(stmt):
            insert, table, alias = m.group(1), m.group(2), m.group(3)
            if alias and alias.lower() in SQL_KEYWORDS:
                alias = None
            if insert:
                cols = re.match(r"\s*(?:AS\s+\w+\s*)?\(([^)]*)\)", stmt[m.end(2) :], re.I)
                if not cols or "scope_id" not in cols.group(1):
                    bad.append(f"INSERT INTO pgmem.{table} without scope_id")
                continue
            pattern = rf"\b{alias}\.scope_id\b" if alias else r"(?<![.\w])scope_id\s*="
            if not re.search(pattern, stmt, re.I):
                bad.append(f"pgmem.{table} {alias or ''} not pinned to a scope".strip())
    return bad


def test_no_function_reads_across_scopes(admin_conn: Conn) -> None:
    scoped = _scoped_tables(admin_conn)
    rows = admin_conn.execute(
        """SELECT p.proname, p.prosrc, coalesce(p.proargnames, '{}'), p.prorettype = 'trigger'::regtype
             FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace AND p.prokind = 'f'"""
    ).fetchall()
    touching = 0
    problems = []
    for name, src, argnames, trigger in rows:
        body = _code(str(src))
        if not re.search(rf"\bpgmem\.({'|'.join(scoped)})\b", body):
            continue
        touching += 1
        if str(name) in CROSS_SCOPE_MAINTENANCE:
            continue
        # A trigger function runs where the row that fired it lives, never routed by a call;
        # its statements must still name the row's scope (below).
        if not trigger and "scope" not in _names(argnames):
            problems.append(f"{name}: reads a scoped table but takes no scope argument (not routable)")
        problems += [f"{name}: {b}" for b in unscoped_references(body, scoped)]
    assert touching >= 8
    assert problems == [], "\n".join(problems)


def test_the_checker_catches_a_cross_scope_join() -> None:
    scoped = {"piece", "turn"}
    ok = "SELECT 1 FROM pgmem.piece p JOIN pgmem.turn t ON t.scope_id = p.scope_id WHERE p.scope_id = scope"
    assert unscoped_references(ok, scoped) == []
    leaky = "SELECT 1 FROM pgmem.piece p JOIN pgmem.turn t ON t.turn_index = p.turn_index WHERE p.scope_id = scope"
    assert unscoped_references("DECLARE r pgmem.turn; BEGIN SELECT * INTO r FROM pgmem.turn t", scoped) == [
        "pgmem.turn t not pinned to a scope"
    ]
    assert unscoped_references(leaky, scoped) == ["pgmem.turn t not pinned to a scope"]
    assert unscoped_references("INSERT INTO pgmem.turn (thread_id) VALUES ('x')", scoped) != []
    # 'pgmem.scope' the setting is not pgmem.scope the table
    assert unscoped_references("SELECT current_setting('pgmem.scope')", {"scope"}) == []


def test_distribution_script_covers_every_table() -> None:
    script = (Path(__file__).resolve().parent.parent / "sql" / "citus" / "distribute.sql").read_text()
    for table in ("scope", "thread", "turn", "document", "chunk", "piece", "fact", "recall_log"):
        assert f"create_distributed_table('pgmem.{table}', 'scope_id'" in script, table
    for table in REFERENCE:
        assert f"create_reference_table('pgmem.{table}')" in script, table
    for fn in ("memory_recall", "fact_recall", "document_search"):
        assert f"'pgmem.{fn}(" in script, fn
