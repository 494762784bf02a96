"""The store batch A/B lab tool (pgmem.lab.bench.batch_ab): two worker processes' batches of puts
over several namespaces side by side, every put stored on both sides and no scope of theirs left
behind; a bad input is one line and exit 1 (a malformed option: argparse's exit 2)."""

from __future__ import annotations

import psycopg
import pytest

from pgmem.db import with_database
from pgmem.lab.bench import batch_ab
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams


def _left(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM pgmem.scope WHERE scope_id LIKE 'bench/batch-ab/%'").fetchone()
    assert row is not None
    return int(str(row[0]))


@pytest.mark.long
def test_batch_ab_times_both_sides_and_refuses_bad_inputs(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")
    with temporary_database(db_url, InstallParams(384, 1024)) as url2:
        assert (
            batch_ab.main([db_url, url2, "--namespaces", "2", "--puts", "4", "--batches", "2", "--prefill", "2"]) == 0
        )
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith("store.batch, 4 puts over 2 namespaces, 2 batches a side (after 2)")
        assert "URL2/URL p50" in out[0]
        assert _left(db_url) == 0 and _left(url2) == 0

        # Gets of the batch before, each refreshing its item's TTL.
        argv = [db_url, url2, "--namespaces", "2", "--puts", "4", "--gets", "2", "--batches", "2", "--prefill", "2"]
        assert batch_ab.main(argv) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith("store.batch, 4 puts and 2 gets (TTL refreshed) over 2 namespaces")
        assert _left(db_url) == 0 and _left(url2) == 0

        assert batch_ab.main([db_url, with_database(db_url, "pgmem_no_such_database"), "--batches", "2"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("batch_ab: ") and "Traceback" not in err[0]
        assert _left(db_url) == 0
    for argv in (
        ["--namespaces", "0"],
        ["--namespaces", "5", "--puts", "4"],
        ["--batches", "1"],
        ["--prefill", "0"],
        ["--puts", "x"],
        ["--puts", "4", "--gets", "5"],
    ):
        with pytest.raises(SystemExit) as exc:
            batch_ab.main([db_url, db_url, *argv])
        assert exc.value.code == 2
        capsys.readouterr()
