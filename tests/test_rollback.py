"""Rolling back to an older pgmem (docs/operations.md, "Rolling back"), and `pgmem migrate` at
head applying the re-runnable definitions again when another package applied them.

The old package is this repository's own past: the commit before revision 0051 was added (head
0050; 0051's downgrade drops `pgmem._store_key_lock`, which head's delete_item and put_item
call), taken from git and run from its own tree as an installed package would be (`$OLD/bin`:
python, pgmem, alembic). Two of them: that commit as it was (a pgmem older than the rule, which
leaves the definitions alone at its head), and this checkout's Python over that commit's sql/ and
migrations/ (an old package that has the rule). The runbook's `rollback` blocks run as they are
printed, as a LOGIN member of pgmem_owner, between a database written at head and the checks."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgmem import server
from pgmem.cli import main
from pgmem.db import connect, scoped
from pgmem.ingest import ingest_turns
from pgmem.migrate import head_revision, upgrade
from pgmem.sqlfiles import InstallParams, package_version
from tests.conftest import TEST_DIMS, scratch_database
from tests.security_helpers import (
    APP_LOGIN,
    Conn,
    HashEmbedder,
    ensure_login_roles,
    hash_vector,
    maintenance_login,
    make_turn,
    package_before,
    repo_root,
    role_url,
)
from tests.test_operations import blocks

PARAMS = InstallParams(TEST_DIMS, TEST_DIMS)
OLD_HEAD = "0050"
MIGRATOR = "pgmem_test_migrator"
NAMESPACE = ["notes"]
TURN_TEXT = "The zeppelin flight over Lake Constance is booked for Friday."


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pgmem of the commit before 0051 was added, laid out as installed (pgmem.sql and
    pgmem.migrations inside the package)."""
    return package_before(
        "migrations/versions/0051_store_tombstone.py", tmp_path_factory.mktemp("pgmem-0050"), OLD_HEAD
    )


def _with_the_rule(old: Path, dest: Path) -> Path:
    """This checkout's Python with the old package's sql/ and migrations/."""
    package = dest / "pgmem"
    package.mkdir(parents=True)
    for entry in (repo_root() / "pgmem").iterdir():
        if entry.name not in ("sql", "migrations", "__pycache__"):
            (package / entry.name).symlink_to(entry)
    for folder in ("sql", "migrations"):
        (package / folder).symlink_to(old / folder)
    return dest


def _installed(tree: Path, dest: Path) -> Path:
    """A virtualenv-like folder whose bin/ runs `tree`'s pgmem: python, pgmem, alembic (-P: never
    the pgmem of the working directory)."""
    bin_dir = dest / "bin"
    bin_dir.mkdir(parents=True)
    for name, module in (("python", "-P"), ("pgmem", "-P -m pgmem"), ("alembic", "-P -m alembic")):
        script = bin_dir / name
        script.write_text(
            f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(tree))} exec {shlex.quote(sys.executable)} {module} "$@"\n'
        )
        script.chmod(0o755)
    return dest


def _in_store(app: Conn, query: str, *args: object) -> list[tuple[object, ...]]:
    with app.transaction():
        app.execute(
            "SELECT set_config('pgmem.scope', pgmem.store_scope(%s), true),"
            " set_config('pgmem.store_directory', 'rollback', true)",
            (NAMESPACE,),
        )
        return app.execute(query, args).fetchall()


def _put(app: Conn, key: str) -> object:
    rows = _in_store(
        app,
        "SELECT written FROM pgmem.put_item(pgmem.store_scope(%s), %s, %s, '{\"v\": 1}')",
        NAMESPACE,
        NAMESPACE,
        key,
    )
    return rows[0][0]


def _delete(app: Conn, key: str) -> object:
    return _in_store(app, "SELECT pgmem.delete_item(pgmem.store_scope(%s), %s)", NAMESPACE, key)[0][0]


def _recall(app: Conn) -> list[str]:
    with scoped(app, "alpha"):
        rows = app.execute(
            "SELECT body FROM pgmem.memory_recall('alpha', ARRAY[%s::vector], floor => -1)",
            ("[" + ",".join(repr(float(v)) for v in hash_vector(TURN_TEXT)) + "]",),
        ).fetchall()
    return [str(r[0]) for r in rows]


def _stored(url: str) -> dict[str, list[tuple[object, ...]]]:
    with psycopg.connect(url) as c:
        return {
            "item": c.execute("SELECT item_key, value, created_at FROM pgmem.store_item ORDER BY 1").fetchall(),
            "turn": c.execute("SELECT scope_id, thread_id, turn_index, content_hash FROM pgmem.turn").fetchall(),
            "piece": c.execute("SELECT piece_id, body, embedding::text FROM pgmem.piece ORDER BY 1").fetchall(),
        }


def _version(url: str) -> tuple[object, ...] | None:
    with psycopg.connect(url) as c:
        return c.execute("SELECT * FROM pgmem.version()").fetchone()


@contextlib.contextmanager
def _database_at_head(admin_conn: Conn, name: str) -> Iterator[str]:
    """A scratch database at head holding a turn and two store items, with the migrating login
    (pgmem_test_migrator) allowed to create in it."""
    with scratch_database(admin_conn, name) as url:
        upgrade(url, params=PARAMS)
        ensure_login_roles(admin_conn)
        maintenance_login(admin_conn, url, MIGRATOR).close()
        admin_conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO pgmem_owner").format(
                sql.Identifier(str(conninfo_to_dict(url)["dbname"]))
            )
        )
        with connect(role_url(url, APP_LOGIN)) as app:
            assert ingest_turns(app, [make_turn("alpha", "trip", 0, TURN_TEXT)], HashEmbedder()).inserted == 1
            assert _put(app, "k1") is True and _put(app, "k2") is True
        yield url


def _run(code: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, f"block failed:\n{code}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _roll_back(url: str, old_bin: Path, cwd: Path) -> list[str]:
    """The runbook's rollback blocks, in order, until the database holds the old package's
    definitions; returns what each printed."""
    steps = [b.code for b in blocks() if b.who == "rollback"]
    assert len(steps) == 3
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(server.bin_dir()), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "OLD": str(old_bin),
        "MIGRATOR_URL": role_url(url, MIGRATOR),
        "PGMEM_PIECE_DIMS": str(TEST_DIMS),
        "PGMEM_FACT_DIMS": str(TEST_DIMS),
    }
    env.pop("DATABASE_URL", None)
    out = [_run(steps[0], env, cwd)]
    assert "DROP TABLE pgmem.store_tombstone" in (cwd / "downgrade.sql").read_text(encoding="utf-8")
    assert _version(url) == (package_version(), OLD_HEAD)
    with connect(role_url(url, APP_LOGIN)) as app, pytest.raises(psycopg.errors.UndefinedFunction):
        _delete(app, "k1")  # the window the runbook warns of: head's functions over 0050's tables
    out.append(_run(steps[1], env, cwd))
    if "nothing to do" in out[-1]:
        out.append(_run(steps[2], env, cwd))
    return out


def _works_at_the_old_head(url: str, before: dict[str, list[tuple[object, ...]]]) -> None:
    assert _stored(url) == before, "a rollback loses nothing the old package stores"
    assert _version(url) == (package_version(), OLD_HEAD)
    with psycopg.connect(url) as c:
        assert c.execute("SELECT to_regproc('pgmem._store_key_lock') IS NULL").fetchone() == (True,)
    with connect(role_url(url, APP_LOGIN)) as app:
        assert _delete(app, "k1") is True
        assert _put(app, "k3") is True and _put(app, "k1") is True  # a deleted key is written again at 0050
        assert TURN_TEXT in _recall(app)[0]
    # Forward again: a plain upgrade with this package.
    assert upgrade(url, params=PARAMS) == "migrate"
    assert _version(url) == (package_version(), head_revision())
    with connect(role_url(url, APP_LOGIN)) as app:
        assert _delete(app, "k2") is True and TURN_TEXT in _recall(app)[0]


@pytest.mark.long
def test_rollback_to_an_old_package_with_the_rule(admin_conn: Conn, old_tree: Path, tmp_path: Path) -> None:
    """Its `pgmem migrate` at its head applies its own definitions: the runbook's step 3 is one
    command. Before the rule, that command said "at head already: nothing to do" and every
    delete_item failed with 42883 afterwards."""
    old_bin = _installed(_with_the_rule(old_tree, tmp_path / "tree"), tmp_path / "old")
    with _database_at_head(admin_conn, "rollback_rule") as url:
        before = _stored(url)
        # The old package first, before the downgrade: one line, the schema untouched.
        early = subprocess.run(
            [str(old_bin / "bin" / "pgmem"), "migrate"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "DATABASE_URL": url},
        )
        assert early.returncode == 2 and early.stderr.count("\n") == 1, early.stderr
        assert f"at {head_revision()}, a revision this pgmem (head {OLD_HEAD}) does not ship" in early.stderr
        assert "Rolling back" in early.stderr and _version(url) == (package_version(), head_revision())
        out = _roll_back(url, old_bin, tmp_path)
        assert len(out) == 2 and "applied this package's re-runnable definitions again" in out[1], out
        _works_at_the_old_head(url, before)


@pytest.mark.long
def test_rollback_to_an_old_package_without_the_rule(admin_conn: Conn, old_tree: Path, tmp_path: Path) -> None:
    """A pgmem from before the rule leaves the definitions alone at its head; the runbook's
    printed set, from its own code, in one transaction, restores them."""
    old_bin = _installed(old_tree, tmp_path / "old")
    with _database_at_head(admin_conn, "rollback_old") as url:
        before = _stored(url)
        out = _roll_back(url, old_bin, tmp_path)
        assert len(out) == 3 and "at head already: nothing to do" in out[1], out
        _works_at_the_old_head(url, before)


def _cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def _definitions_xmin(url: str) -> object:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT xmin::text FROM pg_proc WHERE oid = 'pgmem.delete_item(text, text)'::regprocedure")
        return row.fetchone()


@pytest.mark.parametrize(
    "tamper",
    [
        "CREATE OR REPLACE FUNCTION pgmem.version() RETURNS TABLE (package_version text, schema_revision text)"
        " LANGUAGE sql STABLE SET search_path = pg_catalog, pgmem, pg_temp"
        " AS $$ SELECT '0.0.1'::text, (SELECT version_num::text FROM pgmem.alembic_version) $$",
        "CREATE OR REPLACE FUNCTION pgmem._definitions() RETURNS text LANGUAGE sql IMMUTABLE"
        " SET search_path = pg_catalog, pgmem, pg_temp AS $$ SELECT 'another package'::text $$",
        "DROP FUNCTION pgmem._definitions()",
    ],
    ids=["package version", "digest", "no digest"],
)
def test_migrate_at_head_applies_the_definitions_again_when_another_package_applied_them(
    admin_conn: Conn, db_url: str, app_url: str, monkeypatch: pytest.MonkeyPatch, tamper: str
) -> None:
    """Same package: nothing runs, for the migrating login as for the application login.
    Another package's digest recorded, or none: the migrating login applies this package's set
    again; the application login, which may not, still gets a no-op. Another package version
    with the same digest (a release that changed only Python) applies nothing: two such
    packages side by side would otherwise apply them in turn."""
    ensure_login_roles(admin_conn)
    applied = _definitions_xmin(db_url)
    assert upgrade(app_url) == "nothing" and upgrade(db_url) == "nothing"
    monkeypatch.setenv("DATABASE_URL", db_url)
    assert _cli("migrate") == (0, "schema pgmem is at head already: nothing to do\n")
    assert _definitions_xmin(db_url) == applied, "no DDL at head with this package's definitions"

    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(tamper.encode())
        c.execute(
            b"CREATE OR REPLACE FUNCTION pgmem.delete_item(scope text, item_key text) RETURNS boolean"
            b" LANGUAGE sql VOLATILE SET search_path = pg_catalog, pgmem, pg_temp AS $$ SELECT NULL::boolean $$"
        )
    assert upgrade(app_url) == "nothing"
    code, err = _cli("migrate")
    if tamper.startswith("CREATE OR REPLACE FUNCTION pgmem.version()"):
        assert (code, err) == (0, "schema pgmem is at head already: nothing to do\n")
        with connect(app_url) as app:
            assert _put(app, "k") is True and _delete(app, "k") is None  # the tampered delete_item stays
        return
    assert (code, err) == (0, "schema pgmem is at head; applied this package's re-runnable definitions again\n")
    assert _version(db_url) == (package_version(), head_revision())
    with connect(app_url) as app:
        assert _put(app, "k") is True and _delete(app, "k") is True
    assert _cli("migrate") == (0, "schema pgmem is at head already: nothing to do\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["migrate", "--revision", "0001"],
        ["migrate", "--revision", "zzz"],
        ["migrate", "--revision", ""],
        ["migrate", "--revision", "-1"],
        ["migrate", "--revision", "head+1"],
        ["migrate", "--revision", "base"],
        ["migrate", "--revision", "0054:0050"],
        ["migrate", "--revision", "\x1b[31m" + "9" * 5000],
        ["migrate", "--sql", "--revision", "head:0001"],
        ["migrate", "--sql", "--revision", "zzz:head"],
        ["migrate", "--sql", "--revision", ":"],
    ],
)
def test_migrate_refuses_a_bad_or_downward_revision_in_one_line(
    db_url: str, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    code, err = _cli(*argv)
    assert code == 2 and err.count("\n") == 1 and err.startswith("pgmem: error: ") and len(err) < 300, err
    if "0001" in argv[-1]:
        assert "only upgrades" in err and "Rolling back" in err
    assert _version(db_url) == (package_version(), head_revision())


def test_the_definitions_go_only_onto_this_packages_head(db_url: str) -> None:
    """apply_definitions holds the version row and checks it: a migration that moved the schema
    between preflight and the apply makes it stop, one line, before any definition is written."""
    from pgmem.errors import SchemaError
    from pgmem.migrate import apply_definitions

    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE pgmem.alembic_version SET version_num = '0053'")
        applied = _definitions_xmin(db_url)
        with pytest.raises(SchemaError, match="moved to 0053 meanwhile"):
            apply_definitions(db_url, PARAMS)
        assert _definitions_xmin(db_url) == applied
