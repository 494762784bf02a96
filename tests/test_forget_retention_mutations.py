"""Forgetting and retention: behaviours a mutation review of sql/idempotent/070_forget.sql,
075_retention.sql, pgmem/forget.py and `pgmem forget` found untested (a mutant of each passed
every test of forget, retention and the lock order). Run as the app login (`conn`); `admin_conn`
looks under row-level security to prove what went and what stayed, and runs apply_retention as
the superuser docs/operations.md allows, the one caller row-level security does not confine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from pgmem import forget_document, forget_fact, forget_scope, forget_turn
from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents
from pgmem.facts import Fact, add_facts
from pgmem.forget import Forgotten
from pgmem.ingest import ingest_turns
from pgmem.integrations.langgraph import PgmemStore, namespace_scope
from tests.lifecycle_helpers import in_scope, vec
from tests.security_helpers import APP_LOGIN, HashEmbedder, connect_as, ensure_login_roles, make_turn, role_url

Conn = psycopg.Connection[tuple[object, ...]]
EMB = HashEmbedder()
#: A LOGIN member of pgmem_owner: the role that migrates pgmem and runs apply_retention.
OWNER_LOGIN = "pgmem_test_mut_owner"


def _scope_tables(admin: Conn) -> list[str]:
    """Every table of schema pgmem with a scope_id column (from the catalog: a table added later
    is covered too)."""
    rows = admin.execute(
        """SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
              AND a.attname = 'scope_id' AND NOT a.attisdropped ORDER BY 1"""
    ).fetchall()
    return [str(r[0]) for r in rows]


def _snapshot(admin: Conn, scope: str) -> dict[str, list[str]]:
    """Every row of the scope in every table, as text (and its store directory entries)."""
    out = {}
    for table in _scope_tables(admin):
        rows = admin.execute(
            sql.SQL("SELECT ROW(r.*)::text FROM {} r WHERE r.scope_id = %s ORDER BY 1").format(
                sql.Identifier("pgmem", table)
            ),
            (scope,),
        ).fetchall()
        out[table] = [str(r[0]) for r in rows]
    rows = admin.execute(
        "SELECT ROW(n.*)::text FROM pgmem.store_namespace n WHERE n.scope_name = %s ORDER BY 1", (scope,)
    ).fetchall()
    out["store_namespace"] = [str(r[0]) for r in rows]
    return out


def _log(conn: Conn, scope: str, results: object, plane: str = "memory") -> int:
    with scoped(conn, scope):
        row = conn.execute(
            "SELECT pgmem.log_recall(%s, %s, 'q', ARRAY['q'], ARRAY[%s::vector], 5, -1, NULL, 'vector', %s::jsonb)",
            (scope, plane, vec("q"), json.dumps(results)),
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def _turns(admin: Conn, scope: str) -> list[tuple[str, int]]:
    rows = admin.execute(
        "SELECT thread_id, turn_index FROM pgmem.turn WHERE scope_id = %s ORDER BY 1, 2", (scope,)
    ).fetchall()
    return [(str(t), int(str(i))) for t, i in rows]


def _threads(admin: Conn, scope: str) -> list[str]:
    rows = admin.execute("SELECT thread_id FROM pgmem.thread WHERE scope_id = %s ORDER BY 1", (scope,)).fetchall()
    return [str(r[0]) for r in rows]


def _facts(admin: Conn, scope: str) -> list[str]:
    rows = admin.execute("SELECT body FROM pgmem.fact WHERE scope_id = %s ORDER BY 1", (scope,)).fetchall()
    return [str(r[0]) for r in rows]


def test_forget_turn_takes_the_facts_of_that_turn_of_that_thread_only(conn: Conn, admin_conn: Conn) -> None:
    """A fact tied to turn 1 of another thread, or to another turn of the thread, or to the
    thread alone, is not the forgotten turn's (mutant: the facts of turn index 1 of every thread
    of the scope went)."""
    turns = [make_turn("s", th, i, f"{th} turn {i}") for th in ("t", "u") for i in range(2)]
    assert ingest_turns(conn, turns, EMB).inserted == 4
    add_facts(
        conn,
        "s",
        [Fact("t one", "t", 1), Fact("t zero", "t", 0), Fact("u one", "u", 1), Fact("about u", "u")],
        EMB,
    )
    done = forget_turn(conn, "s", "t", 1)
    assert (done.turns, done.facts) == (1, 1)
    assert _facts(admin_conn, "s") == ["about u", "t zero", "u one"]


@pytest.fixture
def two_scopes(conn: Conn, admin_conn: Conn) -> Iterator[tuple[str, str]]:
    """Scopes `keep` (no retention setting) and `trim` (keep_days 30, log_keep_days 10,
    log_keep_rows 2) with the same names in them: thread t with turns 0, 1 and 2, a LangGraph
    store item k (thread item:k, turn 0), a fact of t/1, recall-log rows naming t/1. In keep
    every turn is 100 days old; in trim t/0, t/1 and the item's turn are, t/2 is new. keep's
    log rows are written after trim's (the newest of the database), one of them 20 days old."""
    keep, trim = namespace_scope(("users", "keep")), namespace_scope(("users", "trim"))
    for scope in (trim, keep):
        ns = tuple(scope.split("/"))
        PgmemStore(conn, embedder=EMB).put(ns, "k", {"text": f"the spare key of {scope} is under the flowerpot"})
        turns = [make_turn(scope, "t", i, f"{scope} turn {i} about the ferry") for i in range(3)]
        assert ingest_turns(conn, turns, EMB).inserted == 3
        add_facts(conn, scope, [Fact(f"{scope} fact of t/1", "t", 1)], EMB)
    admin_conn.execute(
        "UPDATE pgmem.turn SET turn_time = now() - interval '100 days'"
        " WHERE scope_id = %s OR (scope_id = %s AND turn_index < 2)",
        (keep, trim),
    )
    # The items put as long ago as their turns (retention ages an item by its last put, 0089).
    admin_conn.execute(
        "UPDATE pgmem.store_item SET created_at = now() - interval '100 days', updated_at = now() - interval '100 days'"
        " WHERE scope_id IN (%s, %s)",
        (keep, trim),
    )
    with scoped(conn, trim):
        conn.execute(
            "SELECT pgmem.set_retention(%s, keep_days => 30, log_keep_days => 10, log_keep_rows => 2)", (trim,)
        )
    yield keep, trim


def test_apply_retention_as_a_superuser_leaves_other_scopes_as_they_were(
    two_scopes: tuple[str, str], conn: Conn, admin_conn: Conn
) -> None:
    """A superuser is not held to one scope by row-level security, so apply_retention's own
    scope filters are all that keep one scope's setting to its own rows. Mutants that passed the
    retention tests (each run in one scope, or as the owner login under row-level security): the
    expired turns listed from every scope (trim's new t/2 went, as keep's t/2 is old); an
    expired turn's pieces, its store item or its recall-log rows deleted in every scope; the log
    trimmed by age, or counted against log_keep_rows, across every scope."""
    keep, trim = two_scopes
    named = [{"thread_id": "t", "turn_index": 1}]
    trim_logs = [_log(conn, trim, named)] + [_log(conn, trim, []) for _ in range(3)]
    keep_logs = [_log(conn, keep, named)] + [_log(conn, keep, []) for _ in range(3)]
    admin_conn.execute(
        "UPDATE pgmem.recall_log SET created_at = now() - interval '20 days' WHERE scope_id = %s AND recall_id = %s",
        (keep, keep_logs[1]),
    )
    kept = _snapshot(admin_conn, keep)
    assert kept["store_item"] and kept["piece"] and len(kept["recall_log"]) == 4

    rows = admin_conn.execute(
        "SELECT scope_id, turns, facts, threads, recall_logs FROM pgmem.apply_retention()"
    ).fetchall()
    # t/0, t/1 and the item's turn; the fact of t/1; thread item:k; the row naming t/1 and the
    # oldest other row (log_keep_rows).
    assert rows == [(trim, 3, 1, 1, 2)]
    assert _snapshot(admin_conn, keep) == kept
    assert _turns(admin_conn, trim) == [("t", 2)]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (trim,)).fetchone() == (0,)
    logs = admin_conn.execute(
        "SELECT recall_id FROM pgmem.recall_log WHERE scope_id = %s ORDER BY 1", (trim,)
    ).fetchall()
    assert [int(str(r[0])) for r in logs] == trim_logs[2:]


def test_apply_retention_puts_back_the_maintenance_setting(
    two_scopes: tuple[str, str], admin_conn: Conn, db_url: str
) -> None:
    """apply_retention turns pgmem.maintenance on to read every scope's setting, and puts back
    the caller's value: left on, the owner login's transaction went on seeing every scope's
    rows (the maintenance policies) after the call."""
    keep, _ = two_scopes
    ensure_login_roles(admin_conn)
    with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        admin_conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(OWNER_LOGIN)))
    admin_conn.execute(sql.SQL("GRANT pgmem_owner TO {}").format(sql.Identifier(OWNER_LOGIN)))
    with scoped(admin_conn, keep):
        admin_conn.execute("SELECT pgmem.set_retention(%s, keep_turns => 100)", (keep,))
    owner = connect_as(db_url, OWNER_LOGIN)
    try:
        with owner.transaction():
            in_scope(owner, keep)
            assert len(owner.execute("SELECT * FROM pgmem.apply_retention()").fetchall()) == 2
            assert owner.execute("SELECT current_setting('pgmem.maintenance', true)").fetchone() in ((None,), ("",))
            seen = owner.execute("SELECT scope_id FROM pgmem.retention ORDER BY 1").fetchall()
            assert seen == [(keep,)]
    finally:
        owner.close()


def test_forget_scope_counts_every_row_it_removes_and_leaves_none(conn: Conn, admin_conn: Conn) -> None:
    """forget_scope reports the pieces it removes (a mutant left them to the foreign key's cascade
    from the turns and the documents, and reported 0), and no table holds a row of the scope
    afterwards; another scope keeps all of its own."""
    for scope in ("s", "other"):
        turns = [make_turn(scope, "t", i, f"turn {i} about the harbour", tool="a tool result") for i in range(2)]
        assert ingest_turns(conn, turns, EMB).inserted == 2
        add_documents(conn, scope, [Document("a.md", "# A\n\nabout harbours\n\n## B\n\nand ferries")], EMB)
        add_facts(conn, scope, [Fact("a fact", "t", 0), Fact("about a", section="a.md")], EMB)
        _log(conn, scope, [])
    other = _snapshot(admin_conn, "other")
    before = _snapshot(admin_conn, "s")
    done = forget_scope(conn, "s")
    assert done.as_dict() == {
        "threads": 1, "turns": 2, "pieces": len(before["piece"]), "facts": 2, "documents": 1, "recall_logs": 1,
        "store_items": 0,
    }  # fmt: skip
    assert len(before["piece"]) > 4
    assert {k: v for k, v in _snapshot(admin_conn, "s").items() if v} == {}
    assert _snapshot(admin_conn, "other") == other


def test_set_retention_records_when_the_setting_changed(conn: Conn) -> None:
    """get_retention's updated_at is the time of the last set_retention, not of the first."""

    def updated() -> object:
        with scoped(conn, "a"):
            row = conn.execute("SELECT updated_at FROM pgmem.get_retention('a')").fetchone()
        assert row is not None
        return row[0]

    with scoped(conn, "a"):
        conn.execute("SELECT pgmem.set_retention('a', keep_days => 30)")
    first = updated()
    with scoped(conn, "a"):
        conn.execute("SELECT pgmem.set_retention('a', keep_days => 7)")
        now = conn.execute("SELECT now()").fetchone()
    assert now is not None and updated() == now[0] and now[0] != first


def test_a_fact_only_turn_forgotten_takes_its_thread(conn: Conn, admin_conn: Conn) -> None:
    """add_facts may tie a fact to a turn the scope does not hold (its thread row is made for it).
    forget_turn of that turn took the fact and left the thread row, whose name is the caller's
    data, although nothing of the thread remained, as forget_fact of the same fact does not. It
    goes now whenever a forget_turn leaves it empty (0062)."""
    add_facts(conn, "s", [Fact("said in a turn that was never stored", "x", 3)], EMB)
    (kept,) = add_facts(conn, "s", [Fact("y's fact", "y", 3)], EMB)
    assert _threads(admin_conn, "s") == ["x", "y"]
    assert forget_turn(conn, "s", "x", 3).as_dict() == {
        "threads": 1, "turns": 0, "pieces": 0, "facts": 1, "documents": 0, "recall_logs": 0, "store_items": 0,
    }  # fmt: skip
    assert _threads(admin_conn, "s") == ["y"]
    assert forget_fact(conn, "s", kept).threads == 1
    assert _threads(admin_conn, "s") == []


def test_forget_document_takes_a_document_whose_id_is_longer_than_a_thread_name(conn: Conn, admin_conn: Conn) -> None:
    """Document ids may hold 1,000 characters (add_documents, remove_document): forget_document
    takes them too (a mutant held them to the 200 characters of a thread name)."""
    long_id = "docs/" + "x" * 600 + ".md"
    assert add_documents(conn, "s", [Document(long_id, "# Long\n\nbody")], EMB).inserted == 1
    assert forget_document(conn, "s", long_id).documents == 1
    assert admin_conn.execute("SELECT count(*) FROM pgmem.document").fetchone() == (0,)


def test_a_forget_that_removes_only_recall_log_rows_counts_them(conn: Conn, admin_conn: Conn) -> None:
    """A log row naming a fact already gone goes with a second forget_fact of its id: the call
    removed something, and its total says so (`pgmem forget` exits 1 on a total of 0)."""
    (fact_id,) = add_facts(conn, "s", [Fact("the locker code is 4417")], EMB)
    assert forget_fact(conn, "s", fact_id).facts == 1
    # log_recall drops a gone fact's hit; a row naming it anyway, as a superuser can write one.
    admin_conn.execute(
        "INSERT INTO pgmem.recall_log (scope_id, plane, message, part_texts, part_vectors, x, floor, mode, results)"
        " VALUES ('s', 'fact', 'q', ARRAY['q'], ARRAY[%s::vector], 5, -1, 'vector', %s::jsonb)",
        (vec("q"), json.dumps([{"hits": [{"fact_id": fact_id, "body": "the locker code is 4417"}]}])),
    )
    done = forget_fact(conn, "s", fact_id)
    assert done == Forgotten(recall_logs=1) and done.total == 1


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": role_url(db_url, APP_LOGIN)}
    return subprocess.run(
        [sys.executable, "-m", "pgmem", "forget", *args], capture_output=True, text=True, env=env, check=False
    )


def test_cli_forget_fact_and_document(conn: Conn, admin_conn: Conn, app_url: str, db_url: str) -> None:
    """`pgmem forget fact` and `pgmem forget document` forget what they name and nothing else (a
    mutant sent `forget document` to forget_scope), and report success though no turn went."""
    assert ingest_turns(conn, [make_turn("s", "t", 0, "a turn that stays")], EMB).inserted == 1
    add_documents(conn, "s", [Document("a.md", "# A\n\ngone"), Document("b.md", "# B\n\nstays")], EMB)
    gone, _ = add_facts(conn, "s", [Fact("gone fact"), Fact("a fact that stays")], EMB)
    fact = _cli(db_url, "fact", "--scope", "s", str(gone), "--json")
    assert fact.returncode == 0, fact.stderr
    assert json.loads(fact.stdout) == {
        "threads": 0, "turns": 0, "pieces": 0, "facts": 1, "documents": 0, "recall_logs": 0,
    }  # fmt: skip
    doc = _cli(db_url, "document", "--scope", "s", "a.md", "--json")
    assert doc.returncode == 0, doc.stderr
    got = json.loads(doc.stdout)
    assert (got["documents"], got["facts"], got["turns"], got["threads"]) == (1, 0, 0, 0) and got["pieces"] > 0
    assert _facts(admin_conn, "s") == ["a fact that stays"]
    rows = admin_conn.execute("SELECT document_id FROM pgmem.document WHERE scope_id = 's'").fetchall()
    assert rows == [("b.md",)]
    assert _turns(admin_conn, "s") == [("t", 0)]
    again = _cli(db_url, "fact", "--scope", "s", str(gone))
    assert again.returncode == 1 and "nothing to forget" in again.stderr


def test_a_forget_in_ones_own_scope_of_another_scopes_names_and_ids_removes_nothing(
    conn: Conn, admin_conn: Conn
) -> None:
    """Fact ids are unique across scopes, and thread, turn and document names repeat in them.
    A forget in the attacker's own scope that names the victim's fact id, thread, turn or
    document removes nothing of the victim's (each forget's scope filter, and row-level
    security under it: the mutation review found the filters alone untestable through the app,
    which row-level security confines to its scope)."""
    assert ingest_turns(conn, [make_turn("victim", "t", i, f"victim turn {i}") for i in range(2)], EMB).inserted == 2
    add_documents(conn, "victim", [Document("a.md", "# A\n\nthe victim's document")], EMB)
    ids = add_facts(conn, "victim", [Fact("tied", "t", 1), Fact("about a", section="a.md"), Fact("loose")], EMB)
    _log(conn, "victim", [{"thread_id": "t", "turn_index": 1}])
    before = _snapshot(admin_conn, "victim")
    done = [forget_fact(conn, "attacker", i) for i in ids]
    done += [forget_turn(conn, "attacker", "t", 1), forget_document(conn, "attacker", "a.md")]
    with scoped(conn, "attacker"):
        row = conn.execute("SELECT * FROM pgmem.forget_thread('attacker', 't')").fetchone()
    assert row == (0, 0, 0, 0, 0, 0)
    assert all(d.total == 0 for d in done), done
    assert _snapshot(admin_conn, "victim") == before
