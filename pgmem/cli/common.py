"""Shared CLI plumbing: settings, connections, embedders, progress, text safe to print."""

from __future__ import annotations

import json
import re
import sys
import time

import psycopg

from pgmem.config import Settings
from pgmem.db import check_model, connect, database_url
from pgmem.embedders import Embedder, from_settings


def settings() -> Settings:
    return Settings.from_env()


#: What `shown` escapes: the C0 controls but tab and newline, DEL, the C1 controls, and the
#: bidirectional embeddings, overrides and isolates (U+202A to U+202E, U+2066 to U+2069).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """`text` as the CLI prints it for a person. Stored text was written by someone else (a
    tool's result, a web page, a document) and must not act on the reader's terminal: every
    character that would (ESC starting a CSI, an OSC 8 link or an OSC 52 clipboard write; the
    one-character C1 CSI U+009B; a carriage return or backspace overwriting the line; a bidi
    override reordering it) is written as Python's repr writes it: `\\x1b`, `\\r`, `\\x9b`, `\\u202e`.
    Newlines and tabs are kept: the caller lays out lines. A backslash is kept as it is, so
    paths and LaTeX read as stored (the exact text is the --json output)."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]  # \r, \x1b, \x9b, \u202e: no quote or backslash is matched


def json_line(value: object) -> str:
    """`value` as the CLI's --json prints it: JSON with text as written (ensure_ascii off), but
    every character `shown` escapes written as a JSON escape (`\u009b`, `\u202e`; json.dumps
    escapes C0 itself), so the output parses to the exact text and never acts on a terminal."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def server_url(s: Settings | None = None) -> str:
    """DATABASE_URL, or the embedded server's URL when it is running. No command but `pgmem db
    start` starts the embedded server: one started behind a read (with shared_buffers sized for
    the machine) would stay running unseen, so a stopped server is one clear line instead."""
    s = s or settings()
    if s.database_url:
        return s.database_url
    from pgmem import server
    from pgmem.errors import ServerError

    if not server.status(s.pgdata).running:
        raise ServerError(
            f"the embedded server in {s.pgdata} is not running: run `pgmem db start` (or set DATABASE_URL)"
        )
    return database_url(s)  # the running server's URL (its pgmem database created if missing)


def open_conn(s: Settings | None = None) -> psycopg.Connection[tuple[object, ...]]:
    return connect(server_url(s))


def embedder_for(
    conn: psycopg.Connection[tuple[object, ...]], plane: str = "piece", s: Settings | None = None
) -> Embedder:
    """The configured embedder, checked against the installed schema's dimensions."""
    e = from_settings(s or settings(), plane=plane)
    check_model(conn, plane=plane, model_id=e.model_id, dims=e.dims)
    return e


class Progress:
    """A one-line progress bar on stderr: done/total, rate, ETA."""

    def __init__(self, what: str, unit: str = "pieces") -> None:
        self.what = what
        self.unit = unit
        self.start = time.monotonic()
        self.last = 0.0
        self.tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int, units: int) -> None:
        """`total` < 0: not known yet (a file read as it is stored): no bar and no ETA."""
        now = time.monotonic()
        if now - self.last < 0.5 and (done < total or total < 0):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = units / elapsed
        if total < 0:
            line = f"{self.what} {done} read · {units} {self.unit} · {rate:.1f} {self.unit}/s"
            print(line, end="\r" if self.tty else "\n", file=sys.stderr, flush=True)
            return
        eta = (total - done) * elapsed / done if done else 0.0
        width = 24
        filled = int(width * done / total) if total else width
        bar = "#" * filled + "-" * (width - filled)
        line = f"{self.what} [{bar}] {done}/{total} · {units} {self.unit} · {rate:.1f} {self.unit}/s · ETA {eta:.0f}s"
        end = "\r" if self.tty and done < total else "\n"
        if self.tty or done >= total or now - self.start > 0:
            print(line, end=end, file=sys.stderr, flush=True)
