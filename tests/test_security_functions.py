"""Functions are safe to call: pinned search_path everywhere, no hijack by objects a
low-privilege session plants, and hostile names only ever travel as data."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, remove_document, search_documents
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.ingest import ingest_turns
from pgmem.recall import recall
from pgmem.sqlfiles import SQL_DIR, InstallParams, render
from tests.conftest import TEST_DIMS
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, app_conn, hash_vector, make_turn

__all__ = ["app_conn"]

HOSTILE_NAMES = [
    'x"; DROP TABLE pgmem.piece; --',
    "'); DROP TABLE pgmem.turn; --",
    "Robert'); DROP SCHEMA pgmem CASCADE;--",
    "$$; DROP TABLE pgmem.fact; $$",
    "%s %(x)s {} {0} %I %L",
    "back\\slash\\'quote",
    "pgmem.scope = 'other'",
    "čšž 漢字 🙂",
    "a" * 200,
    " leading and trailing ",
]


def test_every_function_pins_search_path(admin_conn: Conn) -> None:
    rows = admin_conn.execute(
        """SELECT p.oid::regprocedure::text, p.prosecdef,
                  (SELECT c FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%%'),
                  has_function_privilege('public', p.oid, 'EXECUTE'),
                  coalesce(obj_description(p.oid, 'pg_proc'), '')
             FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace ORDER BY 1"""
    ).fetchall()
    assert len(rows) >= 15
    for fn, secdef, path, public_exec, comment in rows:
        assert path is not None, f"{fn} does not pin search_path"
        schemas = [s.strip() for s in str(path).removeprefix("search_path=").split(",")]
        assert schemas[0] == "pg_catalog" and schemas[-1] == "pg_temp", f"{fn}: {path}"
        assert comment, f"{fn} has no COMMENT"
        if secdef:
            assert not public_exec, f"SECURITY DEFINER {fn} is executable by PUBLIC"
            assert "SECURITY DEFINER:" in str(comment), f"SECURITY DEFINER {fn} has no written reason"
    definers = {str(r[0]).split("(")[0] for r in rows if r[1]}
    assert {"pgmem.put_turn", "pgmem.add_facts", "pgmem.log_recall"} <= definers


def test_the_logged_recall_readers_run_as_the_caller(admin_conn: Conn) -> None:
    """explain_logged_recall and replay_logged_recall read the log under the caller's row-level
    security (SECURITY INVOKER, STABLE), so the app and the read-only role may run them."""
    rows = admin_conn.execute(
        """SELECT p.proname, p.prosecdef, p.provolatile,
                  has_function_privilege('pgmem_app', p.oid, 'EXECUTE'),
                  has_function_privilege('pgmem_reader', p.oid, 'EXECUTE'),
                  has_function_privilege('public', p.oid, 'EXECUTE')
             FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace
              AND p.proname IN ('explain_logged_recall', 'replay_logged_recall') ORDER BY 1"""
    ).fetchall()
    assert rows == [
        ("explain_logged_recall", False, "s", True, True, False),
        ("replay_logged_recall", False, "s", True, True, False),
    ]


PLANTS = [
    # tables that would shadow pgmem's if a function resolved names through the caller's path
    "CREATE TEMP TABLE piece (scope_id text, piece_id bigint, kind text, thread_id text, turn_index int,"
    " label text, body text, embedding public.vector(384))",
    "CREATE TEMP TABLE turn (scope_id text, thread_id text, turn_index int, content_hash bytea)",
    "CREATE TEMP TABLE vector_column (column_name text, dims int)",
    "CREATE TEMP TABLE scope (scope_id text, piece_model_key smallint, fact_model_key smallint)",
    "INSERT INTO pg_temp.vector_column VALUES ('piece.embedding', 3), ('fact.embedding', 3)",
    "INSERT INTO pg_temp.turn VALUES ('s', 't', 0, '\\x00')",
    # masking functions: same names and argument types as ones the pgmem functions call
    "CREATE FUNCTION pg_temp.l2_normalize(public.vector) RETURNS public.vector LANGUAGE sql"
    " AS $$ SELECT array_fill(0.5::real, ARRAY[384])::public.vector $$",
    "CREATE FUNCTION pg_temp.column_dims(text) RETURNS integer LANGUAGE sql AS 'SELECT 3'",
    "CREATE FUNCTION pg_temp.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 's' $$",
    "SET search_path = pg_temp, pgmem, public",
]


def test_planted_temp_objects_do_not_hijack(app_conn: Conn, admin_conn: Conn) -> None:
    emb = HashEmbedder()
    # Control: a function WITHOUT a pinned search_path is hijacked by the same plants,
    # so the assertions below would catch a pgmem function that forgot to pin it.
    admin_conn.execute("CREATE SCHEMA control")
    admin_conn.execute("SET check_function_bodies = off")  # `piece` resolves only when called
    admin_conn.execute(
        "CREATE FUNCTION control.piece_rows() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM piece'"
    )
    admin_conn.execute(sql.SQL("GRANT USAGE ON SCHEMA control TO {}").format(sql.Identifier(APP_LOGIN)))

    report = ingest_turns(app_conn, [make_turn("s", "t", i, f"turn {i} about freight") for i in range(3)], emb)
    assert report.inserted == 3
    for plant in PLANTS:
        app_conn.execute(plant)
    app_conn.execute(
        "INSERT INTO pg_temp.piece VALUES ('s', -1, 'memory', 't', 0, 'FAKE', 'FAKE', %s)", (hash_vector("q"),)
    )
    assert app_conn.execute("SELECT control.piece_rows()").fetchone() == (1,)  # hijacked: the plants work

    # The low-privilege session cannot plant anywhere the functions do look.
    for statement in (
        "CREATE FUNCTION public.l2_normalize(public.vector) RETURNS public.vector LANGUAGE sql AS 'SELECT $1'",
        "CREATE FUNCTION pgmem.column_dims(text, integer) RETURNS integer LANGUAGE sql AS 'SELECT 3'",
        "CREATE TABLE public.piece (x int)",
        "CREATE OPERATOR public.<=> (LEFTARG = text, RIGHTARG = text, FUNCTION = texteq)",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app_conn.execute(statement)

    # pgmem's functions see only pgmem's objects: writes store the real vectors, reads the real rows.
    report = ingest_turns(app_conn, [make_turn("s", "t", 9, "a planted session writes")], emb)
    assert report.inserted == 1 and not report.failed
    hits = recall(app_conn, "s", "freight", emb, x=10, floor=-1.0)
    bodies = [h.body for g in hits.groups for h in g.hits]
    assert "FAKE" not in bodies and len(bodies) == 4
    with scoped(app_conn, "s"):
        hashes = app_conn.execute("SELECT turn_index FROM pgmem.turn_hashes('s', 't', ARRAY[0, 1, 2, 9])").fetchall()
        assert sorted(int(str(r[0])) for r in hashes) == [0, 1, 2, 9]
        dims = app_conn.execute("SELECT pgmem.column_dims('piece.embedding')").fetchone()
        assert dims == (384,)
        raw = app_conn.execute(
            "SELECT raw_embedding FROM pgmem.piece WHERE turn_index = 9 ORDER BY piece_id LIMIT 1"
        ).fetchone()
    assert raw is not None
    stored = raw[0].to_numpy()  # type: ignore[attr-defined]
    assert abs(float(stored[0]) - 0.5) > 1e-3 or abs(float(stored[1]) - 0.5) > 1e-3  # not the masking function's
    # A different scope is still invisible although the session "set" one through a masking current_setting.
    assert app_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_hostile_scope_and_thread_names_are_data(app_conn: Conn, admin_conn: Conn, name: str) -> None:
    emb = HashEmbedder()
    turns = [make_turn(name, name, i, f"hostile name turn {i}", tool="result") for i in range(2)]
    report = ingest_turns(app_conn, turns, emb)
    assert report.inserted == 2, report.failed
    assert ingest_turns(app_conn, turns, emb).unchanged == 2
    hits = recall(app_conn, name, "hostile name turn", emb, x=5, floor=-1.0, thread=name, log=True)
    assert {h.thread_id for g in hits.groups for h in g.hits} == {name}
    assert hits.recall_id is not None
    add_facts(app_conn, name, [Fact("a fact", thread=name, turn_index=0, section=name)], emb)
    facts = fact_recall(app_conn, name, "a fact", emb, floor=-1.0, thread=name)
    assert [h.body for g in facts.groups for h in g.hits] == ["a fact"]
    docs = add_documents(app_conn, name, [Document(name, f"# {name}\n\nSome text about {name}.\n")], emb)
    assert docs.inserted == 1, docs
    found = search_documents(app_conn, name, "some text", emb, floor=-1.0)
    assert found.groups and found.groups[0].hits
    pieces = admin_conn.execute(
        "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'memory'", (name,)
    ).fetchone()
    assert pieces != (0,)
    with scoped(app_conn, name):
        # The logged recall replays to the hits it gave; then every memory piece is reblended.
        kept = app_conn.execute(
            "SELECT piece_id FROM pgmem.explain_logged_recall(%s, %s) WHERE verdict = 'kept'", (name, hits.recall_id)
        ).fetchall()
        assert {int(str(r[0])) for r in kept} == {h.piece_id for g in hits.groups for h in g.hits}
        replayed = app_conn.execute(
            "SELECT part_no, rank, piece_id, change FROM pgmem.replay_logged_recall(%s, %s)", (name, hits.recall_id)
        ).fetchall()
        assert replayed == [(g.part_no, h.rank, h.piece_id, "same") for g in hits.groups for h in g.hits]
        assert app_conn.execute("SELECT pgmem.reblend(%s, 0.7)", (name,)).fetchone() == pieces
    assert remove_document(app_conn, name, name)
    # Stored exactly as given, and every table is still there.
    assert admin_conn.execute("SELECT DISTINCT scope_id, thread_id FROM pgmem.turn").fetchall() == [(name, name)]
    tables = admin_conn.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmem' AND tablename = ANY(%s)",
        (["scope", "thread", "turn", "piece", "fact", "document", "chunk", "recall_log"],),
    ).fetchone()
    assert tables == (8,)


def test_hostile_names_through_the_index_builders_dynamic_ddl(app_conn: Conn, admin_conn: Conn) -> None:
    """pgmem.index_large_scopes builds DDL from scope names (run by a DBA): they stay data."""
    emb = HashEmbedder()
    names = [HOSTILE_NAMES[0], HOSTILE_NAMES[3]]
    for name in names:
        turns = [make_turn(name, "t", i, f"turn {i}", tool=f"output {i}") for i in range(50)]
        assert ingest_turns(app_conn, turns, emb).inserted == 50
    built = admin_conn.execute("SELECT scope_id FROM pgmem.index_large_scopes(min_pieces => 100)").fetchall()
    assert {str(r[0]) for r in built} == set(names)
    for name in names:
        index = admin_conn.execute("SELECT pgmem.scope_ann_index('piece', %s) IS NOT NULL", (name,)).fetchone()
        assert index == (True,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (200,)


def _apply_grants(admin_conn: Conn) -> None:
    """Apply sql/idempotent/900_grants.sql again, as every migration's last step does."""
    text = (SQL_DIR / "idempotent" / "900_grants.sql").read_text(encoding="utf-8")
    admin_conn.execute(render(text, InstallParams(TEST_DIMS, TEST_DIMS)).encode())


#: Preferred over pg_catalog's unnest(anyarray) for an integer[] (an exact type beats a
#: polymorphic one), which put_turns, a SECURITY DEFINER function, calls first: it would run as
#: pgmem_owner.
PLANTED_UNNEST = (
    "CREATE FUNCTION {}.unnest(a integer[]) RETURNS SETOF integer LANGUAGE plpgsql "
    "SET search_path = pg_catalog, pg_temp AS "
    "$$ BEGIN RAISE EXCEPTION 'planted unnest ran as %', current_user; END $$"
)
#: A put_turns call of no turn: it runs the planted function, if any, and stores nothing.
PUT_NOTHING = (
    "SELECT * FROM pgmem.put_turns('s', 'm', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')"
)


@pytest.mark.parametrize("schema", ["public", "pgmem"])
def test_an_app_login_that_may_create_where_pgmem_looks_fails_the_install(
    app_conn: Conn, admin_conn: Conn, schema: str
) -> None:
    """Every pgmem function searches pgvector's schema (public here) and pgmem, so a function an
    app login creates there can be preferred over a built-in one and run as pgmem_owner inside a
    SECURITY DEFINER function: with that, the login could turn row-level security off. The
    install checked PUBLIC and the group roles on pgvector's schema only, not their LOGIN
    members, nor what such a member had planted already (in pgmem it even became pgmem_owner's):
    both are refused now (42501), naming the role or the object."""
    grant = sql.SQL("GRANT CREATE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(APP_LOGIN))
    revoke = sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(sql.Identifier(schema), sql.Identifier(APP_LOGIN))
    admin_conn.execute(grant)
    try:
        app_conn.execute(sql.SQL(PLANTED_UNNEST).format(sql.Identifier(schema)))
        with scoped(app_conn, "s"), pytest.raises(psycopg.errors.RaiseException, match="ran as pgmem_owner"):
            app_conn.execute(PUT_NOTHING)  # the hijack the check prevents
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"{APP_LOGIN}.*may CREATE in schema {schema}"):
            _apply_grants(admin_conn)
        admin_conn.execute(revoke)
        # The privilege is gone, the planted function is not.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=rf"unnest\(integer\[\]\) in schema {schema}"):
            _apply_grants(admin_conn)
    finally:
        admin_conn.execute(revoke)
        admin_conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}.unnest(integer[])").format(sql.Identifier(schema)))
    _apply_grants(admin_conn)
    with scoped(app_conn, "s"):
        assert app_conn.execute(PUT_NOTHING).fetchall() == []
