"""Query splitting rules and the whole-message byte cap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pgmem.splitting import SplitRules, cap_bytes_keep_end, split_prompt_chunks


def test_splits_on_lines_and_sentence_ends() -> None:
    msg = "The staging deploy failed again today.\nWhat are my dogs called, do you remember?"
    assert split_prompt_chunks(msg) == [
        "The staging deploy failed again today.",
        "What are my dogs called, do you remember?",
    ]


def test_short_part_joins_the_one_before() -> None:
    msg = "Do you remember my dogs' names? Or anything about them?"
    # "Or anything about them?" is 23 characters: it joins the part before it.
    assert split_prompt_chunks(msg) == [msg]


def test_a_part_of_exactly_min_chars_stands_alone() -> None:
    # Only a part shorter than 24 characters joins the one before: one of 24 is searched alone.
    msg = "Do you remember my dogs' names? And what breed are they?"
    assert split_prompt_chunks(msg) == ["Do you remember my dogs' names?", "And what breed are they?"]
    assert len("And what breed are they?") == 24


def test_long_unpunctuated_part_is_windowed() -> None:
    words = [f"w{i}" for i in range(130)]
    parts = split_prompt_chunks(" ".join(words))
    assert [len(p.split()) for p in parts] == [40, 40, 40, 10]


def test_more_than_max_parts_joined_into_runs() -> None:
    msg = " ".join(f"This is sentence number {i} of the message." for i in range(20))
    parts = split_prompt_chunks(msg)
    assert len(parts) == 8
    assert " ".join(parts) == msg


def test_rules_are_configurable() -> None:
    msg = "The first sentence is here. The second sentence is here. The third sentence is here."
    assert len(split_prompt_chunks(msg)) == 3
    assert len(split_prompt_chunks(msg, SplitRules(max_parts=2))) == 2
    assert len(split_prompt_chunks(msg, SplitRules(min_chars=30))) == 1
    words = " ".join(["word"] * 30)
    assert len(split_prompt_chunks(words, SplitRules(max_words=20, window_words=10))) == 3


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=600), st.integers(1, 10))
def test_parts_cover_message_in_order_never_more_than_max(msg: str, max_parts: int) -> None:
    parts = split_prompt_chunks(msg, SplitRules(max_parts=max_parts))
    assert len(parts) <= max_parts
    assert "".join("".join(parts).split()) == "".join(msg.split())


def test_cap_keeps_the_end_on_a_character_boundary() -> None:
    text = "前" * 3000  # 3 bytes per character: 9,000 bytes
    capped = cap_bytes_keep_end(text, 8000)
    assert len(capped.encode()) <= 8000
    assert capped == "前" * 2666
    # The last 4 bytes start inside 日: the cut moves forward to the next character.
    assert cap_bytes_keep_end("abc日本", 4) == "本"
    assert cap_bytes_keep_end("abc日本", 7) == "c日本"
    assert cap_bytes_keep_end("short", 8000) == "short"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.integers(0, 400))
def test_cap_is_a_valid_suffix(text: str, cap: int) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    out = cap_bytes_keep_end(text, cap)
    assert len(out.encode("utf-8")) <= cap
    assert text.endswith(out)
