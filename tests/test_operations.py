"""docs/operations.md, the DBA's runbook (issue 27 part 8), and pgmem.stats().

Every ```sql, ```sh and ```conf block of the runbook carries an HTML comment naming who runs
it (`<!-- run: app -->`, `owner`, `superuser`, `sh`, `conf`, `pg_stat_statements`, `pg_cron`,
`rollback`: the rollback's shell blocks, run by tests/test_rollback.py between two packages).
The first test runs them all, in the order of the page, on one fresh database holding the
scopes the page names: SQL through the bundled psql as that login (the application login, a
LOGIN member of pgmem_owner, a superuser), shell blocks through bash with the bundled client
binaries and this venv's `pgmem` on PATH and $APP_URL / $MIGRATOR_URL / $SUPERUSER_URL /
$RESTORE_URL set. pg_dump and pg_restore run for real, into a second database, and the restored
copy must answer recall. The embedded server has no pg_stat_statements (nor pg_cron): the
pg_stat_statements query runs on the machine's PostgreSQL with its contrib modules when there
is one, and the pg_cron job's command runs as the migrating login."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import pgmem
from pgmem import server
from pgmem.aio import stats as astats
from pgmem.cli import main
from pgmem.db import with_database
from pgmem.documents.store import Document, add_documents
from pgmem.errors import InputError
from pgmem.facts import Fact, add_facts
from pgmem.ingest import ingest_turns
from pgmem.integrations.langgraph import PgmemStore
from pgmem.recall import recall
from pgmem.sqlfiles import SQL_DIR, InstallParams, idempotent_files, render
from pgmem.stats import stats_call
from tests.lifecycle_helpers import in_scope, put_turn
from tests.security_helpers import (
    APP_LOGIN,
    READER_LOGIN,
    HashEmbedder,
    connect_as,
    ensure_login_roles,
    make_turn,
    repo_root,
    role_url,
)

Conn = psycopg.Connection[tuple[object, ...]]
DOC = repo_root() / "docs" / "operations.md"
#: A LOGIN member of pgmem_owner: the migrating login of the runbook.
OWNER_LOGIN = "pgmem_test_migrator"
MARK = re.compile(r"^( *)<!-- run: ([a-z_]+) -->\n\1```(\w+)\n(.*?)\n\1```$", re.S | re.M)
FENCE = re.compile(r"^ *```(\w+)\n", re.M)
EMB = HashEmbedder()


@dataclass(frozen=True)
class Block:
    who: str
    lang: str
    code: str


def blocks() -> list[Block]:
    text = DOC.read_text(encoding="utf-8")
    return [Block(m[2], m[3], textwrap.dedent(m[4])) for m in MARK.finditer(text)]


def test_every_block_names_who_runs_it() -> None:
    """No sql, sh or conf block escapes the runner: each has its marker (cron is run by
    tests/test_retention.py), and the page stays a runbook, not a book."""
    text = DOC.read_text(encoding="utf-8")
    fenced = [lang for lang in FENCE.findall(text) if lang in ("sql", "sh", "conf")]
    assert len(fenced) == len(blocks()), "a ```sql/```sh/```conf block without <!-- run: WHO -->"
    whos = {"app", "owner", "superuser", "sh", "conf", "pg_stat_statements", "pg_cron", "rollback"}
    assert {b.who for b in blocks()} <= whos
    assert len(text.splitlines()) <= 600


# --- the database the runbook talks about -------------------------------------------------


def _make_owner_login(admin: Conn) -> None:
    with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(
                sql.Identifier(OWNER_LOGIN)
            )
        )
    admin.execute(sql.SQL("GRANT pgmem_owner TO {}").format(sql.Identifier(OWNER_LOGIN)))
    # What `pgmem roles create` grants: migrations start with CREATE SCHEMA IF NOT EXISTS.
    admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO pgmem_owner").format(sql.Identifier(admin.info.dbname)))


@pytest.fixture
def owner(admin_conn: Conn, db_url: str) -> Iterator[Conn]:
    ensure_login_roles(admin_conn)
    _make_owner_login(admin_conn)
    c = connect_as(db_url, OWNER_LOGIN)
    yield c
    c.close()


#: One put_turn of `n` memory pieces with random unit vectors made by the server (a scope big
#: enough for an ANN index without sending 20 MB of vector literals).
BULK_TURN = """
SELECT * FROM pgmem.put_turn(scope => %(scope)s, thread => 'bulk', turn_index => %(i)s::integer, turn_time => NULL,
    messages => '[{"role": "user", "content": "bulk"}]'::jsonb,
    content_hash => pg_catalog.sha256(convert_to('bulk' || %(i)s::integer, 'UTF8')), model_id => 'test:hash',
    unit_kinds => array_fill('user'::text, ARRAY[%(n)s::integer]),
    source_indexes => ARRAY(SELECT g FROM generate_series(0, %(n)s::integer - 1) g),
    labels => array_fill(('[Turn ' || %(i)s::integer || ' · User]')::text, ARRAY[%(n)s::integer]),
    bodies => ARRAY(SELECT 'bulk piece ' || %(i)s::integer || '.' || g FROM generate_series(0, %(n)s::integer - 1) g),
    vectors => ARRAY(SELECT l2_normalize(ARRAY(SELECT random() - 0.5 + 0 * g FROM generate_series(1, 384) d)::vector)
                       FROM generate_series(0, %(n)s::integer - 1) g))
"""


def _seed(app: Conn, scope: str = "user:42") -> None:
    """What the runbook's examples read: scope user:42 with 5,000 memory pieces (the index
    threshold), threads support-7 and support-3, a logged recall; and a second scope."""
    with app.transaction():
        in_scope(app, scope)
        for i in range(100):
            app.execute(BULK_TURN, {"scope": scope, "i": i, "n": 50})
        for thread in ("support-7", "support-3"):
            for i in range(2):
                put_turn(app, scope, thread, i, [f"{thread} turn {i}: the harbour ferry leaves at nine"])
    with app.transaction():
        in_scope(app, "user:7")
        put_turn(app, "user:7", "t", 0, ["another tenant's turn"])
    # Filtered to support-7, so the runbook's forget of support-3 leaves the logged row alone.
    recall(app, scope, "the harbour ferry", EMB, floor=-1, thread="support-7", log=True)


def _count(admin: Conn, query: str, *args: object) -> int:
    row = admin.execute(query, args).fetchone()
    assert row is not None
    return int(str(row[0]))


def _psql(url: str, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "block.sql"
    script.write_text(code + "\n", encoding="utf-8")
    return subprocess.run(
        [str(server.bin_dir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _head_revision() -> str:
    from alembic.script import ScriptDirectory

    from pgmem.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config(None)).get_current_head()
    assert head is not None
    return head


@pytest.mark.long
def test_every_block_of_the_runbook_runs_as_its_login(
    app_conn: Conn, admin_conn: Conn, owner: Conn, db_url: str, app_url: str, tmp_path: Path
) -> None:
    _seed(app_conn)
    restore_db = f"{admin_conn.info.dbname}_restored"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(restore_db)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(restore_db)))
    restore_url = with_database(db_url, restore_db)
    urls = {"app": app_url, "owner": role_url(db_url, OWNER_LOGIN), "superuser": db_url}
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(server.bin_dir()), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "APP_URL": app_url,
        "MIGRATOR_URL": urls["owner"],
        "SUPERUSER_URL": db_url,
        "RESTORE_URL": restore_url,
    }
    env.pop("DATABASE_URL", None)
    outputs: list[tuple[Block, str]] = []
    try:
        for b in blocks():
            if b.who in ("conf", "pg_stat_statements", "rollback"):
                continue  # test_pg_stat_statements_query_of_the_runbook; tests/test_rollback.py
            if b.who == "pg_cron":
                # cron.schedule(name, schedule, command): the command, as the migrating login
                m = re.search(r"cron\.schedule\('[^']*', '[^']*', '([^']*)'\)", b.code)
                assert m, b.code
                done = _psql(urls["owner"], m[1], tmp_path)
            elif b.who == "sh":
                assert b.lang == "sh"
                done = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", b.code],
                    capture_output=True,
                    text=True,
                    check=False,
                    cwd=tmp_path,
                    env=env,
                    timeout=300,
                )
            else:
                assert b.lang == "sql"
                done = _psql(urls[b.who], b.code, tmp_path)
            assert done.returncode == 0, f"{b.who} block failed:\n{b.code}\n{done.stdout}\n{done.stderr}"
            outputs.append((b, done.stdout + done.stderr))
        _check_outputs(outputs, admin_conn, restore_url)
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(restore_db)))


def _output(outputs: list[tuple[Block, str]], needle: str) -> str:
    found = [out for b, out in outputs if needle in b.code]
    assert len(found) == 1, f"{len(found)} blocks contain {needle!r}"
    return found[0]


def _check_outputs(outputs: list[tuple[Block, str]], admin: Conn, restore_url: str) -> None:
    head = _head_revision()
    # Upgrading: the versions, the reviewed script, the migration under a lock timeout.
    assert f"{pgmem.__name__} " in _output(outputs, "pgmem --version")
    assert f"|{head}" in _output(outputs, "pgmem --version")
    locks = _output(outputs, "VALIDATE CONSTRAINT turn_metadata_object")
    assert "pgmem.turn | ShareUpdateExclusiveLock" in locks and "AccessExclusive" not in locks
    assert "0.8" in _output(outputs, "extversion")
    review = _output(outputs, "pgmem migrate --sql").splitlines()
    assert int(review[0]) > 20, "the reviewed script holds the re-runnable functions"
    assert f"|{head}" in _output(outputs, "lock_timeout")
    # Backup and restore: the restored copy answers recall as the application login.
    assert f"|{head}" in _output(outputs, "pg_restore")
    app = connect_as(restore_url, APP_LOGIN)
    try:
        with app.transaction():
            in_scope(app, "user:42")
            rows = app.execute(
                """SELECT r.body FROM pgmem.memory_recall('user:42',
                       ARRAY(SELECT embedding FROM pgmem.piece WHERE scope_id = 'user:42' AND thread_id = 'support-7'
                              ORDER BY piece_id LIMIT 1), floor => -1) r"""
            ).fetchall()
        assert rows and "support-7 turn 0" in str(rows[0][0])
    finally:
        app.close()
    # The replayed forget removed its thread.
    assert _count(admin, "SELECT count(*) FROM pgmem.turn WHERE thread_id = 'support-3'") == 0
    # The logged recall replays to the hits it gave (the seed's: support-7's two turns).
    replay = _output(outputs, "replay_logged_recall")
    assert replay.count("| same") == 2 and "(2 rows)" in replay, replay
    # Monitoring: the owner sees both scopes, the app its own.
    owner_stats = _output(outputs, "recalls_last_hour\n  FROM pgmem.stats()")
    assert "user:42" in owner_stats and "user:7" in owner_stats and "(2 rows)" in owner_stats
    app_stats = _output(outputs, "SELECT * FROM pgmem.stats('user:42')")
    assert "user:42" in app_stats and "user:7" not in app_stats and "(1 row)" in app_stats
    cli = _output(outputs, "pgmem stats").splitlines()
    assert cli[0].split()[:3] == ["scope", "threads", "turns"]
    assert [line.split()[0] for line in cli[1:3]] == ["user:42", "user:7"]
    scoped = [json.loads(line) for line in cli if line.startswith("{")]
    assert [d["scope_id"] for d in scoped] == ["user:42"]
    assert scoped[0]["memory_pieces"] == 5002  # support-3 was forgotten above and scoped[0]["recalls_last_hour"] == 1
    assert "user:42" in _output(outputs, "date_trunc('hour'")
    # When recall gets slow: the plan built the scope's index, and the search uses it.
    n = _count(admin, "SELECT scope_no FROM pgmem.scope WHERE scope_id = 'user:42'")
    plan = _output(outputs, "scope_index_plan() \\gexec")
    assert "| piece |      5002 | create" in plan and "| words |      5002 | postings" in plan
    assert "CREATE INDEX" in plan and "refresh_word_fold" in plan
    assert f"Index Scan using piece_ann_s{n}" in _output(outputs, "SELECT pgmem.scope_no('user:42')")
    assert "Function Scan on memory_recall" in _output(outputs, "EXPLAIN (ANALYZE, BUFFERS)\nSELECT * FROM")
    assert _count(admin, "SELECT count(*) FROM pg_indexes WHERE indexname = %s", f"piece_ann_s{n}") == 1


# --- what the runbook says about backups and locks ---------------------------------------------


def test_pg_dump_as_the_migrating_login_stops_on_row_level_security(owner: Conn, db_url: str, tmp_path: Path) -> None:
    with owner.transaction():
        in_scope(owner, "user:42")
    admin = psycopg.connect(db_url, autocommit=True)
    try:
        with admin.transaction():
            in_scope(admin, "s")
            put_turn(admin, "s", "t", 0, ["kept in the dump"])
    finally:
        admin.close()
    pg_dump = str(server.bin_dir() / "pg_dump")
    url = role_url(db_url, OWNER_LOGIN)
    refused = subprocess.run(
        [pg_dump, url, "--schema=pgmem", "--file", str(tmp_path / "x.sql")], capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0 and "row-level security" in refused.stderr
    empty = subprocess.run(
        [pg_dump, url, "--schema=pgmem", "--enable-row-security", "--file", str(tmp_path / "y.sql")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert empty.returncode == 0, empty.stderr
    dump = (tmp_path / "y.sql").read_text(encoding="utf-8")
    assert "kept in the dump" not in dump, "the owner's row-security dump holds no scope's rows"


#: PostgreSQL's table lock modes, weakest first.
LOCK_MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
)
REVISIONS = repo_root() / "migrations" / "versions"


def _doc_lock_table() -> dict[str, tuple[str, set[str]]]:
    """revision -> (the "strongest lock" cell's mode, the tables it names) of the runbook's table."""
    out: dict[str, tuple[str, set[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not re.match(r"^\d{4}", cells[0]):
            continue
        revs: list[str] = []
        for part in cells[0].split(", "):
            lo, _, hi = part.partition("–")
            revs += [f"{n:04d}" for n in range(int(lo), int(hi or lo) + 1)]
        lock = cells[2].split(" (")[0]
        mode = lock.split(" on ")[0]
        for r in revs:
            out[r] = (mode, set(re.findall(r"`([a-z_]+)`", lock)))
    return out


def _measured_locks(admin: Conn, db_url: str, incremental: str) -> tuple[str, set[str]]:
    """Run one run-once file in a transaction on a database holding the files before it; the
    strongest lock it takes on a table that existed before, and the tables it takes it on."""
    params = InstallParams(384, 384)
    name = f"{admin.info.dbname}_locks"
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = with_database(db_url, name)
        files = sorted((SQL_DIR / "incremental").glob("*.sql"))
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector; CREATE SCHEMA pgmem")
            for f in files:
                if f.name < incremental:
                    c.execute(render(f.read_text(encoding="utf-8"), params))
            rows = c.execute("SELECT relname FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace").fetchall()
            before = {str(r[0]) for r in rows}
        with psycopg.connect(url) as c:
            c.execute(render((SQL_DIR / "incremental" / incremental).read_text(encoding="utf-8"), params))
            held = c.execute(
                """SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                    WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'pgmem'::regnamespace
                      AND c.relkind IN ('r', 'p')"""
            ).fetchall()
            c.rollback()
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    modes = [(str(t), LOCK_MODES.index(str(m))) for t, m in held if str(t) in before]
    if not modes:
        return "none", set()
    top = max(m for _, m in modes)
    words = re.sub(r"(?<!^)([A-Z])", r" \1", LOCK_MODES[top].removesuffix("Lock")).upper()
    return words, {t for t, m in modes if m == top}


@pytest.mark.long
def test_the_lock_table_is_what_each_run_once_file_takes(admin_conn: Conn, db_url: str) -> None:
    """Every revision has a row in the runbook's lock table, and a revision's run-once file
    takes exactly the strongest lock the row names, on the tables it names."""
    table = _doc_lock_table()
    for module in sorted(REVISIONS.glob("[0-9][0-9][0-9][0-9]_*.py")):
        rev = module.name[:4]
        assert rev in table, f"revision {rev} has no row in the lock table of docs/operations.md"
        text = module.read_text(encoding="utf-8")
        m = re.search(r'apply\(op, "incremental/([^"]+)"\)', text)
        if m is None:
            # The functions-only row: the revision can do nothing but apply the re-runnable set.
            assert table[rev][0] == "the re-runnable set", rev
            assert "\nupgrade, downgrade = functions_only(revision)\n" in text and "op." not in text, rev
            continue
        measured = _measured_locks(admin_conn, db_url, m[1])
        expected = ("none", set()) if table[rev][0].startswith("none") else table[rev]
        assert measured == expected, f"revision {rev} ({m[1]})"


def _scoped_tables(admin: Conn) -> set[str]:
    rows = admin.execute(
        """SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'scope_id'
            WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p') AND NOT a.attisdropped"""
    ).fetchall()
    return {str(r[0]) for r in rows}


def _rerunnable_set() -> str:
    params = InstallParams(384, 384)
    return "\n".join(render(p.read_text(encoding="utf-8"), params) for p in idempotent_files())


def test_the_rerunnable_set_locks_every_scoped_table_and_gives_up_on_its_timeout(admin_conn: Conn, db_url: str) -> None:
    """The table's last row: ACCESS EXCLUSIVE on every table with a scope_id and on
    store_namespace (its policies), on no other; and a migration behind a running reader stops
    at its lock_timeout (55P03) and changes nothing."""
    with psycopg.connect(db_url) as c:
        c.execute(_rerunnable_set())
        held = c.execute(
            """SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                WHERE l.pid = pg_backend_pid() AND l.mode = 'AccessExclusiveLock'
                  AND c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')"""
        ).fetchall()
        c.rollback()
    assert {str(r[0]) for r in held} == _scoped_tables(admin_conn) | {"store_namespace"}

    # pgmem's functions and their row versions: a function replaced (even by its own text) gets
    # a new xmin, so a migration that gave up must leave every one as it was.
    functions = "SELECT oid, xmin::text FROM pg_proc WHERE pronamespace = 'pgmem'::regnamespace ORDER BY oid"
    before = admin_conn.execute(functions).fetchall()
    reader = psycopg.connect(db_url)
    try:
        reader.execute("SELECT count(*) FROM pgmem.turn")  # a transaction still open on turn
        with psycopg.connect(db_url) as c:
            c.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable, match="lock timeout"):
                c.execute(_rerunnable_set())
    finally:
        reader.close()
    assert admin_conn.execute(functions).fetchall() == before


# --- pgmem.stats() ---------------------------------------------------------------------------


def _store_everything(conn: Conn) -> None:
    """As the application login: turns in two threads, facts, a document, a store item."""
    turns = [make_turn("a", "t", i, f"turn {i} about the harbour") for i in range(3)]
    turns.append(make_turn("a", "u", 0, "invoices"))
    turns.append(make_turn("b", "x", 0, "the other tenant"))
    report = ingest_turns(conn, turns, EMB)
    assert report.inserted == 5 and not report.failed
    add_facts(conn, "a", [Fact("the trip is on saturday", "t", 0), Fact("thread u is about invoices", "u")], EMB)
    add_documents(
        conn, "a", [Document("guide", "# Guide\n\nThe ferry leaves at nine.\n\n## Tickets\n\nAt the pier.")], EMB
    )
    PgmemStore(conn, embedder=EMB).put(("a",), "k1", {"text": "a remembered value"})
    recall(conn, "a", "harbour", EMB, floor=-1, log=True)
    recall(conn, "a", "invoices", EMB, floor=-1, log=True)


def _truth(admin: Conn, scope: str) -> dict[str, int]:
    """The counts a superuser reads straight from the tables."""
    q = {
        "threads": "SELECT count(*) FROM pgmem.thread WHERE scope_id = %s",
        "turns": "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s",
        "memory_pieces": "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'memory'",
        "document_pieces": "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'document'",
        "facts": "SELECT count(*) FROM pgmem.fact WHERE scope_id = %s",
        "documents": "SELECT count(*) FROM pgmem.document WHERE scope_id = %s",
        "store_items": "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s",
        "recalls_last_hour": "SELECT count(*) FROM pgmem.recall_log WHERE scope_id = %s",
    }
    return {k: _count(admin, v, scope) for k, v in q.items()}


def _as_counts(s: pgmem.ScopeStats) -> dict[str, int]:
    d = s.as_dict()
    return {k: int(str(d[k])) for k in _TRUTH_KEYS}


_TRUTH_KEYS = (
    "threads",
    "turns",
    "memory_pieces",
    "document_pieces",
    "facts",
    "documents",
    "store_items",
    "recalls_last_hour",
)


def test_stats_counts_what_was_stored(conn: Conn, admin_conn: Conn, owner: Conn) -> None:
    _store_everything(conn)
    truth = _truth(admin_conn, "a")
    # The store item is indexed: it is a turn of its own thread too.
    assert truth["threads"] == 3 and truth["turns"] == 5 and truth["facts"] == 2
    assert truth["documents"] == 1 and truth["store_items"] == 1
    assert truth["document_pieces"] > 0 and truth["recalls_last_hour"] == 2
    mine = pgmem.stats(conn, "a")
    assert [s.scope_id for s in mine] == ["a"]
    assert _as_counts(mine[0]) == truth
    assert mine[0].recalls_last_day == 2 and mine[0].last_recall_at is not None
    assert (mine[0].piece_index, mine[0].piece_index_state, mine[0].piece_index_bytes) == (None, "none", None)
    # The owner and a superuser see every scope (the store item's scope is its namespace's, "a").
    for who in (owner, admin_conn):
        rows = {s.scope_id: s for s in pgmem.stats(who)}
        assert set(rows) == {"a", "b"}
        assert _as_counts(rows["a"]) == truth and _as_counts(rows["b"]) == _truth(admin_conn, "b")
        assert [s.scope_id for s in pgmem.stats(who, "b")] == ["b"]
    # The owner's pgmem.maintenance is put back after the call.
    with owner.transaction():
        owner.execute("SET LOCAL pgmem.maintenance = 'off'")
        owner.execute("SELECT count(*) FROM pgmem.stats()")
        assert owner.execute("SELECT current_setting('pgmem.maintenance')").fetchone() == ("off",)
        assert _count(owner, "SELECT count(*) FROM pgmem.turn") == 0


def test_stats_reports_an_ann_index_and_its_health(conn: Conn, admin_conn: Conn, owner: Conn) -> None:
    with conn.transaction():
        in_scope(conn, "big")
        for i in range(3):
            conn.execute(BULK_TURN, {"scope": "big", "i": i, "n": 50})
    owner.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => 100)")
    [row] = pgmem.stats(owner, "big")
    n = _count(admin_conn, "SELECT scope_no FROM pgmem.scope WHERE scope_id = 'big'")
    assert row.piece_index == f"piece_ann_s{n}" and row.piece_index_state == "valid"
    assert row.piece_index_bytes and row.piece_index_bytes > 8192
    assert row.fact_index_state == "none"
    # A failed concurrent build leaves the index invalid: stats says so.
    admin_conn.execute(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'pgmem.piece_ann_s{n}'::regclass")
    assert pgmem.stats(owner, "big")[0].piece_index_state == "invalid"


def test_stats_under_row_level_security(conn: Conn, admin_conn: Conn, db_url: str) -> None:
    _store_everything(conn)
    # Without a scope the app sees none, and a NOTICE says why.
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    assert pgmem.stats(conn) == []
    assert notices and "no pgmem.scope is set" in notices[0]
    # Inside scope a, naming scope b is refused (not an empty answer).
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot read scope b"), conn.transaction():
        in_scope(conn, "a")
        conn.execute("SELECT * FROM pgmem.stats('b')")
    with conn.transaction():
        in_scope(conn, "a")
        assert [r[0] for r in conn.execute("SELECT scope_id FROM pgmem.stats()").fetchall()] == ["a"]
    # The reader login sees the same, read-only (stats is STABLE and SECURITY INVOKER).
    ensure_login_roles(admin_conn)
    reader = connect_as(db_url, READER_LOGIN)
    try:
        assert [s.scope_id for s in pgmem.stats(reader, "b")] == ["b"]
    finally:
        reader.close()
    # The app login cannot widen its view by turning the maintenance setting on.
    with conn.transaction():
        conn.execute("SET LOCAL pgmem.maintenance = 'on'")
        assert conn.execute("SELECT count(*) FROM pgmem.stats()").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (0,)


def test_stats_catalog_rules(admin_conn: Conn) -> None:
    row = admin_conn.execute(
        """SELECT p.provolatile, p.prosecdef, p.proconfig, obj_description(p.oid, 'pg_proc'),
                  has_function_privilege('pgmem_app', p.oid, 'EXECUTE'),
                  has_function_privilege('pgmem_reader', p.oid, 'EXECUTE')
             FROM pg_proc p WHERE p.oid = 'pgmem.stats(text)'::regprocedure"""
    ).fetchone()
    assert row is not None
    volatility, definer, config, comment, app, reader = row
    assert volatility == "s" and not definer and app and reader
    assert "search_path=pg_catalog, pgmem, pg_temp" in list(config)  # type: ignore[call-overload]
    assert "pg_stat_statements" in str(comment)
    assert (SQL_DIR / "idempotent" / "085_stats.sql").exists()


def test_stats_async(conn: Conn, db_url: str, app_url: str) -> None:
    _store_everything(conn)

    async def go() -> list[pgmem.ScopeStats]:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as ac:
            return await astats(ac, "a")

    rows = asyncio.run(go())
    assert [r.scope_id for r in rows] == ["a"] and rows[0].turns == 5


# --- `pgmem stats` -----------------------------------------------------------------------------


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch, **env: str | None) -> tuple[int, str, str]:
    for k, v in env.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("scope", "says"),
    [
        ("a\x00b", "--scope"),
        ("", "--scope must be a non-empty string"),
        ("x" * 201, "--scope is 201 characters"),
        ("\ud800", "--scope"),
    ],
)
def test_stats_cli_refuses_hostile_scope_in_one_line(
    scope: str, says: str, monkeypatch: pytest.MonkeyPatch, app_url: str
) -> None:
    code, out, err = _cli(["stats", "--scope", scope], monkeypatch, DATABASE_URL=app_url)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("pgmem: error: ") and says in err


def test_stats_cli_unknown_scope_and_stopped_server(
    conn: Conn, monkeypatch: pytest.MonkeyPatch, app_url: str, tmp_path: Path
) -> None:
    _store_everything(conn)
    for json_flag in ([], ["--json"]):  # the same status either way (--json used to exit 0, silent)
        code, out, err = _cli(["stats", "--scope", "no-such-scope", *json_flag], monkeypatch, DATABASE_URL=app_url)
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "no-such-scope" in err
        # A misspelt or forgotten scope, as a recall says: not "this login does not see", which
        # sent the person to check the roles.
        assert "check the scope name" in err and "does not see" not in err, err
    code, out, err = _cli(["stats", "--scope", "a"], monkeypatch, DATABASE_URL=app_url)
    assert code == 0 and out.splitlines()[1].split()[:3] == ["a", "3", "5"]
    # No DATABASE_URL and no embedded server running: one line, and no server is started.
    home = tmp_path / "home"
    code, out, err = _cli(["stats"], monkeypatch, DATABASE_URL=None, PGMEM_HOME=str(home))
    assert code == 2 and "not running" in err and "pgmem db start" in err
    assert not (home / "pgdata").exists()


def test_stats_cli_on_an_empty_store_says_no_scope_is_stored(
    owner: Conn, db_url: str, app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new store, asked by a login that sees every scope (a superuser, the migrating login):
    'this login does not see any scope', as if it lacked a privilege, sent the DBA to
    docs/operations.md to check the roles. It says no scope is stored (exit 1 as before); the
    application login is still told what it does not see."""
    migrating = owner.info.user
    for url in (db_url, role_url(db_url, migrating)):
        code, out, err = _cli(["stats"], monkeypatch, DATABASE_URL=url)
        assert code == 1 and out == "" and err.count("\n") == 1, err
        assert "no scope is stored in this database" in err and "does not see" not in err, err
        code, out, err = _cli(["stats", "--scope", "nope", "--json"], monkeypatch, DATABASE_URL=url)
        assert code == 1 and out == "" and "no scope 'nope' is stored" in err, err
    code, out, err = _cli(["stats"], monkeypatch, DATABASE_URL=app_url)
    assert code == 1 and "this login does not see any scope" in err, err


def test_stats_wrapper_checks_its_scope() -> None:
    with pytest.raises(InputError, match="scope"):
        next(stats_call("a\x00b"))


# --- pg_stat_statements, where a server has it ---------------------------------------------------


def _contrib_postgres() -> Path | None:
    """The bin folder of a PostgreSQL on this machine that ships pg_stat_statements."""
    for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (bindir.parent / "lib" / "pg_stat_statements.so").exists() and (bindir / "initdb").exists():
            return bindir
    return None


def test_pg_stat_statements_query_of_the_runbook(tmp_path: Path) -> None:
    """The runbook's setup line and query on a real pg_stat_statements. The embedded server has
    none, and the machine's PostgreSQL has no pgvector, so pgmem.memory_recall and put_turn are
    stand-ins there; the query groups by the function name whatever the functions do."""
    bindir = _contrib_postgres()
    if bindir is None or shutil.which("runuser") is None:
        pytest.skip("no PostgreSQL with pg_stat_statements on this machine (apt-get install postgresql-contrib)")
    conf = [b.code for b in blocks() if b.who == "conf"]
    [query] = [b.code for b in blocks() if b.who == "pg_stat_statements"]
    assert conf == ["shared_preload_libraries = 'pg_stat_statements'"]
    user = "postgres" if os.geteuid() == 0 else None
    # Not under pytest's tmp_path (mode 700, root's): the server runs as `postgres`.
    base = Path(tempfile.mkdtemp(prefix="pgmem-pss-"))
    data = base / "pgdata"
    sock = base / "sock"
    sock.mkdir()

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        full = ["runuser", "-u", user, "--", *cmd] if user else list(cmd)
        return subprocess.run(full, capture_output=True, text=True, check=False, timeout=120)

    if user:
        shutil.chown(base, user)
        shutil.chown(sock, user)
        base.chmod(0o755)
    assert run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres").returncode == 0
    (data / "postgresql.conf").open("a").write("\n" + conf[0] + "\n")
    opts = f"-c listen_addresses='' -c unix_socket_directories='{sock}'"
    # -l: the server's output goes to a file, not to the pipes this test reads until EOF
    started = run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-o", opts, "-w", "start")
    assert started.returncode == 0, started.stderr
    try:
        url = f"postgresql://postgres@/postgres?host={sock}"
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE SCHEMA pgmem")
            # Stand-ins by name: put_turn is the slow one.
            for name in ("memory_recall", "put_turn"):
                c.execute(f"CREATE FUNCTION pgmem.{name}(s text, n integer) RETURNS integer LANGUAGE sql AS 'SELECT n'")
            c.execute("CREATE EXTENSION pg_stat_statements")
            c.execute("SELECT pg_stat_statements_reset()")  # the CREATE FUNCTIONs name them too
            for i in range(5):
                c.execute("SELECT * FROM pgmem.memory_recall(%s, %s)", ("user:42", i))
            for i in range(3):
                c.execute("SELECT pgmem.put_turn(%s, %s), pg_sleep(0.02)", ("user:42", i))
        (base / "query.sql").write_text(query + "\n", encoding="utf-8")
        done = subprocess.run(
            [str(bindir / "psql"), "-X", "-A", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", str(base / "query.sql")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = [line.split("|") for line in done.stdout.splitlines() if "|" in line]
        assert lines[0][:3] == ["function", "calls", "total_ms"]
        rows = {line[0]: line for line in lines[1:]}
        assert rows["memory_recall"][1] == "5" and rows["put_turn"][1] == "3"
        assert lines[1][0] == "put_turn", "ordered by the time taken"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def test_rebuild_cli_of_a_scope_without_turns_says_so(
    monkeypatch: pytest.MonkeyPatch, app_url: str, tmp_path: Path
) -> None:
    """As reblend refuses a scope with no memory (42704): one error line and status 2, where it
    printed "rebuilt 0 of 0 turns" and exited 0; no state file is left behind."""
    code, out, err = _cli(
        ["rebuild", "--scope", "no-such-scope"], monkeypatch, DATABASE_URL=app_url, PGMEM_HOME=str(tmp_path)
    )
    assert code == 2 and out == "" and "Traceback" not in err
    # One line: no progress bar of 0 of 0 turns before it.
    assert err.strip() == "pgmem: error: scope 'no-such-scope' has no stored turns to rebuild"
    assert not list(tmp_path.glob("rebuild-*.json"))
