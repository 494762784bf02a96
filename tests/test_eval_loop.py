"""The full evaluation loop (issue 14 item 1): each distinct text is embedded once across
all methods, bootstrap intervals and paired comparisons on hand-made numbers, and
`pgmem eval longmemeval ... --compare A B` end to end on a tiny fixture."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from pgmem.blend import blend
from pgmem.cli import main
from pgmem.embedders.base import Embedder, FloatArray
from pgmem.errors import InputError
from pgmem.lab.evaluation import coverage, longmemeval, toolqa
from pgmem.lab.evaluation.common import CachedEmbedder
from pgmem.lab.evaluation.conversations import METHODS, one_piece_turn, query_variant
from pgmem.lab.evaluation.stats import bootstrap_ci, paired, sign_test
from pgmem.recall import QueryParts
from pgmem.turns import Turn
from tests.helpers import CountingEmbedder
from tests.test_eval_suites import a, lme_question, u, write_lme


class Counting(CountingEmbedder):
    """A CountingEmbedder that also records every text it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.sent: Counter[str] = Counter()

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.sent.update(texts)
        return super().embed(texts)


@pytest.mark.long
def test_each_distinct_text_is_embedded_once_across_methods(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    counting = Counting(embedder)
    cached = CachedEmbedder(counting, tmp_path / "cache")
    d = write_lme(tmp_path / "lme")
    result = longmemeval.run(d, server_url=db_url, embedder=cached)
    assert set(result["results"]) == set(METHODS)
    assert counting.sent and max(counting.sent.values()) == 1  # no text reached the model twice
    assert cached.embedded == len(counting.sent)
    # pieces and blended share their texts; the baselines' texts are there too
    assert any(t.startswith("[Turn") for t in counting.sent)
    assert "I just got a golden retriever named Max." in counting.sent
    assert set(result["timings"]) >= {"prepare_seconds", "embed_seconds", "store_seconds", "search_seconds"}
    assert sorted(result["ids"]) == ["q1", "q2", "q3"]

    # a second run in a new process (a fresh wrapper on the same disk cache) embeds nothing
    again = Counting(embedder)
    second = longmemeval.run(d, server_url=db_url, embedder=CachedEmbedder(again, tmp_path / "cache"))
    assert not again.sent
    assert second["results"] == result["results"]

    # the query-split ablation needs no new embedding (the whole message is embedded anyway)
    whole = longmemeval.run(
        d, server_url=db_url, embedder=CachedEmbedder(again, tmp_path / "cache"), methods=("blended",), query="whole"
    )
    assert not again.sent and set(whole["results"]) == {"blended"}
    with pytest.raises(InputError, match="query"):
        longmemeval.run(d, server_url=db_url, embedder=cached, query="halves")


def test_pooled_haystack_searches_every_questions_turns(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    # q1's answer is in its own thread; q2's thread holds a turn closer to q1's question. On
    # its own haystack q1 finds its answer first; pooled, every method ranks q2's turn first.
    d = tmp_path / "pool"
    d.mkdir()
    q1 = lme_question(
        "q1",
        "single-session-user",
        "Where did I park the bicycle?",
        [[u("I left the bicycle by the library.", True), a("Noted."), u("Any soup ideas?"), a("Try a leek soup.")]],
    )
    decoy = "Where did I park the bicycle? Where did I park the bicycle today?"
    q2 = lme_question(
        "q2",
        "single-session-user",
        "What colour is my kettle?",
        [[u("My kettle is bright red.", True), a("Nice."), u(decoy), a("I do not know where you parked it.")]],
    )
    for q in (q1, q2):
        (d / f"1_{q['question_id']}.json").write_text(json.dumps(q))
    cached = CachedEmbedder(embedder, tmp_path / "cache")
    own = longmemeval.run(d, server_url=db_url, embedder=cached)
    pooled = longmemeval.run(d, server_url=db_url, embedder=cached, haystack="pooled")
    assert own["ids"] == pooled["ids"] == ["q1", "q2"]
    for m in METHODS:
        assert own["per_question"][m]["top1"][0] == 1.0, m
        assert pooled["per_question"][m]["top1"][0] == 0.0, m
        assert pooled["per_question"][m]["mrr"][0] == 0.5, m
    with pytest.raises(InputError, match="haystack must be one of"):
        longmemeval.run(d, server_url=db_url, embedder=cached, haystack="shared")

    # Filler: another folder's haystacks stored beside the pooled one, never scored and never
    # holding evidence. Its answer session (the kettle's colour again) and its evidence turn are
    # left out; its other session holds a turn nearer q2's question than q2's answer.
    f = tmp_path / "filler"
    f.mkdir()
    other = lme_question(
        "f1",
        "single-session-user",
        "What colour is my kettle?",
        [
            [u("My kettle is bright red, I said.", True), a("Red it is.")],
            [u("What colour is my kettle? I keep asking what colour my kettle is."), a("Unsure.")],
        ],
    )
    (f / "1_f1.json").write_text(json.dumps(other))
    (extra,) = longmemeval.filler_questions(f)
    assert extra.thread == "filler:f1" and not extra.gold
    assert [t.messages[0]["content"] for t in extra.turns] == [other["haystack_sessions"][1][0]["content"]]
    assert [t.index for t in extra.turns] == [0] and extra.user_turns == frozenset({0})
    filled = longmemeval.run(d, server_url=db_url, embedder=cached, haystack="pooled", filler=str(f))
    assert filled["ids"] == ["q1", "q2"]  # the filler is stored, not scored
    for m in METHODS:
        assert filled["per_question"][m]["mrr"][1] < pooled["per_question"][m]["mrr"][1], m
    with pytest.raises(InputError, match="haystack=pooled"):
        longmemeval.run(d, server_url=db_url, embedder=cached, filler=str(f))
    with pytest.raises(InputError, match="not a folder"):
        longmemeval.run(d, server_url=db_url, embedder=cached, haystack="pooled", filler=str(tmp_path / "none"))


@pytest.mark.long
def test_piece_ablations_embed_what_they_say(tmp_path: Path, db_url: str, embedder: Embedder) -> None:
    d = write_lme(tmp_path / "lme")
    # label beside: the pieces are embedded without their label, each text once, and the
    # store phase finds every vector the embed phase made (nothing embedded twice)
    beside = Counting(embedder)
    cached = CachedEmbedder(beside, tmp_path / "cache-beside")
    result = longmemeval.run(d, server_url=db_url, embedder=cached, methods=("blended",), label="beside")
    assert set(result["results"]) == {"blended"}
    assert beside.sent and max(beside.sent.values()) == 1
    assert not any(t.startswith("[Turn") for t in beside.sent)
    assert "I just got a golden retriever named Max." in beside.sent
    # a smaller byte budget: a long message becomes more, shorter pieces, each with its label
    long_d = tmp_path / "long"
    long_d.mkdir()
    story = " ".join(f"On day {i} I walked the dog to the old harbour and back again." for i in range(12))
    q = lme_question("q9", "single-session-user", "Where do I walk the dog?", [[u(story, True), a("Nice.")]])
    (long_d / "1_q9_0.json").write_text(json.dumps(q))
    sizes = {}
    for budget in (1200, 300):
        sent = Counting(embedder)
        cache = CachedEmbedder(sent, tmp_path / f"cache-{budget}")
        longmemeval.run(long_d, server_url=db_url, embedder=cache, methods=("blended",), piece_bytes=budget)
        sizes[budget] = [len(t.encode()) for t in sent.sent if t.startswith("[Turn")]
    assert len(sizes[300]) > len(sizes[1200]) >= 1
    assert max(sizes[300]) <= 300 < max(sizes[1200])
    # short turns in one piece: a short chat exchange is embedded as one text holding both
    # messages; the other methods' texts are the same as the default run's
    merged = Counting(embedder)
    result = longmemeval.run(
        d, server_url=db_url, embedder=CachedEmbedder(merged, tmp_path / "cache-merged"), short_turns="one_piece"
    )
    assert set(result["results"]) == set(METHODS)
    exchange = [t for t in merged.sent if "User: I just got a golden retriever named Max." in t]
    assert len(exchange) == 1 and "Assistant: Golden retrievers are friendly." in exchange[0]
    assert exchange[0].startswith("[Turn 0 · User")
    assert not any(t.startswith("[Turn 0 · Assistant") for t in merged.sent if "Golden retrievers" in t)
    # the turn's text as context: each short turn's whole text is embedded once more
    ctx = Counting(embedder)
    longmemeval.run(
        d, server_url=db_url, embedder=CachedEmbedder(ctx, tmp_path / "cache-ctx"), methods=("blended",), context="text"
    )
    turn_text = "User: I just got a golden retriever named Max.\nAssistant step 1: Golden retrievers are friendly."
    assert turn_text in ctx.sent
    # every suite that stores pieces takes the same options and refuses the same bad values
    bads = (
        {"label": "inside"},
        {"piece_bytes": 10},
        {"piece_bytes": "1200"},
        {"piece_bytes": True},
        {"context": "x"},
        {"word_weight": "heavy"},
    )
    for bad in bads:
        for suite in (longmemeval, toolqa, coverage):
            with pytest.raises(InputError):
                suite.run(d, server_url=db_url, embedder=cached, **bad)
    for suite in (longmemeval, coverage):  # turn-scored suites only: toolqa scores messages
        with pytest.raises(InputError, match="short_turns"):
            suite.run(d, server_url=db_url, embedder=cached, short_turns="merged")
    for suite in (longmemeval, toolqa, coverage):
        with pytest.raises(InputError, match="query"):
            suite.run(d, server_url=db_url, embedder=cached, query="halves")


def test_query_variants_merge_parts_of_one_subject() -> None:
    e = np.eye(4, dtype=np.float32)
    near = np.array([0.9, 0.1, 0.0, 0.0], dtype=np.float32) / np.linalg.norm([0.9, 0.1])
    raw = np.stack([e[0], near, e[2]])  # parts 1 and 2 are one subject, part 3 another
    whole = np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32)
    q = QueryParts(["a", "b", "c"], raw, whole, blend(raw, np.broadcast_to(whole, raw.shape).copy(), 0.8))
    assert query_variant(q, "split", 0.25) is q
    assert query_variant(q, "parts", None) is q  # a model without a subject cosine: no merge
    w = query_variant(q, "whole", 0.25)
    assert w.texts == ["a b c"] and np.allclose(w.blended, whole[None, :]) and np.allclose(w.raw, whole[None, :])
    # Two subjects: every part keeps its group, even the two parts of one subject.
    assert query_variant(q, "parts", 0.25) is q
    # All one subject: the whole message, one part.
    one = QueryParts(["a", "b"], raw[:2], whole, q.blended[:2])
    merged = query_variant(one, "parts", 0.25)
    assert merged.texts == ["a b"]
    assert np.allclose(merged.blended, whole[None, :]) and np.allclose(merged.raw, whole[None, :])
    assert query_variant(one, "parts", 0.999) is one  # their cosine is 0.994: apart at 0.999
    # A chain is not one subject: a and c are each close to the middle part, not to each other
    # (a question, a paragraph, another question).
    mid = (e[0] + e[1]) / np.linalg.norm(e[0] + e[1])
    chain = QueryParts(["a", "m", "c"], np.stack([e[0], mid, e[1]]), whole, q.blended)
    assert query_variant(chain, "parts", 0.5) is chain
    with pytest.raises(InputError, match="query"):
        query_variant(q, "subjects", 0.25)


def test_one_piece_turn_merges_only_short_chat_turns() -> None:
    t = Turn("s", "t", 3, None, ({"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "Hello!"}))
    one = one_piece_turn(t)
    assert one.messages == ({"role": "user", "content": "User: Hi there.\nAssistant: Hello!"},)
    assert (one.scope, one.thread, one.index, one.time) == (t.scope, t.thread, t.index, t.time)
    assert one_piece_turn(t, max_bytes=40) is t  # does not fit: per-role pieces as always
    long = Turn("s", "t", 4, None, ({"role": "user", "content": "x " * 700}, {"role": "assistant", "content": "ok"}))
    assert one_piece_turn(long) is long
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    tool = Turn(
        "s",
        "t",
        5,
        None,
        (
            {"role": "user", "content": "Run it."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ),
    )
    assert one_piece_turn(tool) is tool  # tool turns keep their per-call pieces
    alone = Turn("s", "t", 6, None, ({"role": "user", "content": "Just me."},))
    assert one_piece_turn(alone) is alone


def test_bootstrap_interval() -> None:
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)
    m, low, high = bootstrap_ci([0.0] * 50 + [1.0] * 50)
    assert m == 0.5
    # normal approximation: 0.5 +- 1.96 * 0.05
    assert 0.38 <= low <= 0.42 and 0.58 <= high <= 0.62
    assert bootstrap_ci([0.0] * 50 + [1.0] * 50) == (m, low, high)  # fixed seed: reproducible
    assert bootstrap_ci([]) == (0.0, 0.0, 0.0)


def test_paired_comparison() -> None:
    a = [1.0, 1.0, 0.0, 0.5, 1.0]
    b = [0.0, 1.0, 1.0, 0.0, 0.0]
    r = paired(a, b)
    assert (r["won"], r["lost"], r["tied"]) == (3, 1, 1)
    assert r["diff"] == pytest.approx(0.3)
    assert r["diff_low"] <= 0.3 <= r["diff_high"]
    # sign test: 3 wins vs 1 loss, two-sided: 2 * (C(4,0) + C(4,1)) / 16
    assert r["p_sign"] == pytest.approx(0.625)
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(0, 0) == 1.0
    one_sided = paired([1.0] * 20, [0.0] * 20)
    assert one_sided["p_bootstrap"] == 0.0 and one_sided["won"] == 20
    same = paired(a, a)
    assert (same["won"], same["lost"], same["tied"]) == (0, 0, 5) and same["p_sign"] == 1.0
    with pytest.raises(ValueError):
        paired([1.0], [1.0, 0.0])


def test_command_end_to_end(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATABASE_URL", db_url)
    for var in ("PGMEM_EMBEDDER", "PGMEM_PIECE_DIMS", "PGMEM_FACT_DIMS"):
        monkeypatch.delenv(var, raising=False)
    d = write_lme(tmp_path / "lme")
    out = tmp_path / "out"
    argv = ["eval", "longmemeval", str(d), "--json", "--compare", "blended", "per_message", "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    for phase in ("prepare", "embed", "store", "search"):
        assert f"longmemeval: {phase} " in captured.err
    cmp = result["comparisons"]["blended vs per_message"]
    assert cmp["questions"] == 3
    assert cmp["top1"]["won"] + cmp["top1"]["lost"] + cmp["top1"]["tied"] == 3
    for m in METHODS:
        ci = result["ci"][m]
        assert ci["top1_low"] <= result["results"][m]["top1"] <= ci["top1_high"]
    report = (out / "longmemeval.md").read_text()
    assert "--compare blended per_message" in report and "top1_low" in report

    # a side from an earlier run's JSON: the run against itself ties on every question
    argv = ["eval", "longmemeval", str(d), "--json", "--compare", "hybrid", f"{out / 'longmemeval.json'}:hybrid"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out)["comparisons"][f"hybrid vs {out / 'longmemeval.json'}:hybrid"]
    assert again["top1"]["tied"] == 3
    assert "0 texts embedded" in captured.err
