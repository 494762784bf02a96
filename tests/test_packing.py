"""Packing: nothing lost, budgets held, valid UTF-8 — over arbitrary Unicode."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgmem.embedders.local import LocalEmbedder
from pgmem.packing import pack_text, utf8_len

_EMBEDDER: LocalEmbedder | None = None


def local() -> LocalEmbedder:
    global _EMBEDDER
    if _EMBEDDER is None:
        _EMBEDDER = LocalEmbedder()
    return _EMBEDDER


def squash(text: str) -> str:
    return "".join(text.split())


tricky = st.sampled_from(
    [
        "日本語の文章です。",
        "👩‍👩‍👧‍👦",
        "e\u0301",
        "\r\n",
        "\x00",
        ". ",
        "! ",
        "? ",
        "\n",
        "   ",
        "supercalifragilisticexpialidocious" * 5,
        "🇺🇳",
        "ß",
        "\u2028",
        "Ω≈ç√∫",
    ]
)
texts = st.lists(st.one_of(st.text(max_size=80), tricky), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=texts, budget=st.integers(min_value=4, max_value=300))
def test_no_text_lost_and_bytes_within_budget(text: str, budget: int) -> None:
    pieces = pack_text(text, budget)
    assert squash("".join(pieces)) == squash(text)
    for p in pieces:
        assert 0 < utf8_len(p) <= budget
        p.encode("utf-8")  # valid UTF-8: no lone surrogates produced by cutting
        assert p == p.strip()


@settings(max_examples=60, deadline=None)
@given(text=texts, budget=st.integers(min_value=16, max_value=400), tokens=st.integers(min_value=4, max_value=60))
def test_token_budget_held_with_real_tokenizer(text: str, budget: int, tokens: int) -> None:
    emb = local()
    pieces = pack_text(text, budget, max_tokens=tokens, count_tokens=emb.count_tokens)
    assert squash("".join(pieces)) == squash(text)
    for p, n in zip(pieces, emb.count_tokens(pieces), strict=True):
        assert utf8_len(p) <= budget
        assert n <= tokens


def test_sentences_packed_whole_and_lines_kept() -> None:
    text = "First one. Second one!\nThird line? Yes."
    assert pack_text(text, 1200) == ["First one. Second one!\nThird line? Yes."]
    assert pack_text(text, 25) == ["First one. Second one!", "Third line? Yes."]


def test_long_sentence_cut_at_last_whole_word() -> None:
    text = "alpha beta gamma delta epsilon"
    assert pack_text(text, 12) == ["alpha beta", "gamma delta", "epsilon"]


def test_long_word_cut_at_character_boundary() -> None:
    word = "é" * 10  # 2 bytes each
    pieces = pack_text(word, 5)
    assert pieces == ["éé", "éé", "éé", "éé", "éé"]


def test_whitespace_is_normalised_inside_sentences() -> None:
    assert pack_text("a \t  b\r\n\r\n  c", 100) == ["a b\nc"]


def test_budget_too_small_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        pack_text("x", 3)


def test_a_long_unbroken_word_is_cut_without_reading_past_the_byte_budget() -> None:
    """A word longer than the budget (a base64 blob, a long URL) is cut into the longest prefixes
    that fit. The search used to count and tokenize prefixes of the whole rest of the word, so
    piecing one took time in the square of its length; now no prefix longer than the byte
    budget is tokenized, and the cuts are the same as the search's over every length."""
    seen: list[int] = []

    def count(texts: Sequence[str]) -> list[int]:
        seen.extend(len(t) for t in texts)
        return [len(t) // 3 + 1 for t in texts]

    word = "QUJD" * 25_000  # 100,000 characters, no space
    pieces = pack_text(word, 1200, max_tokens=300, count_tokens=count)
    assert "".join(pieces) == word and all(utf8_len(p) <= 1200 for p in pieces)
    # The whole word is counted once or twice (does it fit whole?), never a long prefix per cut.
    assert sum(1 for n in seen if n > 1200) <= 2, sorted(seen)[-5:]
    assert [len(p) for p in pieces[:3]] == [899, 899, 899]  # the longest prefixes within 300 tokens
