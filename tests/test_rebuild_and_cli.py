"""Rebuild (resumable) and the `pgmem db` commands."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from pgmem import server
from pgmem.db import scoped
from pgmem.embedders.base import Embedder, FloatArray
from pgmem.errors import EmbeddingError
from pgmem.ingest import ingest_turns
from pgmem.rebuild import rebuild
from pgmem.turns import Turn, turn_from_dict
from tests.helpers import CountingEmbedder

Conn = psycopg.Connection[tuple[object, ...]]


class FailingAfter(CountingEmbedder):
    """Fails on the n-th call: an interrupted rebuild."""

    def __init__(self, inner: Embedder, fail_on: int) -> None:
        super().__init__(inner)
        self.fail_on = fail_on

    def embed(self, texts: Sequence[str]) -> FloatArray:
        if self.calls + 1 == self.fail_on:
            self.calls += 1
            raise EmbeddingError("endpoint went away")
        return super().embed(texts)


def turns(n: int) -> list[Turn]:
    return [
        turn_from_dict(
            {
                "scope": "r",
                "thread": "t",
                "turn": i,
                "messages": [{"role": "user", "content": f"Turn number {i} here."}],
            }
        )
        for i in range(n)
    ]


def stamps(conn: Conn) -> dict[int, datetime]:
    with scoped(conn, "r"):
        rows = conn.execute("SELECT turn_index, ingested_at FROM pgmem.turn").fetchall()
    return {int(str(i)): t for i, t in rows if isinstance(t, datetime)}


def test_rebuild_is_resumable_and_complete(conn: Conn, embedder: Embedder, tmp_path: Path) -> None:
    ingest_turns(conn, turns(6), embedder)
    before = stamps(conn)
    state = tmp_path / "rebuild.json"
    flaky = FailingAfter(embedder, fail_on=2)
    with pytest.raises(EmbeddingError):
        rebuild(conn, flaky, state, scope="r", group_pieces=1)  # one embedding call per turn
    assert state.exists()
    with scoped(conn, "r"):
        done_first = conn.execute("SELECT count(*) FROM pgmem.turn WHERE ingested_at > %s", (max(before.values()),))
        assert done_first.fetchone() == (1,)
    counting = CountingEmbedder(embedder)
    res = rebuild(conn, counting, state, scope="r")
    assert res.resumed and res.turns == 5 and res.report.replaced == 5
    assert not state.exists()
    with scoped(conn, "r"):
        assert conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (6,)
    after = stamps(conn)
    assert all(after[i] > before[i] for i in before)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_bytes": 5}, "max_bytes must be an integer from 64"),
        ({"weight": float("nan")}, "weight must be between 0 and 1"),
        ({"group_pieces": 0}, "group_pieces must be an integer from 1"),
        ({"model": "test:other"}, "refusing model test:other"),
    ],
)
def test_a_rebuild_refused_before_it_begins_leaves_no_state_to_resume(
    conn: Conn, tmp_path: Path, kwargs: dict[str, object], error: str
) -> None:
    """A rebuild refused before it rebuilt anything (a bad --max-bytes or --weight, or a model
    the scope refuses, each turn of which failed) left its state file: the next rebuild "resumed"
    from that refused run's start and took every turn stored since for rebuilt."""
    from pgmem.errors import InputError, ModelRefusedError
    from tests.security_helpers import HashEmbedder

    ingest_turns(conn, turns(2), HashEmbedder())
    state = tmp_path / "rebuild.json"
    emb = HashEmbedder(model_id=str(kwargs.pop("model", "test:hash")))
    with pytest.raises((InputError, ModelRefusedError), match=error):
        rebuild(conn, emb, state, scope="r", **kwargs)  # type: ignore[arg-type]
    assert not state.exists() and emb.calls == 0
    res = rebuild(conn, HashEmbedder(), state, scope="r")
    assert not res.resumed and res.report.replaced == 2 and not state.exists()


def test_a_state_file_write_cut_short_leaves_nothing_to_refuse(conn: Conn, tmp_path: Path) -> None:
    """The state file was written in place: a write cut short (a full disk; here the process's
    file size limit) left part of it, and every later rebuild of the scope refused it as "not a
    rebuild state file" until it was removed by hand. It is written whole or not at all now."""
    import resource
    import signal

    from pgmem.errors import ConfigError
    from tests.security_helpers import HashEmbedder

    ingest_turns(conn, turns(2), HashEmbedder())
    state = tmp_path / "rebuild.json"
    limits, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, limits[1]))  # a write past 16 bytes fails: EFBIG
        with pytest.raises(ConfigError, match="cannot write the rebuild state file"):
            rebuild(conn, HashEmbedder(), state, scope="r")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert list(tmp_path.iterdir()) == []
    res = rebuild(conn, HashEmbedder(), state, scope="r")
    assert not res.resumed and res.report.replaced == 2 and not state.exists()


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PGMEM_HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "pgmem", *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("ram_gb", "shared", "maintenance"),
    [(0.5, "128MB", "64MB"), (2, "256MB", "64MB"), (24, "3072MB", "768MB"), (256, "4096MB", "1024MB")],
)
def test_embedded_memory_settings_scale_with_the_machine_within_bounds(
    ram_gb: float, shared: str, maintenance: str
) -> None:
    got = server.memory_settings(int(ram_gb * 1024**3))
    assert got == {"shared_buffers": shared, "maintenance_work_mem": maintenance}


@pytest.mark.long
def test_db_commands_start_share_and_stop_a_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "db", "status").returncode == 3
    started = run(home, "db", "start")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    try:
        st = run(home, "db", "status")
        assert st.returncode == 0 and st.stdout.startswith("running")
        assert run(home, "db", "url").stdout.strip() == url
        # a second process using the same folder reuses the running server
        assert server.start(home / "pgdata") == url
        q = run(home, "db", "psql", "-At", "-c", "SELECT 40 + 2")
        assert q.stdout.strip() == "42", q.stderr
        # the memory settings written after initdb apply from the first start
        mem = run(
            home,
            "db",
            "psql",
            "-At",
            "-F",
            " ",
            "-c",
            "SELECT name, pg_size_bytes(setting || ' ' || replace(unit, '8kB', 'kB')) * "
            "CASE unit WHEN '8kB' THEN 8 ELSE 1 END / 1048576, sourcefile FROM pg_settings "
            "WHERE name IN ('maintenance_work_mem', 'shared_buffers') ORDER BY name",
        )
        want = server.memory_settings(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        conf = str((home / "pgdata" / "pgmem.conf").resolve())
        assert [line.split(" ") for line in mem.stdout.splitlines()] == [
            ["maintenance_work_mem", want["maintenance_work_mem"].removesuffix("MB"), conf],
            ["shared_buffers", want["shared_buffers"].removesuffix("MB"), conf],
        ], mem.stderr
        mig = run(home, "migrate")
        assert mig.returncode == 0, mig.stderr
        tables = run(home, "db", "psql", "-At", "-c", r"\dt pgmem.*")
        assert "piece" in tables.stdout
    finally:
        stopped = run(home, "db", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert run(home, "db", "status").returncode == 3


@pytest.mark.parametrize(
    ("thread", "messages"),
    [("  ", '[{"role": "user", "content": "a turn of a blank thread"}]'), ("t-sql", '[{"content": "no role"}]')],
    ids=["blank thread", "message without a role"],
)
def test_a_turn_the_sql_api_stored_that_python_cannot_read_fails_alone_and_the_others_are_rebuilt(
    conn: Conn, admin_conn: Conn, embedder: Embedder, tmp_path: Path, thread: str, messages: str
) -> None:
    """put_turn through SQL (a service in another language, with its own piecing) stored turns
    Python's rules refuse until 0091: a blank thread name (Python's names need a non-blank
    character) or a message without a role (put_turn checked only that messages are a JSON
    array). put_turn refuses them now (tests/test_sql_write_rules.py), but a database may hold
    such turns from before; made here as it stored them (a superuser writing the tables). The
    rebuild read every pending turn through those rules first, so that one turn raised an
    InputError and no turn of the scope was rebuilt, on every run. It is reported now, with its
    reason, and the others are rebuilt; the state file stays (the turn is still to do)."""
    ingest_turns(conn, turns(3), embedder)
    before = stamps(conn)
    vector = embedder.embed(["a turn stored through SQL"])[0].tolist()
    with pytest.raises(psycopg.errors.InvalidParameterValue), conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', 'r', true)")
        conn.execute(
            """SELECT pgmem.put_turn(scope => 'r', thread => %s, turn_index => 7, turn_time => NULL,
                   messages => %s::jsonb, content_hash => '\\x01', model_id => %s, unit_kinds => ARRAY['user'],
                   source_indexes => ARRAY[0], labels => ARRAY['[Turn 7 · User]'],
                   bodies => ARRAY['stored through SQL'], vectors => ARRAY[%s::vector])""",
            (thread, messages, embedder.model_id, vector),
        )
    with admin_conn.transaction():
        admin_conn.execute(
            "INSERT INTO pgmem.thread (scope_id, thread_id) VALUES ('r', %s) ON CONFLICT DO NOTHING", (thread,)
        )
        admin_conn.execute(
            """INSERT INTO pgmem.turn (scope_id, thread_id, turn_index, messages, content_hash, context, model_key)
               SELECT 'r', %s, 7, %s::jsonb, '\\x01', t.context, t.model_key FROM pgmem.turn t
                WHERE t.scope_id = 'r' LIMIT 1""",
            (thread, messages),
        )
    state = tmp_path / "rebuild.json"
    res = rebuild(conn, embedder, state, scope="r")
    assert res.turns == 4 and res.report.replaced == 3
    assert [k for k, _ in res.report.failed] == [("r", thread, 7)]
    assert "cannot be rebuilt" in res.report.failed[0][1]
    assert state.exists()
    after = stamps(conn)
    assert all(after[i] > before[i] for i in before)
