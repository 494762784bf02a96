"""Migrations are reproducible: fresh install, downgrade-then-upgrade and the offline
script give the same catalog (pg_dump --schema-only); upgrading at head is a no-op; a
released run-once SQL file that changes fails its checksum."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgmem import server
from pgmem.migrate import downgrade, upgrade
from pgmem.sqlfiles import SQL_DIR, InstallParams
from tests.conftest import TEST_DIMS, conninfo_url
from tests.security_helpers import Conn, repo_root

PARAMS = InstallParams(TEST_DIMS, TEST_DIMS)
INCREMENTAL = SQL_DIR / "incremental"


def schema_dump(url: str) -> str:
    """The catalog as pg_dump --schema-only prints it, minus lines that differ per run."""
    proc = subprocess.run(
        [str(server.bin_dir() / "pg_dump"), "--schema-only", "--no-comments", "-d", url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    proc_c = subprocess.run(  # comments too, separately: they are part of the contract
        [str(server.bin_dir() / "pg_dump"), "--schema-only", "-d", url],
        capture_output=True,
        text=True,
        check=True,
    )
    keep = []
    for line in (proc.stdout + proc_c.stdout).splitlines():
        if line.startswith(("\\restrict", "\\unrestrict", "-- Dumped", "-- PostgreSQL database dump")):
            continue
        keep.append(line)
    return "\n".join(keep)


def _diff(a: str, b: str) -> str:
    import difflib

    return "\n".join(list(difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=1))[:60])


def _version(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as c:
        return c.execute("SELECT version_num FROM pgmem.alembic_version").fetchall()


@pytest.fixture
def fresh_url(admin_conn: Conn) -> Iterator[str]:
    """A database migrated now, from the files as they are (the session's template database
    was migrated when the session started)."""
    name = f"{admin_conn.info.dbname}_fresh"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = conninfo_url(name)
        upgrade(url, params=PARAMS)
        yield url
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_downgrade_then_upgrade_gives_the_fresh_catalog(db_url: str, fresh_url: str) -> None:
    fresh = schema_dump(fresh_url)
    assert "CREATE TABLE pgmem.piece" in fresh and "ROW LEVEL SECURITY" in fresh
    downgrade(db_url, "base", params=PARAMS)
    with psycopg.connect(db_url) as c:
        left = c.execute(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace AND relname <> 'alembic_version'"
            " AND relkind IN ('r', 'p', 'v', 'm')"
        ).fetchone()
        assert left == (0,)
    upgrade(db_url, params=PARAMS)
    again = schema_dump(db_url)
    assert again == fresh, _diff(fresh, again)


def test_upgrade_head_twice_is_a_no_op(db_url: str) -> None:
    before, version = schema_dump(db_url), _version(db_url)
    upgrade(db_url, params=PARAMS)
    upgrade(db_url, params=PARAMS)
    assert _version(db_url) == version
    after = schema_dump(db_url)
    assert after == before, _diff(before, after)


def test_reapplying_every_idempotent_file_changes_nothing(fresh_url: str) -> None:
    """The re-runnable files really are: applying them all again leaves the same catalog
    (policies recreated, grants reapplied, SECURITY DEFINER reasons not appended twice)."""
    from pgmem.sqlfiles import idempotent_files, render

    before = schema_dump(fresh_url)
    with psycopg.connect(fresh_url, autocommit=True) as c:
        for path in idempotent_files():
            c.execute(render(path.read_text(encoding="utf-8"), PARAMS).encode())
    after = schema_dump(fresh_url)
    assert after == before, _diff(before, after)


def test_offline_sql_script_installs_the_same_catalog(fresh_url: str, admin_conn: Conn) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alembic",
            "-c",
            "migrations/alembic.ini",
            "-x",
            f"piece_dims={TEST_DIMS}",
            "-x",
            f"fact_dims={TEST_DIMS}",
            "upgrade",
            "head",
            "--sql",
        ],
        capture_output=True,
        text=True,
        cwd=repo_root(),
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = proc.stdout
    assert "CREATE TABLE pgmem.piece" in script and "@PIECE_DIMS@" not in script
    name = f"{admin_conn.info.dbname}_offline"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = conninfo_url(name)
        psql = subprocess.run(
            [str(server.bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url],
            input=script,
            capture_output=True,
            text=True,
            check=False,
        )
        assert psql.returncode == 0, psql.stderr[-3000:]
        offline, fresh = schema_dump(url), schema_dump(fresh_url)
        assert offline == fresh, _diff(fresh, offline)
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# --- checksums of released run-once files ----------------------------------------------


def checksum_problems(folder: Path) -> list[str]:
    """Every file listed in CHECKSUMS must exist unchanged; returns what is wrong."""
    listing = folder / "CHECKSUMS"
    problems = []
    for n, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([0-9a-f]{64})  (\S+\.sql)", line)
        if not match:
            problems.append(f"CHECKSUMS line {n} is not '<sha256>  <file>.sql': {line!r}")
            continue
        digest, name = match.groups()
        path = folder / name
        if not path.exists():
            problems.append(f"released file {name} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(
                f"released run-once file {name} changed (sha256 differs from CHECKSUMS): "
                "add a new numbered file instead"
            )
    return problems


def test_released_run_once_files_are_unchanged() -> None:
    assert (INCREMENTAL / "CHECKSUMS").exists(), "sql/incremental/CHECKSUMS is missing"
    assert checksum_problems(INCREMENTAL) == []
    listed = {line.split()[1] for line in (INCREMENTAL / "CHECKSUMS").read_text().splitlines() if line[:1].isalnum()}
    assert "001_schema.sql" in listed
    # every listed file is a numbered run-once file that a revision applies
    revisions = "\n".join(p.read_text() for p in (repo_root() / "migrations" / "versions").glob("*.py"))
    for name in listed:
        assert re.fullmatch(r"\d{3}_[a-z0-9_]+\.sql", name) and f"incremental/{name}" in revisions


def test_checksum_test_catches_a_changed_file(tmp_path: Path) -> None:
    shutil.copytree(INCREMENTAL, tmp_path / "incremental")
    folder = tmp_path / "incremental"
    assert checksum_problems(folder) == []
    target = folder / "001_schema.sql"
    target.write_text(target.read_text() + "\n-- a harmless-looking edit\n")
    assert any("001_schema.sql changed" in p for p in checksum_problems(folder))
    target.unlink()
    assert any("missing" in p for p in checksum_problems(folder))


@pytest.mark.parametrize("folder", ["incremental", "idempotent"])
def test_sql_folders_state_their_rule(folder: str) -> None:
    text = (SQL_DIR / folder / "README.md").read_text(encoding="utf-8")
    assert ("CHECKSUMS" in text) if folder == "incremental" else ("CREATE OR REPLACE" in text)
