"""Packing text into pieces by sentence under a byte budget and, optionally, a token budget.

Rules (seed 000, "Stored side"): split on line breaks, then after `.`, `!`, `?`;
normalise whitespace inside a sentence; fill a piece with whole sentences until the
next one would overflow; a sentence over budget is cut at the last whole word that
fits; a word over budget is cut at a character boundary. Nothing is dropped.

Token budgets use `count_tokens`, which must be additive over whitespace-joined texts, or
over-count: exact for MiniLM's WordPiece tokenizer; e5's SentencePiece counts add one token
per text, one of slack per join (`pgmem.embedders.e5`); a byte count is a safe upper bound
for BPE."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pgmem.errors import InputError

TokenCounter = Callable[[Sequence[str]], list[int]]

_LINES = re.compile(r"[\r\n]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def sentences(text: str) -> list[list[str]]:
    """Lines of normalised sentences (empty ones dropped: they hold only whitespace)."""
    out: list[list[str]] = []
    for line in _LINES.split(text):
        sents = [" ".join(s.split()) for s in _SENTENCE_END.split(line)]
        sents = [s for s in sents if s]
        if sents:
            out.append(sents)
    return out


class _Budget:
    def __init__(self, max_bytes: int, max_tokens: int | None, count: TokenCounter | None) -> None:
        if max_bytes < 4:  # one UTF-8 character can take four bytes
            raise InputError(f"byte budget must be at least 4, got {max_bytes}")
        if max_tokens is not None and (count is None or max_tokens < 1):
            raise InputError("a token budget needs a positive max_tokens and a token counter")
        self.max_bytes = max_bytes
        self.max_tokens = max_tokens
        self.count = count

    def tokens(self, texts: Sequence[str]) -> list[int]:
        if self.max_tokens is None or self.count is None:
            return [0] * len(texts)
        return self.count(texts)

    def fits(self, nbytes: int, ntokens: int) -> bool:
        return nbytes <= self.max_bytes and (self.max_tokens is None or ntokens <= self.max_tokens)


def pack_text(
    text: str,
    max_bytes: int,
    *,
    max_tokens: int | None = None,
    count_tokens: TokenCounter | None = None,
) -> list[str]:
    """Pack `text` into pieces of at most `max_bytes` UTF-8 bytes (and `max_tokens`)."""
    budget = _Budget(max_bytes, max_tokens, count_tokens)
    lines = sentences(text)
    flat = [s for line in lines for s in line]
    counts = iter(budget.tokens(flat))
    pieces: list[str] = []
    current, cur_bytes, cur_tokens = "", 0, 0
    for line in lines:
        for index, sentence in enumerate(line):
            ntok = next(counts)
            parts = (
                [(sentence, utf8_len(sentence), ntok)]
                if budget.fits(utf8_len(sentence), ntok)
                else _cut_sentence(sentence, budget)
            )
            for k, (part, pbytes, ptok) in enumerate(parts):
                joiner = "" if not current else ("\n" if index == 0 and k == 0 else " ")
                if current and not budget.fits(cur_bytes + len(joiner) + pbytes, cur_tokens + ptok):
                    pieces.append(current)
                    current, cur_bytes, cur_tokens = part, pbytes, ptok
                else:
                    current += joiner + part
                    cur_bytes += len(joiner) + pbytes
                    cur_tokens += ptok
    if current:
        pieces.append(current)
    return pieces


def _cut_sentence(sentence: str, budget: _Budget) -> list[tuple[str, int, int]]:
    """Cut an over-budget sentence at the last whole word that fits, repeatedly."""
    words = sentence.split(" ")
    wtok = budget.tokens(words)
    out: list[tuple[str, int, int]] = []
    cur: list[str] = []
    cur_bytes = cur_tokens = 0
    for word, ntok in zip(words, wtok, strict=True):
        nbytes = utf8_len(word)
        if not budget.fits(nbytes, ntok):
            if cur:
                out.append((" ".join(cur), cur_bytes, cur_tokens))
                cur, cur_bytes, cur_tokens = [], 0, 0
            out.extend(_cut_word(word, budget))
            continue
        extra = 1 if cur else 0
        if cur and not budget.fits(cur_bytes + extra + nbytes, cur_tokens + ntok):
            out.append((" ".join(cur), cur_bytes, cur_tokens))
            cur, cur_bytes, cur_tokens = [word], nbytes, ntok
        else:
            cur.append(word)
            cur_bytes += extra + nbytes
            cur_tokens += ntok
    if cur:
        out.append((" ".join(cur), cur_bytes, cur_tokens))
    return out


def _cut_word(word: str, budget: _Budget) -> list[tuple[str, int, int]]:
    """Cut one over-budget word into the longest prefixes that fit, at character boundaries."""
    out: list[tuple[str, int, int]] = []
    at = 0
    while at < len(word):
        # Largest prefix length that fits; one character always fits the byte budget (>= 4). A
        # prefix of more characters than the byte budget cannot fit (a character is at least a
        # byte): refused unread, with the same probes as before, so the same cuts. It used to be
        # counted and tokenized, prefixes of the whole rest of the word: one 100,000-character
        # base64 word took 14.43 s to piece with the local model (docs/bench/packing-long-word-0040.txt).
        lo, hi = 1, len(word) - at
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if mid > budget.max_bytes:
                hi = mid - 1
                continue
            prefix = word[at : at + mid]
            if budget.fits(utf8_len(prefix), budget.tokens([prefix])[0]):
                lo = mid
            else:
                hi = mid - 1
        prefix = word[at : at + lo]
        out.append((prefix, utf8_len(prefix), budget.tokens([prefix])[0]))
        at += lo
    return out
