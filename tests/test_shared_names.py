"""Writers sharing a name (rt59): one writer must not overwrite, take over or forget what another
writer of the same scope stored under that name.

- The MCP server's `remember` gives a note the thread's next index, read under an advisory lock
  that only MCP servers take. An application's put_turn (or `pgmem ingest`) of that thread
  storing a turn at that index between the read and the write saw its turn replaced by the note:
  the application's messages were lost. The note now takes the index after.

Real Postgres, the app login, the hash embedder (no retrieval quality is asserted)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest

from pgmem import ingest_turns
from pgmem.db import connect
from tests.security_helpers import HashEmbedder, make_turn

Conn = psycopg.Connection[tuple[object, ...]]
EMB = HashEmbedder()


class _WriterDuringEmbed(HashEmbedder):
    """The hash embedder, running `hook` (another client's write, committed) before its first
    embedding: between the note's read of the next index and its write."""

    def __init__(self, hook: Callable[[], None]) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = hook

    def embed(self, texts: Sequence[str]) -> Any:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().embed(texts)


def _turns(admin_conn: Conn, scope: str, thread: str) -> list[tuple[object, ...]]:
    return admin_conn.execute(
        """SELECT turn_index, messages -> 0 ->> 'content' FROM pgmem.turn
            WHERE scope_id = %s AND thread_id = %s ORDER BY 1""",
        (scope, thread),
    ).fetchall()


def test_mcp_remember_never_replaces_a_turn_another_writer_stored_at_the_next_index(
    app_url: str, admin_conn: Conn
) -> None:
    """Before: the note was written as turn 1, replacing the application's turn 1 (status
    replaced), and the application's messages were gone."""
    pytest.importorskip("mcp", reason="the [mcp] extra is not installed")
    from pgmem.integrations.mcp import Memory

    with connect(app_url) as c:
        assert ingest_turns(c, [make_turn("s", "notes", 0, "turn zero")], EMB).inserted == 1

    def app_appends() -> None:
        with connect(app_url) as c:
            assert ingest_turns(c, [make_turn("s", "notes", 1, "the app's turn about ferries")], EMB).inserted == 1

    out = Memory(app_url, "s", _WriterDuringEmbed(app_appends)).remember(None, "a note about cats", None, None, None)
    assert out == {"thread": "notes", "turn_index": 2, "status": "inserted", "pieces": 1}
    assert _turns(admin_conn, "s", "notes") == [
        (0, "turn zero"),
        (1, "the app's turn about ferries"),
        (2, "a note about cats"),
    ]
    # A turn_index given is the caller's: the same index again replaces that turn, as documented.
    out = Memory(app_url, "s", EMB).remember(None, "a note replacing turn 2", None, 2, None)
    assert out["status"] == "replaced" and _turns(admin_conn, "s", "notes")[2] == (2, "a note replacing turn 2")


def test_mcp_notes_racing_an_applications_turns_never_replace_them(app_url: str, admin_conn: Conn) -> None:
    """Two clients released together, six rounds: the application stores turn n of the thread
    at the index it read as next, while an MCP server remembers a note (the next index too).
    Every application turn is kept, whichever came first; a note is at the index remember
    returned, unless the application's turn came after it there (its own index: put_turn at an
    index replaces what is there, as documented)."""
    pytest.importorskip("mcp", reason="the [mcp] extra is not installed")
    from pgmem.integrations.mcp import Memory

    memory = Memory(app_url, "s", EMB)
    rounds = 6
    notes: dict[int, int] = {}
    with connect(app_url) as app:
        for n in range(rounds):
            barrier = threading.Barrier(2)
            index = len(_turns(admin_conn, "s", "notes"))

            def application(n: int = n, index: int = index, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                ingest_turns(app, [make_turn("s", "notes", index, f"app turn {n}")], EMB)

            def server(n: int = n, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                notes[n] = int(memory.remember(None, f"note {n}", None, None, None)["turn_index"])

            workers = [threading.Thread(target=f) for f in (application, server)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(60)
    stored = {int(str(i)): str(t) for i, t in _turns(admin_conn, "s", "notes")}
    texts = list(stored.values())
    assert all(texts.count(f"app turn {n}") == 1 for n in range(rounds)), texts
    for n, at in notes.items():
        assert stored[at] == f"note {n}" or stored[at].startswith("app turn"), (n, at, stored)
