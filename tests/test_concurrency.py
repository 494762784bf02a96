"""Concurrency: 2 to 8 writers ingest overlapping turns (some in two competing versions)
while readers recall: exactly one copy of each turn, no deadlock left unhandled, and every
recall sees whole turns only."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from pgmem.ingest import ingest_turns
from pgmem.pieces import turn_pieces
from pgmem.turns import Turn
from tests.helpers import InFlight
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, app_conn, connect_as, hash_vector, make_turn

__all__ = ["app_conn"]

SCOPE = "busy"
N_TURNS = 120


def versions() -> tuple[list[Turn], list[Turn]]:
    """Two versions of the same turns: every 5th turn differs between them (same shape)."""
    a, b = [], []
    for i in range(N_TURNS):
        tool = "tool output line " * (1 + i % 4) if i % 3 == 0 else None
        a.append(make_turn(SCOPE, f"t{i % 4}", i, f"turn {i} says alpha", tool=tool))
        text_b = f"turn {i} says bravo" if i % 5 == 0 else f"turn {i} says alpha"
        b.append(make_turn(SCOPE, f"t{i % 4}", i, text_b, tool=tool))
    return a, b


@pytest.mark.parametrize("writers", [2, 8])
def test_writers_and_readers(app_conn: Conn, db_url: str, admin_conn: Conn, writers: int) -> None:
    emb = HashEmbedder()
    va, vb = versions()
    expected = {t.index: len(turn_pieces(t, emb)) for t in va}
    assert expected == {t.index: len(turn_pieces(t, emb)) for t in vb}
    errors: list[str] = []
    done = threading.Event()
    reads: Counter[str] = Counter()
    flight = InFlight()  # ingest calls in flight

    def writer(w: int) -> None:
        rng = np.random.default_rng(w)
        turns = list(va if w % 2 == 0 else vb)
        order = [turns[int(i)] for i in rng.permutation(len(turns))]
        c = connect_as(db_url, APP_LOGIN)
        try:
            for start in range(0, len(order), 10):
                with flight():
                    report = ingest_turns(c, order[start : start + 10], emb)
                if report.failed:
                    errors.append(f"writer {w}: {report.failed}")
        except Exception as exc:  # a deadlock or anything else would land here
            errors.append(f"writer {w}: {type(exc).__name__}: {exc}")
        finally:
            c.close()

    def reader(r: int) -> None:
        c = connect_as(db_url, APP_LOGIN)
        rng = np.random.default_rng(100 + r)
        try:
            while not done.is_set():
                with c.transaction():
                    c.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
                    hits = c.execute(
                        """SELECT thread_id, turn_index, body FROM pgmem.memory_recall(%s, %s::vector[],
                               x => 1000, floor => -1)""",
                        (SCOPE, [hash_vector(f"q{rng.integers(1 << 30)}")]),
                        binary=True,
                    ).fetchall()
                per_turn = Counter(int(str(h[1])) for h in hits)
                for idx, n in per_turn.items():
                    if n != expected[idx]:
                        errors.append(f"reader {r} saw {n} of {expected[idx]} pieces of turn {idx}")
                versions_seen = {(int(str(h[1])), "bravo" in str(h[2])) for h in hits if "says" in str(h[2])}
                if len({idx for idx, _ in versions_seen}) != len(versions_seen):
                    errors.append(f"reader {r} saw two versions of one turn at once")
                reads["recalls"] += 1
                # Some turns stored, not all: this read ran while the writers were writing.
                reads["mid-write"] += 0 < len(per_turn) < N_TURNS
        except Exception as exc:
            errors.append(f"reader {r}: {type(exc).__name__}: {exc}")
        finally:
            c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    readers = [threading.Thread(target=reader, args=(r,)) for r in range(2)]
    for t in readers + threads:
        t.start()
    deadline = time.monotonic() + 300
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic()))
    done.set()
    for t in readers:
        t.join(30)
    assert not any(t.is_alive() for t in threads + readers), "a thread hung (lock wait without end?)"
    assert errors == []
    # The properties below mean something only if the threads met: writers wrote at the same
    # time, and readers read a half-written scope (not only the empty or the finished one).
    assert flight.most >= 2, "the writers never wrote at the same time"
    assert reads["mid-write"] > 0, f"no recall ran while the turns were being written: {reads}"

    # Exactly one copy of each turn, each whole, each piece once, all from one version.
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (N_TURNS,)
    counts = admin_conn.execute("SELECT turn_index, count(*) FROM pgmem.piece GROUP BY 1").fetchall()
    assert {int(str(i)): int(str(n)) for i, n in counts} == expected
    dup = admin_conn.execute(
        "SELECT count(*) - count(DISTINCT (scope_id, thread_id, turn_index, source_index, seq)) FROM pgmem.piece"
    ).fetchone()
    assert dup == (0,)
    mixed = admin_conn.execute(
        """SELECT t.turn_index FROM pgmem.turn t JOIN pgmem.piece p USING (scope_id, thread_id, turn_index)
            WHERE p.unit_kind = 'user' AND position(t.messages->0->>'content' IN p.body) = 0"""
    ).fetchall()
    assert mixed == []
    print(
        f"{writers} writers ({flight.most} at once): {reads['recalls']} concurrent recalls "
        f"({reads['mid-write']} mid-write), all whole; {N_TURNS} turns, one copy each"
    )
