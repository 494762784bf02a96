"""The staging A/B lab tool (pgmem.lab.bench.stage_ab): two databases' stage_vectors calls side by
side, every page staged on both sides and nothing of its scope left behind; a bad input is one
line and exit 1 (a malformed option: argparse's exit 2)."""

from __future__ import annotations

import psycopg
import pytest

from pgmem.db import with_database
from pgmem.lab.bench import stage_ab
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams


def _left(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as c:
        row = c.execute(
            """SELECT (SELECT count(*) FROM pgmem.scope WHERE scope_id = %s),
                      (SELECT count(*) FROM pgmem.staged_vector WHERE scope_id = %s)""",
            (stage_ab.SCOPE, stage_ab.SCOPE),
        ).fetchone()
    assert row is not None
    return int(str(row[0])), int(str(row[1]))


def test_stage_ab_times_both_databases_and_refuses_bad_inputs(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with temporary_database(db_url, InstallParams(384, 1024)) as url2:
        assert stage_ab.main([db_url, url2, "--turns", "10", "--page", "6", "--rounds", "2"]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert out[0] == "stage_vectors, 20 pieces, 6 a call (4 calls a round), medians in ms:"
        assert [line.split(":")[0] for line in out[1:]] == ["round 1", "round 2", "all rounds"]
        assert all("(URL2/URL " in line for line in out[1:])
        assert _left(db_url) == (0, 0) and _left(url2) == (0, 0)

        assert stage_ab.main([db_url, with_database(db_url, "pgmem_no_such_database"), "--turns", "4"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("stage_ab: ") and "Traceback" not in err[0]
        assert _left(db_url) == (0, 0)
    for argv in (["--turns", "0"], ["--page", "10001"], ["--rounds", "0"], ["--page", "x"]):
        with pytest.raises(SystemExit) as exc:
            stage_ab.main([db_url, db_url, *argv])
        assert exc.value.code == 2
        capsys.readouterr()
