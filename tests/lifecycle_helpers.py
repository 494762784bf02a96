"""Helpers of the lifecycle tests (issue 15): SQL calls as a service in any language makes
them, with vectors passed as pgvector text literals (no adapter registered)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence

import numpy as np
import psycopg

from tests.security_helpers import DIMS, hash_vector

Conn = psycopg.Connection[tuple[object, ...]]


def vec(text: str, dims: int = DIMS) -> str:
    """The pgvector text literal of a unit vector determined by `text`."""
    return "[" + ",".join(f"{x:.6f}" for x in hash_vector(text, dims)) + "]"


def near(axis: int, dims: int = DIMS, spread: float = 0.0, salt: str = "") -> str:
    """A unit vector close to one axis (plus a little hash noise when spread > 0)."""
    v = np.zeros(dims, dtype=np.float64)
    v[axis % dims] = 1.0
    if spread:
        v += spread * hash_vector(f"{salt}{axis}", dims).astype(np.float64)
    v /= np.linalg.norm(v)
    return "[" + ",".join(f"{x:.6f}" for x in v) + "]"


def put_turn(
    conn: Conn,
    scope: str,
    thread: str,
    index: int,
    bodies: Sequence[str],
    *,
    vectors: Sequence[str] | None = None,
    turn_time: object = None,
    metadata: object = None,
) -> tuple[object, ...]:
    """pgmem.put_turn in plain SQL, one user piece per body; the caller sets the scope."""
    vs = list(vectors) if vectors is not None else [vec(f"{scope}/{thread}/{index}/{b}") for b in bodies]
    n = len(bodies)
    row = conn.execute(
        """SELECT * FROM pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => %s::timestamptz,
               messages => %s::jsonb, content_hash => %s, model_id => 'test:hash', unit_kinds => %s,
               source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[],
               metadata => %s::jsonb)""",
        (
            scope,
            thread,
            index,
            turn_time,
            json.dumps([{"role": "user", "content": b} for b in bodies]),
            hashlib.sha256(json.dumps([scope, thread, index, list(bodies)]).encode()).digest(),
            ["user"] * n,
            list(range(n)),
            [f"[Turn {index} · User]"] * n,
            list(bodies),
            vs,
            None if metadata is None else json.dumps(metadata),
        ),
    ).fetchone()
    assert row is not None
    return row


def in_scope(conn: Conn, scope: str) -> None:
    """SET LOCAL pgmem.scope, in its function form (inside a transaction)."""
    conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))


def until_waiting(admin: Conn, pid: int, tries: int = 300) -> None:
    """Return once backend `pid` waits for a lock (polled every 10 ms); AssertionError if it never does."""
    for _ in range(tries):
        row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        if row == ("Lock",):
            return
        time.sleep(0.01)
    raise AssertionError("the call never waited")
