"""The first minutes: the embedded server's data folder in odd states, and connection settings.
Each answers in one line with a non-zero exit status, never a traceback, a hang or a secret,
and what is stored is never lost."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from tests.conftest import scratch_database

Conn = psycopg.Connection[tuple[object, ...]]
SECRET = "S3cretPW"


def run(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {"PGMEM_HOME": str(home), "PATH": "/usr/bin:/bin", **(env or {})}
    return subprocess.run([sys.executable, "-m", "pgmem", *args], env=full, capture_output=True, text=True, timeout=60)


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode != 0, r
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgmem: error: "), r.stderr
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    h.chmod(0o755)  # the server runs as pgserver when we are root
    return h


def started_with_a_row(home: Path, env: dict[str, str] | None = None) -> None:
    r = run(home, "db", "start", env=env)
    assert r.returncode == 0, r.stderr
    r = run(home, "db", "psql", "-Atc", "CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)", env=env)
    assert r.returncode == 0, r.stderr


def still_has_the_row(home: Path, env: dict[str, str] | None = None) -> None:
    r = run(home, "db", "psql", "-Atc", "SELECT x FROM kept", env=env)
    assert r.stdout.strip() == "7", r.stderr


@pytest.mark.parametrize("content", ["live-not-postgres", "", "garbage\n", "partial"])
@pytest.mark.long
def test_a_stale_postmaster_pid_is_no_running_server(home: Path, content: str) -> None:
    """A postmaster.pid left by a crash: its pid reused by another process, empty, garbled or
    cut short. The server is stopped; stop signals nobody, start starts it, the data is kept."""
    started_with_a_row(home)
    assert run(home, "db", "stop").returncode == 0
    pidfile = home / "pgdata" / "postmaster.pid"
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        if content == "live-not-postgres":
            content = f"{bystander.pid}\n{home / 'pgdata'}\n1733450000\n5432\n{home / 'pgdata'}\n\n  5432001 0\nready\n"
        elif content == "partial":
            content = f"{bystander.pid}\n{home / 'pgdata'}\n"
        pidfile.write_text(content)
        st = run(home, "db", "status")
        assert st.returncode == 3 and st.stdout.startswith("stopped"), (st.stdout, st.stderr)
        stop = run(home, "db", "stop")
        assert stop.returncode == 0 and stop.stdout.startswith("no server running"), (stop.stdout, stop.stderr)
        assert bystander.poll() is None, "pgmem db stop signalled a process that is not its server"
        r = run(home, "db", "start")
        assert r.returncode == 0, r.stderr
        still_has_the_row(home)
    finally:
        bystander.kill()
        bystander.wait()
        run(home, "db", "stop")


@pytest.mark.parametrize("holder", ["zombie", "live-not-postgres"])
@pytest.mark.long
def test_a_crashed_servers_socket_lock_naming_another_process_is_no_running_server(home: Path, holder: str) -> None:
    """The server killed (-9): postmaster.pid and the socket's lock file (.s.PGSQL.5432.lock)
    stay, naming its pid. In a container whose first process reaps no child (no --init), the
    dead postmaster stays a zombie; elsewhere its pid may be reused. postgres takes either for
    another postmaster on the socket, so `pgmem db start` said 'FATAL: lock file
    ".s.PGSQL.5432.lock" already exists' after every crash, until the container restarted. A lock
    naming this folder and a process that is not its postgres is removed as postgres removes a
    dead one's; the data is kept. The second case runs with PGPORT set, so the server's socket
    and lock are .s.PGSQL.5433*: its lock was left alone until rt71 (5432's was looked for)."""
    env = {"PGPORT": "5433"} if holder == "live-not-postgres" else {}
    started_with_a_row(home, env)
    pgdata = home / "pgdata"
    pid, socket_dir = (line.strip() for line in (pgdata / "postmaster.pid").read_text().splitlines()[0:5:4])
    os.kill(int(pid), 9)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # reaped by the machine's init
        time.sleep(0.05)
    lock = Path(socket_dir) / f".s.PGSQL.{env.get('PGPORT', '5432')}.lock"
    assert lock.exists()
    # The server's user (pgserver when we are root): postgres ignores a pid it may not signal.
    other = subprocess.Popen(
        ["true"] if holder == "zombie" else ["sleep", "60"],  # "true" is never waited for: a zombie
        user=(pgdata / "PG_VERSION").stat().st_uid,
    )
    try:
        while holder == "zombie" and Path(f"/proc/{other.pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.01)
        lines = lock.read_text().splitlines()
        lock.write_text("\n".join([str(other.pid), *lines[1:]]) + "\n")
        st = run(home, "db", "status", env=env)
        assert st.returncode == 3 and st.stdout.startswith("stopped"), (st.stdout, st.stderr)
        r = run(home, "db", "start", env=env)
        assert r.returncode == 0, r.stderr
        still_has_the_row(home)  # without PGPORT: the URL names the port
        assert holder == "zombie" or other.poll() is None
    finally:
        other.kill()
        other.wait()
        run(home, "db", "stop")


@pytest.mark.long
def test_a_failed_start_names_this_starts_reason_not_an_old_fatal_of_the_log(home: Path) -> None:
    """The server's log keeps every start's lines. A start that failed without writing a FATAL
    there (pg_ctl could not open the log: a data folder copied or restored by another user) was
    reported with the log's last FATAL, from some earlier start ('FATAL: lock file ... already
    exists' of last week). Only what this start wrote counts; else pg_ctl's own error line."""
    started_with_a_row(home)
    assert run(home, "db", "stop").returncode == 0
    log = home / "pgdata" / "log"
    with log.open("a") as f:
        f.write("2026-01-01 00:00:00.000 UTC [1] FATAL:  an old failure of another start\n")
    log.chmod(0)  # the server's user may not open it (root's tests: the server runs as pgserver)
    try:
        line = one_line_error(run(home, "db", "start"))
        assert "an old failure" not in line and "log" in line, line
    finally:
        log.chmod(0o600)
    r = run(home, "db", "start")
    assert r.returncode == 0, r.stderr
    still_has_the_row(home)
    run(home, "db", "stop")


def test_db_psql_with_the_server_stopped_is_one_line(home: Path) -> None:
    one_line_error(run(home, "db", "psql", "-c", "SELECT 1"))


def test_pgmem_home_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "home"
    f.write_text("not a folder")
    line = one_line_error(run(f, "db", "start"))
    assert str(f) in line
    assert f.read_text() == "not a folder"


@pytest.mark.parametrize("version", [True, False])
def test_a_half_initialised_data_folder_is_one_line_and_kept(home: Path, version: bool) -> None:
    """initdb killed midway: with or without PG_VERSION, the folder is named and left alone."""
    pgdata = home / "pgdata"
    (pgdata / "base").mkdir(parents=True)
    (pgdata / "base" / "mine").write_text("keep")
    if version:
        (pgdata / "PG_VERSION").write_text("18\n")
    line = one_line_error(run(home, "db", "start"))
    assert str(pgdata) in line
    assert (pgdata / "base" / "mine").read_text() == "keep"
    assert (pgdata / "PG_VERSION").exists() == version


def test_a_pgmem_home_that_is_not_utf8_is_refused_before_initdb(tmp_path: Path) -> None:
    """A PGMEM_HOME holding a byte that is not UTF-8: initdb ran, then reading the server's
    output failed ('utf-8' codec can't decode), so every start after failed the same way over a
    folder initialised for nothing. Now refused before anything is created."""
    home = tmp_path / os.fsdecode(b"home\xff")
    home.mkdir()
    home.chmod(0o755)
    line = one_line_error(run(home, "db", "start"))
    assert "UTF-8" in line and "PGMEM_HOME" in line, line
    assert not (home / "pgdata").exists() or not any((home / "pgdata").iterdir())


def test_a_data_folder_that_is_a_symlink_loop_is_one_line(home: Path) -> None:
    """PGMEM_HOME/pgdata a symlink to itself (or a loop of them): Path.resolve raised
    RuntimeError, a traceback from every command that looks for the server."""
    (home / "pgdata").symlink_to(home / "pgdata")
    for args in (("db", "status"), ("db", "stop"), ("db", "start"), ("db", "url"), ("stats",)):
        line = one_line_error(run(home, *args))
        assert str(home / "pgdata") in line and "symlink" in line, (args, line)
    assert (home / "pgdata").is_symlink()


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}@[::1/db",  # libpq echoes a URI it cannot parse
        f"postgresql://u:{SECRET}%zz@localhost/db",  # and a percent-escape it cannot decode
        f"host=/nowhere password={SECRET}%zz dbname=x",
        f"postgresql://[::1/db?password={SECRET}&sslmode=require",
    ],
)
def test_a_password_in_database_url_is_never_printed(home: Path, url: str) -> None:
    for args in (("db", "url"), ("migrate",), ("stats",), ("db", "psql", "-c", "SELECT 1"), ("roles", "show")):
        r = run(home, *args, env={"DATABASE_URL": url})
        assert SECRET not in r.stdout + r.stderr, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr


def test_db_url_prints_the_url_without_its_password(home: Path) -> None:
    r = run(home, "db", "url", env={"DATABASE_URL": f"postgresql://u:{SECRET}@db.example:6432/mem?sslmode=require"})
    assert r.returncode == 0 and r.stdout.strip() == "postgresql://u:***@db.example:6432/mem?sslmode=require"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://u:{SECRET}/x@db.example/mem", "postgresql://u:***@db.example/mem"),
        (
            f"postgresql://u:a/{SECRET}@db.example:6432/mem?sslmode=require",
            "postgresql://u:***@db.example:6432/mem?sslmode=require",
        ),
        (f"postgresql://u:a@{SECRET}@db.example/mem?x=a@b", "postgresql://u:***@db.example/mem?x=a@b"),
        # no scheme: libpq reads it as key=value and says it whole (until rt71, password and all)
        (f"u:{SECRET}@db.example:6432/mem", "u:***@db.example:6432/mem"),
        ("postgresql://postgres@/pgmem?host=/tmp/x&port=5432", "postgresql://postgres@/pgmem?host=/tmp/x&port=5432"),
    ],
)
def test_db_url_hides_a_password_holding_a_slash_or_an_at_sign(home: Path, url: str, shown: str) -> None:
    """A password written into the URL unescaped, with a `/` or `@` in it (libpq cannot parse
    it: the URL is broken, but the password is still the user's). Until rt60 `pgmem db url`
    printed the URL whole, or the password's end: it was matched up to the first `/` or `@`."""
    from pgmem.db import redact_secrets

    r = run(home, "db", "url", env={"DATABASE_URL": url})
    assert r.returncode == 0 and r.stdout.strip() == shown, (r.stdout, r.stderr)
    assert SECRET not in redact_secrets(f"could not parse {url}: {url.split('@')[0]}", url)


def test_an_unmigrated_database_says_run_pgmem_migrate(home: Path, admin_conn: Conn) -> None:
    with scratch_database(admin_conn, "unmigrated") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
        for args in (("stats",), ("reblend", "--scope", "s", "--weight", "0.5")):
            line = one_line_error(run(home, *args, env={"DATABASE_URL": url}))
            assert "run `pgmem migrate`" in line, line
        with psycopg.connect(url, autocommit=True) as c:
            from pgmem import stats
            from pgmem.errors import SchemaError

            with pytest.raises(SchemaError, match="run `pgmem migrate`"):
                stats(c)


def test_the_pgmem_database_created_by_two_starts_at_once_is_no_error(db_url: str, admin_conn: Conn) -> None:
    """Two first starts at once both find no `pgmem` database and both create it: the second
    CREATE DATABASE fails with 42P04 (the first committed) or 23505 (both inserted at once into
    pg_database's unique name index). Either means the database is there, not an error."""
    import threading

    from pgmem.server import _ensure_database

    failures: list[BaseException] = []
    for round_no in range(8):
        name = f"pgmem_race_{os.getpid()}_{round_no}"
        barrier = threading.Barrier(4)

        def create(name: str = name, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                _ensure_database(db_url, name)
            except BaseException as exc:  # collected, asserted below
                failures.append(exc)

        workers = [threading.Thread(target=create) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert admin_conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone() == (1,)
        admin_conn.execute(f'DROP DATABASE "{name}"')
    assert failures == []


@pytest.mark.long
def test_a_pgmem_home_with_a_space_starts_and_stops() -> None:
    """macOS's default data path has a space ("Application Support"). The library hands the
    socket folder to postgres through pg_ctl's shell unquoted: the server never started from
    such a path (one line since the first-run fixes, but a failure). Its socket now lives in a
    folder named by a hash of the data folder, and the data stays where PGMEM_HOME says."""
    # Short enough for the socket to fit in the data folder (pytest's tmp_path is too long: the
    # library then puts the socket elsewhere, and the space never reaches the shell).
    top = Path(tempfile.mkdtemp(prefix="pgmem sp-"))
    home = top / "App Support"
    home.mkdir()
    for folder in (home, top):
        folder.chmod(0o755)  # the server runs as pgserver when we are root
    try:
        started_with_a_row(home)
        r = run(home, "db", "status")
        assert r.returncode == 0 and r.stdout.startswith("running"), r.stdout + r.stderr
        assert (home / "pgdata" / "PG_VERSION").exists()
        # `pgmem db` is "ignored with DATABASE_URL": stop leaves the embedded server running
        # (until rt71 it stopped it, under a service reaching it by its own URL).
        other = run(home, "db", "stop", env={"DATABASE_URL": "postgresql://u@/elsewhere?host=/nowhere"})
        assert other.returncode == 0 and "nothing to stop" in other.stderr, other.stdout + other.stderr
        assert "unset DATABASE_URL" in other.stderr
        assert run(home, "db", "status").stdout.startswith("running")
        assert run(home, "db", "stop").returncode == 0
        assert run(home, "db", "status").stdout.startswith("stopped")
        again = run(home, "db", "start")
        assert again.returncode == 0, again.stderr
        still_has_the_row(home)
    finally:
        run(home, "db", "stop")
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("name", ["x$(touch MARK)y", "x`touch MARK`y", 'quo"te', "back\\slash"])
def test_a_pgmem_home_pg_ctls_shell_would_read_is_refused(tmp_path: Path, name: str) -> None:
    """pg_ctl puts the data folder and its log in double quotes for its shell, where `$(...)`,
    backquotes, a quote or a backslash still act: such a PGMEM_HOME ran a command as the
    server's user (and the start failed). It is one line, before anything is created."""
    tmp_path.chmod(0o777)  # so that a command run as the server's user could write MARK here
    home = tmp_path / name.replace("MARK", str(tmp_path / "MARK"))
    line = one_line_error(run(home, "db", "start"))
    assert "pg_ctl's shell" in line
    assert not (tmp_path / "MARK").exists() and not (home / "pgdata").exists()


def test_the_embedded_servers_url_names_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The port names the server's socket (.s.PGSQL.<port>). postgres takes PGPORT from the
    environment it starts in, libpq from the connecting one's: without the port in `pgmem db
    url`, a server started with PGPORT set was out of reach of a shell without it (and the
    reverse), with "No such file or directory" for a socket that was never there."""
    from pgmem import server
    from tests.conftest import _test_home

    if os.environ.get("DATABASE_URL"):
        pytest.skip("the tests run on DATABASE_URL's server, not an embedded one")
    st = server.status(_test_home() / "pgdata")
    assert st.running and st.url is not None
    monkeypatch.setenv("PGPORT", "1")  # another server's port, in the shell of a later command
    with psycopg.connect(st.url, autocommit=True) as c:
        assert c.execute("SELECT current_database()").fetchone() == ("pgmem",)


def test_db_psql_passes_the_password_in_its_environment_not_on_its_command_line(home: Path, db_url: str) -> None:
    """`pgmem db psql` ran psql with DATABASE_URL as its first argument, password and all: any
    user of the machine read it in `ps` or /proc/PID/cmdline while the session lasted (until
    rt71). psql's own command line is read here from a shell it starts (its parent is psql)."""
    assert "@" in db_url and "://" in db_url
    url = db_url.replace("@", f":{SECRET}@", 1)  # the test server trusts its logins: any password
    r = run(home, "db", "psql", "-c", '\\! tr "\\0" " " < /proc/$PPID/cmdline', env={"DATABASE_URL": url})
    assert r.returncode == 0 and "psql" in r.stdout, (r.stdout, r.stderr)
    assert SECRET not in r.stdout + r.stderr


def test_db_psql_takes_psqls_own_database_and_user_options(home: Path, db_url: str) -> None:
    """The connection was psql's first argument: `pgmem db psql -d postgres` made it the user
    name ("connection to server on socket /tmp/.s.PGSQL.5432 failed"), and `-U` was overridden
    by it (until rt71). psql's options now override the connection pgmem gives it."""
    sql = "SELECT current_database() || ' ' || current_user"
    r = run(home, "db", "psql", "-d", "postgres", "-U", "pgmem_test_app", "-Atc", sql, env={"DATABASE_URL": db_url})
    assert r.returncode == 0 and r.stdout.split() == ["postgres", "pgmem_test_app"], (r.stdout, r.stderr)


@pytest.mark.parametrize("folder", ["/tmp/a%s%n/pgdata", "/tmp/50%25/pgdata", "/tmp/a+b=c@d/pgdata", "/tmp/ü/pgdata"])
def test_the_embedded_servers_url_holds_any_socket_folder(folder: str) -> None:
    """The socket stays in the data folder when pg_ctl's shell may read its path as it is, and
    `%` is such a character: PGMEM_HOME=/tmp/50%/x started the server, then every command (the
    start's own CREATE DATABASE first) failed with 'invalid percent-encoded token' (until rt71)."""
    from psycopg.conninfo import conninfo_to_dict

    from pgmem.server import _socket_url

    assert conninfo_to_dict(_socket_url(folder, "5432", "pgmem")) == {
        "user": "postgres",
        "dbname": "pgmem",
        "host": folder,
        "port": "5432",
    }
