"""The lab's offline recency replay (pgmem.lab.evaluation.recency_replay) against memory_recall:
the same hits, recalled once with recency off and replayed under a rule, must come back in the
order memory_recall gives with that rule's band and depth (replies moving, as SQL does)."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.lab.evaluation.recency_replay import Asked, Hit, Rule, replay, score
from tests.security_helpers import DIMS

Conn = psycopg.Connection[tuple[object, ...]]

#: (turn, day, [(role, cosine with the query, axis)]): the old fact's turn holds the first two
#: hits, a later reply echoes the subject, the new fact comes fourth, a newer turn is far under.
TURNS = [
    (1, "03-02", [("user", 0.90, 1), ("assistant", 0.88, 2)]),
    (2, "06-20", [("assistant", 0.86, 3)]),
    (3, "05-11", [("user", 0.80, 4)]),
    (4, "09-14", [("user", 0.60, 5)]),
]


def unit(c: float, axis: int) -> str:
    v = [0.0] * DIMS
    v[0], v[axis] = c, math.sqrt(1 - c * c)
    return "[" + ",".join(f"{x:.6f}" for x in v) + "]"


@pytest.fixture
def store(conn: Conn) -> Conn:
    with scoped(conn, "s"):
        for turn, day, pieces in TURNS:
            conn.execute(
                """SELECT pgmem.put_turn(scope => 's', thread => 'r', turn_index => %s, turn_time => %s::timestamptz,
                       messages => %s::jsonb, content_hash => %s, model_id => 'test:hash', unit_kinds => %s,
                       source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[], weight => 1.0)""",
                (
                    turn,
                    f"2026-{day}T10:00:00Z",
                    json.dumps([{"role": r, "content": f"piece {a}"} for r, _, a in pieces]),
                    hashlib.sha256(f"{turn}".encode()).digest(),
                    [r for r, _, _ in pieces],
                    list(range(len(pieces))),
                    [f"[Turn {turn} · {r}]" for r, _, _ in pieces],
                    [f"piece {a}" for _, _, a in pieces],
                    [unit(c, a) for _, c, a in pieces],
                ),
            )
    return conn


def recalled(conn: Conn, band: float, depth: int) -> list[tuple[int, float]]:
    with scoped(conn, "s"):
        conn.execute("SELECT set_config('pgmem.recency_depth', %s, true)", (str(depth),))
        rows = conn.execute(
            """SELECT turn_index, cosine FROM pgmem.memory_recall('s', ARRAY[%s]::vector[], ARRAY['nothing'],
                   x => 10, floor => -1, recency => %s) ORDER BY rank""",
            (unit(1.0, 6), band),
        ).fetchall()
    return [(int(str(t)), round(float(str(c)), 6)) for t, c in rows]


@pytest.mark.parametrize(("band", "depth"), [(0.0, 2), (0.05, 2), (0.1, 3), (0.15, 4), (0.35, 5), (0.02, 4)])
def test_the_replay_ranks_as_memory_recall_does(store: Conn, band: float, depth: int) -> None:
    days = {turn: datetime.fromisoformat(f"2026-{day}T10:00:00+00:00") for turn, day, _ in TURNS}
    roles = {(t, round(c, 6)): r for t, _, pieces in TURNS for r, c, _ in pieces}
    off = recalled(store, 0.0, 2)
    hits = [Hit(1, i + 1, c, ("r", t), days[t], roles[(t, c)] == "assistant") for i, (t, c) in enumerate(off)]
    replayed = [(h.key[1], h.cosine) for h in sorted(replay(hits, Rule(band, depth)), key=lambda h: h.rank)]
    assert replayed == recalled(store, band, depth)


def test_a_rule_that_keeps_replies_still_moves_the_users_newer_fact() -> None:
    t = [datetime.fromisoformat(f"2026-{d}T10:00:00+00:00") for d in ("03-02", "06-20", "05-11")]
    hits = (
        Hit(1, 1, 0.90, ("r", 1), t[0], False),
        Hit(1, 2, 0.88, ("r", 1), t[0], True),
        Hit(1, 3, 0.86, ("r", 2), t[1], True),
        Hit(1, 4, 0.80, ("r", 3), t[2], False),
    )
    q = Asked("q", "knowledge-update", hits, frozenset({("r", 3)}), frozenset({("r", 3)}), windowed=False)
    assert score([q], Rule(0.05, 2))["all"]["top1"] == 0  # both looked-at hits are turn 1's
    assert score([q], Rule(0.15, 4))["all"]["top1"] == 0  # the later reply takes the first rank
    assert score([q], Rule(0.15, 4, replies_move=False))["knowledge-update"] == {
        "questions": 1,
        "top1": 1.0,
        "top1_latest": 1.0,
    }
    # Under a time window memory_recall turns recency off: the replay leaves the hits alone.
    assert score([replace_windowed(q)], Rule(0.15, 4, replies_move=False))["all"]["top1"] == 0


def replace_windowed(q: Asked) -> Asked:
    return Asked(q.qid, q.qtype, q.hits, q.gold, q.latest, windowed=True)
