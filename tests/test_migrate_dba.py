"""`pgmem migrate` as a DBA runs it in production (docs/operations.md, "Upgrading pgmem"): two
runs at once, the migrating login without CREATE on the database, a run that gives up on its
lock timeout behind an application's open transaction and is run again. Each run is the CLI in
its own process, as a deploy script starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgmem.migrate import head_revision, upgrade
from pgmem.sqlfiles import InstallParams
from tests.conftest import TEST_DIMS, scratch_database
from tests.security_helpers import Conn, ensure_login_roles, maintenance_login, repo_root, role_url
from tests.test_migrations import _diff, schema_dump

PARAMS = InstallParams(TEST_DIMS, TEST_DIMS)
#: The revision the scratch database starts at: the last that changed a table (0059's
#: functions), below a run of functions-only revisions whose last applies the re-runnable set.
START = "0059"
MIGRATOR = "pgmem_test_migrator"


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
