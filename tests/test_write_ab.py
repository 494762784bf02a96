"""The write A/B lab tool (pgmem.lab.bench.write_ab): two databases' write paths side by side on
the same turns, the same rows on both sides or exit 1, and nothing left behind either way; a bad
input is one line and exit 1 (a malformed option: argparse's exit 2)."""

from __future__ import annotations

import psycopg
import pytest

from pgmem.db import with_database
from pgmem.lab.bench import write_ab
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams
from tests.conftest import TEST_DIMS


def _left(url: str) -> int:
    """Rows of the tool's scopes in the database (read as its owner: no scope set)."""
    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT (SELECT count(*) FROM pgmem.scope WHERE scope_id LIKE 'write-ab-%%')"
            " + (SELECT count(*) FROM pgmem.piece WHERE scope_id LIKE 'write-ab-%%')"
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("write_ab: ") and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.long  # two databases and three rounds of each write path: over 10 s
def test_write_ab_compares_two_databases_and_refuses_bad_inputs(
    db_url: str, app_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--turns", "3", "--single", "2", "--rounds", "2"]
    with temporary_database(db_url, InstallParams(TEST_DIMS, TEST_DIMS)) as url2:  # installed as db_url is
        assert write_ab.main([db_url, url2, *args, "--documents", "3", "--facts", "150"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert "median of 2 rounds" in out[0]
        assert out[1].startswith("put_turns (one call of 3 turns): database ") and ", ratio " in out[1]
        assert out[2].startswith("put_turn (2 calls, one turn each): database ") and ", ratio " in out[2]
        assert out[3].startswith("put_document (3 documents of 3 units, one call each): database ")
        assert out[4].startswith("add_facts (150 facts, calls of 100): database ")
        assert out[5].startswith("add_facts again (the same 150 facts again, all skipped): database ") and len(out) == 6
        assert _left(db_url) == 0 and _left(url2) == 0

        # A second database whose words differ (another rule for a piece's lexemes): refused on the
        # first round's rows, and its scopes are forgotten all the same.
        with psycopg.connect(url2, autocommit=True) as c:
            c.execute(
                "CREATE OR REPLACE FUNCTION pgmem.piece_lexemes(label text, body text) RETURNS text"
                " LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, pgmem, pg_temp"
                " RETURN upper(label || ' ' || body)"
            )
        assert write_ab.main([db_url, url2, *args]) == 1
        assert "round 1: the two databases stored different rows" in _one_line(capsys)
        assert _left(db_url) == 0 and _left(url2) == 0

        bad = {
            "a database that is not there": [db_url, with_database(db_url, "pgmem_no_such_database"), *args],
            "a login that is not a superuser": [db_url, app_url, *args],
        }
        for what, argv in bad.items():
            assert write_ab.main(argv) == 1, what
            _one_line(capsys)
            assert _left(db_url) == 0, what
    for argv in (
        ["--rounds", "0"],
        ["--turns", "5001"],
        ["--single", "x"],
        ["--documents", "-1"],
        ["--facts", "100001"],
    ):
        with pytest.raises(SystemExit) as exc:
            write_ab.main([db_url, db_url, *argv])
        assert exc.value.code == 2
        capsys.readouterr()
