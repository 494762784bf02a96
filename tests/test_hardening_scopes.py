"""One tenant must not affect the others (issue 12, items 5-7), tried as the roles a real
deployment uses: the app's login (a member of pgmem_app), the reader's, and the DBA's login
that migrates pgmem (a member of pgmem_owner).

- Index maintenance sees every scope, or refuses: run the way docs/scaling.md says, under a
  scope or not, it never plans the DROP of another scope's index.
- The model registry is reached only through bind_scope_model inside the caller's scope, and
  33,000 registrations rolled back burn no key.
- No scope name shows in the catalog (index names and definitions), and recall still takes the
  scope's partial index.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from pgmem import server
from pgmem.embedders.base import FloatArray
from tests.security_helpers import (
    READER_LOGIN,
    Conn,
    app_conn,
    connect_as,
    ensure_login_roles,
    hash_vector,
    role_url,
)

__all__ = ["app_conn"]

#: A LOGIN member of pgmem_owner, like the `migrator` login of docs/security.md.
OWNER_LOGIN = "pgmem_test_maint"
#: Two large scopes (named like real tenants: e-mail addresses) and a small one.
LARGE = ("alice@example.com", "bob@example.com")
SMALL = "carol@example.com"
MIN = 100  # min_pieces of the maintenance calls: small fixtures


def _vectors(n: int, salt: str) -> list[FloatArray]:
    return [hash_vector(f"{salt} {i}") for i in range(n)]


@pytest.fixture
def store(admin_conn: Conn) -> Conn:
    """120 memory pieces and 110 facts in each large scope, 5 of each in the small one, written
    as a DBA would load them (one statement per scope); returns the superuser connection."""
    ensure_login_roles(admin_conn)
    with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        admin_conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(
                sql.Identifier(OWNER_LOGIN)
            )
        )
    admin_conn.execute(sql.SQL("GRANT pgmem_owner TO {}").format(sql.Identifier(OWNER_LOGIN)))
    for scope in (*LARGE, SMALL):
        n = 120 if scope in LARGE else 5
        with admin_conn.transaction():
            admin_conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            admin_conn.execute("SELECT pgmem.bind_scope_model(%s, 'test:hash', 384, 'piece')", (scope,))
            admin_conn.execute("INSERT INTO pgmem.thread (scope_id, thread_id) VALUES (%s, 't')", (scope,))
            admin_conn.execute(
                "INSERT INTO pgmem.turn (scope_id, thread_id, turn_index, messages, content_hash)"
                " SELECT %s, 't', g, '[]', '\\x00' FROM generate_series(0, %s - 1) g",
                (scope, n),
            )
            admin_conn.execute(
                """INSERT INTO pgmem.piece (scope_id, kind, unit_kind, thread_id, turn_index, label, body,
                                            raw_embedding, embedding, model_key)
                   SELECT %s, 'memory', 'user', 't', v.i - 1, 'label', 'body', v.e, v.e,
                          (SELECT piece_model_key FROM pgmem.scope WHERE scope_id = %s)
                     FROM unnest(%s::vector[]) WITH ORDINALITY AS v(e, i)""",
                (scope, scope, _vectors(n, scope)),
            )
            m = 110 if scope in LARGE else 5
            admin_conn.execute(
                "SELECT count(*) FROM pgmem.add_facts(%s, 'test:hash', %s, %s::vector[])",
                (scope, [f"fact {i}" for i in range(m)], _vectors(m, "fact " + scope)),
            )
    return admin_conn


@pytest.fixture
def owner(store: Conn, db_url: str) -> Iterator[Conn]:
    """The DBA's login (member of pgmem_owner): what docs/scaling.md says maintenance runs as."""
    c = connect_as(db_url, OWNER_LOGIN)
    yield c
    c.close()


def _indexed(admin: Conn) -> dict[tuple[str, str], str]:
    """(plane, scope) -> name of the scope's valid partial ANN index, read by a superuser."""
    out = {}
    for scope in (*LARGE, SMALL):
        for plane in ("piece", "fact"):
            row = admin.execute("SELECT pgmem.scope_ann_index(%s, %s)::text", (plane, scope)).fetchone()
            if row is not None and row[0] is not None:
                out[(plane, scope)] = str(row[0])
    return out


def _every_large_scope_indexed(admin: Conn) -> None:
    want = {(plane, scope) for plane in ("piece", "fact") for scope in LARGE}
    assert set(_indexed(admin)) == want


# --- item 5: index maintenance sees every scope, or refuses ------------------------------


def test_maintenance_as_documented_indexes_every_large_scope(store: Conn, owner: Conn, db_url: str) -> None:
    """docs/scaling.md: as the migrating login, `SELECT ddl FROM pgmem.scope_index_plan(...)
    \\gexec` (each statement on its own, CONCURRENTLY), with or without a scope set."""
    plan = owner.execute("SELECT plane, scope_id, action, ddl FROM pgmem.scope_index_plan(%s)", (MIN,)).fetchall()
    assert sorted((str(p[0]), str(p[1]), str(p[2])) for p in plan[:-1]) == sorted(
        (plane, scope, "create") for plane in ("piece", "fact") for scope in LARGE
    )
    # The last statement gives back the maintenance lock the plan took (read, not run, here).
    assert plan[-1] == ("lock", None, "unlock", "SELECT pgmem._end_index_maintenance()")
    owner.execute(str(plan[-1][3]))
    psql = subprocess.run(
        [str(server.bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", role_url(db_url, OWNER_LOGIN)],
        input=f"SELECT ddl FROM pgmem.scope_index_plan(min_pieces => {MIN}) \\gexec\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert psql.returncode == 0, psql.stderr
    _every_large_scope_indexed(store)
    # What docs/security.md used to advise ("setting each scope in turn") now changes nothing:
    # under any scope the plan still sees the others and drops none of their indexes.
    for scope in (*LARGE, SMALL):
        with owner.transaction():
            owner.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            assert owner.execute("SELECT count(*) FROM pgmem.scope_index_plan(%s)", (MIN,)).fetchone() == (0,)
            owner.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
    _every_large_scope_indexed(store)


def _plan(c: Conn) -> list[str]:
    """The statements of a plan as the DBA's psql reads them (`SELECT ddl ... \\gexec`)."""
    return [str(r[0]) for r in c.execute("SELECT ddl FROM pgmem.scope_index_plan(%s)", (MIN,)).fetchall()]


def test_a_plan_beside_a_build_in_progress_drops_nothing(store: Conn, owner: Conn, db_url: str) -> None:
    """Run A's \\gexec builds CONCURRENTLY; a build in progress is `indisvalid = false`, and run B's
    plan (pg_cron beside a DBA's psql) listed it as a failed build to drop: B's DROP dropped the
    index A had just built. B now stops with 55P03 (one line) and drops nothing."""
    plan_a = _plan(owner)
    blocker = psycopg.connect(db_url)  # a writer in flight: A's first build waits for it, invalid
    blocker.execute("LOCK TABLE pgmem.piece IN ROW EXCLUSIVE MODE")
    errors: list[BaseException] = []

    def build_first() -> None:
        try:
            owner.execute(plan_a[0])
        except psycopg.Error as exc:
            errors.append(exc)

    a = threading.Thread(target=build_first)
    a.start()
    other = connect_as(db_url, OWNER_LOGIN)
    try:
        for _ in range(100):
            building = store.execute(
                "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname LIKE 'piece\\_ann\\_s%' AND NOT i.indisvalid"
            ).fetchone()
            if building != (0,):
                break
            time.sleep(0.02)
        assert building == (1,)
        try:
            plan_b = _plan(other)
        except psycopg.errors.LockNotAvailable as exc:
            line = str(exc.diag.message_primary)
            assert line.startswith("index maintenance is already running in another session (pid ") and "\n" not in line
            plan_b = []
    finally:
        blocker.close()
        a.join(30)
    for ddl in plan_b:  # B's drops, once A's build is done
        if ddl.startswith("DROP"):
            other.execute(ddl)
    for ddl in plan_a[1:]:
        owner.execute(ddl)
    other.close()
    assert errors == []
    _every_large_scope_indexed(store)


def test_overlapping_rebuilds_leave_the_scope_its_index(store: Conn, owner: Conn, db_url: str) -> None:
    """Two runs rebuild one scope's index (create `_rebuild`, drop, rename) side by side: B found A's
    `_rebuild` built (IF NOT EXISTS), dropped the old index and renamed A's into its place, then
    A's "drop the old index" dropped it. The scope was left with none (exact scans from then on).
    B (a plan or index_large_scopes) now stops with 55P03 while A's plan is in progress."""
    owner.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s, m => 16)", (MIN,))
    other = connect_as(db_url, OWNER_LOGIN)
    try:
        plan_a = _plan(owner)  # m 24: every index rebuilt
        assert sum(d.startswith("CREATE") for d in plan_a) == 4
        try:
            plan_b = _plan(other)
        except psycopg.errors.LockNotAvailable:
            plan_b = []
        for ddl in plan_a:  # A builds the `_rebuild` twins
            if ddl.startswith("CREATE"):
                owner.execute(ddl)
        for ddl in plan_b:  # B runs its plan whole
            other.execute(ddl)
        for ddl in plan_a:  # A drops the old indexes and renames
            if not ddl.startswith("CREATE"):
                owner.execute(ddl)
        _every_large_scope_indexed(store)
        assert _plan(other) == []  # A's last statement gave the lock back; nothing is left to do
        # A plan read and not run holds the lock until its last statement (or the session's end).
        assert owner.execute("SELECT count(*) FROM pgmem.scope_index_plan(%s, m => 16)", (MIN,)).fetchone() == (13,)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
        owner.execute("SELECT pgmem._end_index_maintenance()")
        assert other.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,)).fetchall() == []
    finally:
        other.close()


def test_a_rebuild_stopped_before_its_rename_is_renamed_not_built_again(store: Conn, owner: Conn) -> None:
    """A run stopped between a rebuild's "drop the old index" and its rename left the scope only
    `piece_ann_s<n>_rebuild`, which recall does not use (it looks the index up by name: exact scans
    from then on); the next plan built a new index from nothing and dropped the valid twin. It
    renames the twin now (0112), and the plan after it has nothing left to do."""
    owner.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
    [(n,)] = store.execute("SELECT scope_no FROM pgmem.scope WHERE scope_id = %s", (LARGE[0],)).fetchall()
    name = f"piece_ann_s{n}"
    rows = owner.execute("SELECT scope_id, plane, ddl FROM pgmem.scope_index_plan(%s, m => 16)", (MIN,)).fetchall()
    rebuild = [str(r[2]) for r in rows if r[0] == LARGE[0] and r[1] == "piece"]
    assert [d.split()[0] for d in rebuild] == ["CREATE", "DROP", "ALTER"]
    for ddl in rebuild[:2]:  # the run stops before its rename
        owner.execute(ddl)
    owner.execute("SELECT pgmem._end_index_maintenance()")
    assert store.execute("SELECT pgmem.scope_ann_index('piece', %s)", (LARGE[0],)).fetchone() == (None,)
    twin = store.execute("SELECT to_regclass(%s)::oid", (f"pgmem.{name}_rebuild",)).fetchone()
    rows = owner.execute("SELECT scope_id, plane, ddl FROM pgmem.scope_index_plan(%s, m => 16)", (MIN,)).fetchall()
    mine = [str(r[2]) for r in rows if r[0] in (LARGE[0], None) and r[1] in ("piece", "lock")]
    assert mine[0] == f"ALTER INDEX IF EXISTS pgmem.{name}_rebuild RENAME TO {name}", mine
    assert not any(d.startswith("CREATE") and name in d for d in mine), mine
    for row in rows:
        owner.execute(str(row[2]))
    assert store.execute("SELECT to_regclass(%s)::oid", (f"pgmem.{name}",)).fetchone() == twin
    assert store.execute("SELECT pgmem.scope_ann_index('piece', %s)::text", (LARGE[0],)).fetchone() == (
        f"pgmem.{name}",
    )
    assert owner.execute("SELECT count(*) FROM pgmem.scope_index_plan(%s, m => 16)", (MIN,)).fetchone() == (0,)
    _every_large_scope_indexed(store)


def test_a_build_in_progress_reads_building_and_the_plan_leaves_it(store: Conn, owner: Conn, db_url: str) -> None:
    """A DBA's CREATE INDEX CONCURRENTLY, validating (ready, not yet valid: it waits for an older
    snapshot): pgmem.stats read 'invalid' (a failed build, which the plan drops) and the plan
    listed its DROP. It reads 'building' and the plan leaves it alone; a failed build stays 'invalid'."""
    [(n,)] = store.execute("SELECT scope_no FROM pgmem.scope WHERE scope_id = %s", (LARGE[0],)).fetchall()
    name = f"piece_ann_s{n}"
    snap = psycopg.connect(db_url)
    snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    snap.execute("SELECT 1 FROM pgmem.scope LIMIT 1")  # an older snapshot: the build waits for it
    builder = psycopg.connect(db_url, autocommit=True)
    errors: list[BaseException] = []

    def build() -> None:
        try:
            builder.execute(
                f"CREATE INDEX CONCURRENTLY {name} ON pgmem.piece USING hnsw (embedding vector_ip_ops)"
                f" WHERE scope_no = {n} AND kind = 'memory'"
            )
        except psycopg.Error as exc:
            errors.append(exc)

    b = threading.Thread(target=build)
    b.start()
    try:
        for _ in range(200):
            state = store.execute(
                "SELECT indisready, indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (f"pgmem.{name}",)
            ).fetchone()
            if state == (True, False):
                break
            time.sleep(0.02)
        assert state == (True, False)
        row = owner.execute("SELECT piece_index_state FROM pgmem.stats(%s)", (LARGE[0],)).fetchone()
        assert row == ("building",)
        plan = _plan(owner)
        owner.execute("SELECT pgmem._end_index_maintenance()")
        assert not [d for d in plan if name in d]
    finally:
        snap.close()
        b.join(30)
        builder.close()
    assert errors == []
    assert owner.execute("SELECT piece_index_state FROM pgmem.stats(%s)", (LARGE[0],)).fetchone() == ("valid",)
    # A build that failed (here: marked so) is still 'invalid', and the plan drops it.
    store.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (f"pgmem.{name}",))
    assert owner.execute("SELECT piece_index_state FROM pgmem.stats(%s)", (LARGE[0],)).fetchone() == ("invalid",)
    assert [d for d in _plan(owner) if name in d] == [f"DROP INDEX CONCURRENTLY IF EXISTS pgmem.{name}"]


def test_index_large_scopes_under_a_scope_keeps_the_other_scopes_indexes(store: Conn, owner: Conn) -> None:
    """The report's reproduction: index_large_scopes with SET LOCAL pgmem.scope = <one scope>."""
    owner.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
    _every_large_scope_indexed(store)
    with owner.transaction():
        owner.execute("SET LOCAL pgmem.scope = 'alice@example.com'")
        done = owner.execute("SELECT action FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,)).fetchall()
    assert done == []
    _every_large_scope_indexed(store)


def test_maintenance_refused_to_whoever_sees_one_scope(store: Conn, app_conn: Conn, db_url: str) -> None:
    store.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
    before = _indexed(store)
    reader = connect_as(db_url, READER_LOGIN)
    try:
        for c in (app_conn, reader):
            for call in (
                "SELECT * FROM pgmem.scope_index_plan(%s)",
                "SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege) as err, c.transaction():
                    c.execute("SET LOCAL pgmem.scope = 'alice@example.com'")
                    c.execute(call, (MIN,))
                if c is reader:
                    continue  # the reader may not even call them: both are volatile (the plan takes a lock, 0110)
                assert "must see every scope" in str(err.value)
                assert err.value.diag.message_hint and "pgmem_owner" in err.value.diag.message_hint
    finally:
        reader.close()
    assert _indexed(store) == before


def test_the_maintenance_policy_widens_nothing_for_the_app(store: Conn, app_conn: Conn, owner: Conn) -> None:
    """pgmem.maintenance is an ordinary setting anyone can SET: it must not let the app (even
    inside the SECURITY DEFINER write functions, which run as pgmem_owner) read another scope,
    and outside scope_index_plan the owner's login is filtered like everyone."""
    with app_conn.transaction():
        app_conn.execute("SET LOCAL pgmem.maintenance = 'on'")
        app_conn.execute("SET LOCAL pgmem.scope = 'alice@example.com'")
        seen = app_conn.execute("SELECT DISTINCT scope_id FROM pgmem.piece UNION SELECT scope_id FROM pgmem.fact")
        assert [r[0] for r in seen] == ["alice@example.com"]
        # a definer write function, run as pgmem_owner with the setting on: still one scope
        assert app_conn.execute(
            "SELECT count(*) FROM pgmem.add_facts('alice@example.com', 'test:hash', %s, %s::vector[])",
            (["one more"], _vectors(1, "x")),
        ).fetchone() == (1,)
    with owner.transaction():
        owner.execute("SET LOCAL pgmem.scope = 'alice@example.com'")
        assert owner.execute("SELECT count(DISTINCT scope_id) FROM pgmem.piece").fetchone() == (1,)
    assert owner.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)


# --- item 6: the model registry -------------------------------------------------------------


@pytest.mark.long
def test_model_registry_cannot_be_exhausted_by_one_tenant(store: Conn, app_conn: Conn) -> None:
    # Direct registration is not the app's to call any more.
    for call in (
        "SELECT pgmem.model_key('junk', 384, 'piece.embedding')",
        "SELECT pgmem._model_key('junk', 384, 'piece.embedding')",
    ):
        with pytest.raises((psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege)):
            app_conn.execute(call)
    # The way that is left (binding models to its own scope) costs nothing once rolled back:
    # 33,000 registrations, more than a smallint key has.
    top = store.execute("SELECT max(model_key) FROM pgmem.embedding_model").fetchone()
    assert top is not None
    with app_conn.transaction():
        # a scope of its own for each (rebinding one scope 33,000 times is merely slower)
        n = app_conn.execute(
            "SELECT count(pgmem.bind_scope_model(s.scope, 'junk' || g, 384, 'piece'))"
            " FROM generate_series(1, 33000) g,"
            " LATERAL (SELECT set_config('pgmem.scope', 'mallory' || g, true) AS scope) s"
        ).fetchone()
        assert n == (33000,)
        raise psycopg.Rollback()  # as the report's attacker did
    # Any tenant can still register a new model, and its key is the next one: nothing was burnt.
    with app_conn.transaction():
        app_conn.execute("SET LOCAL pgmem.scope = 'dave'")
        key = app_conn.execute("SELECT pgmem.bind_scope_model('dave', 'new-model', 384, 'piece')").fetchone()
    assert key == (int(str(top[0])) + 1,)
    # and a scope may register only inside its own scope
    with pytest.raises(psycopg.errors.InsufficientPrivilege), app_conn.transaction():
        app_conn.execute("SET LOCAL pgmem.scope = 'dave'")
        app_conn.execute("SELECT pgmem.bind_scope_model('erin', 'other-model', 384, 'piece')")


# --- item 7: no scope names in the catalog ------------------------------------------------


def _names_in(text: str) -> list[str]:
    """Scope names, or the md5 prefixes the old index names were made of, found in `text`."""
    found = []
    for scope in (*LARGE, SMALL):
        for needle in (scope, scope.split("@")[0], hashlib.md5(scope.encode()).hexdigest()[:24]):
            if needle in text:
                found.append(needle)
    return found


def test_catalog_shows_no_scope_name_and_recall_takes_the_index(store: Conn, app_conn: Conn, db_url: str) -> None:
    store.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
    indexes = _indexed(store)
    assert len(indexes) == 4
    reader = connect_as(db_url, READER_LOGIN)
    try:
        for c in (app_conn, reader):
            rows = c.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'pgmem'"
                " UNION ALL SELECT relname, '' FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace"
            ).fetchall()
            seen = " ".join(f"{r[0]} {r[1]}" for r in rows)
            assert all(i.split(".")[-1] in seen for i in indexes.values())  # the indexes are there
            assert _names_in(seen) == []
    finally:
        reader.close()
    # Recall as the app still takes the scope's index: the query memory_recall runs is planned
    # on it, and running memory_recall scans it once per part.
    scope = LARGE[0]
    index = indexes[("piece", scope)]
    query = hash_vector("query")
    with app_conn.transaction():
        app_conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        # (with the index's last piece_id: later pieces are the write tail, searched exactly beside it)
        number = app_conn.execute(
            "SELECT pgmem.scope_no(%s), pgmem.ann_index_through(%s::regclass)", (scope, index)
        ).fetchone()
        assert number is not None and number[0] is not None and number[1] is not None
        plan = app_conn.execute(
            sql.SQL(
                "EXPLAIN SELECT c.piece_id FROM pgmem.piece c WHERE c.scope_id = {} AND c.scope_no = {}"
                " AND c.kind = 'memory' AND c.piece_id <= {} ORDER BY c.embedding <#> %s::vector LIMIT 5"
            ).format(sql.Literal(scope), sql.Literal(number[0]), sql.Literal(number[1])),
            (query,),
        ).fetchall()
        assert f"Index Scan using {index.split('.')[-1]}" in "\n".join(str(r[0]) for r in plan)
        hits = app_conn.execute(
            "SELECT count(*) FROM pgmem.memory_recall(%s, %s::vector[], floor => -1)", (scope, [query, query])
        ).fetchone()
        assert hits == (10,)
        scans = app_conn.execute("SELECT pg_stat_get_xact_numscans(%s::regclass)", (index,)).fetchone()
        assert scans is not None and int(str(scans[0])) >= 2
        facts = app_conn.execute(
            "SELECT count(*) FROM pgmem.fact_recall(%s, %s::vector[], floor => -1)", (scope, [query])
        ).fetchone()
        assert facts == (5,)
        fscans = app_conn.execute(
            "SELECT pg_stat_get_xact_numscans(%s::regclass)", (indexes[("fact", scope)],)
        ).fetchone()
        assert fscans is not None and int(str(fscans[0])) >= 1


def test_indexes_named_after_scopes_are_replaced_by_the_plan(store: Conn, owner: Conn) -> None:
    """An index built before 0003 (named from md5(scope), WHERE scope_id = '<scope>') is
    replaced: the new one is created first, then the old one dropped."""
    scope = LARGE[0]
    old = "piece_ann_" + hashlib.md5(scope.encode()).hexdigest()[:24]
    store.execute(
        sql.SQL(
            "CREATE INDEX {} ON pgmem.piece USING hnsw (embedding vector_ip_ops) WITH (m = 24, ef_construction = 400)"
            " WHERE scope_id = {} AND kind = 'memory'"
        ).format(sql.Identifier(old), sql.Literal(scope))
    )
    plan = owner.execute("SELECT plane, scope_id, action, ddl FROM pgmem.scope_index_plan(%s)", (MIN,)).fetchall()
    piece = [(str(p[2]), str(p[3])) for p in plan if p[0] == "piece" and (p[1] == scope or p[2] == "drop")]
    assert [a for a, _ in piece] == ["create", "drop"]
    assert old in piece[1][1] and old not in piece[0][1]
    for row in plan:
        owner.execute(str(row[3]))
    _every_large_scope_indexed(store)
    defs = store.execute("SELECT string_agg(indexname || ' ' || indexdef, ' ') FROM pg_indexes").fetchone()
    assert defs is not None and _names_in(str(defs[0])) == []


def test_what_the_catalog_still_shows(store: Conn, app_conn: Conn, db_url: str) -> None:
    """docs/security.md, "What the catalog still shows": statistics are hidden from the app and
    the reader, but index sizes and the planner's estimate for a guessed scope name are not."""
    store.execute("ANALYZE pgmem.piece")
    assert store.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'piece'").fetchone() != (0,)
    store.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => %s)", (MIN,))
    reader = connect_as(db_url, READER_LOGIN)
    try:
        for c in (app_conn, reader):
            hidden = "SELECT count(*) FROM pg_stats WHERE schemaname = 'pgmem' AND tablename = 'piece'"
            assert c.execute(hidden).fetchone() == (0,)
            sizes = c.execute(
                "SELECT reltuples FROM pg_class"
                " WHERE relnamespace = 'pgmem'::regnamespace AND relname LIKE 'piece_ann_s%'"
            ).fetchall()
            assert sorted(float(str(r[0])) for r in sizes) == [120.0, 120.0]

            def estimate(scope: str, c: Conn = c) -> int:
                plan = c.execute(
                    sql.SQL("EXPLAIN SELECT * FROM pgmem.piece WHERE scope_id = {}").format(sql.Literal(scope))
                ).fetchall()
                line = next(str(r[0]) for r in plan if "rows=" in str(r[0]) and "piece" in str(r[0]))
                return int(line.split("rows=")[1].split()[0])

            assert estimate(LARGE[0]) > 50 and estimate("nobody@example.com") < 5
    finally:
        reader.close()
