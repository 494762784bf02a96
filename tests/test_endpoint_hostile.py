"""A hostile OpenAI-compatible endpoint: answers that look like embeddings but are not, waits
it asks for that never end, bodies that never end. Each is one `EmbeddingError` (never
another exception, never a hang), and an ingest that meets one stores nothing."""

from __future__ import annotations

import contextlib
import gzip
import json
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler

import pytest

from pgmem.embedders.openai_compat import OpenAIEmbedder
from pgmem.errors import ConfigError, EmbeddingError
from pgmem.ingest import ingest_turns
from tests.helpers import send
from tests.security_helpers import DIMS, Conn, make_turn
from tests.test_embedders import Script, Writer, endpoint, fake_vector

__all__ = ["endpoint"]

Endpoint = tuple[str, Script]


def embedder(url: str, sleeps: list[float], *, dims: int = 4, timeout: float = 2.0, **kw: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        dimensions=dims,
        api_key="sk-test-SECRET123",
        base_url=url,
        sleep=sleeps.append,
        max_attempts=2,
        timeout=timeout,
        **kw,  # type: ignore[arg-type]
    )


def response(items: Sequence[Mapping[str, object]]) -> bytes:
    return json.dumps({"object": "list", "data": items, "model": "m", "usage": {}}).encode()


def indexed(indexes: list[object], dims: int = 4) -> bytes:
    return response(
        [{"object": "embedding", "index": i, "embedding": fake_vector(str(n), dims)} for n, i in enumerate(indexes)]
    )


def with_values(first: object) -> bytes:
    return response([{"index": 0, "embedding": first}, {"index": 1, "embedding": [0.5, 0.5, 0.5, 0.5]}])


BAD_SHAPES = {
    "index twice": indexed([0, 0]),
    "index missing": indexed([0, 2]),
    "index a string": indexed(["1", "0"]),
    "index a bool": indexed([True, False]),
    "index negative": indexed([-1, 0]),
    "embedding of strings": with_values(["0.5", "0.1", "0.2", "0.3"]),
    "an integer beyond float": b'{"data": [{"index": 0, "embedding": [1' + b"0" * 400 + b", 1, 2, 3]}, "
    b'{"index": 1, "embedding": [1, 2, 3, 4]}]}',
    "JSON nested 100,000 deep": b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("body", BAD_SHAPES.values(), ids=BAD_SHAPES.keys())
def test_a_response_that_is_not_one_embedding_per_input_is_refused(endpoint: Endpoint, body: bytes) -> None:
    # Before: indexes twice, missing, strings or bools were sorted into place and their
    # vectors returned for the wrong inputs; a huge integer raised OverflowError and deep
    # JSON RecursionError, a traceback out of `pgmem ingest`.
    url, script = endpoint
    script.queue = [(200, {}, body)] * 2
    sleeps: list[float] = []
    with pytest.raises(EmbeddingError, match="unusable response") as err:
        embedder(url, sleeps).embed(["a", "b"])
    assert "gave up after 2 attempts" in str(err.value)
    assert len(script.requests) == 2


def test_string_indexes_past_ten_are_refused_not_sorted_as_text(endpoint: Endpoint) -> None:
    url, script = endpoint
    script.queue = [(200, {}, indexed([str(i) for i in range(12)]))] * 2
    with pytest.raises(EmbeddingError, match="index"):
        embedder(url, []).embed([str(i) for i in range(12)])


def test_items_out_of_order_are_put_back_in_input_order(endpoint: Endpoint) -> None:
    url, script = endpoint
    items = [{"index": i, "embedding": fake_vector(str(i), 4)} for i in (2, 0, 1)]
    script.queue = [(200, {}, response(items))]
    out = embedder(url, []).embed(["x", "y", "z"])
    for i in range(3):
        assert float(out[i] @ fake_vector(str(i), 4)) > 0.9999


def test_an_ingest_that_meets_a_duplicated_index_stores_nothing(
    app_conn: Conn, admin_conn: Conn, endpoint: Endpoint
) -> None:
    url, script = endpoint

    def duplicated(handler: BaseHTTPRequestHandler, body: dict[str, object]) -> None:
        texts = body["input"]
        assert isinstance(texts, list)
        items = [{"index": i, "embedding": fake_vector(str(t), DIMS)} for i, t in enumerate(texts)]
        items[-1]["index"] = 0
        send(handler, 200, response(items))

    turns = [make_turn("s", "t", i, f"turn {i} about the export and the dogs") for i in range(3)]
    script.queue = [duplicated] * 2
    with pytest.raises(EmbeddingError, match="unusable response"):
        ingest_turns(app_conn, turns, embedder(url, [], dims=DIMS))
    assert len(script.requests) == 2
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (0,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)


@pytest.mark.parametrize("value", ["86400", "inf", "1e400", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_a_retry_after_past_a_minute_fails_at_once(endpoint: Endpoint, value: str) -> None:
    # Before: the client slept what the server asked: a day, 74 years, or (inf)
    # OverflowError out of time.sleep.
    url, script = endpoint
    script.queue = [(429, {"Retry-After": value}, None), (503, {"Retry-After": value}, None)]
    sleeps: list[float] = []
    with pytest.raises(EmbeddingError, match=r"HTTP 429 asking to wait .* over 60 s; not retried"):
        embedder(url, sleeps).embed(["a"])
    assert len(script.requests) == 1 and sleeps == []


@pytest.mark.parametrize("value", ["-5", "soon", "nan", "", "60"])
def test_a_retry_after_that_is_no_wait_or_a_minute_is_retried(endpoint: Endpoint, value: str) -> None:
    url, script = endpoint
    script.queue = [(503, {"Retry-After": value}, None)]
    sleeps: list[float] = []
    assert embedder(url, sleeps).embed(["a"]).shape == (1, 4)
    assert len(script.requests) == 2 and len(sleeps) == 1
    assert 0 < sleeps[0] <= 60


def drip(handler: BaseHTTPRequestHandler, body: dict[str, object]) -> None:
    """Headers at once, then a body of a byte every 0.1 s (each read well inside the timeout)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    with contextlib.suppress(OSError):
        for _ in range(100_000):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)


def endless(handler: BaseHTTPRequestHandler, body: dict[str, object]) -> None:
    """A chunked body that never ends, as fast as the client reads it."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    chunk = b" " * 65536
    with contextlib.suppress(OSError):
        while True:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def huge(handler: BaseHTTPRequestHandler, body: dict[str, object]) -> None:
    """A 200 MB body of valid JSON: whitespace, then a real answer."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(200 * 2**20 + len(indexed([0]))))
    handler.end_headers()
    with contextlib.suppress(OSError):
        for _ in range(200):
            handler.wfile.write(b" " * 2**20)
        handler.wfile.write(indexed([0]))


def gzip_bomb(handler: BaseHTTPRequestHandler, body: dict[str, object]) -> None:
    """Gzip sent although identity was asked for: 64 KB that would inflate to 64 MB."""
    payload = gzip.compress(b" " * 64 * 2**20 + indexed([0]), compresslevel=1)
    send(handler, 200, payload, {"Content-Encoding": "gzip"})


@pytest.mark.parametrize("answer", [drip, endless, huge, gzip_bomb], ids=lambda f: f.__name__)
def test_a_body_too_slow_too_big_or_compressed_is_cut_off(endpoint: Endpoint, answer: Writer) -> None:
    # Before: httpx's timeout is per read, so the drip (a byte each 0.1 s, timeout 1 s) and
    # the endless body hung pgmem for good, the endless one growing in memory; a 200 MB or
    # inflating body was read whole. The message says which bound cut it off.
    url, script = endpoint
    script.queue = [answer, answer]
    with pytest.raises(
        EmbeddingError, match=r"unusable response: the response (took over 1 s|is over \d+ bytes|is gzip)"
    ):
        embedder(url, [], timeout=1.0).embed(["a"])
    assert len(script.requests) == 2
    assert script.encodings[0] == "identity"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://user:hunter2@h/v1",
        "user:hunter2@127.0.0.1:8080/v1",
        "file:///etc/passwd",
        "http://user:hunter2@/v1",
        "user:hunter2://h/v1",
    ],
)
def test_a_base_url_that_is_not_http_is_a_config_error_without_its_credentials(url: str) -> None:
    # Before: every request failed as "APIConnectionError", retried for ~50 s.
    with pytest.raises(ConfigError, match=r"OPENAI_BASE_URL must be an http\(s\) URL with a host") as err:
        OpenAIEmbedder(dimensions=4, api_key="sk-test", base_url=url)
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize("key", ["sk-SECRET\nX-Evil: 1", "sk-SECRET\r", "sk-SECRETé", "sk-SECRET\x00"])
def test_a_key_that_cannot_be_a_header_is_a_config_error_without_the_key(key: str) -> None:
    # Before: "APIConnectionError" (a line break) or "unusable response: 'ascii' codec can't
    # encode..." (non-ASCII), retried for ~50 s.
    with pytest.raises(ConfigError, match="OPENAI_API_KEY contains a character") as err:
        OpenAIEmbedder(dimensions=4, api_key=key, base_url="http://127.0.0.1:9/v1")
    assert "SECRET" not in str(err.value)


def test_credentials_in_a_base_url_never_reach_an_error(endpoint: Endpoint) -> None:
    url, script = endpoint
    with_creds = url.replace("http://", "http://user:hunter2@")
    script.queue = [(500, {}, None)] * 2
    with pytest.raises(EmbeddingError) as err:
        embedder(with_creds, []).embed(["a"])
    assert "hunter2" not in str(err.value) and "hunter2" not in repr(err.value)
