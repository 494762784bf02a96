"""Every SECURITY DEFINER function the application may call refuses a scope other than its
transaction's, found in the catalog (so a function added later is covered without a list).

test_security_rls.py's list of writes names eight functions; the forgets, the store's
functions (put_item, delete_item, expire_items, ...), set_retention, the model change's staging
and flip and put_turns are definer functions too, and each runs as pgmem_owner. Here each is
called by the application login, inside scope a, with every argument named `scope` set to scope
b (which holds a turn, a fact, a document, a store item and a retention setting) and every other
required argument a plausible value of its type, and again with no scope set at all: each must
answer 42501, and b must keep every row it had. A scope that does not exist yet must not be
created either. (Checked by removing set_retention's guard: the test then fails.)"""

from __future__ import annotations

import itertools
import uuid

import psycopg
import pytest
from psycopg import sql

from pgmem.documents.store import Document, add_documents
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from tests.security_helpers import DIMS, HashEmbedder, hash_vector, make_turn

Conn = psycopg.Connection[tuple[object, ...]]
EMB = HashEmbedder()
#: Arguments whose values a function checks before the scope (log_recall's plane).
NAMED: dict[str, sql.Composable] = {"plane": sql.SQL("'memory'")}
TABLES = ("scope", "thread", "turn", "piece", "fact", "document", "chunk", "store_item", "retention", "recall_log")


def _value(type_name: str) -> sql.Composable:
    """A plausible non-NULL value of an argument's type (so a NULL check does not answer first)."""
    one = sql.Literal(hash_vector("v").tolist())
    values: dict[str, sql.Composable] = {
        "text": sql.SQL("'x'"),
        "text[]": sql.SQL("ARRAY['x']"),
        "integer": sql.SQL("1"),
        "integer[]": sql.SQL("ARRAY[0]"),
        "bigint": sql.SQL("1"),
        "bigint[]": sql.SQL("ARRAY[1]::bigint[]"),
        "double precision": sql.SQL("0.5"),
        "boolean": sql.SQL("false"),
        "jsonb": sql.SQL("'[]'::jsonb"),
        "jsonb[]": sql.SQL("ARRAY['[]'::jsonb]"),
        "bytea": sql.SQL("'\\x00'::bytea"),
        "bytea[]": sql.SQL("ARRAY['\\x00'::bytea]"),
        "timestamp with time zone": sql.SQL("now()"),
        "timestamp with time zone[]": sql.SQL("ARRAY[now()]"),
        "vector": sql.SQL("{}::vector").format(one),
        "vector[]": sql.SQL("ARRAY[{}::vector]").format(one),
    }
    return values[type_name]


def _counts(admin: Conn, scope: str) -> dict[str, int]:
    out = {}
    for t in TABLES:
        row = admin.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE scope_id = %s").format(sql.Identifier("pgmem", t)), (scope,)
        ).fetchone()
        assert row is not None
        out[t] = int(str(row[0]))
    row = admin.execute("SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = %s", (scope,)).fetchone()
    assert row is not None
    out["store_namespace"] = int(str(row[0]))
    return out


def _definer_calls(admin: Conn, other: str) -> list[tuple[str, sql.Composed]]:
    rows = admin.execute(
        """SELECT p.proname::text, p.oid::regprocedure::text,
                  coalesce(p.proargnames[1:p.pronargs], '{}'),
                  ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) AS t),
                  p.pronargs - p.pronargdefaults
             FROM pg_proc p
            WHERE p.pronamespace = 'pgmem'::regnamespace AND p.prosecdef
              AND has_function_privilege('pgmem_app', p.oid, 'EXECUTE')
            ORDER BY 2"""
    ).fetchall()
    calls = []
    for name, signature, arg_names, arg_types, required in rows:
        assert isinstance(arg_names, list) and isinstance(arg_types, list) and isinstance(required, int)
        args = [
            sql.SQL("{} => {}").format(
                sql.Identifier(str(n)),
                sql.Literal(other) if n == "scope" else NAMED.get(str(n)) or _value(str(t)),
            )
            for n, t in list(zip(arg_names, arg_types, strict=True))[:required]
        ]
        query = sql.SQL("SELECT * FROM {}({})").format(sql.Identifier("pgmem", str(name)), sql.SQL(", ").join(args))
        calls.append((str(signature), query))
    return calls


@pytest.mark.parametrize("target_exists", [True, False], ids=["scope b stored", "scope b never written"])
def test_every_definer_function_refuses_another_scope_and_leaves_it_as_it_was(
    conn: Conn, admin_conn: Conn, target_exists: bool
) -> None:
    assert DIMS == 384
    a = f"guard-a-{uuid.uuid4().hex[:8]}"
    b = f"guard-b-{uuid.uuid4().hex[:8]}"
    assert ingest_turns(conn, [make_turn(a, "t", 0, "a's turn about the harbour")], EMB).inserted == 1
    if target_exists:
        assert ingest_turns(conn, [make_turn(b, "x", 0, "b's turn about the ferry")], EMB).inserted == 1
        add_facts(conn, b, [Fact("b's fact", thread="x", turn_index=0)], EMB)
        assert add_documents(conn, b, [Document("x", "# B\n\nb's document\n")], EMB).inserted == 1
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (b,))
            conn.execute("SELECT set_config('pgmem.store_directory', 'd', true)")
            conn.execute("SELECT * FROM pgmem.put_item(%s, ARRAY[%s], 'x', '{\"v\": 1}', thread => 'x')", (b, b))
            conn.execute("SELECT * FROM pgmem.set_retention(%s, keep_days => 30)", (b,))
    before_b, before_a = _counts(admin_conn, b), _counts(admin_conn, a)
    calls = _definer_calls(admin_conn, b)
    assert len(calls) >= 25  # every write function: the list in 900_grants.sql
    answers = {}
    for (signature, query), inside in itertools.product(calls, (a, None)):
        try:
            with conn.transaction():
                if inside is not None:  # else no scope is set at all
                    conn.execute("SELECT set_config('pgmem.scope', %s, true)", (inside,))
                conn.execute("SELECT set_config('pgmem.store_directory', 'd', true)")
                conn.execute(query)
            answers[signature, inside] = "ok"
        except psycopg.Error as exc:
            answers[signature, inside] = str(exc.sqlstate)
    assert {s: v for s, v in answers.items() if v != "42501"} == {}
    assert _counts(admin_conn, b) == before_b
    assert _counts(admin_conn, a) == before_a
