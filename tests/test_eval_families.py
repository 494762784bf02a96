"""The families suite: tie splitting, the generic top-k check, distractor choice, and a
whole run on a tiny hand-made fixture with a bag-of-words embedder (exact expectations)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgmem.blend import blend
from pgmem.embedders.base import FloatArray
from pgmem.errors import InputError
from pgmem.lab.evaluation.families import (
    CONDITIONS,
    REPRESENTATIONS,
    distractor_lines,
    evaluate,
    part_scores,
    read_distractors,
    read_families,
    run,
    takes_top,
    top1_share,
    with_distractors,
)


class BagOfWords:
    """Deterministic toy embedder: one dimension per word (no hashing collisions)."""

    model_id = "test/bag-of-words"
    dims = 64
    max_input_tokens = 512

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.calls: list[list[str]] = []

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                out[i, self.vocab.setdefault(word, len(self.vocab))] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.where(norms > 0, norms, 1)).astype(np.float32)


def _family(name: str, sentence: str, contexts: list[tuple[str, str]], generic: str) -> dict[str, object]:
    return {
        "family": name,
        "block": "word-sense",
        "sentence": sentence,
        "records": [
            {"id": f"{name}/{slug}", "passage": f"{sentence} {ctx}.", "queries": [f"{name} {ctx}"]}
            for slug, ctx in contexts
        ],
        "generic_query": generic,
    }


@pytest.fixture
def fixture_files(tmp_path: Path) -> tuple[Path, Path]:
    fams = [
        _family("alpha", "Alpha beta.", [("one", "red apple"), ("two", "blue sky")], "alpha beta?"),
        _family("gamma", "Gamma delta.", [("one", "green grass"), ("two", "yellow sun")], "gamma delta?"),
    ]
    path = tmp_path / "fams.jsonl"
    path.write_text("\n".join(json.dumps(f) for f in fams) + "\n", encoding="utf-8")
    distractors = tmp_path / "distractors.txt"
    distractors.write_text("\n".join(f"Noise{i} filler{i}." for i in range(10)) + "\n", encoding="utf-8")
    return path, distractors


def test_top1_share_splits_ties() -> None:
    assert top1_share(np.array([0.9, 0.5, 0.1]), 0) == 1.0
    assert top1_share(np.array([0.9, 0.5, 0.1]), 1) == 0.0
    assert top1_share(np.array([0.7, 0.7, 0.7, 0.7, 0.2]), 2) == 0.25
    # within 1e-6 counts as a tie; further apart does not
    assert top1_share(np.array([0.5, 0.5 + 1e-7, 0.3]), 0) == 0.5
    assert top1_share(np.array([0.5, 0.5 + 1e-4, 0.3]), 0) == 0.0
    with pytest.raises(ValueError):
        top1_share(np.array([0.5, 0.4]), 2)


def test_takes_top_is_strict_at_the_boundary() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    assert takes_top(scores, [0, 1, 2, 3])
    assert not takes_top(scores, [0, 1, 2, 4])
    tied = np.array([0.9, 0.8, 0.7, 0.6, 0.6 + 1e-8])
    assert not takes_top(tied, [0, 1, 2, 3])  # a tie with an outsider is not a win
    assert takes_top(np.array([0.1, 0.2]), [0, 1])


def test_part_scores_takes_the_best_part() -> None:
    stored = np.eye(3)
    parts = np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]])
    assert part_scores(parts, stored).tolist() == [1.0, 0.6, 0.8]


def test_distractor_lines_follow_the_readme() -> None:
    assert distractor_lines(0, None, 60) == [0, 1, 2, 3, 4]
    assert distractor_lines(0, 0, 60) == [20, 21, 22, 23, 24]
    assert distractor_lines(0, 1, 60) == [25, 26, 27, 28, 29]
    assert distractor_lines(11, None, 60) == [55, 56, 57, 58, 59]
    assert distractor_lines(12, None, 60) == [0, 1, 2, 3, 4]
    assert distractor_lines(8, 1, 60) == [5, 6, 7, 8, 9]  # 65..69 mod 60
    # a query never gets its own record's passage lines
    for j in range(64):
        own = set(distractor_lines(j, None, 60))
        assert not own & set(distractor_lines(j, 0, 60))
        assert not own & set(distractor_lines(j, 1, 60))
    assert with_distractors("A b.", [1, 0], ["X.", "Y."]) == "A b. Y. X."


def test_tiny_fixture_exact(fixture_files: tuple[Path, Path]) -> None:
    path, distractors = fixture_files
    emb = BagOfWords()
    result = evaluate(read_families(path), read_distractors(distractors), emb)
    assert len(emb.calls) == 1  # one batch, every distinct text once
    assert len(emb.calls[0]) == len(set(emb.calls[0]))
    acc = result.accuracy
    assert list(acc) == list(REPRESENTATIONS)
    assert all(list(acc[r]) == list(CONDITIONS) for r in acc)
    # the shared sentence ties two ways in every family: half a hit per query
    assert acc["isolated"] == dict.fromkeys(CONDITIONS, 0.5)
    assert acc["whole"]["clean"] == 1.0
    assert acc["blended"]["clean"] == 1.0
    assert (result.generic_hit, result.generic_of) == (2, 2)
    assert result.queries == 4
    shares = {o.share for o in result.outcomes if o.representation == "isolated"}
    assert shares == {0.5}


def test_run_returns_the_issue_shape(fixture_files: tuple[Path, Path]) -> None:
    path, distractors = fixture_files
    out = run(path, embedder=BagOfWords(), distractors=distractors, limit=1)
    assert set(out) == {"results", "generic_top4"}
    assert set(out["results"]) == set(REPRESENTATIONS)
    assert all(0.0 <= v <= 1.0 for conds in out["results"].values() for v in conds.values())
    assert out["generic_top4"] == {"hit": 1, "of": 1}


def test_bad_files_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"family": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl:1"):
        read_families(bad)
    with pytest.raises(InputError, match="not found"):
        read_families(tmp_path / "missing.jsonl")
    short = tmp_path / "short.txt"
    short.write_text("one.\ntwo.\n", encoding="utf-8")
    with pytest.raises(InputError, match="need at least 5"):
        read_distractors(short)


def test_numpy_blend_matches_sql_blend(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 384)).astype(np.float32)
    row = conn.execute("SELECT pgmem.blend(%s, %s, 0.8)", (a, b)).fetchone()
    assert row is not None
    sql_vec = np.asarray(row[0].to_numpy(), dtype=np.float64)  # type: ignore[attr-defined]
    assert np.allclose(sql_vec, blend(a, b, 0.8), atol=1e-6)


def test_report_notes_name_the_protocol(fixture_files: tuple[Path, Path]) -> None:
    from pgmem.lab.evaluation.families import evaluate_files, report_notes

    path, distractors = fixture_files
    notes = report_notes(evaluate_files(path, embedder=BagOfWords(), distractors=distractors))
    assert notes[0].startswith("Exact cosine search in numpy")
    assert "4 record queries" in notes[0]
