"""Shared plumbing of the evaluation suites: a throwaway database, an on-disk
embedding cache, and progress on stderr."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sqlite3
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

from pgmem.db import with_database
from pgmem.embedders.base import Embedder, FloatArray, QueryEmbedder, Side, WrappedEmbedder, embed_side
from pgmem.errors import InputError
from pgmem.sqlfiles import MIGRATIONS_DIR, SQL_DIR, InstallParams

#: The prefix of the migrated databases that evaluation runs copy (_migrated_template).
TEMPLATE_PREFIX = "pgmem_eval_template_"
MAKING_PREFIX = "pgmem_eval_making_"
#: The advisory lock (in the server's `postgres` database) under which templates are made,
#: dropped and copied.
TEMPLATE_LOCK = int.from_bytes(hashlib.sha256(b"pgmem eval template").digest()[:8], "big", signed=True)


def _params_tag(params: InstallParams) -> str:
    """The install parameters as a short digest: the first part of a template's name, so runs
    with other parameters (another model's dimension) keep their own templates."""
    return hashlib.sha256(repr(params).encode()).hexdigest()[:8]


def _schema_key(params: InstallParams) -> str:
    """What a migration from nothing makes: the parameters' tag, then a short digest of this
    package's SQL (every file of the shipped sql/ folder) and its revisions."""
    digest = hashlib.sha256()
    for folder in (SQL_DIR, MIGRATIONS_DIR / "versions"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in (".sql", ".py"):
                digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{_params_tag(params)}_{digest.hexdigest()[:16]}"


def _migrated_template(admin: psycopg.Connection[tuple[object, ...]], server_url: str, params: InstallParams) -> str:
    """The name of a database migrated by this package with `params`, made once a server (and
    once again after any change to the SQL): a run copies it (CREATE DATABASE ... TEMPLATE, a
    fraction of a second) instead of migrating a fresh database (seconds, every run). The caller
    holds TEMPLATE_LOCK and copies it under the lock, so no run copies a half-made template or
    one another package's run is dropping. Made under another name and renamed once migrated
    (a run stopped meanwhile leaves no template); other packages' templates of the same
    parameters, and what a killed run was making, are dropped then (one in use is left)."""
    from pgmem.migrate import upgrade

    name = TEMPLATE_PREFIX + _schema_key(params)
    found = admin.execute(
        "SELECT datname FROM pg_catalog.pg_database WHERE datname LIKE %s OR datname LIKE %s",
        (TEMPLATE_PREFIX + "%", MAKING_PREFIX + "%"),
    ).fetchall()
    if (name,) in found:
        return name
    ours = TEMPLATE_PREFIX + _params_tag(params) + "_"
    for (stale,) in found:
        stale = str(stale)
        # This package's parameters from another package, a killed run's half-made one, or
        # one named before templates carried their parameters' tag; never another's parameters
        # (two suites at once on one server would drop each other's).
        if stale.startswith(TEMPLATE_PREFIX) and not stale.startswith(ours) and "_" in stale[len(TEMPLATE_PREFIX) :]:
            continue
        with contextlib.suppress(psycopg.Error):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(str(stale))))
    making = f"{MAKING_PREFIX}{secrets.token_hex(4)}"
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(making)))
    try:
        upgrade(with_database(server_url, making), params=params)
        admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(making), sql.Identifier(name)))
    except BaseException:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(making)))
        raise
    return name


@contextmanager
def temporary_database(server_url: str, params: InstallParams) -> Iterator[str]:
    """A fresh database on the server of `server_url`, migrated (a copy of _migrated_template),
    yielding its URL; dropped afterwards (even on error)."""
    name = f"pgmem_eval_{secrets.token_hex(4)}"
    admin = with_database(server_url, "postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute("SELECT pg_catalog.pg_advisory_lock(%s)", (TEMPLATE_LOCK,))
        try:
            template = _migrated_template(c, server_url, params)
            c.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
        finally:
            c.execute("SELECT pg_catalog.pg_advisory_unlock(%s)", (TEMPLATE_LOCK,))
    url = with_database(server_url, name)
    try:
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class CachedEmbedder(WrappedEmbedder):
    """Wraps an Embedder with a content-addressed cache: on disk (sqlite, one file per model
    and dimension, keyed by the text's sha256), so a re-run of a suite does not re-embed, and
    in memory for the run, so every distinct text is sent to the model once across all
    methods and suites of a process. `cache_dir=None` keeps the memory cache only. Token
    counts are cached too (the piece packer asks for them once per method). Counts what it
    really sent (`embedded`) and what it served from a cache (`cached`).

    For a model with a query side (`QueryEmbedder`, e.g. e5) query vectors live in their own
    table and memo, so a passage vector is never served for a query of the same text; for
    a symmetric model both sides share one cache."""

    def __init__(self, inner: Embedder, cache_dir: Path | None) -> None:
        super().__init__(inner)
        key = hashlib.sha256(f"{inner.model_id}|{inner.dims}".encode()).hexdigest()[:16]
        self.path: Path | None = None
        self._db: sqlite3.Connection | None = None
        self.sides = isinstance(inner, QueryEmbedder)
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            self.path = cache_dir / f"embeddings-{key}.sqlite"
            # The store phase runs on several threads (longmemeval.evaluate_threads); the lock
            # in `_embed` lets one thread at a time use the file.
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS v (k BLOB PRIMARY KEY, vec BLOB NOT NULL)")
            if self.sides:
                self._db.execute("CREATE TABLE IF NOT EXISTS q (k BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        memo: dict[bytes, bytes] = {}
        self._memo: dict[Side, dict[bytes, bytes]] = {"passage": memo, "query": {} if self.sides else memo}
        self._tokens: dict[str, int] = {}
        self._lock = threading.Lock()
        self.embedded = 0
        self.cached = 0

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        todo = list(dict.fromkeys(t for t in texts if t not in self._tokens))
        if todo:  # two threads may count the same text: both get the same count
            self._tokens.update(zip(todo, self.inner.count_tokens(todo), strict=True))
        return [self._tokens[t] for t in texts]

    def embed(self, texts: Sequence[str], *, chunk: int = 1024) -> FloatArray:
        """Passage vectors for `texts`; texts in neither cache go to the model once each,
        `chunk` at a time (saved to disk after each chunk, so an interrupted run keeps its work)."""
        return self._embed(texts, "passage", chunk)

    def embed_queries(self, texts: Sequence[str], *, chunk: int = 1024) -> FloatArray:
        """Query vectors for `texts`, cached apart from passages when the model has sides."""
        return self._embed(texts, "query" if self.sides else "passage", chunk)

    def _embed(self, texts: Sequence[str], side: Side, chunk: int) -> FloatArray:
        with self._lock:
            return self._embed_locked(texts, side, chunk)

    def _embed_locked(self, texts: Sequence[str], side: Side, chunk: int) -> FloatArray:
        table = "q" if side == "query" else "v"
        keys = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in texts]
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        found = self._memo[side]
        uniq = [k for k in dict.fromkeys(keys) if k not in found]
        db = self._db
        if db is not None:
            for i in range(0, len(uniq), 500):
                part = uniq[i : i + 500]
                q = f"SELECT k, vec FROM {table} WHERE k IN ({','.join('?' * len(part))})"
                found.update(dict(db.execute(q, part).fetchall()))
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            first: dict[bytes, int] = {}
            for i in missing:
                first.setdefault(keys[i], i)
            # Sorted by length: the model's batches then pad little.
            todo = sorted(first, key=lambda k: len(texts[first[k]]))
            for start in range(0, len(todo), chunk):
                if len(todo) > chunk:
                    progress(f"embedding: {start}/{len(todo)} new texts")
                ks = todo[start : start + chunk]
                vecs = embed_side(self.inner, [texts[first[k]] for k in ks], side)
                rows = [(k, vecs[j].astype(np.float32).tobytes()) for j, k in enumerate(ks)]
                if self._db is not None:
                    self._db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", rows)
                    self._db.commit()
                found.update(rows)
            self.embedded += len(todo)
        self.cached += len(texts) - len(missing)
        for i, k in enumerate(keys):
            out[i] = np.frombuffer(found[k], dtype=np.float32)
        return out


def progress(msg: str) -> None:
    """Progress lines go to stderr, so `--json` output on stdout stays one object."""
    print(msg, file=sys.stderr, flush=True)


#: The halves of a development set: `tune` chooses settings, `confirm` reports them.
SPLITS = ("all", "tune", "confirm")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise InputError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")


def half(key: str) -> str:
    """The fixed half a question belongs to, `tune` or `confirm`: the first bit of the sha256 of
    its id (LongMemEval's question_id; toolqa's trajectory and question; a document question's
    text). Fixed forever, so a setting chosen on `tune` is reported on questions it never saw."""
    return "tune" if hashlib.sha256(f"pgmem-split:{key}".encode()).digest()[0] < 128 else "confirm"


def in_split(key: str, split: str) -> bool:
    return split == "all" or half(key) == split


def check_output(path: Path, what: str, *, folder: bool = False) -> None:
    """An InputError of one line unless `path` can be written (a file, or with `folder` a
    folder): what is there is of that kind, and the first folder above it that exists is one
    this process may write in (the missing ones are made)."""
    if path.exists() and path.is_dir() != folder:
        raise InputError(f"{what} {path}: {'not a folder' if folder else 'a folder, not a file'}")
    above = path if folder and path.is_dir() else path.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise InputError(f"{what} {path}: {above} is not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise InputError(f"{what} {path}: cannot write in {above}")
