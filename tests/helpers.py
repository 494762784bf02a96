"""Small test helpers shared by several test modules."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np

from pgmem.embedders.base import Embedder, FloatArray, WrappedEmbedder


class CountingEmbedder(WrappedEmbedder):
    """Wraps a real embedder and counts calls and inputs (to prove 0 calls on re-ingest)."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.calls = 0
        self.inputs = 0

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.calls += 1
        self.inputs += len(texts)
        return self.inner.embed(texts)


def vec(value: object) -> FloatArray:
    """A pgvector value (numpy array or pgvector.Vector) as a float32 numpy array."""
    to_numpy = getattr(value, "to_numpy", None)
    arr = to_numpy() if to_numpy is not None else value
    out: FloatArray = np.asarray(arr, dtype=np.float32)
    return out


def sent(trace: Path, *messages: str) -> int:
    """How many of these protocol messages (Sync, Flush, Query...) the client sent, in a libpq
    trace ("F" lines): each is a wait for the server. A Flush right after a Sync is not counted:
    the client asks for what the Sync already brings."""
    fields = [line.split("\t") for line in trace.read_text().splitlines()]
    out = [f[3].split(" ")[0].strip() for f in fields if len(f) > 3 and f[1] == "F"]
    return sum(1 for i, m in enumerate(out) if m in messages and not (m == "Flush" and i and out[i - 1] == "Sync"))


def send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
    """One JSON answer of a test's HTTP endpoint: the status, the payload, extra headers."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(payload)


class InFlight:
    """Records, from inside a concurrency test's workers, which calls ran at the same time: a
    test whose workers ran one after another proves nothing, so it asserts they met. Each worker
    wraps the call that must race in `with flight("write"):` (a kind per sort of call); then
    `flight.most` is the most calls ever in flight at once, and `flight.met` holds each pair of
    kinds, sorted, seen in flight together (("write", "write"): two writes at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now: Counter[str] = Counter()
        self.most = 0
        self.met: set[tuple[str, str]] = set()

    @contextlib.contextmanager
    def __call__(self, kind: str = "call") -> Iterator[None]:
        with self._lock:
            self._now[kind] += 1
            self.most = max(self.most, sum(self._now.values()))
            # Two calls overlap exactly when one starts while the other runs: seen here.
            self.met |= {(min(k, kind), max(k, kind)) for k, n in self._now.items() if n > (k == kind)}
        try:
            yield
        finally:
            with self._lock:
                self._now[kind] -= 1
