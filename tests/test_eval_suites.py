"""The conversation suites on tiny hand-made fixtures in their real formats (LoCoMo,
LongMemEval, toolqa), run end to end on a temporary database with the local model."""

from __future__ import annotations

import json
import random
from math import log2
from pathlib import Path
from typing import Any

import pytest

from pgmem.embedders.base import Embedder
from pgmem.lab.evaluation import coverage, locomo, longmemeval, toolqa
from pgmem.lab.evaluation.conversations import METHODS, fixed_chunk_units, per_message_units, source_messages
from pgmem.lab.evaluation.ranking import ScoredHit, rank_units
from pgmem.turns import Turn, split_sources

LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Wren",
            "speaker_b": "Tobin",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Wren", "dia_id": "D1:1", "text": "We adopted a beagle puppy and named him Biscuit."},
                {"speaker": "Tobin", "dia_id": "D1:2", "text": "Biscuit is a lovely name for a dog!"},
                {"speaker": "Wren", "dia_id": "D1:3", "text": "My sister is learning to play the cello this year."},
                {"speaker": "Tobin", "dia_id": "D1:4", "text": "The cello has such a warm sound."},
            ],
            "session_2_date_time": "10:05 am on 2 June, 2023",
            "session_2": [
                {"speaker": "Tobin", "dia_id": "D2:1", "text": "How was your weekend?"},
                {
                    "speaker": "Wren",
                    "dia_id": "D2:2",
                    "text": "We hiked up Mount Tamalpais and saw the fog roll in over the bay.",
                    "blip_caption": "a photo of a foggy mountain trail",
                },
                {"speaker": "Tobin", "dia_id": "D2:3", "text": "That hike is beautiful in the morning."},
                {"speaker": "Wren", "dia_id": "D2:4", "text": "Next month I start a new job as a pastry chef."},
            ],
        },
        "qa": [
            {"question": "What is the name of Wren's dog?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 1},
            {"question": "Which mountain did Wren hike?", "answer": "Tamalpais", "evidence": ["D2:2"], "category": 4},
            {
                "question": "What new job is Wren starting?",
                "answer": "pastry chef",
                "evidence": ["D2:4"],
                "category": 2,
            },
            {
                "question": "What instrument does Tobin play?",
                "adversarial_answer": "cello",
                "evidence": ["D1:3"],
                "category": 5,
            },
            {"question": "What is Wren's favourite colour?", "answer": "unknown", "evidence": [], "category": 3},
        ],
    }
]


def test_locomo_turns_follow_the_format() -> None:
    turns, where = locomo.conversation_turns(LOCOMO[0]["conversation"], "conv-x", "fixture")  # type: ignore[arg-type]
    # session 1: (D1:1, D1:2), (D1:3, D1:4); session 2 opens with Tobin: (D2:1), (D2:2, D2:3), (D2:4)
    assert [len(t.messages) for t in turns] == [2, 2, 1, 2, 1]
    assert where == {"D1:1": 0, "D1:2": 0, "D1:3": 1, "D1:4": 1, "D2:1": 2, "D2:2": 3, "D2:3": 3, "D2:4": 4}
    assert turns[0].messages[0] == {"role": "user", "content": "Wren: We adopted a beagle puppy and named him Biscuit."}
    assert turns[2].messages[0]["role"] == "assistant"
    assert "foggy mountain trail" in turns[3].messages[0]["content"]
    assert not any("D1:" in m["content"] or "D2:" in m["content"] for t in turns for m in t.messages)
    assert turns[0].time is not None and (turns[0].time.month, turns[0].time.hour) == (5, 13)
    assert turns[3].time is not None and turns[3].time.month == 6


def test_locomo_suite(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO))
    items = locomo.load(path)
    assert len(items) == 3  # category 5 and the question without evidence are skipped
    result = locomo.run(path, server_url=db_url, embedder=embedder)
    assert result["questions"] == 3
    assert set(result["results"]) == set(METHODS)
    for metrics in result["results"].values():
        assert set(metrics) == {"top1", "top1_above_floor", "mrr", "recall_at_5"}
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert result["results"]["blended"]["top1"] == 1.0
    assert result["results"]["blended"]["mrr"] == 1.0


def lme_question(qid: str, qtype: str, question: str, sessions: list[list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": question,
        "answer": "-",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_sessions": sessions,
        "haystack_session_ids": [f"answer_{i}" for i in range(len(sessions))],
        "haystack_dates": [f"2023/05/{10 + i:02d} (Wed) 09:{i:02d}" for i in range(len(sessions))],
        "answer_session_ids": [f"answer_{i}" for i, s in enumerate(sessions) if any(m["has_answer"] for m in s)],
    }


def u(text: str, has: bool = False) -> dict[str, Any]:
    return {"role": "user", "content": text, "has_answer": has}


def a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "has_answer": False}


def write_lme(d: Path) -> Path:
    d.mkdir()
    qs = [
        lme_question(
            "q1",
            "single-session-user",
            "What breed is my dog?",
            [
                [
                    u("I just got a golden retriever named Max.", True),
                    a("Golden retrievers are friendly."),
                    u("Can you suggest a pasta recipe?"),
                    a("Try carbonara with eggs and pecorino."),
                ]
            ],
        ),
        lme_question(
            "q2",
            "multi-session",
            "Which city did I fly to for the conference?",
            [
                [a("Hello! How can I help today?"), u("Recommend a sci-fi novel."), a("Read Dune.")],
                [u("I flew to Lisbon for the robotics conference last week.", True), a("Lisbon is lovely.")],
            ],
        ),
        lme_question(
            "q3",
            "temporal-reasoning",
            "When did I start learning the violin?",
            [
                [
                    u("I started violin lessons in March.", True),
                    a("Great, practise scales daily."),
                    u("What is a good stretching routine?"),
                    a("Hamstrings and shoulders, ten minutes."),
                ]
            ],
        ),
        lme_question(
            "q4_abs", "multi-session", "What is my cat's name?", [[u("I like tea.", True), a("Tea is nice.")]]
        ),
    ]
    for i, q in enumerate(qs):
        (d / f"{len(q['haystack_sessions'])}_{q['question_id']}_{i}.json").write_text(json.dumps(q))
    return d


def test_longmemeval_loading(tmp_path: Path) -> None:
    d = write_lme(tmp_path / "lme")
    qs = {q.qid: q for q in longmemeval.load_dir(d)}
    assert set(qs) == {"q1", "q2", "q3"}  # _abs is left out
    q2 = qs["q2"]
    # a session opening with an assistant message gives it a turn of its own
    assert [len(t.messages) for t in q2.turns] == [1, 2, 2]
    assert q2.gold == frozenset({2})
    assert q2.turns[2].time is not None and q2.turns[2].time.day == 11
    assert all(set(m) == {"role", "content"} for t in q2.turns for m in t.messages)  # has_answer removed
    assert len(longmemeval.load_dir(d, limit=2, seed=1)) == 2
    # LongMemEval's own levels: the assistant-opened turn is not a user turn; session 1 is gold
    assert q2.sessions == (0, 0, 1)
    assert q2.user_turns == frozenset({1, 2}) and q2.user_gold == frozenset({2})
    assert q2.session_gold == frozenset({1})


def test_longmemeval_levels_score_as_the_paper_script() -> None:
    qs = [
        longmemeval.Question(
            "a", "t", "?", [], frozenset({1}), (0, 0, 1, 1), frozenset({0, 1, 2, 3}), frozenset({3}), frozenset({1})
        ),
        longmemeval.Question("b", "t", "?", [], frozenset({0}), (0, 1), frozenset({1}), frozenset(), frozenset({0})),
    ]
    la, lb = longmemeval.levels(qs, qs)
    # ranked turns of a pooled haystack: a's turn 0, b's turn 0 (not a user turn), a's turn 3
    ranked = rank_units([ScoredHit(1, r, 1 - r / 10, k) for r, k in enumerate([("a", 0), ("b", 0), ("a", 3)], 1)])
    sa = la.scores(ranked)
    assert sa["turn_recall_all_at_5"] == 1.0
    assert sa["turn_ndcg_at_10"] == pytest.approx(1.0)  # gold at turn rank 2: the script leaves rank 2 undiscounted
    assert sa["session_recall_all_at_5"] == 1.0
    assert sa["session_ndcg_at_10"] == pytest.approx(1 / log2(3))  # sessions a/0, b/0, a/1
    sb = lb.scores(ranked)
    assert sb["turn_ndcg_at_10"] is None  # no gold user turn: left out of the turn-level means
    assert sb["session_recall_all_at_5"] == 1.0 and sb["session_ndcg_at_10"] == pytest.approx(1.0)


def test_longmemeval_suite(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    d = write_lme(tmp_path / "lme")
    result = longmemeval.run(d, server_url=db_url, embedder=embedder, methods=("per_message", "blended", "hybrid"))
    assert result["questions"] == 3
    assert set(result["results"]) == {"per_message", "blended", "hybrid"}
    assert result["results"]["blended"]["top1"] == 1.0
    assert result["results"]["blended"]["recall_at_5"] == 1.0
    assert result["lme_questions"] == {"turn": 3, "session": 3}
    assert result["results"]["blended"]["turn_recall_all_at_5"] == 1.0
    assert result["results"]["blended"]["session_ndcg_at_10"] == 1.0
    by_type = result["by_type"]
    assert by_type["multi-session"]["questions"] == 1 and by_type["temporal-reasoning"]["questions"] == 1
    assert by_type["multi-session"]["blended"]["top1"] == 1.0


def test_coverage_messages_are_seeded(tmp_path: Path) -> None:
    qs = longmemeval.load_dir(write_lme(tmp_path / "lme"))
    m1 = coverage.build_messages(qs, ["An unrelated paragraph."], count=5, rng=random.Random(3))
    m2 = coverage.build_messages(qs, ["An unrelated paragraph."], count=5, rng=random.Random(3))
    assert m1 == m2
    for m in m1:
        assert len(m.questions) in (2, 3) and len(set(m.questions)) == len(m.questions)
        assert len({qs[i].qtype for i in m.questions}) == len(m.questions)  # different types
        assert "An unrelated paragraph." in m.text
        assert all(qs[i].question in m.text for i in m.questions)


def test_coverage_suite(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    d = write_lme(tmp_path / "lme")
    result = coverage.run(d, server_url=db_url, embedder=embedder, messages=4, seed=2)
    assert result["messages"] == 4
    assert set(result["results"]) == {"one_vector", "one_query", "per_part"}
    # a three-question store with x = 5 per part: every gold turn is returned
    assert result["results"]["per_part"] == {"coverage": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    for name in ("one_vector", "one_query"):
        r = result["results"][name]
        assert 0.0 <= r["ci_low"] <= r["coverage"] <= r["ci_high"] <= 1.0
        p = result["paired"][f"per_part − {name}"]
        assert p["won"] + p["lost"] + p["tied"] == 4 and p["lost"] == 0
        assert p["diff"] == pytest.approx(1.0 - r["coverage"])
    # Message by message, so a run pairs with another run of the same messages (--compare).
    assert len(result["ids"]) == 4 and result["per_question"]["per_part"]["coverage"] == [1.0] * 4
    saved = tmp_path / "coverage.json"
    saved.write_text(json.dumps(result))
    again = coverage.run(
        d,
        server_url=db_url,
        embedder=embedder,
        messages=4,
        seed=2,
        compare=[["per_part", f"{saved}:per_part"], ["one_vector", "per_part"]],
    )
    same = again["comparisons"][f"per_part vs {saved}:per_part"]
    assert same["questions"] == 4 and same["coverage"]["tied"] == 4
    vs = again["comparisons"]["one_vector vs per_part"]["coverage"]
    assert vs["diff"] == pytest.approx(result["results"]["one_vector"]["coverage"] - 1.0) and vs["won"] == 0


TRAJ = {
    "id": "demo/run1",
    "messages": [
        {"role": "user", "content": "Fix the failing date parser in utils.py."},
        {
            "role": "assistant",
            "content": "Let me look at the file.",
            "tool_calls": [
                {
                    "id": "call_000",
                    "type": "function",
                    "function": {"name": "open", "arguments": '{"command": "open utils.py"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_000",
            "content": (
                "1: import re\n2: DATE = re.compile(r'\\d{4}-\\d{2}')\n3: def parse(s):\n4:     return DATE.match(s)\n"
            ),
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_001",
                    "type": "function",
                    "function": {"name": "pip", "arguments": '{"command": "pip install python-dateutil"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_001",
            "content": "Collecting python-dateutil\nSuccessfully installed python-dateutil-2.8.2 six-1.16.0",
        },
    ],
    "questions": [
        {
            "question": "Which version of dateutil got installed?",
            "gold_message": 4,
            "gold_kind": "tool_result",
            "answer": "2.8.2",
            "gold_chars": 80,
        },
        {
            "question": "What regular expression did the date parser use?",
            "gold_message": 2,
            "gold_kind": "tool_result",
            "answer": "DATE",
            "gold_chars": 90,
        },
    ],
}


def test_message_maps() -> None:
    msgs = TRAJ["messages"]
    assert isinstance(msgs, list)
    turn = Turn("s", "t", 0, None, tuple(msgs))
    # sources: user, assistant step 1 thought, tool open (call + result), tool pip (call + result)
    assert source_messages(msgs) == [(0,), (1,), (1, 2), (3, 4)]
    assert len(split_sources(msgs)) == 4
    assert [x.messages for x in per_message_units(turn)] == [(0,), (1,), (2,), (3,), (4,)]
    assert "pip(" in per_message_units(turn)[3].text
    chunks = fixed_chunk_units(turn)
    assert chunks and all(c.messages for c in chunks)


def test_toolqa_suite(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    path = tmp_path / "toolqa.jsonl"
    path.write_text(json.dumps(TRAJ) + "\n")
    result = toolqa.run(path, server_url=db_url, embedder=embedder, compare=[["blended", "whole_turn"]])
    assert result["questions"] == 2
    assert set(result["results"]) == set(METHODS)
    r = result["results"]
    assert all(r[m]["top1_turn"] == 1.0 for m in METHODS)  # one turn
    assert r["whole_turn"]["top1_message"] == 0.0  # a whole turn points at no message
    assert r["blended"]["top1_message"] == 1.0
    assert set(result["by_kind"]) == {"tool_result", "tool_result<=1500"}
    assert result["by_kind"]["tool_result"]["questions"] == 2
    # Intervals and the paired comparison: blended finds both gold messages, whole turns none.
    assert result["ci"]["blended"]["top1_message_low"] == 1.0
    assert len(result["ids"]) == 2 and result["per_question"]["blended"]["top1_message"] == [1.0, 1.0]
    pair = result["comparisons"]["blended vs whole_turn"]
    assert pair["questions"] == 2 and pair["top1_message"]["won"] == 2 and pair["top1_message"]["diff"] == 1.0


@pytest.mark.parametrize("bad", [{"messages": []}, {"messages": [{"role": "user", "content": "x"}], "questions": [{}]}])
def test_toolqa_bad_input(tmp_path: Path, bad: dict[str, Any]) -> None:
    from pgmem.errors import InputError

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError):
        toolqa.load(path)


def test_docs_suite_intervals_and_pairing(tmp_path: Path, admin_conn: Any, embedder: Embedder) -> None:
    from pgmem.lab.evaluation import docs_suite

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "boats.md").write_text(
        "# Boats\n\n## Hulls\n\nA catamaran has two hulls joined by a deck.\n\n"
        "## Sails\n\nA jib is the small sail in front of the mast.\n",
        encoding="utf-8",
    )
    (corpus / "bread.md").write_text(
        "# Bread\n\n## Starter\n\nFeed the sourdough starter flour and water every day.\n", encoding="utf-8"
    )
    questions = tmp_path / "questions.jsonl"
    rows = [
        {"question": "how many hulls does a catamaran have?", "file": "boats.md", "heading_path": ["Boats", "Hulls"]},
        {"question": "what do I feed a sourdough starter?", "file": "bread.md", "heading_path": ["Bread", "Starter"]},
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result: dict[str, Any] = docs_suite.run_docs_eval(admin_conn, embedder, corpus, questions)
    assert result["results"] == {"chunk": {"top1": 1.0, "mrr": 1.0}, "units": {"top1": 1.0, "mrr": 1.0}}
    assert result["ci"]["units"] == {"top1_low": 1.0, "top1_high": 1.0, "mrr_low": 1.0, "mrr_high": 1.0}
    pair = result["paired"]["units − chunk"]["top1"]
    assert (pair["won"], pair["lost"], pair["tied"], pair["diff"]) == (0, 0, 2, 0.0)


def test_the_halves_are_fixed_disjoint_and_even() -> None:
    from pgmem.lab.evaluation.common import half, in_split

    keys = [f"question-{i}" for i in range(2000)]
    tune = {k for k in keys if in_split(k, "tune")}
    confirm = {k for k in keys if in_split(k, "confirm")}
    assert tune.isdisjoint(confirm) and tune | confirm == set(keys)
    assert all(in_split(k, "all") for k in keys)
    assert 900 < len(tune) < 1100  # about half, by a hash of the id alone
    # Fixed: the halves of these ids never change (a new split would reopen every choice).
    assert [half(q) for q in ("q1", "q2", "q3")] == ["confirm", "tune", "confirm"]


def test_longmemeval_scores_one_half_only(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    from pgmem.errors import InputError

    d = write_lme(tmp_path / "lme")
    tune = longmemeval.run(d, server_url=db_url, embedder=embedder, methods=("per_message",), split="tune")
    assert tune["split"] == "tune" and tune["ids"] == ["q2"] and tune["questions"] == 1
    # A pooled haystack still holds every question's turns; only the half is scored.
    confirm = longmemeval.run(
        d, server_url=db_url, embedder=embedder, methods=("per_message",), split="confirm", haystack="pooled"
    )
    assert confirm["ids"] == ["q1", "q3"] and confirm["results"]["per_message"]["top1"] == 1.0
    with pytest.raises(InputError, match="split must be one of"):
        longmemeval.run(d, server_url=db_url, embedder=embedder, split="half")


def test_eval_cli_split_is_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pgmem.cli import main

    d = write_lme(tmp_path / "lme")
    with pytest.raises(SystemExit) as exc:
        main(["eval", "longmemeval", str(d), "--split", "third"])
    assert exc.value.code == 2 and "invalid choice: 'third'" in capsys.readouterr().err
    (tmp_path / "f.jsonl").write_text("{}\n")
    assert main(["eval", "families", str(tmp_path / "f.jsonl"), "--distractors", str(tmp_path / "f.jsonl"),
                 "--split", "tune"]) == 2  # fmt: skip
    assert "the families test has no halves" in capsys.readouterr().err
