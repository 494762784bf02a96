"""SQL behaviour shown as psql scripts with expected output (tests/sql/*.sql vs
tests/sql/expected/*.out). They double as documentation; regenerate an expected file
with PGMEM_REGEN_SQL=1 after a deliberate change and review the diff."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pgmem import server

SQL_DIR = Path(__file__).parent / "sql"
SCRIPTS = sorted(SQL_DIR.glob("*.sql"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_psql_script_output(script: Path, db_url: str) -> None:
    psql = server.bin_dir() / "psql"
    proc = subprocess.run(
        [str(psql), "-X", "-a", "-v", "ON_ERROR_STOP=0", "-P", "pager=off", db_url, "-f", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env={**os.environ, "PGOPTIONS": "-c client_min_messages=warning", "PGTZ": "UTC"},
    )
    out = proc.stdout.replace(str(script), script.name)
    expected = SQL_DIR / "expected" / f"{script.stem}.out"
    if os.environ.get("PGMEM_REGEN_SQL") == "1":
        expected.write_text(out)
    assert out == expected.read_text()
