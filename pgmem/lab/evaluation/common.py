"""Shared plumbing of the evaluation suites: a throwaway database, an on-disk
embedding cache, and progress on stderr."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

from pgmem.db import with_database
from pgmem.embedders.base import Embedder, FloatArray
from pgmem.sqlfiles import InstallParams


@contextmanager
def temporary_database(server_url: str, params: InstallParams) -> Iterator[str]:
    """Create a fresh database on the server of `server_url`, migrate it, yield its URL,
    and drop it afterwards (even on error)."""
    from pgmem.migrate import upgrade

    name = f"pgmem_eval_{secrets.token_hex(4)}"
    admin = with_database(server_url, "postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server_url, name)
    try:
        upgrade(url, params=params)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class CachedEmbedder:
    """Wraps an Embedder with an on-disk cache (sqlite, one file per model and dimension),
    so a re-run of a suite does not re-embed. Counts what it really sent."""

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        cache_dir.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(f"{inner.model_id}|{inner.dims}".encode()).hexdigest()[:16]
        self.path = cache_dir / f"embeddings-{key}.sqlite"
        self._db = sqlite3.connect(self.path)
        self._db.execute("CREATE TABLE IF NOT EXISTS v (k BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        self.embedded = 0
        self.cached = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dims(self) -> int:
        return self.inner.dims

    @property
    def max_input_tokens(self) -> int:
        return self.inner.max_input_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        keys = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in texts]
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        found: dict[bytes, bytes] = {}
        uniq = list(dict.fromkeys(keys))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i : i + 500]
            q = f"SELECT k, vec FROM v WHERE k IN ({','.join('?' * len(chunk))})"
            found.update(dict(self._db.execute(q, chunk).fetchall()))
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            todo = list(dict.fromkeys(keys[i] for i in missing))
            first: dict[bytes, int] = {}
            for i in missing:
                first.setdefault(keys[i], i)
            vecs = self.inner.embed([texts[first[k]] for k in todo])
            self._db.executemany(
                "INSERT OR REPLACE INTO v VALUES (?, ?)",
                [(k, vecs[j].astype(np.float32).tobytes()) for j, k in enumerate(todo)],
            )
            self._db.commit()
            for j, k in enumerate(todo):
                found[k] = vecs[j].astype(np.float32).tobytes()
            self.embedded += len(todo)
        self.cached += len(texts) - len(missing)
        for i, k in enumerate(keys):
            out[i] = np.frombuffer(found[k], dtype=np.float32)
        return out


def progress(msg: str) -> None:
    """Progress lines go to stderr, so `--json` output on stdout stays one object."""
    print(msg, file=sys.stderr, flush=True)
