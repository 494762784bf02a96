"""Writers sharing a name (rt59): one writer must not overwrite, take over or forget what another
writer of the same scope stored under that name.

- The MCP server's `remember` gives a note the thread's next index, read under an advisory lock
  that only MCP servers take. An application's put_turn (or `pgmem ingest`) of that thread
  storing a turn at that index between the read and the write saw its turn replaced by the note:
  the application's messages were lost. The note now takes the index after.

Real Postgres, the app login, the hash embedder (no retrieval quality is asserted)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgmem import ingest_turns
from pgmem.cli import main
from pgmem.db import connect
from pgmem.errors import EmbeddingError
from tests.conftest import conninfo_url
from tests.security_helpers import APP_LOGIN, HashEmbedder, hash_vector, make_turn, role_url

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


class _Unreachable(HashEmbedder):
    def embed(self, texts: Sequence[str]) -> Any:
        raise EmbeddingError("endpoint went away")


@pytest.fixture
def other_database(admin_conn: Conn) -> Iterator[str]:
    """A second migrated database on the server (a copy of the tests' template), as the app
    login: another deployment holding a scope of the same name."""
    name = f"{admin_conn.info.dbname}_other"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(
        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(f"{admin_conn.info.dbname}_tmpl")
        )
    )
    try:
        yield role_url(conninfo_url(name), APP_LOGIN)
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _rebuild_cli(url: str, home: Path, emb: HashEmbedder, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("PGMEM_HOME", str(home))
    monkeypatch.setattr("pgmem.cli.memory.embedder_for", lambda conn, *a, **k: emb)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["rebuild", "--scope", "s"])
    return code, out.getvalue(), err.getvalue()


def test_a_rebuild_interrupted_in_one_database_is_resumed_there_only(
    app_url: str, other_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the rebuild here "resumed the rebuild begun at" the other database's start and
    rebuilt 0 of 0 turns, leaving this database's turn (stored after that start) as it was, and
    removed the state of the interrupted rebuild there."""
    with connect(other_database) as c:
        assert ingest_turns(c, [make_turn("s", "t", 0, "a turn of the other database")], EMB).inserted == 1
    code, _, err = _rebuild_cli(other_database, tmp_path, _Unreachable(), monkeypatch)
    assert code != 0 and "endpoint went away" in err  # interrupted: its state file stays
    assert len(list(tmp_path.glob("rebuild-*.json"))) == 1
    with connect(app_url) as c:
        assert ingest_turns(c, [make_turn("s", "t", 0, "a turn of this database")], EMB).inserted == 1
    code, out, err = _rebuild_cli(app_url, tmp_path, EMB, monkeypatch)
    assert code == 0 and "resumed" not in err, err
    assert out.startswith("rebuilt 1 of 1 turns"), out
    # The other database's rebuild is resumed where it was interrupted.
    code, out, err = _rebuild_cli(other_database, tmp_path, EMB, monkeypatch)
    assert code == 0 and "resumed the rebuild begun at" in err and out.startswith("rebuilt 1 of 1 turns"), (out, err)
    assert list(tmp_path.glob("rebuild-*.json")) == []


def test_a_rebuild_state_file_of_another_scope_or_database_is_refused(app_url: str, tmp_path: Path) -> None:
    """The Python API takes the state file from its caller: one of another scope, or of another
    database, is not resumed (it would redo only what was stored there before that one began)."""
    from pgmem.errors import ConfigError
    from pgmem.rebuild import rebuild

    state = tmp_path / "state.json"
    with connect(app_url) as c:
        ingest_turns(c, [make_turn("s", "t", 0, "a turn")], EMB)
        for other, says in (
            ('{"started": "2026-01-01 00:00:00+00", "scope": "s2"}', "of scope 's2', not 's'"),
            (
                '{"started": "2026-01-01 00:00:00+00", "scope": "s", "database": "elsewhere@1"}',
                "database 'elsewhere@1'",
            ),
        ):
            state.write_text(other)
            with pytest.raises(ConfigError, match=says):
                rebuild(c, EMB, state, scope="s")
            assert state.read_text() == other
        state.write_text('{"started": "2026-01-01 00:00:00+00", "scope": "s"}')  # before rt59: no database
        assert rebuild(c, EMB, state, scope="s").resumed


class _Words(HashEmbedder):
    """A text's vector is the sum of its words' (so texts sharing words are near): enough for a
    conversation to outrank an item, with no model."""

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in "".join(c if c.isalnum() else " " for c in t.lower()).split():
                out[i] += hash_vector(w, self.dims)
        return out


def test_a_conversation_of_the_namespaces_scope_does_not_hide_its_items_from_search(conn: Conn) -> None:
    """Before: with forty conversation turns about cats in scope u1, the search for them in
    namespace ("u1",) answered [] (its recall's 20 hits a part were all conversation pieces),
    and so did a search whose filter kept only the item about ferries."""
    pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")
    from pgmem.integrations.langgraph import PgmemStore

    words = _Words()
    store = PgmemStore(conn, embedder=words, floor=-1.0)
    store.put(("u1",), "k", {"text": "cats and dogs and birds"})
    store.put(("u1",), "j", {"text": "ferries", "kind": "boat"})
    assert sorted(i.key for i in store.search(("u1",), query="the cats are here")) == ["j", "k"]
    turns = [make_turn("u1", f"chat-{i}", 0, "the cats are here") for i in range(40)]
    assert ingest_turns(conn, turns, words).inserted == 40
    assert sorted(i.key for i in store.search(("u1",), query="the cats are here")) == ["j", "k"]
    assert len(store.search(("u1",), query="the cats are here", limit=1)) == 1
    assert [i.key for i in store.search(("u1",), query="the cats are here", filter={"kind": "boat"})] == ["j"]


def test_mcp_remember_on_a_connection_lost_mid_write_reports_that_and_the_next_call_works(
    app_url: str, admin_conn: Conn
) -> None:
    """The server's connection ended while a note was embedded (a failover, an administrator's
    pg_terminate_backend): remember's unlock of its advisory lock then raised "the connection is
    closed" in place of the error that ended the write. The client now reads the server's own
    line, and the next call reconnects and stores the note."""
    pytest.importorskip("mcp", reason="the [mcp] extra is not installed")
    from mcp.server.mcpserver.exceptions import ToolError

    from pgmem.integrations.mcp import Memory

    memory = Memory(app_url, "s", EMB)
    memory.check()
    pid = memory.conn().info.backend_pid

    def terminate() -> None:
        admin_conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    memory.embedder = _WriterDuringEmbed(terminate)
    with pytest.raises(ToolError) as lost:
        memory.run("remember", lambda: memory.remember(None, "a note", None, None, None))
    assert "terminat" in str(lost.value) and "connection is closed" not in str(lost.value)
    memory.embedder = EMB
    out = memory.run("remember", lambda: memory.remember(None, "a note", None, None, None))
    assert out["status"] == "inserted" and _turns(admin_conn, "s", "notes") == [(0, "a note")]
