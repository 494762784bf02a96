"""Row-level security per scope, proven as pgmem_app: randomized calls never see another
scope, no scope sees nothing, writes into another scope are refused; and the catalog
promises (RLS enabled + forced everywhere, roles without superpowers) hold."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, search_documents, search_vectors
from pgmem.embedders.base import FloatArray
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from pgmem.recall import recall_vectors
from tests.helpers import vec
from tests.security_helpers import (
    APP_LOGIN,
    NOBODY_LOGIN,
    READER_LOGIN,
    Conn,
    HashEmbedder,
    app_conn,
    connect_as,
    ensure_login_roles,
    hash_vector,
    make_turn,
    role_url,
    sentence,
)

__all__ = ["app_conn"]  # the fixture is used by name

SCOPES = ("tenant-a", "tenant-b")
CALLS = 4_000
ROLES = ("pgmem_owner", "pgmem_app", "pgmem_reader")


def scoped_tables(conn: Conn) -> list[str]:
    rows = conn.execute(
        """SELECT c.relname FROM pg_class c
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'scope_id' AND NOT a.attisdropped
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1"""
    ).fetchall()
    return [str(r[0]) for r in rows]


def test_catalog_every_scoped_table_is_forced_and_roles_are_plain(admin_conn: Conn) -> None:
    ensure_login_roles(admin_conn)
    tables = scoped_tables(admin_conn)
    assert {"scope", "thread", "turn", "piece", "fact", "document", "chunk", "recall_log"} <= set(tables)
    rows = admin_conn.execute(
        """SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
                  (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
             FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relname = ANY(%s)""",
        (tables,),
    ).fetchall()
    # pgmem.piece_word alone is enabled but not forced: its owner reads its word index through
    # pgmem._word_postings (SECURITY DEFINER), which forced row-level security would keep from
    # being used (no GIN operator is leakproof). Every other role is filtered there too.
    unforced = {"piece_word"}
    bad = [r for r in rows if not (r[1] and (r[2] or r[0] in unforced) and int(str(r[3])) >= 1)]
    assert bad == [], f"scoped tables without enabled+forced RLS and a policy: {bad}"
    assert {str(r[0]) for r in rows if not r[2]} == unforced

    roles = admin_conn.execute(
        """SELECT rolname, rolsuper, rolbypassrls, rolcreaterole, rolcreatedb, rolcanlogin
             FROM pg_roles WHERE rolname = ANY(%s) OR rolname = ANY(%s)""",
        (list(ROLES), [APP_LOGIN, READER_LOGIN]),
    ).fetchall()
    assert len(roles) == 5
    for name, superuser, bypass, createrole, createdb, _login in roles:
        assert not (superuser or bypass or createrole or createdb), f"{name} has a superpower"
    assert all(not r[5] for r in roles if r[0] in ROLES), "the group roles must be NOLOGIN"

    # Nothing in this database is owned by the app or reader roles (or their login members).
    owned = admin_conn.execute(
        """SELECT classid::regclass, objid, refobjid::regrole FROM pg_shdepend
            WHERE deptype = 'o' AND refobjid IN ('pgmem_app'::regrole, 'pgmem_reader'::regrole,
                                                  %s::regrole, %s::regrole)""",
        (APP_LOGIN, READER_LOGIN),
    ).fetchall()
    assert owned == []
    # ... and everything in the schema is owned by pgmem_owner.
    strays = admin_conn.execute(
        """SELECT 'class ' || c.oid::regclass FROM pg_class c
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relowner <> 'pgmem_owner'::regrole
           UNION ALL SELECT 'function ' || p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proowner <> 'pgmem_owner'::regrole
           UNION ALL SELECT 'schema pgmem' FROM pg_namespace
            WHERE nspname = 'pgmem' AND nspowner <> 'pgmem_owner'::regrole"""
    ).fetchall()
    assert strays == []

    # The app writes through functions only; the reader cannot write at all.
    for role in ("pgmem_app", "pgmem_reader", APP_LOGIN, READER_LOGIN):
        writable = admin_conn.execute(
            """SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'r'
                  AND has_table_privilege(%s, c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER')""",
            (role,),
        ).fetchall()
        assert writable == [], f"{role} may write {writable}"
        for schema in ("pgmem", "public"):
            may = admin_conn.execute("SELECT has_schema_privilege(%s, %s, 'CREATE')", (role, schema)).fetchone()
            assert may == (False,)
    # The reader writes nothing: no volatile function, and one definer function, read-only:
    # the word side's read of pgmem.piece_word (900_grants.sql says why).
    reader_volatile = admin_conn.execute(
        """SELECT p.proname::text, p.provolatile::text FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace
              AND (p.provolatile = 'v' OR p.prosecdef) AND has_function_privilege('pgmem_reader', p.oid, 'EXECUTE')"""
    ).fetchall()
    assert reader_volatile == [("_word_postings", "s")]
    public_exec = admin_conn.execute(
        """SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace
              AND has_function_privilege('public', p.oid, 'EXECUTE')"""
    ).fetchall()
    assert public_exec == []
    nobody_exec = admin_conn.execute(
        """SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace
              AND has_function_privilege(%s, p.oid, 'EXECUTE')""",
        (NOBODY_LOGIN,),
    ).fetchall()
    assert nobody_exec == []


def _populate(app: Conn) -> dict[str, dict[str, set[object]]]:
    """Two scopes with turns, facts and a logged recall, written as pgmem_app."""
    emb = HashEmbedder()
    rng = np.random.default_rng(7)
    for scope in SCOPES:
        turns = [
            make_turn(scope, f"thread-{i % 3}", i, sentence(rng), tool=sentence(rng, 30) if i % 2 else None)
            for i in range(24)
        ]
        report = ingest_turns(app, turns, emb)
        assert report.inserted == 24 and not report.failed
        add_facts(app, scope, [Fact(sentence(rng), thread="thread-0", turn_index=i) for i in range(10)], emb)
        rec = recall_vectors(app, scope, ["q"], hash_vector("q")[None, :], x=5, floor=-1.0, log=True)
        assert rec.recall_id is not None
    owned: dict[str, dict[str, set[object]]] = {}
    for scope in SCOPES:
        with scoped(app, scope):
            owned[scope] = {
                "piece": {r[0] for r in app.execute("SELECT piece_id FROM pgmem.piece").fetchall()},
                "fact": {r[0] for r in app.execute("SELECT fact_id FROM pgmem.fact").fetchall()},
                "recall": {r[0] for r in app.execute("SELECT recall_id FROM pgmem.recall_log").fetchall()},
                "turn": {
                    (r[0], r[1], r[2])
                    for r in app.execute("SELECT thread_id, turn_index, content_hash FROM pgmem.turn").fetchall()
                },
            }
        assert all(owned[scope].values()), f"scope {scope} should see its own rows"
    return owned


@pytest.mark.long
def test_randomized_calls_never_cross_scopes(app_conn: Conn) -> None:
    owned = _populate(app_conn)
    rng = np.random.default_rng(20261130)
    tables = ["scope", "thread", "turn", "piece", "fact", "document", "chunk", "recall_log"]
    leaked = 0
    refused = 0
    nonempty: Counter[str] = Counter()
    tried: Counter[str] = Counter()

    def vecs(n: int) -> list[FloatArray]:
        return [hash_vector(f"q{rng.integers(1 << 30)}") for _ in range(n)]

    def memory(arg: str) -> list[tuple[str, object]]:
        mode = "hybrid" if rng.random() < 0.3 else "vector"
        n = int(rng.integers(1, 4))
        rows = app_conn.execute(
            "SELECT piece_id FROM pgmem.memory_recall(%s, %s::vector[], %s, x => %s, floor => -1, mode => %s)",
            (arg, vecs(n), [str(w) for w in rng.choice(["invoice", "cargo", "audit"], size=n)], 50, mode),
            binary=True,
        ).fetchall()
        return [("piece", r[0]) for r in rows]

    def facts(arg: str) -> list[tuple[str, object]]:
        rows = app_conn.execute(
            "SELECT fact_id FROM pgmem.fact_recall(%s, %s::vector[], x => 20, floor => -1)", (arg, vecs(2)), binary=True
        ).fetchall()
        return [("fact", r[0]) for r in rows]

    def explain(arg: str) -> list[tuple[str, object]]:
        rows = app_conn.execute(
            "SELECT piece_id FROM pgmem.explain_recall(%s, %s::vector[], floor => -1, show => 30)",
            (arg, vecs(1)),
            binary=True,
        ).fetchall()
        return [("piece", r[0]) for r in rows]

    def hashes(arg: str) -> list[tuple[str, object]]:
        thread = f"thread-{rng.integers(3)}"
        rows = app_conn.execute(
            "SELECT turn_index, content_hash FROM pgmem.turn_hashes(%s, %s, %s)", (arg, thread, list(range(24)))
        ).fetchall()
        return [("turn", (thread, r[0], r[1])) for r in rows]

    def logged(arg: str) -> list[tuple[str, object]]:
        rid = int(rng.choice(sorted(int(str(x)) for s in SCOPES for x in owned[s]["recall"])))
        rows = app_conn.execute("SELECT piece_id FROM pgmem.explain_logged_recall(%s, %s)", (arg, rid)).fetchall()
        return [("piece", r[0]) for r in rows]

    def replayed(arg: str) -> list[tuple[str, object]]:
        rid = int(rng.choice(sorted(int(str(x)) for s in SCOPES for x in owned[s]["recall"])))
        rows = app_conn.execute("SELECT piece_id FROM pgmem.replay_logged_recall(%s, %s)", (arg, rid)).fetchall()
        return [("piece", r[0]) for r in rows]

    def table(arg: str) -> list[tuple[str, object]]:
        name = str(rng.choice(tables))
        rows = app_conn.execute(sql.SQL("SELECT scope_id FROM {}").format(sql.Identifier("pgmem", name))).fetchall()
        return [("scope_id", r[0]) for r in rows]

    ops: dict[str, Callable[[str], list[tuple[str, object]]]] = {
        "memory_recall": memory,
        "fact_recall": facts,
        "explain_recall": explain,
        "turn_hashes": hashes,
        "explain_logged_recall": logged,
        "replay_logged_recall": replayed,
        "select": table,
    }
    names = list(ops)

    def allowed(kind: str, value: object, scope: str) -> bool:
        if kind == "scope_id":
            return value == scope
        return value in owned[scope]["recall" if kind == "recall" else kind]

    for i in range(CALLS):
        name = names[i % len(names)] if i < len(names) else str(rng.choice(names))
        arg = str(rng.choice(SCOPES))
        pick = int(rng.integers(3))
        setting = SCOPES[pick] if pick < 2 else None
        tried[name] += 1
        try:
            if setting is None:
                got = ops[name](arg)
                leaked += len(got)  # no scope: every row is a leak
                continue
            with scoped(app_conn, setting):
                got = ops[name](arg)
        except psycopg.errors.InsufficientPrivilege:
            # A read function asked for another scope than the transaction's (or with none set)
            # is refused (42501, issue 15 item 5) instead of returning nothing.
            assert name != "select" and arg != setting
            refused += 1
            continue
        except psycopg.errors.NoDataFound:
            # Another scope's recall id is not in this scope's log: said, not leaked.
            assert name in ("explain_logged_recall", "replay_logged_recall") and arg == setting
            continue
        leaked += sum(1 for kind, value in got if not allowed(kind, value, setting))
        if got:
            nonempty[name] += 1
    assert sum(tried.values()) == CALLS
    assert leaked == 0
    assert refused > 0
    # The calls did return rows of their own scope (so the zero above means something).
    assert all(nonempty[n] > 0 for n in names), nonempty


def test_no_scope_set_sees_nothing(app_conn: Conn, db_url: str) -> None:
    _populate(app_conn)
    for name in ("scope", "thread", "turn", "piece", "fact", "recall_log"):
        assert app_conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("pgmem", name))
        ).fetchone() == (0,)
    # an empty setting (what a pooled connection has after a scoped transaction ended) is no scope
    app_conn.execute("SET pgmem.scope = ''")
    assert app_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)
    reader = connect_as(db_url, READER_LOGIN)
    try:
        assert reader.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)
        with scoped(reader, SCOPES[0]):
            assert reader.execute("SELECT count(*) > 0 FROM pgmem.piece").fetchone() == (True,)
            assert reader.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = %s", (SCOPES[1],)).fetchone() == (
                0,
            )
    finally:
        reader.close()


def _put_turn_sql(scope: str) -> tuple[str, tuple[object, ...]]:
    return (
        """SELECT pgmem.put_turn(%s, 'intruder', 0, NULL, '[]'::jsonb, '\\x00'::bytea, 'test:hash',
                                 ARRAY['user'], ARRAY[0], ARRAY['[Turn 0 · User]'], ARRAY['x'], %s::vector[])""",
        (scope, [hash_vector("x")]),
    )


@pytest.mark.parametrize("target_exists", [True, False])
def test_writes_into_another_scope_are_refused(app_conn: Conn, target_exists: bool) -> None:
    _populate(app_conn)
    other = SCOPES[1] if target_exists else "tenant-new"
    writes: list[tuple[str, tuple[object, ...]]] = [
        _put_turn_sql(other),
        ("SELECT pgmem.add_facts(%s, 'test:hash', ARRAY['f'], %s::vector[])", (other, [hash_vector("f")])),
        ("SELECT pgmem.reblend(%s, 0.5)", (other,)),
        ("SELECT pgmem.remove_document(%s, 'doc')", (other,)),
        ("SELECT pgmem.reblend_documents(%s, 0.5)", (other,)),
        ("SELECT pgmem.bind_scope_model(%s, 'test:hash', 384)", (other,)),
        ("SELECT pgmem.open_scope(%s)", (other,)),
        (
            "SELECT pgmem.log_recall(%s, 'memory', 'm', ARRAY['p'], %s::vector[], 5, 0.3, NULL, 'vector', '[]')",
            (other, [hash_vector("p")]),
        ),
    ]
    for query, params in writes:
        with pytest.raises(psycopg.errors.InsufficientPrivilege), scoped(app_conn, SCOPES[0]):
            app_conn.execute(query, params, binary=True)
        # and with no scope set at all
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app_conn.execute(query, params, binary=True)
    direct = [
        "INSERT INTO pgmem.scope (scope_id) VALUES ('tenant-a')",
        "INSERT INTO pgmem.embedding_model (model_id, dims) VALUES ('x', 384)",
        "UPDATE pgmem.piece SET body = 'owned'",
        "DELETE FROM pgmem.turn",
        "TRUNCATE pgmem.fact",
        "UPDATE pgmem.vector_column SET dims = 3",
        "CREATE TABLE pgmem.evil (x int)",
        "CREATE FUNCTION pgmem.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "ALTER TABLE pgmem.piece DISABLE ROW LEVEL SECURITY",
        "DROP POLICY scope_isolation ON pgmem.piece",
    ]
    for statement in direct:
        with pytest.raises(psycopg.errors.InsufficientPrivilege), scoped(app_conn, SCOPES[0]):
            app_conn.execute(statement)
    # The other scope is exactly as it was.
    with scoped(app_conn, other):
        assert app_conn.execute("SELECT count(*) FROM pgmem.turn WHERE thread_id = 'intruder'").fetchone() == (0,)
    if target_exists:
        with scoped(app_conn, other):
            assert app_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (24,)
            assert app_conn.execute("SELECT count(*) FROM pgmem.fact").fetchone() == (10,)
            assert app_conn.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (1,)
    else:
        with scoped(app_conn, other):
            assert app_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == (0,)


def test_own_scope_writes_work_as_app(app_conn: Conn) -> None:
    """The definer write functions do work for the app in its own scope (not just refuse)."""
    query, params = _put_turn_sql(SCOPES[0])
    with scoped(app_conn, SCOPES[0]):
        row = app_conn.execute(query, params, binary=True).fetchone()
        assert row is not None and "inserted" in str(row[0])
        assert app_conn.execute("SELECT pgmem.reblend(%s, 0.5)", (SCOPES[0],)).fetchone() == (1,)
        logged = app_conn.execute(
            "SELECT pgmem.log_recall(%s, 'memory', 'm', ARRAY['p'], %s::vector[], 5, 0.3, NULL, 'vector', %s)",
            (SCOPES[0], [hash_vector("p")], json.dumps([])),
            binary=True,
        ).fetchone()
        assert logged is not None and isinstance(logged[0], int), logged
        stored = app_conn.execute(
            "SELECT scope_id, plane, message FROM pgmem.recall_log WHERE recall_id = %s", (logged[0],)
        ).fetchall()
        assert stored == [(SCOPES[0], "memory", "m")]


@pytest.mark.long
def test_dba_setup_then_migrate_as_a_non_superuser_owner_member(admin_conn: Conn) -> None:
    """The production path: a DBA runs `pgmem roles create`, a LOGIN member of pgmem_owner
    (not a superuser) migrates, and a LOGIN member of pgmem_app uses the API."""
    from pgmem.cli.roles import Login, setup_sql
    from pgmem.migrate import upgrade
    from pgmem.sqlfiles import InstallParams
    from tests.conftest import conninfo_url
    from tests.security_helpers import role_url

    name = f"{admin_conn.info.dbname}_dba"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = conninfo_url(name)
    logins = [Login("pgmem_test_migrator", "owner"), Login("pgmem_test_app2", "app")]
    try:
        with psycopg.connect(url, autocommit=True) as dba:
            dba.execute(setup_sql(database=name, logins=logins))
            dba.execute(setup_sql(database=name, logins=logins))  # idempotent
        upgrade(role_url(url, "pgmem_test_migrator"), params=InstallParams(384, 384))
        with psycopg.connect(url, autocommit=True) as c:
            strays = c.execute(
                """SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace
                      AND c.relowner <> 'pgmem_owner'::regrole
                   UNION ALL SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proowner <> 'pgmem_owner'::regrole"""
            ).fetchall()
            assert strays == []
        app = connect_as(url, "pgmem_test_app2")
        try:
            report = ingest_turns(app, [make_turn("s", "t", 0, "hello from the app")], HashEmbedder())
            assert report.inserted == 1
            hits = recall_vectors(app, "s", ["hello"], hash_vector("hello")[None, :], floor=-1.0)
            assert [h.turn_index for h in hits.groups[0].hits] == [0]
        finally:
            app.close()
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_roles_cli_prints_reviewable_sql(capsys: pytest.CaptureFixture[str]) -> None:
    from pgmem.cli import main

    assert main(["roles", "create", "--print", "--login", "svc_app:app:SVC_PW", "--login", "migrator:owner"]) == 0
    out = capsys.readouterr().out
    for expected in (
        'CREATE ROLE "pgmem_app" NOLOGIN NOSUPERUSER NOBYPASSRLS',
        'CREATE ROLE "svc_app" LOGIN NOSUPERUSER NOBYPASSRLS',
        'GRANT "pgmem_app" TO "svc_app";',
        'GRANT "pgmem_owner" TO "migrator";',
        "CREATE SCHEMA pgmem AUTHORIZATION pgmem_owner;",
    ):
        assert expected in out
    assert "PASSWORD" not in out.replace("""-- then: ALTER ROLE "svc_app" PASSWORD '...'""", "")
    # The hint quotes the name as the script does (Bob unquoted is bob; user is a reserved word).
    assert main(["roles", "create", "--print", "--login", "Bob:app:B_PW", "--login", "user:reader:U_PW"]) == 0
    out = capsys.readouterr().out
    assert """ALTER ROLE "Bob" PASSWORD""" in out and """ALTER ROLE "user" PASSWORD""" in out
    # "$" matched before a final newline: "bob\n" was a login name, and its hint broke the script.
    for bad in ("x;drop:app", "svc:admin", "pgmem_app:app", "nocolon", "bob\n:app", "bob:app:PW\n"):
        assert main(["roles", "create", "--print", "--login", bad]) == 2
        assert "error" in capsys.readouterr().err


def test_roles_create_refuses_text_postgres_cannot_take_in_one_line(
    admin_conn: Conn, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A password variable or --vector-schema holding an undecodable byte (a lone surrogate in
    Python) raised UnicodeEncodeError from psycopg: a traceback, after the roles were created and
    before the password was set. Now one line naming the input, the password not shown, and
    nothing created."""
    from pgmem.cli import main

    admin_conn.execute("DROP ROLE IF EXISTS pgmem_test_badpw")  # roles are the server's, not the database's
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("PGMEM_TEST_BAD_PW", "hunter2\udcffx")
    for args in (
        ["--login", "pgmem_test_badpw:app:PGMEM_TEST_BAD_PW"],
        ["--vector-schema", "vec\udcff"],
        ["--print", "--vector-schema", "vec\udcff"],
    ):
        assert main(["roles", "create", *args]) == 2, args
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and "hunter2" not in captured.err + captured.out, captured.err
        assert "PGMEM_TEST_BAD_PW" in captured.err or "--vector-schema" in captured.err, captured.err
    assert admin_conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'pgmem_test_badpw'").fetchone() is None


def test_roles_create_refuses_an_existing_role_that_is_no_safe_login(
    admin_conn: Conn, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--login NAME:ROLE` creates NAME only when it does not exist: an existing SUPERUSER (or
    BYPASSRLS) role was made a member of pgmem_app without a word, and the application using it
    reads every scope; an existing NOLOGIN role was reported as a login that cannot log in. Both
    are refused in one line before anything is granted; an existing plain login is reused."""
    from pgmem.cli import main

    names = ("pgmem_test_su_login", "pgmem_test_bypass_login", "pgmem_test_nologin", "pgmem_test_plain_login")
    admin_conn.execute(f"DROP ROLE IF EXISTS {', '.join(names)}")
    admin_conn.execute("CREATE ROLE pgmem_test_su_login LOGIN SUPERUSER")
    admin_conn.execute("CREATE ROLE pgmem_test_bypass_login LOGIN BYPASSRLS")
    admin_conn.execute("CREATE ROLE pgmem_test_nologin NOLOGIN")
    admin_conn.execute("CREATE ROLE pgmem_test_plain_login LOGIN")
    monkeypatch.setenv("DATABASE_URL", db_url)
    try:
        for name in names[:3]:
            assert main(["roles", "create", "--login", f"{name}:app"]) == 2, name
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and name in err and "SUPERUSER, BYPASSRLS or NOLOGIN" in err, err
        granted = admin_conn.execute(
            "SELECT m.rolname FROM pg_auth_members am JOIN pg_roles m ON m.oid = am.member"
            " WHERE am.roleid = 'pgmem_app'::regrole AND m.rolname = ANY(%s) ORDER BY 1",
            (list(names),),
        ).fetchall()
        assert granted == []
        assert main(["roles", "create", "--login", "pgmem_test_plain_login:app"]) == 0
        assert main(["roles", "create", "--login", "pgmem_test_plain_login:app"]) == 0  # and again
        assert admin_conn.execute("SELECT pg_has_role('pgmem_test_plain_login', 'pgmem_app', 'MEMBER')").fetchone() == (
            True,
        )
    finally:
        admin_conn.execute(f"DROP ROLE IF EXISTS {', '.join(names)}")


def test_roles_create_by_a_login_that_may_not_grant_is_refused_not_ready(
    admin_conn: Conn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The roles are the server's, so in a second database they exist already, and the script's
    GRANT and REVOKE were all that was left: run by a plain login, PostgreSQL only warns ("no
    privileges were granted"), and `pgmem roles create` said "roles ready" with pgmem_owner
    unable to migrate there (until rt71). Now one line naming the remedy; a superuser's run works."""
    from pgmem.cli import main
    from tests.conftest import MAINTENANCE_LOGIN, scratch_database
    from tests.security_helpers import role_url

    with scratch_database(admin_conn, "grants") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")  # the superuser's part, done already
        monkeypatch.setenv("DATABASE_URL", role_url(url, MAINTENANCE_LOGIN))
        assert main(["roles", "create"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "may not grant" in err and "owner of the database" in err, err
        monkeypatch.setenv("DATABASE_URL", url)
        assert main(["roles", "create"]) == 0
        with psycopg.connect(url, autocommit=True) as c:
            row = c.execute("SELECT has_database_privilege('pgmem_owner', current_database(), 'CREATE')").fetchone()
            assert row == (True,)


def _rows_or_refused(conn: Conn, query: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
    """The rows of a read naming a scope that is not the transaction's: none, or refused
    (42501). In a savepoint, so that a refusal leaves the caller's transaction usable."""
    try:
        with conn.transaction():
            return conn.execute(query, params, binary=True).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        return []


def _documents(scope: str, topic: str) -> list[Document]:
    """Two documents, one of them under a document id every scope uses."""
    return [
        Document(
            "guide.md", f"# {topic} guide\n\n## Setup\n\nInstall the {topic} kit.\n\n## Care\n\nClean the {topic}.\n"
        ),
        Document(f"{scope}.md", f"# Notes of {scope}\n\nOnly {scope} may read about {topic}.\n"),
    ]


def test_document_search_never_crosses_scopes(app_conn: Conn, admin_conn: Conn) -> None:
    emb = HashEmbedder()
    for scope, topic in zip(SCOPES, ("kayak", "violin"), strict=True):
        report = add_documents(app_conn, scope, _documents(scope, topic), emb)
        assert report.inserted == 2 and not report.failed
    a, b = SCOPES
    # Ground truth from a superuser (row-level security does not filter it): both scopes' rows.
    chunks = {
        s: {int(str(r[0])) for r in admin_conn.execute("SELECT chunk_id FROM pgmem.chunk WHERE scope_id = %s", (s,))}
        for s in SCOPES
    }
    units = admin_conn.execute(
        "SELECT scope_id, embedding FROM pgmem.piece WHERE kind = 'document' ORDER BY piece_id", binary=True
    ).fetchall()
    assert all(chunks.values()) and {str(r[0]) for r in units} == set(SCOPES)
    # Queries equal to b's units: without the scope filter, b's chunks would be the best hits.
    queries = np.stack([vec(r[1]) for r in units if r[0] == b])
    found = search_vectors(app_conn, a, ["q"] * len(queries), queries, x=50, floor=-1.0)
    got = {h.chunk_id for g in found.groups for h in g.hits}
    assert got == chunks[a]  # every chunk of a (x = 50 > its chunk count), none of b's
    text = search_documents(app_conn, a, "Clean the violin. Install the violin kit.", emb, x=50, floor=-1.0)
    assert {h.chunk_id for g in text.groups for h in g.hits} == chunks[a]
    assert {h.document_id for g in text.groups for h in g.hits} == {"guide.md", f"{a}.md"}
    with scoped(app_conn, a):
        # The SQL function asked for the other scope while the transaction is in a: nothing.
        rows = _rows_or_refused(
            app_conn,
            "SELECT chunk_id FROM pgmem.document_search(%s, %s::vector[], x => 50, floor => -1)",
            (b, list(queries)),
        )
        assert rows == []
        # The tables show a's rows only.
        for table in ("document", "chunk", "piece"):
            seen = app_conn.execute(
                sql.SQL("SELECT DISTINCT scope_id FROM {}").format(sql.Identifier("pgmem", table))
            ).fetchall()
            assert seen == [(a,)], table
        assert {int(str(r[0])) for r in app_conn.execute("SELECT chunk_id FROM pgmem.chunk")} == chunks[a]
    # With no scope set, no document row is visible and the search finds nothing.
    for table in ("document", "chunk", "piece"):
        assert app_conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("pgmem", table))
        ).fetchone() == (0,)
    rows = _rows_or_refused(
        app_conn,
        "SELECT chunk_id FROM pgmem.document_search(%s, %s::vector[], x => 50, floor => -1)",
        (a, list(queries)),
    )
    assert rows == []


ANN_MIN_PIECES = 100


def test_ann_index_path_never_crosses_scopes(app_conn: Conn, admin_conn: Conn) -> None:
    """Both scopes big enough for their own partial HNSW index (built by a superuser, as a DBA
    runs maintenance): recall as the app in scope a takes a's index and never returns b's pieces,
    even for queries equal to b's vectors."""
    emb = HashEmbedder()
    rng = np.random.default_rng(11)
    for scope in SCOPES:
        turns = [make_turn(scope, "t", i, sentence(rng), tool=sentence(rng, 20)) for i in range(55)]
        assert ingest_turns(app_conn, turns, emb).inserted == 55
    made = admin_conn.execute(
        "SELECT scope_id, plane, action FROM pgmem.index_large_scopes(min_pieces => %s)", (ANN_MIN_PIECES,)
    ).fetchall()
    assert sorted((str(s), str(p), str(act)) for s, p, act in made) == [(s, "piece", "create") for s in SCOPES]
    index: dict[str, str] = {}
    for s in SCOPES:
        row = admin_conn.execute("SELECT pgmem.scope_ann_index('piece', %s)::text", (s,)).fetchone()
        assert row is not None and row[0] is not None
        index[s] = str(row[0])
    a, b = SCOPES
    pieces = {
        s: {int(str(r[0])) for r in admin_conn.execute("SELECT piece_id FROM pgmem.piece WHERE scope_id = %s", (s,))}
        for s in SCOPES
    }
    assert len(pieces[a]) >= ANN_MIN_PIECES and len(pieces[b]) >= ANN_MIN_PIECES
    theirs = admin_conn.execute(
        "SELECT embedding FROM pgmem.piece WHERE scope_id = %s ORDER BY piece_id LIMIT 8", (b,), binary=True
    ).fetchall()
    queries = [r[0] for r in theirs]
    # Without the scope filter the nearest piece to each query is b's own (cosine 1).
    for q in queries:
        nearest = admin_conn.execute("SELECT scope_id FROM pgmem.piece ORDER BY embedding <=> %s LIMIT 1", (q,))
        assert nearest.fetchone() == (b,)
    with scoped(app_conn, a):
        got = app_conn.execute(
            "SELECT part_no, piece_id FROM pgmem.memory_recall(%s, %s::vector[], x => 10, floor => -1)",
            (a, queries),
            binary=True,
        ).fetchall()
        scans = app_conn.execute(
            "SELECT pg_stat_get_xact_numscans(%s::regclass), pg_stat_get_xact_numscans(%s::regclass)",
            (index[a], index[b]),
        ).fetchone()
        # The query the index path runs, as the app under row-level security: the planner takes a's index.
        # (up to the index's last piece_id: later pieces are the write tail, searched exactly)
        number = app_conn.execute(
            "SELECT pgmem.scope_no(%s), pgmem.ann_index_through(pgmem.scope_ann_index('piece', %s))", (a, a)
        ).fetchone()
        assert number is not None and number[0] is not None and number[1] is not None
        plan = app_conn.execute(
            sql.SQL(
                "EXPLAIN (FORMAT JSON) SELECT c.piece_id FROM pgmem.piece c WHERE c.scope_id = {} "
                "AND c.scope_no = {} AND c.kind = 'memory' AND c.piece_id <= {} "
                "ORDER BY c.embedding <#> %s::vector LIMIT 10"
            ).format(sql.Literal(a), sql.Literal(number[0]), sql.Literal(number[1])),
            (queries[0],),
            binary=True,
        ).fetchone()
        # Asked for b while the transaction is in a: nothing, through b's index or otherwise.
        other = _rows_or_refused(
            app_conn, "SELECT piece_id FROM pgmem.memory_recall(%s, %s::vector[], x => 10, floor => -1)", (b, queries)
        )
    assert len(got) == 10 * len(queries)
    assert {int(str(r[1])) for r in got} <= pieces[a]
    assert scans is not None and int(str(scans[0])) >= len(queries) and int(str(scans[1])) == 0
    assert plan is not None and index[a].split(".")[-1] in json.dumps(plan[0])
    assert index[b].split(".")[-1] not in json.dumps(plan[0])
    assert other == []
    # Python recall as the app, vector and hybrid: a's pieces only.
    stacked = np.stack([vec(q) for q in queries])
    for mode in ("vector", "hybrid"):
        r = recall_vectors(app_conn, a, ["q"] * len(queries), stacked, x=10, floor=-1.0, mode=mode)
        ids = {h.piece_id for g in r.groups for h in g.hits}
        assert ids and ids <= pieces[a], mode


def test_roles_show_warns_of_a_login_member_that_bypasses_row_level_security(
    admin_conn: Conn, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The groups are NOLOGIN and never connect; their login members do. A SUPERUSER (or
    BYPASSRLS) member of pgmem_app reads every scope, and `roles show` used to list it without a
    word. An unprintable member name is shown escaped (a terminal escape code printed raw)."""
    from pgmem.cli import main

    admin_conn.execute('DROP ROLE IF EXISTS pgmem_test_su_member, "pgmem_test_odd\x1b[2J"')
    admin_conn.execute("CREATE ROLE pgmem_test_su_member LOGIN SUPERUSER")
    admin_conn.execute('CREATE ROLE "pgmem_test_odd\x1b[2J" LOGIN')
    try:
        admin_conn.execute('GRANT pgmem_app TO pgmem_test_su_member, "pgmem_test_odd\x1b[2J"')
        monkeypatch.setenv("DATABASE_URL", db_url)
        assert main(["roles", "show"]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("pgmem_app:")]
        assert "unsafe members (SUPERUSER or BYPASSRLS): pgmem_test_su_member" in line
        assert "\x1b" not in line and "'pgmem_test_odd\\x1b[2J'" in line
    finally:
        admin_conn.execute('DROP ROLE IF EXISTS pgmem_test_su_member, "pgmem_test_odd\x1b[2J"')


@pytest.mark.long
def test_dba_setup_with_pgvector_in_a_schema_of_its_own(admin_conn: Conn) -> None:
    """PGMEM_VECTOR_SCHEMA, the remedy docs/security.md and operations.md give for an application
    login that may create in `public`, worked nowhere: `pgmem roles create --vector-schema vec`
    failed on the missing schema (and granted no USAGE on it), the install stopped at 0001 on
    `type "vector" does not exist` (the files name the type unqualified and the migrating login's
    search_path does not hold vec), and an application login's every call failed, told pgvector
    was not installed, or with psycopg's `cannot adapt type 'ndarray'`. Now the roles script makes
    the schema, grants it and puts it on its logins' search_path, a migration puts it on its own
    transaction's, and a login without it gets one line naming the setting."""
    from pgmem.cli.roles import Login, setup_sql
    from pgmem.db import connect
    from pgmem.errors import SchemaError
    from pgmem.integrations.langgraph import PgmemStore
    from pgmem.migrate import upgrade
    from pgmem.sqlfiles import InstallParams
    from tests.conftest import conninfo_url
    from tests.security_helpers import role_url

    name = f"{admin_conn.info.dbname}_vec"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = conninfo_url(name)
    logins = [Login("pgmem_test_vec_migrator", "owner"), Login("pgmem_test_vec_app", "app")]
    try:
        with psycopg.connect(url, autocommit=True) as dba:
            dba.execute(setup_sql(database=name, vector_schema="vec", logins=logins))
            dba.execute(setup_sql(database=name, vector_schema="vec", logins=logins))  # idempotent
            row = dba.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'")
            assert row.fetchone() == ("vec",)
            dba.execute("DROP ROLE IF EXISTS pgmem_test_vec_plain")
            dba.execute("CREATE ROLE pgmem_test_vec_plain LOGIN IN ROLE pgmem_app")
        upgrade(role_url(url, "pgmem_test_vec_migrator"), params=InstallParams(384, 384, "vec"))
        app = connect(role_url(url, "pgmem_test_vec_app"))
        try:
            report = ingest_turns(app, [make_turn("s", "t", 0, "hello from the app")], HashEmbedder())
            assert report.inserted == 1
            hits = recall_vectors(app, "s", ["hello"], hash_vector("hello")[None, :], floor=-1.0)
            assert [h.turn_index for h in hits.groups[0].hits] == [0]
            store = PgmemStore(app, embedder=HashEmbedder())
            store.put(("users", "u1"), "k", {"text": "Luna the dog hates baths"})
            assert [i.key for i in store.search(("users", "u1"), query="dog")] == ["k"]
        finally:
            app.close()
        with pytest.raises(SchemaError, match=r'not on this login.s search_path: ALTER ROLE .* "vec"'):
            connect(role_url(url, "pgmem_test_vec_plain"))
        plain = psycopg.connect(role_url(url, "pgmem_test_vec_plain"), autocommit=True)
        try:
            with pytest.raises(SchemaError, match="search_path"):
                PgmemStore(plain, embedder=HashEmbedder()).put(("users", "u2"), "k", {"text": "x"})
        finally:
            plain.close()
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin_conn.execute("DROP ROLE IF EXISTS pgmem_test_vec_plain")


def test_a_read_only_login_calling_a_write_is_told_which_role_writes(app_conn: Conn, db_url: str) -> None:
    """A pgmem_reader login (or one in no pgmem role) calling a write or a forget got Postgres's
    bare "permission denied for function forget_thread": one line, but nothing said the login was
    read-only or what writes. The error keeps its SQLSTATE and names pgmem_app in its hint; what
    is stored stays."""
    from pgmem import forget_thread
    from pgmem.db import connect
    from pgmem.errors import ScopeError

    _populate(app_conn)
    with scoped(app_conn, SCOPES[0]):
        before = app_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone()
    for login in (READER_LOGIN, NOBODY_LOGIN):
        c = connect(role_url(db_url, login))
        try:
            says = "function forget_thread" if login == READER_LOGIN else "schema pgmem"
            with pytest.raises(ScopeError, match=f"permission denied for {says}") as err:
                forget_thread(c, SCOPES[0], "t0")
            assert err.value.sqlstate == "42501" and err.value.hint and "pgmem_app" in err.value.hint
            with pytest.raises(ScopeError, match="permission denied for") as err:
                ingest_turns(c, [make_turn(SCOPES[0], "t9", 0, "a note")], HashEmbedder())
            assert err.value.hint and "pgmem_reader only reads" in err.value.hint
        finally:
            c.close()
    with scoped(app_conn, SCOPES[0]):
        assert app_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == before
