"""`pgmem bench` drops only a store it loaded itself: `--reuse` measures a database loaded by
an earlier run (the 1m store takes about 40 minutes to load), which every run without `--keep`
used to drop at its end, even one that failed. And its server memory figure survives a
connection closing while it reads the server's processes."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from pgmem import cli
from pgmem.db import with_database
from pgmem.lab.bench import measure


def _exists(server: str, name: str) -> bool:
    with psycopg.connect(server, autocommit=True) as c:
        return c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def test_a_reused_store_is_never_dropped(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = with_database(db_url, "postgres")
    name = f"pgmem_bench_reuse_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    monkeypatch.setenv("DATABASE_URL", server)
    try:
        # A database that holds no store: the run fails in one line, and the database stays.
        assert cli.main(["bench", "--size", "tiny", "--reuse", "--db", name, "--skip-writes"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "pgmem migrate" in err and "Traceback" not in err
        assert _exists(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_server_memory_survives_a_process_ending_meanwhile(
    admin_conn: psycopg.Connection[tuple[object, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.environ.get("DATABASE_URL"):
        pytest.skip("a remote server's processes are not this machine's")
    # A pid listed in /proc that is gone when its status is read (a connection that closed).
    listed = [*measure._all_pids(), max(measure._all_pids()) + 10_000_000]
    monkeypatch.setattr(measure, "_all_pids", lambda: listed)
    out = measure.server_memory(admin_conn)
    assert out["server_pss_mb"] is not None and out["server_pss_mb"] > 0 and out["server_processes"] >= 2


def test_a_database_the_bench_did_not_load_is_never_dropped(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run drops its --db and loads it anew: `pgmem bench --db pgmem` (the embedded server's own
    database) dropped every turn, fact and document stored there. Now a database pgmem bench did
    not load is refused in one line before anything is dropped, and keeps what it holds."""
    server = with_database(db_url, "postgres")
    name = f"pgmem_rt63_precious_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server, name)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE memory (note text)")
        c.execute("INSERT INTO memory VALUES ('the only copy')")
    monkeypatch.setenv("DATABASE_URL", server)
    try:
        assert cli.main(["bench", "--size", "tiny", "--db", name, "--skip-writes"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "did not load" in err and name in err and "Traceback" not in err, err
        with psycopg.connect(url, autocommit=True) as c:
            assert c.execute("SELECT note FROM memory").fetchall() == [("the only copy",)]
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
