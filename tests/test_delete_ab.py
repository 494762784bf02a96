"""The delete A/B lab tool (pgmem.lab.bench.delete_ab): two databases' store deletes side by side,
every item and log row gone on both sides and nothing of its scope left behind; a bad input is one
line and exit 1 (a malformed option: argparse's exit 2)."""

from __future__ import annotations

import psycopg
import pytest

from pgmem.db import with_database
from pgmem.lab.bench import delete_ab
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams


def _left(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (delete_ab.SCOPE,)).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_delete_ab_times_both_databases_and_refuses_bad_inputs(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")
    with temporary_database(db_url, InstallParams(384, 1024)) as url2:
        assert delete_ab.main([db_url, url2, "--items", "4", "--recalls", "2"]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith("delete_item, 4 items, 2 logged recalls")
        assert "URL2/URL p50" in out[0]
        assert _left(db_url) == 0 and _left(url2) == 0

        # Several deletes a transaction: timed per delete, with the COMMIT's share.
        assert delete_ab.main([db_url, url2, "--items", "5", "--recalls", "2", "--per-transaction", "2"]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith("delete_item, 5 items, 2 a transaction, 2 logged recalls")
        assert "COMMIT's share of a transaction: URL 0." in out[0]
        assert _left(db_url) == 0 and _left(url2) == 0
        argv = [db_url, url2, "--items", "12", "--recalls", "0", "--per-transaction", "12", "--order", "descending"]
        assert delete_ab.main(argv) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith("delete_item, 12 items, 12 a transaction, keys descending, 0 logged")
        assert "COMMIT's share of a transaction: URL 0." in out[0]
        assert _left(db_url) == 0 and _left(url2) == 0

        assert delete_ab.main([db_url, with_database(db_url, "pgmem_no_such_database"), "--items", "4"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("delete_ab: ") and "Traceback" not in err[0]
        assert _left(db_url) == 0
    for argv in (
        ["--items", "1"],
        ["--recalls", "-1"],
        ["--items", "x"],
        ["--per-transaction", "0"],
        ["--items", "4", "--per-transaction", "5"],
        ["--order", "random"],
    ):
        with pytest.raises(SystemExit) as exc:
            delete_ab.main([db_url, db_url, *argv])
        assert exc.value.code == 2
        capsys.readouterr()
