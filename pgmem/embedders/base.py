"""The Embedder protocol and request sizing shared by every implementation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from pgmem.errors import EmbeddingError

FloatArray = npt.NDArray[np.float32]

#: Seed 000: at most 2,048 inputs and 300,000 bytes per embedding request.
MAX_INPUTS_PER_REQUEST = 2048
MAX_BYTES_PER_REQUEST = 300_000

#: Which side of a search a text is on: stored ("passage") or searched with ("query").
Side = Literal["passage", "query"]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into unit-length float32 vectors of a fixed dimension."""

    @property
    def model_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    @property
    def max_input_tokens(self) -> int:
        """Longest input the model reads in full; longer inputs would be truncated."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text costs, without the model's special tokens. For the WordPiece
        tokenizer of MiniLM, counts of whitespace-joined texts add up exactly."""
        ...

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """One row per text, in order. Implementations size their own requests. These are
        the stored (passage) vectors; see `QueryEmbedder` for models with a query side."""
        ...


class WrappedEmbedder:
    """An embedder around another (a cache, a counter, a cancellable batcher): the model's id,
    dimension, window, token counts, vectors, and its recall settings (`default_floor`,
    `subject_cosine`, read by pgmem.recall), each the inner embedder's unless a subclass says
    otherwise. No `embed_queries`: a wrapper with a query side defines its own."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dims(self) -> int:
        return self.inner.dims

    @property
    def max_input_tokens(self) -> int:
        return self.inner.max_input_tokens

    @property
    def default_floor(self) -> float:
        from pgmem.recall import floor_for

        return floor_for(self.inner)

    @property
    def subject_cosine(self) -> float | None:
        from pgmem.recall import subject_cosine_for

        return subject_cosine_for(self.inner)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return self.inner.embed(texts)


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder whose model embeds queries differently from passages (e5's "query: "
    and "passage: " prefixes). Optional: pgmem reaches it only through `embed_side`."""

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        """Query vectors, one row per text, comparable with `embed`'s passage vectors."""
        ...


def embed_side(embedder: Embedder, texts: Sequence[str], side: Side = "passage") -> FloatArray:
    """Vectors of `texts` on one side: the query side of a model that has one, else `embed`
    (symmetric models such as MiniLM and OpenAI's embed both sides alike). Each distinct text
    is sent once and its row repeated: a document of thousands of identical units (one
    transclusion repeated, bare code fences) cost the model, or a paid endpoint, one input
    each, and every copy of a text now gets the same vector."""
    run = embedder.embed_queries if side == "query" and isinstance(embedder, QueryEmbedder) else embedder.embed
    distinct = list(dict.fromkeys(texts))
    if len(distinct) == len(texts):
        return run(texts)
    return spread(run(distinct), distinct, texts, embedder.model_id)


def spread(vectors: object, distinct: Sequence[str], texts: Sequence[str], source: str) -> FloatArray:
    """The vectors of `distinct` (each text once, as `embed_side` and pgmem.aio send them) as one
    row per text of `texts`, in order."""
    rows = np.asarray(vectors)
    if rows.ndim != 2 or rows.shape[0] != len(distinct):
        raise EmbeddingError(f"{source}: expected {len(distinct)} vectors, got shape {rows.shape}")
    at = {t: i for i, t in enumerate(distinct)}
    out: FloatArray = rows[[at[t] for t in texts]]
    return out


def request_batches(
    texts: Sequence[str],
    *,
    max_inputs: int = MAX_INPUTS_PER_REQUEST,
    max_bytes: int = MAX_BYTES_PER_REQUEST,
) -> Iterator[tuple[int, int]]:
    """Yield (start, end) ranges of `texts` so no request exceeds either limit.

    A single text over `max_bytes` is an error here: the packer must have cut it."""
    if max_inputs < 1 or max_bytes < 1:
        raise ValueError("max_inputs and max_bytes must be positive")
    start = 0
    size = 0
    for i, text in enumerate(texts):
        n = len(text.encode("utf-8"))
        if n > max_bytes:
            raise EmbeddingError(f"input {i} is {n} bytes, over the {max_bytes}-byte request limit; pack it first")
        if i > start and (i - start >= max_inputs or size + n > max_bytes):
            yield start, i
            start, size = i, 0
        size += n
    if start < len(texts):
        yield start, len(texts)


def check_vectors(vectors: FloatArray, *, count: int, dims: int, source: str) -> FloatArray:
    """Refuse a response with the wrong count, wrong dimension, NaN/inf or zero vectors."""
    if vectors.ndim != 2 or vectors.shape[0] != count:
        raise EmbeddingError(f"{source}: expected {count} vectors, got shape {vectors.shape}")
    if vectors.shape[1] != dims:
        raise EmbeddingError(f"{source}: expected {dims} dimensions, got {vectors.shape[1]}")
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingError(f"{source}: response contains NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1)
    if np.any(norms == 0):
        raise EmbeddingError(f"{source}: response contains a zero vector")
    out: FloatArray = (vectors / norms[:, None]).astype(np.float32)
    return out
