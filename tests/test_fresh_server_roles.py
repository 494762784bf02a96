"""The pgmem group roles on a server that does not have them yet: a server of this module's own
(the test server's roles are shared by every test database, so they cannot be dropped there).
A migration of one database while another database's migration creates the roles, and
`pgmem roles create` run by a DBA who is not a superuser (docs/security.md: "a superuser (or a
role with CREATEROLE)"), as on a managed Postgres."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgmem import server
from pgmem.db import with_database
from pgmem.migrate import head_revision
from tests.conftest import TEST_DIMS
from tests.security_helpers import repo_root, role_url

Conn = psycopg.Connection[tuple[object, ...]]
GROUPS = ("pgmem_owner", "pgmem_app", "pgmem_reader")


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """A superuser URL of a server started for this module, in a folder of its own."""
    top = Path(tempfile.mkdtemp(prefix="pgmem-roles-"))
    top.chmod(0o755)  # the server runs as pgserver when we are root
    try:
        yield server.start(top / "pgdata")
    finally:
        server.stop(top / "pgdata")
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def su(base_url: str) -> Iterator[Conn]:
    """A superuser connection; afterwards the server holds no database and no role of the test."""
    c = psycopg.connect(base_url, autocommit=True)
    yield c
    for (name,) in c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'rt_%'").fetchall():
        c.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(str(name))))
    for (name,) in c.execute(
        # rt_dba last: the memberships it granted depend on it
        "SELECT rolname FROM pg_roles WHERE rolname LIKE 'rt_%' OR rolname LIKE 'pgmem\\_%'"
        " ORDER BY rolname = 'rt_dba', rolname"
    ).fetchall():
        c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(str(name))))
    c.close()


def _pgmem(url: str, *args: str, name: str = "rt_run", **extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PGAPPNAME": name,
        "PGMEM_PIECE_DIMS": str(TEST_DIMS),
        "PGMEM_FACT_DIMS": str(TEST_DIMS),
        **extra,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "pgmem", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=repo_root(),
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _database(su: Conn, base_url: str, name: str, owner: str | None = None) -> str:
    owned = sql.SQL(" OWNER {}").format(sql.Identifier(owner)) if owner else sql.SQL("")
    su.execute(sql.SQL("CREATE DATABASE {}{}").format(sql.Identifier(name), owned))
    return with_database(base_url, name)


@pytest.mark.parametrize("command", ["migrate", "roles"])
@pytest.mark.long
def test_a_run_while_another_database_creates_the_roles_goes_on(su: Conn, base_url: str, command: str) -> None:
    """Two databases of one new server migrated at once (two services, a deploy's parallel
    steps), or given `pgmem roles create` at once (a provisioning script per database): both find
    the group roles (and the login) missing and create them, and the second CREATE ROLE waited
    for the first's commit and failed on pg_authid's unique name (23505). Here the other
    database's run is a transaction that has created the roles and not committed yet."""
    url = _database(su, base_url, "rt_mig")
    other = psycopg.connect(base_url)  # its own transaction, another database's run
    try:
        for role in GROUPS:
            other.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        other.execute("CREATE ROLE rt_login LOGIN")
        args = ["migrate"] if command == "migrate" else ["roles", "create", "--login", "rt_login:app"]
        proc = _pgmem(url, *args, name="rt_mig_run")
        deadline = time.monotonic() + 120
        while not su.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'rt_mig_run' AND wait_event_type = 'Lock'"
        ).fetchone():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never waited for the roles"
            time.sleep(0.05)
        other.commit()
    finally:
        other.close()
    code, err = _finish(proc)
    assert code == 0, err
    if command == "roles":
        code, err = _finish(_pgmem(url, "migrate"))
        assert code == 0, err
    with psycopg.connect(url) as c:
        assert c.execute("SELECT version_num FROM pgmem.alembic_version").fetchone() == (head_revision(),)


@pytest.mark.long
def test_roles_create_by_a_createrole_owner_of_the_database_then_migrate(su: Conn, base_url: str) -> None:
    """docs/security.md: run `pgmem roles create` "as a superuser (or a role with CREATEROLE)".
    A CREATEROLE login that owns the database (a managed Postgres's admin, pgvector installed by
    the provider) was refused whole: CREATE SCHEMA pgmem AUTHORIZATION pgmem_owner needs SET ROLE
    pgmem_owner, which PostgreSQL 16+ does not give the creator of a role. The schema is left to
    the migration then, which the migrating login may create (GRANT CREATE ON DATABASE)."""
    su.execute("CREATE ROLE rt_dba LOGIN CREATEROLE")
    url = _database(su, base_url, "rt_managed", owner="rt_dba")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE EXTENSION vector")
    dba = role_url(url, "rt_dba")
    code, err = _finish(_pgmem(dba, "roles", "create", "--login", "rt_mig:owner", "--login", "rt_app:app"))
    assert code == 0, err
    code, err = _finish(_pgmem(role_url(url, "rt_mig"), "migrate"))
    assert code == 0, err
    with psycopg.connect(url) as c:
        assert c.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'pgmem'").fetchone() == (
            "pgmem_owner",
        )
        assert c.execute("SELECT version_num FROM pgmem.alembic_version").fetchone() == (head_revision(),)
    code, err = _finish(_pgmem(role_url(url, "rt_app"), "stats"))
    assert code == 1 and "no rows" in err, err
