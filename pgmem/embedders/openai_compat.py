"""An OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Azure, vLLM, Ollama, TEI, LiteLLM).

Requests are sized before sending; 429, 5xx, timeouts, dropped connections and
malformed or short responses are retried with exponential backoff that never waits
less than the server's `Retry-After` (one over a minute fails at once); any other refusal
(400, 401, 403, 404...) fails at once. The API key never appears in an error message."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from pgmem.embedders.base import (
    MAX_BYTES_PER_REQUEST,
    MAX_INPUTS_PER_REQUEST,
    FloatArray,
    check_vectors,
    request_batches,
)
from pgmem.errors import ConfigError, EmbeddingError
from pgmem.extras import require

log = logging.getLogger(__name__)

#: text-embedding-3 reads at most 8,192 tokens per input.
OPENAI_MAX_TOKENS = 8191
#: The longest `Retry-After` waited for (the OpenAI SDK's own limit); a longer one fails at once.
MAX_RETRY_AFTER = 60.0


class OpenAIEmbedder:
    """Embeds through any server that speaks the OpenAI embeddings protocol."""

    def __init__(
        self,
        *,
        model: str = "text-embedding-3-small",
        dimensions: int,
        api_key: str | None,
        base_url: str | None = None,
        max_inputs: int = MAX_INPUTS_PER_REQUEST,
        max_bytes: int = MAX_BYTES_PER_REQUEST,
        max_attempts: int = 8,
        timeout: float = 60.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        max_input_tokens: int = OPENAI_MAX_TOKENS,
        send_dimensions: bool = True,
    ) -> None:
        openai = require("openai", "openai", "the OpenAI-compatible embedder")
        if not api_key:
            raise ConfigError("OPENAI_API_KEY is not set (needed when PGMEM_EMBEDDER=openai)")
        if dimensions <= 0:
            raise ConfigError(f"dimensions must be positive, got {dimensions}")
        # Neither is ever printed: the key is a secret, and a URL may carry a password.
        if any(not " " <= c <= "~" for c in api_key):
            raise ConfigError("OPENAI_API_KEY contains a character an HTTP header cannot carry (a line break?)")
        if base_url is not None:
            _check_base_url(base_url)
        self._timeout = timeout
        self._max_response_bytes = max_inputs * (dimensions * 32 + 256) + 65_536  # floats as JSON text
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            # A compressed body could inflate past any limit counted on the wire.
            default_headers={"Accept-Encoding": "identity"},
            http_client=openai.DefaultHttpxClient(event_hooks={"response": [self._bound_body]}),
        )
        self._model = model
        self._dims = dimensions
        self._max_inputs = max_inputs
        self._max_bytes = max_bytes
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._sleep = sleep
        self._max_tokens = max_input_tokens
        self._send_dimensions = send_dimensions
        self.requests_sent = 0

    @property
    def model_id(self) -> str:
        return f"openai:{self._model}"

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def max_input_tokens(self) -> int:
        return self._max_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        # A BPE token covers at least one byte, so bytes bound tokens from above.
        return [len(t.encode("utf-8")) for t in texts]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        out = np.zeros((len(texts), self._dims), dtype=np.float32)
        for start, end in request_batches(texts, max_inputs=self._max_inputs, max_bytes=self._max_bytes):
            out[start:end] = self._request(list(texts[start:end]))
        return out

    def _bound_body(self, response: Any) -> None:
        """httpx's timeout is per read: a body dripped a byte at a time, or one that never
        ends, would be read for ever. Every body (errors' too) must arrive within `timeout`
        of its headers and within the size of the largest real answer, uncompressed."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise EmbeddingError(f"the response is {encoding[:20]}-encoded though identity was asked for")
        response.stream = _bounded(
            response.stream,
            deadline=time.monotonic() + self._timeout,
            timeout=self._timeout,
            max_bytes=self._max_response_bytes,
        )

    def _request(self, batch: list[str]) -> FloatArray:
        import openai

        last: Exception | None = None
        for attempt in range(1, self._max_attempts + 1):
            retry_after = 0.0
            try:
                self.requests_sent += 1
                if self._send_dimensions:
                    resp = self._client.embeddings.create(model=self._model, input=batch, dimensions=self._dims)
                else:
                    resp = self._client.embeddings.create(model=self._model, input=batch)
                vectors = _in_input_order(resp.data, len(batch))
                return check_vectors(vectors, count=len(batch), dims=self._dims, source=self.model_id)
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status != 429 and status < 500:
                    raise EmbeddingError(
                        f"{self.model_id}: request refused with HTTP {status} ({_safe_message(exc)}); not retried"
                    ) from None
                retry_after = _retry_after(exc.response.headers.get("retry-after"))
                if retry_after > MAX_RETRY_AFTER:
                    # Waiting less would break the server's rule; waiting longer is a hang.
                    raise EmbeddingError(
                        f"{self.model_id}: HTTP {status} asking to wait {retry_after:.0f} s "
                        f"(Retry-After), over {MAX_RETRY_AFTER:.0f} s; not retried"
                    ) from None
                last = EmbeddingError(f"{self.model_id}: HTTP {status}")
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                last = EmbeddingError(f"{self.model_id}: {type(exc).__name__}")
            except (
                EmbeddingError,
                ValueError,
                TypeError,
                KeyError,
                AttributeError,
                RecursionError,
                OverflowError,
            ) as exc:
                # Wrong count or dimension, NaN, or a body that is not an embeddings response
                # (JSON nested too deep to parse; an integer the SDK cannot make a float).
                last = EmbeddingError(f"{self.model_id}: unusable response: {exc}")
            except openai.APIResponseValidationError as exc:
                last = EmbeddingError(f"{self.model_id}: malformed response: {type(exc).__name__}")
            if attempt == self._max_attempts:
                break
            backoff = min(self._backoff_cap, self._backoff_base * 2 ** (attempt - 1))
            wait = max(retry_after, backoff * (0.5 + random.random() / 2))
            log.warning("%s; retry %d in %.2fs", last, attempt, wait)
            self._sleep(wait)
        raise EmbeddingError(f"{last} (gave up after {self._max_attempts} attempts)")


def _check_base_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port out of range, a broken IPv6 literal
        ok = False
    if not ok:
        # Named only when it is a known scheme: what stands before "://" may be a user name
        # and password ("user:pass://...").
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        known = scheme in ("ftp", "ftps", "file", "ws", "wss", "postgres", "postgresql", "unix")
        raise ConfigError(
            f"OPENAI_BASE_URL must be an http(s) URL with a host, such as https://api.openai.com/v1; "
            f"got {f'a {scheme} URL' if known else 'one with another scheme' if scheme else 'one without a scheme'}"
        )


def _bounded(stream: Any, *, deadline: float, timeout: float, max_bytes: int) -> Any:
    """`stream`, a response body of httpx (or the SDK's httpx2), cut off with an
    `EmbeddingError` past `deadline` or `max_bytes`."""
    # The client reads only a stream of its own library's SyncByteStream class.
    base = next((c for c in type(stream).__mro__ if c.__name__ == "SyncByteStream"), None)
    if base is None:
        return stream

    class Bounded(base):  # type: ignore[misc,valid-type]
        def __iter__(self) -> Iterator[bytes]:
            size = 0
            for chunk in stream:
                size += len(chunk)
                if size > max_bytes:
                    raise EmbeddingError(f"the response is over {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise EmbeddingError(f"the response took over {timeout:g} s")
                yield chunk

        def close(self) -> None:
            stream.close()

    return Bounded()


def _in_input_order(data: object, count: int) -> FloatArray:
    """The response's vectors in input order. Each item's `index` must be an int naming one
    input, every input exactly once, and each embedding a flat list of numbers: sorting by a
    duplicated, missing or string index would hand one input's vector to another."""
    if not isinstance(data, list):
        raise EmbeddingError(f"'data' is a {type(data).__name__}, not a list")
    by_index: dict[int, object] = {}
    for item in data:
        index = getattr(item, "index", None)
        if type(index) is not int or not 0 <= index < count or index in by_index:
            raise EmbeddingError(f"an index must be an int in 0..{count - 1}, once each; got {repr(index)[:40]}")
        by_index[index] = getattr(item, "embedding", None)
    if len(by_index) != count:
        raise EmbeddingError(f"expected {count} embeddings, got {len(by_index)}")
    rows = [np.asarray(by_index[i]) for i in range(count)]
    if any(r.ndim != 1 or r.dtype.kind not in "iuf" for r in rows):
        raise EmbeddingError("an embedding is not a list of numbers")
    if len({len(r) for r in rows}) > 1:
        raise EmbeddingError(f"embeddings of different lengths: {sorted({len(r) for r in rows})[:5]}")
    return np.array(rows, dtype=np.float32)


def _retry_after(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return 0.0


def _safe_message(exc: Exception) -> str:
    """The server's error message, with anything that looks like a key removed."""
    import re

    text = str(getattr(exc, "message", "") or "")[:300]
    return re.sub(r"(sk-|Bearer\s+)[A-Za-z0-9_\-\.]+", r"\1***", text)
