"""`pgmem eval`: a families run on a tiny fixture through the CLI (JSON on stdout, progress
on stderr, report and plots with --out), clear errors, and the generic report tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgmem.cli import main
from pgmem.lab.evaluation import cli as ev
from pgmem.lab.evaluation.report import fmt, markdown, tables


def _fixture(tmp_path: Path) -> tuple[Path, Path]:
    fams = []
    for name, sentence, contexts in (
        (
            "key",
            "I think the key is the real issue here.",
            [
                "The front door lock jams every morning and the brass is worn down",
                "Production requests fail with 401 since the credentials were rotated last night",
                "The piano piece sounds wrong because it is written in F sharp minor",
                "The map legend explains the symbols but nobody could read it",
            ],
        ),
        (
            "bank",
            "We should look at the bank before deciding anything.",
            [
                "The loan application was refused and the interest rate went up twice this year",
                "The river keeps eroding the grass slope behind the cabin after each storm",
                "The blood supply for the surgery is low and the donors cancelled",
                "The reserve of spare servers in the cluster is already used up",
            ],
        ),
    ):
        records = [
            {
                "id": f"{name}/{i}",
                "passage": f"{ctx}. {sentence} We wrote it down.",
                "queries": [f"{ctx.split(' and ')[0]}?", f"What happened: {ctx.lower()}?"],
            }
            for i, ctx in enumerate(contexts)
        ]
        fams.append(
            {
                "family": name,
                "block": "word-sense",
                "sentence": sentence,
                "records": records,
                "generic_query": sentence.replace("I think", "Is").rstrip(".") + "?",
            }
        )
    path = tmp_path / "fams.jsonl"
    path.write_text("\n".join(json.dumps(f) for f in fams) + "\n", encoding="utf-8")
    distractors = tmp_path / "distractors.txt"
    distractors.write_text(
        "\n".join(f"The weather on day {i} was mild and the market sold {i} pears." for i in range(12)) + "\n",
        encoding="utf-8",
    )
    return path, distractors


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    for var in ("PGMEM_EMBEDDER", "PGMEM_PIECE_DIMS", "PGMEM_FACT_DIMS", "DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


def test_families_cli_json_and_report(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, distractors = _fixture(tmp_path)
    out_dir = tmp_path / "out"
    argv = ["eval", "families", str(path), "--distractors", str(distractors), "--json", "--out", str(out_dir)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # exactly one JSON object on stdout
    assert set(result) == {"results", "generic_top4"}
    assert set(result["results"]) == {"isolated", "whole", "blended", "query_only_blend"}
    for conds in result["results"].values():
        assert set(conds) == {"clean", "stored_distractions", "query_distractions", "both"}
        assert all(0.0 <= v <= 1.0 for v in conds.values())
    # the four contexts of a family share one sentence vector: at most a quarter per query
    assert max(result["results"]["isolated"].values()) <= 0.25 + 1e-9
    assert result["generic_top4"]["of"] == 2
    assert "families:" in captured.err
    assert (out_dir / "families.md").read_text().startswith("# pgmem eval families")
    assert (out_dir / "families-results.png").stat().st_size > 1000
    assert json.loads((out_dir / "families.json").read_text()) == result

    # a re-run reads every vector from the cache
    assert main(argv[:-2]) == 0
    assert "0 texts embedded" in capsys.readouterr().err
    assert list((home / "cache").glob("embeddings-*.sqlite"))


def test_missing_suite_module_is_named(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(ev.SUITES, "locomo", ev.Suite("locomo", "pgmem.lab.evaluation._no_such_suite", "x", "file"))
    f = tmp_path / "locomo.json"
    f.write_text("[]", encoding="utf-8")
    assert main(["eval", "locomo", str(f)]) == 2
    assert "pgmem.lab.evaluation._no_such_suite" in capsys.readouterr().err


def test_bad_arguments_are_named(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, distractors = _fixture(tmp_path)
    assert main(["eval", "families", str(tmp_path / "nope.jsonl"), "--distractors", str(distractors)]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    assert main(["eval", "families", str(path), "--distractors", str(distractors), "-o", "bogus=1"]) == 2
    assert "no option bogus" in capsys.readouterr().err
    assert main(["eval", "families", str(path), "--distractors", str(distractors), "--limit", "0"]) == 2


def test_options_parse_json_values() -> None:
    assert ev._options(["x=5", "floor=0.3", "mode=hybrid", "use-dates=true"]) == {
        "x": 5,
        "floor": 0.3,
        "mode": "hybrid",
        "use_dates": True,
    }


def test_report_tables_are_generic() -> None:
    result = {
        "questions": 12,
        "results": {"whole_turn": {"top1": 0.5, "mrr": 0.61}, "pieces": {"top1": 0.75, "mrr": 0.8}},
        "best_weight": 0.5,
        "by_kind": {"tool": {"pieces": {"top1_message": 1.0}}, "user": {"questions": 5, "results": {"a": {"b": 1.0}}}},
        "by_target": {"intro": {"n": 3, "chunk": {"top1": 0.5, "mrr": 0.7}, "units": {"top1": 1.0, "mrr": 1.0}}},
        "load_average": {"latency_load_before": 0.59, "accuracy_load_after": 1.66},
    }
    found = {t.title: t for t in tables(result)}
    assert set(found) == {
        "summary",
        "results",
        "by_kind / tool",
        "by_kind / user (questions 5) / results",
        "by_target",
        "load_average",
    }
    assert found["results"].columns == ["top1", "mrr"]
    assert found["by_target"].columns == ["n", "chunk.top1", "chunk.mrr", "units.top1", "units.mrr"]
    text = markdown(result)
    assert "| whole_turn | 50.0% | 0.610 |" in text
    assert "| questions | 12 |" in text
    assert "| best_weight | 0.500 |" in text
    assert "| intro | 3 | 50.0% | 0.700 | 100.0% | 1.000 |" in text
    assert "| latency_load_before | 0.590 |" in text  # a load average is not a share
    assert fmt(None, percent=True) == "–"


def test_options_are_checked_against_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    from typing import Any

    from pgmem.errors import InputError

    def strict(path: Path, *, x: int = 5) -> None: ...

    def loose(path: Path, *, x: int = 5, **_: Any) -> None: ...

    ev._accepts(strict, {"x": 3}, "s")
    with pytest.raises(InputError, match="no option y; its options: x"):
        ev._accepts(strict, {"y": 1}, "s")
    ev._accepts(loose, {"y": 1}, "s")
    assert "does not name option(s) y" in capsys.readouterr().err
