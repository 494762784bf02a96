"""The recall A/B lab tool (pgmem.lab.bench.recall_ab) on a scratch database: the checkout's
functions beside the database's, or a second database's own (--against), the same rows on both
sides; or the database's own under a setting (--setting), with the share of hits both return; a
bad input is one line and exit 1 (a malformed option: argparse's exit 2), with nothing left
installed. And the word-sums lab tool (pgmem.lab.bench.word_sums): every way of summing the
word side's postings ranks the same pieces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pgmem.db import connect, scoped, with_database
from pgmem.ingest import ingest_turns
from pgmem.lab.bench import recall_ab, word_sums, write_cost
from pgmem.lab.bench.load import PUT_DOCUMENT, _document_params
from pgmem.lab.bench.synth import Document
from pgmem.lab.bench.writes import put_turns
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams
from tests.security_helpers import HashEmbedder, make_turn
from tests.test_eval_suites import a, lme_question, u, write_lme

SCOPE = "cost-source"


def _ab_functions(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgmem'::regnamespace AND proname LIKE '%\\_ab'"
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def _lme_with_a_long_message(path: Path) -> Path:
    """A LongMemEval folder with a long message, which the tools split into 8 parts (a pool needs
    at least one): "Question i: where did the blue crate number i go ...", i from 0 to 11."""
    lme = write_lme(path)
    long = " ".join(f"Question {i}: where did the blue crate number {i} go after the move?" for i in range(12))
    question = lme_question("long", "multi-session", "Where?", [[u(long, True), a("It went to the attic.")]])
    (lme / "1_long_9.json").write_text(json.dumps(question))
    return lme


def test_recall_ab_runs_both_ways_and_refuses_bad_inputs(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lme = _lme_with_a_long_message(tmp_path / "lme")
    with temporary_database(db_url, InstallParams(384, 1024)) as url:
        with connect(url) as conn:
            conn.autocommit = True
            put_turns(conn, write_cost._turns(4, 0)[SCOPE])
            # A document of 8 units in the same scope: document_search runs too.
            rng = np.random.default_rng(0)
            vecs = rng.normal(size=(8, 384)).astype(np.float32)
            bodies = [f"Section {k}: the blue crate number {k} went to the attic." for k in range(8)]
            doc = Document(SCOPE, "doc-1", vecs / np.linalg.norm(vecs, axis=1, keepdims=True), bodies,
                           list(range(8)), [(0, len(b)) for b in bodies], [f"doc-1 / Section {k}" for k in range(8)],
                           bodies)  # fmt: skip
            with scoped(conn, SCOPE):
                conn.execute(PUT_DOCUMENT, _document_params(doc))

        # The checkout's functions beside the database's: a line per place, parts and mode, and
        # document search's two.
        assert recall_ab.main([url, str(lme), SCOPE, "--messages", "1"]) == 0
        out = capsys.readouterr().out
        assert out.count(f"{SCOPE}") == 10 and out.count(", checkout ") == 10 and out.count(", documents, ") == 2
        assert _ab_functions(url) == 0

        # Against a second database (here the same one): its own functions, nothing installed.
        assert recall_ab.main([url, str(lme), SCOPE, "--messages", "1", "--against", url]) == 0
        out = capsys.readouterr().out
        assert out.count(f"{SCOPE}") == 10 and ", against " in out and "checkout" not in out

        # The database's functions under a setting: rows may differ, each line says how many agree.
        assert recall_ab.main([url, str(lme), SCOPE, "--messages", "2", "--setting", "pgmem.word_weight=0"]) == 0
        out = capsys.readouterr().out
        agree = [float(line.split(", same hits ")[1].split(" ")[0]) for line in out.splitlines()[1:]]
        assert len(agree) == 10 and all(0 <= x <= 1 for x in agree) and ", setting " in out
        assert _ab_functions(url) == 0
        for argv in (
            ["--setting", "word_weight=0"],
            ["--setting", "pgmem.word_weight"],
            ["--setting", "pgmem.x=1", "--against", url],
        ):
            with pytest.raises(SystemExit) as exc:
                recall_ab.main([url, str(lme), SCOPE, *argv])
            assert exc.value.code == 2
            assert "--setting" in capsys.readouterr().err

        missing = with_database(url, "pgmem_no_such_database")
        bad = {
            "a second database that is not there": [url, str(lme), SCOPE, "--against", missing],
            "no such folder": [url, str(tmp_path / "none"), SCOPE],
            "a folder without long messages": [url, str(write_lme(tmp_path / "short")), SCOPE],
            "a scope without 8 pieces": [url, str(lme), "no-such-scope"],
            "a database that is not there": [missing, str(lme), SCOPE],
            "a setting the functions refuse": [url, str(lme), SCOPE, "--setting", "pgmem.word_weight=-1"],
        }
        for what, argv in bad.items():
            assert recall_ab.main(argv) == 1, what
            captured = capsys.readouterr()
            lines = captured.err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("recall_ab: "), (what, captured.err)
            assert "Traceback" not in captured.err
            assert _ab_functions(url) == 0, what


def test_word_sums_rank_the_same_pieces_every_way_and_refuse_bad_inputs(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tool's messages are the long message split into 8 parts ("... crate number 7 ..."); the
    # store's pieces share their numbers, each in a few of 120 pieces (distinctive).
    lme = _lme_with_a_long_message(tmp_path / "lme")
    with temporary_database(db_url, InstallParams(384, 1024)) as url:
        with connect(url) as conn:
            turns = [make_turn("sums", "t", i, f"Log {i}: crate {i % 40} moved to room {i % 30}.") for i in range(120)]
            assert not ingest_turns(conn, turns, HashEmbedder(model_id="test:hash")).failed
        assert word_sums.main([url, str(lme), "sums", "--messages", "2", "--repeat", "1"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert len(lines) == 3 and "the same pieces every way" in lines[0]
        for line in lines[1:]:
            postings = int(line.split(": ")[1].split(" postings")[0].replace(",", ""))
            assert postings > 0 and all(f"{w} " in line for w in word_sums.WAYS), line

        missing = with_database(url, "pgmem_no_such_database")
        bad = {
            "no such folder": [url, str(tmp_path / "none"), "sums"],
            "a folder without long messages": [url, str(write_lme(tmp_path / "short")), "sums"],
            "a scope that is not there": [url, str(lme), "no-such-scope"],
            "a database that is not there": [missing, str(lme), "sums"],
        }
        for what, argv in bad.items():
            assert word_sums.main(argv) == 1, what
            captured = capsys.readouterr()
            lines = captured.err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("word_sums: "), (what, captured.err)
        with pytest.raises(SystemExit) as exc:
            word_sums.main([url, str(lme), "sums", "--repeat", "0"])
        assert exc.value.code == 2
