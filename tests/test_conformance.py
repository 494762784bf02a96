"""The language-neutral conformance fixtures (tests/conformance/*.json) hold the exact outputs
of the rules a client in any language must reproduce to write and recall through SQL alone:
query parts, sources and labels, packing, pieces, content hashes. This runs the Python
implementation against them, from the inputs in the files (as a Go or Node client would)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pgmem.errors import InputError
from pgmem.ingest import content_hash
from pgmem.packing import pack_text
from pgmem.pieces import turn_pieces
from pgmem.recall import query_inputs
from pgmem.splitting import SplitRules, cap_bytes_keep_end, split_prompt_chunks
from pgmem.turns import Turn, format_label, split_sources
from tests.conformance import generate

DIR = Path(__file__).parent / "conformance"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DIR / f"{name}.json").read_text(encoding="utf-8"))
    assert data["description"]
    return data


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _turn(case: dict[str, Any]) -> Turn:
    return Turn(
        "scope",
        "thread",
        case["turn_index"],
        _time(case["time"]),
        tuple(case["messages"]),
        metadata=case.get("metadata"),
    )


def test_query_parts() -> None:
    data = _load("query_parts")
    r = data["rules"]
    rules = SplitRules(r["max_parts"], r["max_words"], r["window_words"], r["min_chars"])
    assert rules == SplitRules()
    for case in data["cases"]:
        assert split_prompt_chunks(case["message"], rules) == case["parts"], case["message"]
        if case["parts"]:
            assert list(query_inputs(case["message"])) == [case["parts"], case["embed_inputs"]]
        else:
            with pytest.raises(InputError):
                query_inputs(case["message"])
        assert all(len(p.encode()) <= r["whole_message_bytes"] for p in case["embed_inputs"])
    for cap in data["cap_bytes_keep_end"]:
        assert cap_bytes_keep_end(cap["text"], cap["max_bytes"]) == cap["result"]
        assert len(cap["result"].encode()) <= cap["max_bytes"]


def test_labels_and_sources() -> None:
    data = _load("labels")
    for case in data["labels"]:
        assert format_label(case["turn_index"], case["source_name"], _time(case["time"])) == case["label"]
    for case in data["sources"]:
        got = [
            {"kind": s.kind, "name": s.name, "text": s.text, "index": s.index} for s in split_sources(case["messages"])
        ]
        assert got == case["sources"]


def test_packing() -> None:
    for case in _load("packing")["cases"]:
        bodies = pack_text(case["text"], case["max_bytes"])
        assert bodies == case["bodies"]
        assert all(len(b.encode()) <= case["max_bytes"] for b in bodies)
        # nothing dropped: the same characters, whitespace aside, in order
        assert "".join("".join(bodies).split()) == "".join(case["text"].split())


def test_pieces() -> None:
    for case in _load("pieces")["cases"]:
        ps = turn_pieces(_turn(case), None, max_bytes=case["max_bytes"])
        got = [
            {
                "unit_kind": p.unit_kind,
                "source_index": p.source_index,
                "label": p.label,
                "body": p.body,
                "embedded_text": p.text,
            }
            for p in ps
        ]
        assert got == case["pieces"]
        assert all(len(str(p["embedded_text"]).encode()) <= case["max_bytes"] for p in got)


def test_content_hash() -> None:
    for case in _load("content_hash")["cases"]:
        digest = content_hash(
            _turn(case),
            model_id=case["model_id"],
            max_bytes=case["max_bytes"],
            weight=case["weight"],
            context=case["context"],
        )
        assert digest.hex() == case["content_hash"]
        # what a client computes: sha256 of the payload's UTF-8 bytes
        assert hashlib.sha256(case["payload"].encode("utf-8")).hexdigest() == case["content_hash"]


def test_fixtures_are_what_the_generator_writes() -> None:
    """A rule changed without regenerating (python -m tests.conformance.generate) fails here."""
    for name in generate.FIXTURES:
        assert (DIR / f"{name}.json").read_text(encoding="utf-8") == generate.render(name), name
