"""Query side splitting (seed 000, `splitPromptChunks`) and the whole-message byte cap.

1. Split on line breaks and after `.`, `!`, `?`.
2. A part over `max_words` words (60) is cut into windows of `window_words` (40):
   unpunctuated voice transcripts hit this often.
3. A part under `min_chars` characters (24) joins the part before it (the first part
   joins the one after it when it is alone too short).
4. Over `max_parts` (8), neighbours are joined into `max_parts` runs of near-equal
   size, so every part of the message is still searched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pgmem.errors import InputError

_BOUNDARY = re.compile(r"[\r\n]+|(?<=[.!?])\s+")


@dataclass(frozen=True)
class SplitRules:
    max_parts: int = 8
    max_words: int = 60
    window_words: int = 40
    min_chars: int = 24

    def __post_init__(self) -> None:
        for name in ("max_parts", "max_words", "window_words", "min_chars"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise InputError(f"SplitRules.{name} must be an integer, got {type(v).__name__}")
        if self.max_parts < 1 or self.window_words < 1 or self.max_words < self.window_words:
            raise InputError(
                f"invalid split rules: {self} (max_parts and window_words at least 1, max_words at least window_words)"
            )
        if self.min_chars < 0:
            raise InputError("SplitRules.min_chars must be >= 0")


def split_prompt_chunks(message: str, rules: SplitRules = SplitRules()) -> list[str]:
    """Parts of `message` in order; whitespace-normalised; never more than max_parts."""
    raw = [" ".join(s.split()) for s in _BOUNDARY.split(message)]
    parts: list[str] = []
    for s in raw:
        if not s:
            continue
        words = s.split(" ")
        if len(words) > rules.max_words:
            parts.extend(" ".join(words[i : i + rules.window_words]) for i in range(0, len(words), rules.window_words))
        else:
            parts.append(s)
    joined: list[str] = []
    for p in parts:
        if joined and len(p) < rules.min_chars:
            joined[-1] = f"{joined[-1]} {p}"
        else:
            joined.append(p)
    if len(joined) > 1 and len(joined[0]) < rules.min_chars:
        joined[1] = f"{joined[0]} {joined[1]}"
        joined.pop(0)
    if len(joined) > rules.max_parts:
        n, k = len(joined), rules.max_parts
        bounds = [round(i * n / k) for i in range(k + 1)]
        joined = [" ".join(joined[bounds[i] : bounds[i + 1]]) for i in range(k)]
    return joined


def cap_bytes_keep_end(text: str, max_bytes: int = 8000) -> str:
    """The last `max_bytes` UTF-8 bytes of `text`, cut on a character boundary."""
    if max_bytes < 0:
        raise InputError("max_bytes must be >= 0")
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    tail = data[len(data) - max_bytes :]
    # Skip UTF-8 continuation bytes (10xxxxxx) so the cut starts a character.
    start = 0
    while start < len(tail) and (tail[start] & 0xC0) == 0x80:
        start += 1
    return tail[start:].decode("utf-8", "surrogatepass")
