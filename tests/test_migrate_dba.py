"""`pgmem migrate` as a DBA runs it in production (docs/operations.md, "Upgrading pgmem"): two
runs at once, the migrating login without CREATE on the database (or a member of pgmem_app too),
application and reader logins, a run that gives up on its lock timeout behind an application's
open transaction and is run again, the reviewed offline script applied with psql (to the right
database and to a wrong one), a target below the newest table change, and a store written by
0059's own package upgraded to head and round-tripped through a downgrade. Each run is the CLI
in its own process, as a deploy script starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgmem import server
from pgmem.db import connect, scoped
from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.ingest import ingest_turns
from pgmem.integrations.langgraph import PgmemStore
from pgmem.migrate import downgrade, head_revision, revisions_below, upgrade
from pgmem.recall import recall
from pgmem.sqlfiles import InstallParams
from tests.conftest import TEST_DIMS, scratch_database
from tests.lifecycle_helpers import in_scope
from tests.security_helpers import (
    APP_LOGIN,
    READER_LOGIN,
    Conn,
    HashEmbedder,
    ensure_login_roles,
    maintenance_login,
    make_turn,
    package_before,
    repo_root,
    role_url,
)
from tests.test_migrations import _diff, schema_dump
from tests.test_operations import BULK_TURN

PARAMS = InstallParams(TEST_DIMS, TEST_DIMS)
#: The revision the scratch database starts at: the last that changed a table (0059's
#: functions), below a run of functions-only revisions whose last applies the re-runnable set.
START = "0059"
MIGRATOR = "pgmem_test_migrator"
EMB = HashEmbedder()


def _env(url: str, name: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": url,
        "PGAPPNAME": name,
        "PGMEM_PIECE_DIMS": str(TEST_DIMS),
        "PGMEM_FACT_DIMS": str(TEST_DIMS),
        **extra,
    }


def _start(url: str, name: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pgmem", "migrate"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=repo_root(),
        env=_env(url, name, **extra),
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _wait_for_lock_wait(admin: Conn, name: str, proc: subprocess.Popen[str]) -> None:
    """Until a backend of the run named `name` waits for a lock (fails if the run ends first)."""
    while True:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (name,)
        ).fetchone()
        if row and row[0]:
            return
        if proc.poll() is not None:
            pytest.fail(f"{name} ended without waiting for a lock: {proc.communicate()}")


def _version(url: str) -> str:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT version_num FROM pgmem.alembic_version").fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def at_start(admin_conn: Conn) -> Iterator[str]:
    """A scratch database at START."""
    with scratch_database(admin_conn, "dba") as url:
        upgrade(url, START, params=PARAMS)
        yield url


@pytest.mark.long
def test_two_migrate_runs_at_once_both_end_well(admin_conn: Conn, db_url: str, at_start: str) -> None:
    """A deploy that starts `pgmem migrate` on two hosts at once. The first waits behind an
    application transaction on pgmem.turn (the re-runnable set locks every scoped table), the
    second starts meanwhile. Before: the second ran the last revision again behind the first
    and, its version row moved, stopped with alembic's traceback ("Online migration expected to
    match one row when updating '0066' to '0067' in 'alembic_version'; 0 found"). Now the
    second waits for the first run and finds the schema at head."""
    reader = psycopg.connect(at_start)
    try:
        reader.execute("SELECT count(*) FROM pgmem.turn")  # an application transaction left open
        first = _start(at_start, "pgmem-migrate-1")
        _wait_for_lock_wait(admin_conn, "pgmem-migrate-1", first)
        second = _start(at_start, "pgmem-migrate-2")
        _wait_for_lock_wait(admin_conn, "pgmem-migrate-2", second)
    finally:
        reader.close()
    code1, err1 = _finish(first)
    code2, err2 = _finish(second)
    assert (code1, code2) == (0, 0), (err1, err2)
    assert "Traceback" not in err1 + err2
    assert _version(at_start) == head_revision()
    fresh, got = schema_dump(db_url), schema_dump(at_start)
    assert got == fresh, _diff(fresh, got)


@pytest.mark.long
def test_a_run_that_gives_up_on_its_lock_timeout_says_so_in_one_line(admin_conn: Conn, at_start: str) -> None:
    """The runbook's procedure: behind a running migration (waiting for an application
    transaction), a second run under a lock timeout gives up in one line, changing nothing; once
    the first is done, a run finds nothing to do."""
    reader = psycopg.connect(at_start)
    try:
        reader.execute("SELECT count(*) FROM pgmem.turn")
        first = _start(at_start, "pgmem-migrate-1")
        _wait_for_lock_wait(admin_conn, "pgmem-migrate-1", first)
        code, err = _finish(_start(at_start, "pgmem-migrate-2", PGOPTIONS="-c lock_timeout=100ms"))
        assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: "), err
        assert "lock timeout" in err and "55P03" in err, err
    finally:
        reader.close()
    assert _finish(first) == (0, "schema pgmem is at head\n")
    assert _version(at_start) == head_revision()
    code, err = _finish(_start(at_start, "pgmem-migrate-3"))
    assert (code, err) == (0, "schema pgmem is at head already: nothing to do\n")


@pytest.mark.long
def test_the_migrating_login_without_create_on_the_database_upgrades_an_installed_schema(
    admin_conn: Conn, db_url: str, at_start: str
) -> None:
    """A LOGIN member of pgmem_owner may migrate an installed schema (preflight says so: CREATE
    on the database is needed only to install). Before: every run stopped with sqlalchemy's
    traceback on the run's first statement, `CREATE SCHEMA IF NOT EXISTS pgmem` (42501:
    permission denied for database), which PostgreSQL checks before it looks for the schema."""
    ensure_login_roles(admin_conn)
    maintenance_login(admin_conn, at_start, MIGRATOR).close()
    dbname = str(conninfo_to_dict(at_start)["dbname"])
    admin_conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM pgmem_owner").format(sql.Identifier(dbname)))
    with psycopg.connect(at_start) as c:
        assert c.execute("SELECT has_database_privilege(%s, current_database(), 'CREATE')", (MIGRATOR,)).fetchone() == (
            False,
        )
    code, err = _finish(_start(role_url(at_start, MIGRATOR), "pgmem-migrate"))
    assert (code, err) == (0, "schema pgmem is at head\n"), err
    assert _version(at_start) == head_revision()
    fresh, got = schema_dump(db_url), schema_dump(at_start)
    assert got == fresh, _diff(fresh, got)


# --- an upgrade of a store written by 0059's functions, and a downgrade round trip ----------

#: The revision whose package writes the data: the last before a run of functions-only revisions.
OLD_HEAD = START


@pytest.fixture(scope="module")
def tree_0059(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pgmem of the commit before the first revision above 0059 was added (its Python, sql/
    and migrations/), laid out as installed, as tests/test_rollback.py takes 0050's."""
    return package_before("migrations/versions/006*", tmp_path_factory.mktemp("pgmem-0059"), OLD_HEAD)


def _rows(url: str) -> dict[str, list[str]]:
    """Every row of every pgmem table but the version's, as JSON text, sorted: what a superuser
    reads (row-level security does not apply to it)."""
    with psycopg.connect(url) as c:
        tables = [
            str(r[0])
            for r in c.execute(
                """SELECT relname FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace AND relkind IN ('r', 'p')
                      AND relname <> 'alembic_version' ORDER BY 1"""
            ).fetchall()
        ]
        return {
            t: sorted(
                str(r[0])
                for r in c.execute(sql.SQL("SELECT to_jsonb(t)::text FROM {} t").format(sql.Identifier("pgmem", t)))
            )
            for t in tables
        }


def _write(app: Conn, admin: Conn) -> None:
    """As the application login, with this package's Python (its calls exist at 0059): turns in
    three threads, a bulk turn of 1,100 pieces in another scope, facts, a document, store items,
    logged recalls; then index maintenance folds the big scope's word postings (word_fold)."""
    turns = [make_turn("a", "t", i, f"turn {i} about the harbour and the ferry") for i in range(3)]
    turns += [make_turn("a", "u", 0, "invoices for the harbour master"), make_turn("b", "x", 0, "the other tenant")]
    assert ingest_turns(app, turns, EMB).inserted == 5
    add_facts(app, "a", [Fact("the trip is on saturday", "t", 0), Fact("thread u is about invoices", "u")], EMB)
    add_documents(
        app, "a", [Document("guide", "# Guide\n\nThe ferry leaves at nine.\n\n## Tickets\n\nAt the pier.")], EMB
    )
    store = PgmemStore(app, embedder=EMB)
    store.put(("a",), "k1", {"text": "a remembered value"})
    store.put(("a", "deep"), "k2", {"text": "another value"})
    store.delete(("a",), "gone")  # a tombstone (0051)
    recall(app, "a", "harbour", EMB, floor=-1, log=True)
    with scoped(app, "a"):
        app.execute("SET pgmem.word_weight = 0.5")  # a logged setting (0057)
        recall(app, "a", "invoices", EMB, floor=-1, log=True)
        app.execute("RESET pgmem.word_weight")
    with app.transaction():
        in_scope(app, "big")
        app.execute(BULK_TURN, {"scope": "big", "i": 0, "n": 1100})
    for (ddl,) in admin.execute("SELECT ddl FROM pgmem.scope_index_plan()").fetchall():
        admin.execute(str(ddl))
    folds = admin.execute("SELECT count(*) FROM pgmem.word_fold_head WHERE scope_id = 'big'").fetchone()
    assert folds == (1,)


def _answers(app: Conn) -> dict[str, object]:
    """What the application reads back: recall (hybrid, over the folded postings in "big"),
    facts, documents, the store, a replayed logged recall."""
    out: dict[str, object] = {
        "recall": recall(app, "a", "harbour ferry", EMB, floor=-1).as_dict(),
        "thread": recall(app, "a", "invoices", EMB, floor=-1, thread="u").as_dict(),
        "words": recall(app, "big", "bulk piece 0.517", EMB, floor=-1, mode="hybrid").as_dict(),
        "facts": fact_recall(app, "a", "saturday trip", EMB, floor=-1).as_dict(),
        "documents": search_documents(app, "a", "ferry tickets", EMB, floor=-1).as_dict(),
    }
    store = PgmemStore(app, embedder=EMB)
    out["store"] = [(i.namespace, i.key, i.value) for i in store.search(("a",), limit=10)]
    with scoped(app, "a"):
        ids = [r[0] for r in app.execute("SELECT recall_id FROM pgmem.recall_log ORDER BY recall_id").fetchall()]
        out["replays"] = [
            app.execute(
                "SELECT part_no, rank, piece_id, logged_rank, change FROM pgmem.replay_logged_recall('a', %s)"
                " ORDER BY part_no, rank",
                (i,),
            ).fetchall()
            for i in ids
        ]
    return out


@pytest.mark.long
def test_a_store_written_at_0059_upgrades_and_round_trips_a_downgrade_unchanged(
    admin_conn: Conn, tree_0059: Path
) -> None:
    """A DBA's upgrade of a store written by 0059's functions (0059's package installed it) to
    head, then a downgrade to 0056 and an upgrade again with this package: every row of every
    table stays as it was (turns, pieces, words, word folds, facts, documents, store items and
    tombstones, the recall log), and recall, fact recall, document search, the store and the
    replay of a logged recall answer as before. The one loss is the documented one: 0057's
    downgrade drops recall_log.settings, so the logged recall's settings are gone after it."""
    with scratch_database(admin_conn, "at0059") as url:
        old = subprocess.run(
            [sys.executable, "-P", "-m", "pgmem", "migrate"],
            capture_output=True,
            text=True,
            cwd=repo_root(),
            env={**_env(url, "pgmem-0059"), "PYTHONPATH": str(tree_0059)},
            check=False,
        )
        assert old.returncode == 0 and _version(url) == OLD_HEAD, old.stderr[-2000:]
        ensure_login_roles(admin_conn)
        admin = psycopg.connect(url, autocommit=True)
        try:
            with connect(role_url(url, APP_LOGIN)) as app:
                _write(app, admin)
                rows, answers = _rows(url), _answers(app)
                assert len(rows["word_fold"]) >= 1 and len(rows["store_tombstone"]) == 1
                words = answers["words"]
                assert isinstance(words, dict)
                found = [(h["body"], h["word_rank"]) for g in words["groups"] for h in g["hits"] if h["word_rank"]]
                assert found == [("bulk piece 0.517", 1)]  # the word side, over the folded postings
                assert str(answers["store"]).count("value") == 2
                assert str(answers["replays"]).count("'same'") == 10  # two logged recalls of five hits

                assert upgrade(url, params=PARAMS) == "migrate" and _version(url) == head_revision()
                assert _rows(url) == rows
                assert _answers(app) == answers

                downgrade(url, "0056", params=PARAMS)
                assert upgrade(url, params=PARAMS) == "migrate" and _version(url) == head_revision()
                again = _rows(url)
                assert [json.loads(r)["settings"] for r in again["recall_log"]] == [None, None]
                logged = [json.loads(r) for r in rows.pop("recall_log")]
                assert [r["settings"] for r in logged] == [{}, {"pgmem.word_weight": "0.5"}]
                assert [json.loads(r) for r in again.pop("recall_log")] == [{**r, "settings": None} for r in logged]
                assert again == rows
                assert _answers(app) == answers
        finally:
            admin.close()


def _functions(url: str) -> list[tuple[object, ...]]:
    """pgmem's functions and their row versions: a function replaced (even by its own text) gets
    a new xmin."""
    with psycopg.connect(url) as c:
        return c.execute(
            "SELECT oid, xmin::text FROM pg_proc WHERE pronamespace = 'pgmem'::regnamespace ORDER BY oid"
        ).fetchall()


@pytest.mark.long
def test_a_run_behind_an_application_transaction_gives_up_whole_and_a_rerun_finishes(
    admin_conn: Conn, at_start: str
) -> None:
    """The runbook's lock-timeout procedure from 0059: the functions-only revisions after it but
    the last commit their version rows; the last, head, applies the re-runnable set, which waits
    for an application transaction on pgmem.turn, gives up on its lock timeout (one line, 55P03)
    and rolls back whole: the schema says the revision before head and no function was replaced
    (the set comes with a run's last revision). Meanwhile the application reads and writes; once its transaction ends,
    the same command finishes."""
    ensure_login_roles(admin_conn)
    app = connect(role_url(at_start, APP_LOGIN))
    try:
        with app.transaction():
            in_scope(app, "s")
            ingest_turns(app, [make_turn("s", "t", 0, "written before the migration")], EMB)
        functions = _functions(at_start)
        with app.transaction():
            in_scope(app, "s")
            assert ingest_turns(app, [make_turn("s", "t", 1, "written while it waits")], EMB).inserted == 1
            code, err = _finish(_start(at_start, "pgmem-migrate", PGOPTIONS="-c lock_timeout=100ms"))
            assert code == 2 and err.count("\n") == 1 and "lock timeout" in err and "55P03" in err, err
            assert _version(at_start) == revisions_below(head_revision())[0] and _functions(at_start) == functions
            assert len(recall(app, "s", "written", EMB, floor=-1).groups[0].hits) == 2
        code, err = _finish(_start(at_start, "pgmem-migrate", PGOPTIONS="-c lock_timeout=100ms"))
        assert (code, err) == (0, "schema pgmem is at head\n")
        assert _version(at_start) == head_revision() and _functions(at_start) != functions
        with scoped(app, "s"):
            assert app.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (2,)
    finally:
        app.close()


@pytest.mark.parametrize("login", [APP_LOGIN, READER_LOGIN])
@pytest.mark.long
def test_migrate_as_an_application_or_reader_login_is_refused_in_one_line(
    admin_conn: Conn, at_start: str, login: str
) -> None:
    """Not at head, `pgmem migrate` as a LOGIN member of pgmem_app or pgmem_reader stops before
    alembic runs, in one line naming the role to run it as; nothing changes."""
    ensure_login_roles(admin_conn)
    functions = _functions(at_start)
    code, err = _finish(_start(role_url(at_start, login), "pgmem-migrate"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: "), err
    assert "may not migrate" in err and "pgmem_owner" in err
    assert _version(at_start) == START and _functions(at_start) == functions


def test_migrate_by_an_owner_login_without_create_on_the_database_names_the_grant(
    admin_conn: Conn, db_url: str
) -> None:
    """A new database where `pgmem roles create` has not run: the roles exist (they are the
    cluster's) but pgmem_owner has no CREATE on it. `pgmem migrate` as a LOGIN member of
    pgmem_owner said to run it "as a login member of pgmem_owner", which it is; it names the
    grant the database lacks, in one line, and changes nothing."""
    maintenance_login(admin_conn, db_url, MIGRATOR).close()
    with scratch_database(admin_conn, "nocreate") as url:
        code, err = _finish(_start(role_url(url, MIGRATOR), "pgmem-migrate"))
        assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: "), err
        assert "GRANT CREATE ON DATABASE" in err and "as a login member of pgmem_owner" not in err, err
        with psycopg.connect(url) as c:
            assert c.execute("SELECT to_regnamespace('pgmem')").fetchone() == (None,)


def _offline_script(url: str, revisions: str) -> subprocess.CompletedProcess[str]:
    """`pgmem migrate --sql --revision REVISIONS` as the DBA runs it: no database read."""
    return subprocess.run(
        [sys.executable, "-m", "pgmem", "migrate", "--sql", "--revision", revisions],
        capture_output=True,
        text=True,
        cwd=repo_root(),
        env={k: v for k, v in _env(url, "pgmem-sql").items() if k != "DATABASE_URL"},
        check=False,
    )


def _psql(url: str, script: str) -> subprocess.CompletedProcess[str]:
    """`script` applied with psql, stopping on the first error (ON_ERROR_STOP)."""
    return subprocess.run(
        [str(server.bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.long
def test_the_reviewed_script_from_0059_applied_with_psql_gives_the_online_catalog(db_url: str, at_start: str) -> None:
    """The runbook's review step, then the script itself applied by a DBA with psql (offline
    mode, no database read) to a database at its start revision: it runs cleanly and leaves the
    catalog an online `pgmem migrate` leaves, the version at head."""
    done = _offline_script(at_start, f"{START}:head")
    assert done.returncode == 0, done.stderr[-2000:]
    steps = revisions_below(head_revision()).index(START) + 1  # START's successors up to head
    assert done.stdout.count("COMMIT;") == steps and "@PIECE_DIMS@" not in done.stdout
    psql = _psql(at_start, done.stdout)
    assert psql.returncode == 0, psql.stderr[-2000:]
    assert _version(at_start) == head_revision()
    fresh, got = schema_dump(db_url), schema_dump(at_start)
    assert got == fresh, _diff(fresh, got)


@pytest.mark.long
def test_a_login_of_pgmem_owner_and_pgmem_app_migrates(admin_conn: Conn, at_start: str) -> None:
    """900_grants refuses a member of pgmem_app that may create in pgmem, unless it is a member
    of pgmem_owner too (trusted as the owner is; the runbook's step 4 says so): such a login
    migrates."""
    login = "pgmem_test_owner_app"  # its own role: roles are the cluster's, the others' stay as they are
    ensure_login_roles(admin_conn)
    maintenance_login(admin_conn, at_start, login).close()
    admin_conn.execute(sql.SQL("GRANT pgmem_app TO {}").format(sql.Identifier(login)))
    code, err = _finish(_start(role_url(at_start, login), "pgmem-migrate"))
    assert (code, err) == (0, "schema pgmem is at head\n"), err
    assert _version(at_start) == head_revision()


@pytest.mark.long
def test_a_script_applied_to_a_database_at_another_revision_stops_and_changes_nothing(admin_conn: Conn) -> None:
    """The reviewed script (`pgmem migrate --sql --revision 0059:head`) applied with psql to a
    database that is not at 0059 (a wrong copy, or one that another migration moved). Before:
    offline, alembic's version updates match no row without a word, so on a database at 0056
    the script ran to its end (exit 0), put head's functions over 0056's tables (log_recall
    writes recall_log.settings, which 0057 adds) and left the version at 0056. Now each
    revision's transaction checks the version row it wrote and rolls back when it wrote none:
    psql stops on the first (ON_ERROR_STOP), naming the revision the database is at."""
    with scratch_database(admin_conn, "wrong_start") as url:
        upgrade(url, params=PARAMS)
        downgrade(url, "0056", params=PARAMS)
        functions = _functions(url)
        written = _offline_script(url, f"{START}:head")
        assert written.returncode == 0, written.stderr[-2000:]
        script = written.stdout
        psql = _psql(url, script)
        assert psql.returncode == 3, psql.stderr[-2000:]
        assert "schema pgmem is at 0056, not at 0059 where this step to 0060 starts" in psql.stderr, psql.stderr[-2000:]
        assert _version(url) == "0056" and _functions(url) == functions
        # The script written from where the database is applies.
        written = _offline_script(url, "0056:head")
        assert written.returncode == 0, written.stderr[-2000:]
        script = written.stdout
        psql = _psql(url, script)
        assert psql.returncode == 0, psql.stderr[-2000:]
        assert _version(url) == head_revision()


@pytest.mark.parametrize("argv", [["--revision", "0056"], ["--sql", "--revision", "0012:0030"]])
@pytest.mark.long
def test_migrate_refuses_to_stop_below_the_newest_table_change(admin_conn: Conn, argv: list[str]) -> None:
    """This pgmem ships its head's functions only. Before: `pgmem migrate --revision 0056` ran
    (exit 0) and applied them at 0056, where log_recall failed (42703: recall_log.settings comes
    with 0057), and --sql printed the same. Now both are refused in one line naming 0057, the
    newest revision that changes a table, before anything runs; 0057 itself is accepted."""
    with scratch_database(admin_conn, "below") as url:
        done = subprocess.run(
            [sys.executable, "-m", "pgmem", "migrate", *argv],
            capture_output=True,
            text=True,
            cwd=repo_root(),
            env=_env(url, "pgmem-migrate"),
            check=False,
        )
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        assert "below 0057, the newest revision of this pgmem that changes a table" in done.stderr
        with psycopg.connect(url) as c:
            assert c.execute("SELECT to_regnamespace('pgmem')").fetchone() == (None,)
        if "--sql" not in argv:
            assert upgrade(url, "0057", params=PARAMS) == "migrate" and _version(url) == "0057"
            ensure_login_roles(admin_conn)
            with connect(role_url(url, APP_LOGIN)) as app:
                assert ingest_turns(app, [make_turn("s", "t", 0, "the harbour at dawn")], EMB).inserted == 1
                assert recall(app, "s", "harbour", EMB, floor=-1, log=True).recall_id is not None


@pytest.mark.parametrize(("installed", "configured"), [("vecx", None), ("public", "vecx")])
@pytest.mark.long
def test_migrate_with_pgvector_in_another_schema_than_configured_names_the_setting(
    admin_conn: Conn, installed: str, configured: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pgvector installed in a schema of its own (docs/security.md's remedy) and `pgmem migrate`
    run without PGMEM_VECTOR_SCHEMA, or with it naming a schema pgvector is not in (`pgmem roles
    create --vector-schema vecx` on a database that had pgvector in public already: CREATE
    EXTENSION IF NOT EXISTS changed nothing). The run failed inside the first revision with
    'type "vector" does not exist (SQLSTATE 42704)', which says nothing of the setting. It is one
    line naming the schema pgvector is in, before anything runs; with the setting, it migrates."""
    with scratch_database(admin_conn, "vecschema") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE SCHEMA vecx")
            c.execute(sql.SQL("CREATE EXTENSION vector SCHEMA {}").format(sql.Identifier(installed)))
        env = {"PGMEM_VECTOR_SCHEMA": configured} if configured else {}
        monkeypatch.delenv("PGMEM_VECTOR_SCHEMA", raising=False)
        code, err = _finish(_start(url, "pgmem-migrate", **env))
        assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: "), err
        assert f"PGMEM_VECTOR_SCHEMA={installed}" in err, err
        with psycopg.connect(url) as c:
            assert c.execute("SELECT to_regclass('pgmem.alembic_version')").fetchone() == (None,)
        code, err = _finish(_start(url, "pgmem-migrate", PGMEM_VECTOR_SCHEMA=installed))
        assert code == 0, err
        assert _version(url) == head_revision()


@pytest.mark.long
def test_migrate_on_a_pgvector_older_than_0_8_says_so_in_one_line_and_creates_nothing(admin_conn: Conn) -> None:
    """pgvector 0.7 installed in the database (a server upgraded without ALTER EXTENSION vector
    UPDATE): the migration went ahead and created recall functions that SET hnsw.iterative_scan,
    a setting 0.7 does not have under a prefix it reserves (an error once pgvector is loaded).
    The run is one line naming the version and the remedy, before anything is created; on 0.8
    the same database migrates. (The installed
    version is set in the catalog: this server ships 0.8 only.)"""
    with scratch_database(admin_conn, "oldvec") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
            (real,) = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone() or ("",)
            c.execute("UPDATE pg_extension SET extversion = '0.7.4' WHERE extname = 'vector'")
        code, err = _finish(_start(url, "pgmem-oldvec"))
        assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: "), err
        assert "pgvector 0.8.0 or later" in err and "0.7.4" in err and "ALTER EXTENSION vector UPDATE" in err, err
        with psycopg.connect(url, autocommit=True) as c:
            assert c.execute("SELECT to_regnamespace('pgmem')").fetchone() == (None,)
            c.execute("UPDATE pg_extension SET extversion = %s WHERE extname = 'vector'", (real,))
        code, err = _finish(_start(url, "pgmem-oldvec"))
        assert code == 0, err
        assert _version(url) == head_revision()


def test_a_server_offering_only_an_old_pgvector_is_named_before_the_run() -> None:
    """With pgvector not yet installed, the version CREATE EXTENSION would install is checked, and
    a server without pgvector is named (the run created an empty schema pgmem, then failed)."""
    from pgmem.errors import ConfigError
    from pgmem.migrate import _check_vector_version

    with pytest.raises(ConfigError, match=r"needs pgvector 0\.8\.0 or later, and this server offers 0\.7\.4"):
        _check_vector_version(None, "0.7.4", "db")
    with pytest.raises(ConfigError, match=r"^pgvector is not installed in database 'db', and this server does not"):
        _check_vector_version(None, None, "db")
    for fine in [("0.8.0", None), (None, "0.8.1"), ("1.0.0-dev", None), ("custom", None), ("0.10.0", "0.7.0")]:
        _check_vector_version(*fine, "db")


@pytest.mark.parametrize("schema", ["pgmem", "pg_catalog", "pg_toast", "information_schema", "Vec"])
def test_a_vector_schema_pgmem_cannot_use_is_refused_before_anything_is_created(
    admin_conn: Conn, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PGMEM_VECTOR_SCHEMA (or `pgmem roles create --vector-schema`) naming pgmem's own schema, a
    system schema, or a name the SQL cannot write unquoted. With pgmem, roles create put pgvector
    into pgmem (created by the superuser) and every migration then failed on 'function
    array_to_halfvec(...) does not pin search_path', pgvector left in pgmem; the migration alone
    did the same. With pg_catalog or pg_toast the migration installed pgvector there; roles
    create accepted Vec and made "Vec", which migrate refuses. Each is one line now, and nothing
    is created."""
    monkeypatch.delenv("PGMEM_VECTOR_SCHEMA", raising=False)
    with scratch_database(admin_conn, "badvec") as url:
        for args in (["roles", "create", "--vector-schema", schema], ["migrate"]):
            proc = subprocess.Popen(
                [sys.executable, "-m", "pgmem", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=repo_root(),
                env=_env(url, "pgmem-badvec", PGMEM_VECTOR_SCHEMA=schema),
            )
            code, err = _finish(proc)
            assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: "), (args, err)
            assert "vector schema" in err and repr(schema) in err, err
        with psycopg.connect(url) as c:
            assert c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (0,)
            assert c.execute("SELECT to_regnamespace('pgmem'), to_regnamespace('\"Vec\"')").fetchone() == (None, None)


def test_alembic_run_directly_says_a_failure_in_one_line(admin_conn: Conn, db_url: str, tmp_path: Path) -> None:
    """docs/operations.md's rollback runs alembic itself (`alembic -c "$(pgmem migrate
    --alembic-ini)" downgrade ...`). Run with the wrong login (the application's), alembic printed
    a traceback of some forty lines ending in SQLAlchemy's wrapper of 'permission denied for
    table alembic_version'; without DATABASE_URL it started the embedded server unseen (no
    command but `pgmem db start` starts it). Each is alembic's one FAILED line now, and nothing
    changed."""
    ensure_login_roles(admin_conn)
    ini = subprocess.run(
        [sys.executable, "-m", "pgmem", "migrate", "--alembic-ini"], capture_output=True, text=True, check=True
    ).stdout.strip()
    home = tmp_path / "home"
    for url in (role_url(db_url, APP_LOGIN), None):
        env = {k: v for k, v in _env(url or "", "pgmem-alembic", PGMEM_HOME=str(home)).items() if v}
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "-c", ini, "downgrade", "-1"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            check=False,
            timeout=120,
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        lines = (done.stdout + done.stderr).strip().splitlines()  # alembic prints FAILED on stdout
        assert len(lines) == 1 and lines[0].startswith("FAILED: "), done.stderr[-3000:]
        assert ("permission denied" if url else "pgmem db start") in lines[0], lines[0]
    assert _version(db_url) == head_revision()
    assert not (home / "pgdata").exists()


def test_migrate_takes_every_connection_string_libpq_takes(db_url: str) -> None:
    """DATABASE_URL as key=value, as a URL without a host (the socket folder in its query) and
    as one naming the folder as its host (%2F), all libpq's: the preflight connected, then
    alembic's run handed the string to SQLAlchemy's URL parser, which raised ArgumentError (a
    traceback from `pgmem migrate`) or took the folder for a host name it could not resolve
    (until rt71). The run connects with psycopg now (alembic's `current` runs the same
    connection code as an upgrade, in a fraction of its time)."""
    import io

    from alembic import command

    from pgmem.migrate import alembic_config

    parts = conninfo_to_dict(db_url)
    kv = " ".join(f"{k}={v}" for k, v in parts.items())
    forms = [kv]
    if str(parts.get("host", "")).startswith("/"):
        user, port, host = parts.get("user", "postgres"), parts.get("port", 5432), str(parts["host"])
        forms.append(f"postgresql:///{parts['dbname']}?host={host}&port={port}&user={user}")
        forms.append(f"postgresql://{user}@{host.replace('/', '%2F')}:{port}/{parts['dbname']}")
    for form in forms:
        cfg = alembic_config(form)
        cfg.stdout = io.StringIO()
        command.current(cfg)
        assert head_revision() in cfg.stdout.getvalue(), form
