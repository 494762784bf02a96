"""Helpers for the tests that try to break pgmem: a deterministic fake embedder, login
roles that are members of pgmem_app / pgmem_reader, and small turn builders."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from pgmem.embedders.base import FloatArray
from pgmem.turns import Turn

Conn = psycopg.Connection[tuple[object, ...]]
DIMS = 384

#: LOGIN members of the pgmem group roles; the tests connect as these (never as a superuser).
APP_LOGIN = "pgmem_test_app"
READER_LOGIN = "pgmem_test_reader"
#: A LOGIN role with no pgmem membership at all.
NOBODY_LOGIN = "pgmem_test_nobody"


def hash_vector(text: str, dims: int = DIMS, salt: bytes = b"") -> FloatArray:
    """A unit vector determined by the text (and salt) alone."""
    digest = hashlib.sha256(salt + text.encode("utf-8", "surrogatepass")).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    v = rng.standard_normal(dims).astype(np.float32)
    out: FloatArray = (v / np.linalg.norm(v)).astype(np.float32)
    return out


class HashEmbedder:
    """Fast, deterministic stand-in for a model: vectors from text hashes, one token per word."""

    def __init__(self, dims: int = DIMS, model_id: str = "test:hash") -> None:
        self._dims = dims
        self._model_id = model_id
        self.calls = 0

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def max_input_tokens(self) -> int:
        return 100_000

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.calls += 1
        out = np.zeros((len(texts), self._dims), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = hash_vector(t, self._dims)
        return out


def role_url(url: str, role: str) -> str:
    """`url` with its user replaced by `role` (trust or peer auth on the test server)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{role}@{host}" if host else f"{role}@"
    if parts.port:
        netloc += f":{parts.port}"
    query = parse_qs(parts.query)
    query.pop("user", None)
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, doseq=True), ""))


def ensure_login_roles(conn: Conn) -> None:
    """Create the test's LOGIN roles if missing (roles are cluster-wide; the migration created
    the pgmem group roles)."""
    for login, group in ((APP_LOGIN, "pgmem_app"), (READER_LOGIN, "pgmem_reader"), (NOBODY_LOGIN, None)):
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
        if not exists:
            # another test session may create it first
            with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(
                        sql.Identifier(login)
                    )
                )
        if group:
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(login)))


def connect_as(url: str, role: str, *, autocommit: bool = True) -> Conn:
    c = psycopg.connect(role_url(url, role), autocommit=autocommit)
    register_vector(c)
    return c


def maintenance_login(admin_conn: Conn, url: str, login: str) -> Conn:
    """A connection as `login`, a LOGIN member of pgmem_owner: the login that migrates pgmem and
    runs index maintenance (created if missing)."""
    ensure_login_roles(admin_conn)
    with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        admin_conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(login)))
    admin_conn.execute(sql.SQL("GRANT pgmem_owner TO {}").format(sql.Identifier(login)))
    return connect_as(url, login)


def graded_texts(rng: np.random.Generator, vocab: Sequence[str], n: int) -> list[str]:
    """n texts over vocab where word i is in about 0.5% + i / 100 of them: rare words and common
    ones, for the word side's tests."""
    return [" ".join(w for i, w in enumerate(vocab) if rng.random() < 0.005 + i / 100) or vocab[0] for _ in range(n)]


def __getattr__(name: str) -> Any:
    """`from tests.security_helpers import app_conn` keeps working: the fixture lives in
    tests/conftest.py now. Looked up lazily, so that importing this module (as the crash
    tests' writer processes do) never imports conftest, which starts the test server."""
    if name == "app_conn":
        from tests import conftest

        return conftest.app_conn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_turn(scope: str, thread: str, index: int, text: str, *, tool: str | None = None) -> Turn:
    """A user message, and optionally a tool call with its result."""
    messages: list[dict[str, object]] = [{"role": "user", "content": text}]
    if tool is not None:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": "c1", "content": tool})
    return Turn(scope, thread, index, None, tuple(messages))


WORDS = [
    "invoice",
    "shipment",
    "pallet",
    "freezer",
    "courier",
    "harbour",
    "ledger",
    "voucher",
    "contract",
    "tariff",
    "customs",
    "warehouse",
    "forklift",
    "manifest",
    "refund",
    "quota",
    "audit",
    "rebate",
    "broker",
    "cargo",
]


def sentence(rng: np.random.Generator, n: int = 12) -> str:
    return " ".join(str(w) for w in rng.choice(WORDS, size=n)) + "."


def slow_enabled(config: pytest.Config) -> bool:
    """Long variants run only when asked for: `-m slow` or PGMEM_SLOW=1."""
    expr = str(getattr(config.option, "markexpr", "") or "")
    return ("slow" in expr and "not slow" not in expr) or os.environ.get("PGMEM_SLOW") == "1"


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo_root()), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def package_before(added: str, dest: Path, old_head: str) -> Path:
    """The pgmem of the commit before the first one adding a file matching `added` (a git
    pathspec), laid out in `dest` as installed (pgmem.sql and pgmem.migrations inside the
    package), its last revision `old_head`; skips the test without this repository's history."""
    found = _git("log", "--diff-filter=A", "--format=%H", "--", added)
    commit = _git("rev-parse", "--verify", f"{found.splitlines()[-1]}^") if found else ""
    if not commit:
        pytest.skip("needs this repository's git history (the old package is taken from it)")
    archive = subprocess.run(
        ["git", "-C", str(repo_root()), "archive", commit, "pgmem", "sql", "migrations"],
        capture_output=True,
        check=True,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    for folder in ("sql", "migrations"):
        (dest / "pgmem" / folder).symlink_to(dest / folder)
    assert sorted(p.name for p in (dest / "migrations" / "versions").glob("*.py"))[-1].startswith(old_head)
    return dest
