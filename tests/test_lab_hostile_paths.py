"""The paths `pgmem eval` and `pgmem bench` take, found by a red-team pass: a data file that is not
UTF-8, not JSON, nested too deeply or of the wrong shape, and an output path that cannot be
written, are each one line on stderr and exit status 2 (they were tracebacks, an --out or --record
one only after the whole run), and an unwritable output is refused before the run starts."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from pgmem.cli import main

#: A LongMemEval question file pgmem reads (one session, the answer in its user message).
QUESTION = {
    "question_id": "q1",
    "question": "What is my dog called?",
    "question_type": "single-session-user",
    "haystack_dates": ["2023/05/27 (Sat) 22:10"],
    "haystack_sessions": [[{"role": "user", "content": "My dog is called Biscuit.", "has_answer": True}]],
}
#: Contents no data file may hold, each refused in one line naming the file.
HOSTILE = {
    "not-utf8": b'{"question": "caf\xe9"}\n',
    "not-json": b'{"question": \n',
    "too-deep": b"[" * 100_000 + b"]" * 100_000 + b"\n",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str) -> Path:
    """The environment of a run: its own PGMEM_HOME, and DATABASE_URL (the embedded server is
    never started); a refused path must be refused before the database is used."""
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATABASE_URL", db_url)
    for var in ("PGMEM_EMBEDDER", "PGMEM_PIECE_DIMS", "PGMEM_FACT_DIMS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str], *names: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("pgmem: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert all(n in errors[0] for n in names), (errors[0], names)
    return errors[0]


def _families(tmp_path: Path) -> tuple[Path, Path]:
    fams = tmp_path / "fams.jsonl"
    sentence = "The key is the real issue."
    records = [{"id": f"r{i}", "passage": f"Context {i}. {sentence}", "queries": [f"q {i}?"]} for i in range(2)]
    family = {"family": "key", "block": "b", "sentence": sentence, "records": records, "generic_query": "Key?"}
    fams.write_text(json.dumps(family) + "\n", encoding="utf-8")
    distractors = tmp_path / "distractors.txt"
    distractors.write_text("\n".join(f"Day {i} was mild and {i} pears were sold." for i in range(12)) + "\n")
    return fams, distractors


def test_a_data_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes that are not UTF-8 (UnicodeDecodeError) and JSON nested deeper than Python's parser
    goes (RecursionError) were tracebacks in every suite, and in `pgmem bench --text`."""
    fams, distractors = _families(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.\n", encoding="utf-8")
    for kind, content in HOSTILE.items():
        bad = tmp_path / f"{kind}.json"
        bad.write_bytes(content)
        folder = tmp_path / f"questions-{kind}"
        folder.mkdir()
        (folder / "q1.json").write_text(json.dumps(QUESTION), encoding="utf-8")
        (folder / "q2.json").write_bytes(content)
        _each_suite(capsys, bad, folder, fams, distractors, corpus)


def _each_suite(
    capsys: pytest.CaptureFixture[str], bad: Path, folder: Path, fams: Path, distractors: Path, corpus: Path
) -> None:
    for argv, name in [
        (["eval", "families", str(bad), "--distractors", str(distractors)], bad.name),
        (["eval", "families", str(fams), "--distractors", str(bad)], bad.name),
        (["eval", "locomo", str(bad)], bad.name),
        (["eval", "toolqa", str(bad)], bad.name),
        (["eval", "docs", "--corpus", str(corpus), "--questions", str(bad)], bad.name),
        *[([*cmd, str(folder)], "q2.json") for cmd in (["eval", s] for s in ("longmemeval", "coverage", "sweep"))],
        (["eval", "langgraph", str(folder)], "q2.json"),
        (["bench", "--size", "tiny", "--text", str(folder), "--skip-writes"], "q2.json"),
    ]:
        _one_line(capsys, argv, name)


def test_data_of_the_wrong_shape_is_one_line(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A toolqa line that is a list (AttributeError), a LongMemEval session of strings
    (AttributeError), a date with no such day (ValueError) and a question_kinds.jsonl line that is
    not JSON were tracebacks."""
    toolqa = tmp_path / "toolqa.jsonl"
    toolqa.write_text("[1, 2]\n", encoding="utf-8")
    _one_line(capsys, ["eval", "toolqa", str(toolqa)], "toolqa.jsonl:1")
    for bad in (
        {**QUESTION, "haystack_sessions": [["not a message"]]},
        {**QUESTION, "haystack_dates": ["2023/13/45 (Sat) 22:10"]},
    ):
        folder = tmp_path / f"lme-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "q1.json").write_text(json.dumps(bad), encoding="utf-8")
        _one_line(capsys, ["eval", "longmemeval", str(folder)], "q1.json")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.\n", encoding="utf-8")
    questions = tmp_path / "docs" / "questions.jsonl"
    questions.parent.mkdir()
    questions.write_text(json.dumps({"question": "A?", "file": "a.md", "heading_path": ["A"]}) + "\n")
    (questions.parent / "question_kinds.jsonl").write_text("{not json\n", encoding="utf-8")
    _one_line(capsys, ["eval", "docs", "--corpus", str(corpus), "--questions", str(questions)], "question_kinds")


def test_a_compare_file_that_is_no_runs_output_is_one_line_before_the_run(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--compare FILE.json:METHOD` was read at the end of the run: a file that was not a run's
    output (a list, no ids) was a traceback there, after all the work."""
    folder = tmp_path / "questions"
    folder.mkdir()
    (folder / "q1.json").write_text(json.dumps(QUESTION), encoding="utf-8")
    for content in (b"[1, 2]", b'{"per_question": {"pieces": {}}}', b"\xff", b'{"ids": ["q1"], "per_question": {}}'):
        earlier = tmp_path / "earlier.json"
        earlier.write_bytes(content)
        argv = ["eval", "longmemeval", str(folder), "--compare", f"{earlier}:pieces", "pieces"]
        _one_line(capsys, argv, "--compare", "earlier.json")
        assert "longmemeval: embedder" not in capsys.readouterr().err  # refused before the run began


def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, home: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pgmem bench --out` into a folder, or under a file, ran the whole bench and then raised a
    traceback (its results lost, the JSON was written before they were printed); `pgmem eval
    --record` naming a folder and `--out` naming a file did the same after the suite."""
    fams, distractors = _families(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    a_folder = tmp_path / "a-folder"
    a_folder.mkdir()
    for out in (a_folder, a_file / "results.json"):
        _one_line(capsys, ["bench", "--size", "tiny", "--skip-writes", "--db", "pgmem_rt63_never", "--out", str(out)])
    with psycopg.connect(db_url, autocommit=True) as c:
        # nothing was loaded: the bench's database was never made (a count of all databases
        # raced the other test worker's, which share this server)
        made = c.execute("SELECT count(*) FROM pg_database WHERE datname = 'pgmem_rt63_never'").fetchone()
        assert made == (0,)
    run = ["eval", "families", str(fams), "--distractors", str(distractors)]
    _one_line(capsys, [*run, "--record", str(a_folder)], "--record", "a-folder")
    _one_line(capsys, [*run, "--out", str(a_file)], "--out", "a-file")
    _one_line(capsys, [*run, "--record", str(a_file / "r.json")], "--record", "a-file")


def test_an_option_value_python_cannot_read_as_json_is_one_line(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o KEY=VALUE` reads VALUE as JSON when it parses: an array nested 5,000 deep raised
    RecursionError, an integer of 5,000 digits ValueError, each a traceback."""
    folder = tmp_path / "questions"
    folder.mkdir()
    (folder / "q1.json").write_text(json.dumps(QUESTION), encoding="utf-8")
    for value in ("[" * 5000, "9" * 5000):
        _one_line(capsys, ["eval", "longmemeval", str(folder), "-o", f"floor={value}"], "--option floor")
