"""Generate the language-neutral conformance fixtures (tests/conformance/*.json) from the
Python implementation: the rules that decide query parts, pieces, labels and content hashes.

    python -m tests.conformance.generate          # rewrite the fixtures
    python -m tests.conformance.generate --check  # exit 1 if they differ from the code

A Go or Node service that writes turns through pgmem.put_turn and recalls through
pgmem.memory_recall implements these rules and checks itself against the same files
(tests/conformance/README.md). tests/test_conformance.py runs the Python implementation
against them. Regenerate only after a deliberate change of a rule, and review the diff: a
changed piece or hash means every client must change too (and stored turns are re-pieced).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pgmem.ingest import content_hash
from pgmem.packing import pack_text
from pgmem.pieces import DEFAULT_MAX_BYTES, turn_pieces
from pgmem.splitting import SplitRules, cap_bytes_keep_end, split_prompt_chunks
from pgmem.turns import Turn, format_label, split_sources

HERE = Path(__file__).parent
LONG_WORD = "Donaudampfschifffahrtsgesellschaftskapitänswitwenrentenversicherung"
VOICE = " ".join(f"word{i}" for i in range(130))  # an unpunctuated transcript: 130 words
TOOL_TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "Is anything stuck in the October export?"},
    {
        "role": "assistant",
        "content": "Let me check the export jobs.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "logistics_export", "arguments": '{"month": "2026-10"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "ticket_lookup", "arguments": {"id": 7}}},
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Job 4411 stalled at 62%: carrier API returned 429.\nRetry scheduled 14:05.",
    },
    {"role": "assistant", "content": "Job 4411 is stalled; a retry is scheduled for 2:05 PM."},
]


def _turn(
    index: int, time: str | None, messages: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None = None
) -> Turn:
    return Turn(
        "scope", "thread", index, datetime.fromisoformat(time) if time else None, tuple(messages), metadata=metadata
    )


def query_parts() -> dict[str, Any]:
    messages = [
        "Is anything stuck in the October export?",
        "Hi. What did the vet say about Biscuit? And Juniper?",
        "ok",
        "Short. Also short. This one is long enough to stand alone!",
        VOICE,
        "\n".join(f"Question number {i} is about topic {i}?" for i in range(11)),
        "  spaces\tand\ttabs   are   normalised.  \r\n\r\nBlank lines too.",
        "Émigré café naïve résumé: ünïcödé, 日本語の文章です。 Then English.",
        "trailing words without punctuation",
        "",
        "   \n\t ",
    ]
    rules = SplitRules()
    cases = []
    for m in messages:
        parts = split_prompt_chunks(m, rules)
        whole = cap_bytes_keep_end(" ".join(m.split()), 8000)
        cases.append(
            {"message": m, "parts": parts, "embed_inputs": [cap_bytes_keep_end(p, 8000) for p in parts] + [whole]}
        )
    caps = []
    for text, n in (
        ("abcdef", 4),
        ("héllo wörld", 6),
        ("日本語", 4),
        ("日本語", 5),
        ("🙂🙂", 5),
        ("short", 8000),
        ("x" * 9000, 8000),
    ):
        caps.append({"text": text, "max_bytes": n, "result": cap_bytes_keep_end(text, n)})
    return {
        "description": "Query side: a message is split into parts (at most max_parts), each part and the whole "
        "message are embedded in one batch (embed_inputs: the parts, then the whole message with its "
        "whitespace normalised, each capped at 8,000 UTF-8 bytes keeping the end). cap_bytes_keep_end "
        "keeps the last max_bytes bytes, cut on a character boundary.",
        "rules": {
            "max_parts": rules.max_parts,
            "max_words": rules.max_words,
            "window_words": rules.window_words,
            "min_chars": rules.min_chars,
            "whole_message_bytes": 8000,
        },
        "cases": cases,
        "cap_bytes_keep_end": caps,
    }


def labels() -> dict[str, Any]:
    label_cases = []
    for idx, name, time in (
        (4, "Tool logistics_export", "2026-10-16T14:02:00+00:00"),
        (0, "User", "2026-01-05T00:07:00-08:00"),
        (12, "Assistant step 2", "2026-12-31T12:00:00+05:30"),
        (3, "System", "2026-07-04T09:30:59+00:00"),
        (7, "User", None),
    ):
        label_cases.append(
            {
                "turn_index": idx,
                "source_name": name,
                "time": time,
                "label": format_label(idx, name, datetime.fromisoformat(time) if time else None),
            }
        )
    source_cases = []
    message_lists: tuple[list[dict[str, Any]], ...] = (
        TOOL_TURN,
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "x", "function": {"name": "never_answered", "arguments": "{}"}}],
            }
        ],
        [
            {"role": "user", "content": "   "},
            {"role": "assistant", "content": "kept"},
            {"role": "developer", "content": "d"},
        ],
        [{"role": "tool", "tool_call_id": "unknown", "name": "orphan", "content": {"rows": 3}}],
    )
    for messages in message_lists:
        sources = split_sources(messages)
        source_cases.append(
            {
                "messages": messages,
                "sources": [{"kind": s.kind, "name": s.name, "text": s.text, "index": s.index} for s in sources],
            }
        )
    return {
        "description": "Labels: [Turn <index> · <source name> · <Mon> <day>, <h>:<mm> AM|PM] in the time's own "
        "offset (no time: [Turn <index> · <source name>]). Sources: a turn's messages split by role, in order.",
        "labels": label_cases,
        "sources": source_cases,
    }


def packing() -> dict[str, Any]:
    texts = [
        ("One. Two! Three? Four", 12),
        ("First line\nSecond line. Same line.\n\n\nFourth", 30),
        (f"{LONG_WORD} {LONG_WORD}", 40),
        ("a " * 50, 9),
        ("日本語の文章です。次の文。", 10),
        ("🙂" * 5, 7),
        ("   ", 10),
        ("Sentence one is here. " * 20, 100),
    ]
    return {
        "description": "A source's text packed into bodies of at most max_bytes UTF-8 bytes: split on line breaks, "
        "then after . ! ?, whitespace normalised; whole sentences joined (by a newline across lines, a space "
        "within one) until the next would overflow; an over-long sentence cut at the last whole word that fits; "
        "an over-long word cut at a character boundary. Nothing dropped.",
        "cases": [{"text": t, "max_bytes": n, "bodies": pack_text(t, n)} for t, n in texts],
    }


def pieces() -> dict[str, Any]:
    turns: list[tuple[int, str | None, list[dict[str, Any]], int]] = [
        (4, "2026-10-16T14:02:00+00:00", TOOL_TURN, DEFAULT_MAX_BYTES),
        (1, None, [{"role": "user", "content": "Sentence one is here. " * 120}], DEFAULT_MAX_BYTES),
        (2, "2026-10-18T08:30:00+02:00", [{"role": "user", "content": LONG_WORD * 30}], 200),
        (3, "2026-10-18T20:15:00+00:00", [{"role": "user", "content": "日本語の文章です。" * 60}], 300),
    ]
    cases = []
    for idx, time, messages, max_bytes in turns:
        ps = turn_pieces(_turn(idx, time, messages), None, max_bytes=max_bytes)
        cases.append(
            {
                "turn_index": idx,
                "time": time,
                "messages": messages,
                "max_bytes": max_bytes,
                "pieces": [
                    {
                        "unit_kind": p.unit_kind,
                        "source_index": p.source_index,
                        "label": p.label,
                        "body": p.body,
                        "embedded_text": p.text,
                    }
                    for p in ps
                ],
            }
        )
    return {
        "description": "A turn's pieces, in put_turn's array order: per source, its label, then its text packed "
        "into bodies of at most max_bytes - (label bytes + 1). embedded_text (label, a space, body) is what is "
        "embedded; unit_kinds, source_indexes, labels and bodies are the arrays put_turn takes. The model's token "
        "limit may split further (model-specific, not covered here).",
        "cases": cases,
    }


def hashes() -> dict[str, Any]:
    cases = []
    for idx, time, messages, meta, model, max_bytes, weight, context in (
        (4, "2026-10-16T14:02:00+00:00", TOOL_TURN, None, "local:all-MiniLM-L6-v2-int8", 1200, 0.8, "mean"),
        (
            1,
            None,
            [{"role": "user", "content": "café ☕ and 日本"}],
            None,
            "openai:text-embedding-3-small@256",
            1200,
            0.8,
            "mean",
        ),
        (
            2,
            "2026-01-05T00:07:00-08:00",
            [{"role": "user", "content": "hello"}],
            {"channel": "voice"},
            "m",
            600,
            0.5,
            "text",
        ),
    ):
        turn = _turn(idx, time, messages, meta)
        payload: dict[str, Any] = {
            "v": 1,
            "context": context,
            "model": model,
            "max_bytes": max_bytes,
            "weight": weight,
            "time": turn.time.isoformat() if turn.time else None,
            "messages": list(messages),
        }
        if meta:
            payload["metadata"] = meta
        cases.append(
            {
                "turn_index": idx,
                "time": time,
                "messages": messages,
                "metadata": meta,
                "model_id": model,
                "max_bytes": max_bytes,
                "weight": weight,
                "context": context,
                "payload": json.dumps(payload, sort_keys=True, ensure_ascii=False),
                "content_hash": content_hash(
                    turn, model_id=model, max_bytes=max_bytes, weight=weight, context=context
                ).hex(),
            }
        )
    return {
        "description": "put_turn's content_hash: sha256 of the UTF-8 bytes of payload, a JSON object with sorted keys, "
        "', ' and ': ' separators, non-ASCII kept (Python json.dumps(sort_keys=True, ensure_ascii=False)): "
        "v (piecing version, 1), context (mean or text), model, max_bytes, weight, time (ISO 8601 with its offset, "
        "or null), messages (as sent), and metadata only when non-empty. A service may use any hash of its own, "
        "as long as it changes when the content does; matching this one lets Python and it skip each other's "
        "unchanged turns.",
        "cases": cases,
    }


FIXTURES = {"query_parts": query_parts, "labels": labels, "packing": packing, "pieces": pieces, "content_hash": hashes}


def render(name: str) -> str:
    return json.dumps(FIXTURES[name](), indent=1, ensure_ascii=False) + "\n"


def main(argv: Sequence[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in FIXTURES:
        path = HERE / f"{name}.json"
        text = render(name)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale conformance fixtures: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
