"""A model change's staging (pgmem.stage_vectors) beside writers replacing the same turns: found by
the slow variants of tests/test_mixed_writers.py (2-3 of their 6 seeds, on 677ec66 too), where the
server ended stage_vectors with 40P01 against put_turns. stage_vectors locked only the pieces
(KEY SHARE, through staged_vector's foreign key) in the order of its join, while a put_turns
replacing turns holds the turns FOR UPDATE and deletes their pieces in the order of its scan: two
orders of one set of piece rows. It now takes the lock order first (docs/architecture.md): the
pieces' documents and threads, then their turns (KEY SHARE, sorted), then the pieces."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import psycopg

from pgmem.db import connect
from pgmem.ingest import ingest_turns
from pgmem.lab.bench import churn
from tests.security_helpers import DIMS, Conn, HashEmbedder, make_turn
from tests.test_lock_order import Session

SCOPE = "stage-order"
TURNS = 24


def test_staging_and_turn_replacements_of_one_scope_do_not_deadlock(app_url: str, admin_conn: Conn) -> None:
    emb = HashEmbedder()
    with connect(app_url) as c:
        ingest_turns(c, [make_turn(SCOPE, f"t{i % 3}", i, f"first words {i} about ledgers") for i in range(TURNS)], emb)
    before = churn.deadlocks(admin_conn)
    errors: list[BaseException] = []
    stop = time.monotonic() + 6.0
    rng = random.Random(7)
    vector = "[" + ",".join(["0"] * (DIMS - 1) + ["1"]) + "]"

    def stager() -> None:
        with connect(app_url) as c:
            while time.monotonic() < stop:
                try:
                    with c.transaction():
                        c.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
                        ids = [
                            r[0] for r in c.execute("SELECT piece_id FROM pgmem.piece WHERE scope_id = %s", (SCOPE,))
                        ]
                        rng.shuffle(ids)
                        c.execute(
                            "SELECT pgmem.stage_vectors(%s, 'bench:other-model', %s, %s::vector[])",
                            (SCOPE, ids, [vector] * len(ids)),
                        )
                except psycopg.Error as exc:
                    errors.append(exc)

    def writer(n: int) -> None:
        wrng = random.Random(n)
        with connect(app_url) as c:
            k = 0
            while time.monotonic() < stop:
                k += 1
                # A few turns at a time, so the pieces' ids stop following their turns' order.
                picked = sorted(wrng.sample(range(TURNS), 6))
                turns = [make_turn(SCOPE, f"t{i % 3}", i, f"words {n}.{k} of turn {i}") for i in picked]
                try:
                    report = ingest_turns(c, turns, emb, bulk=True)
                    if report.failed:
                        errors.append(AssertionError(str(report.failed[:2])))
                except psycopg.Error as exc:
                    errors.append(exc)

    threads = [
        threading.Thread(target=stager),
        threading.Thread(target=writer, args=(1,)),
        threading.Thread(target=writer, args=(2,)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(1.2)  # a backend reports its deadlocks at most a second after its transaction
    admin_conn.execute("SELECT pg_stat_clear_snapshot()")
    assert [e for e in errors if getattr(e, "sqlstate", None) == "40P01"] == []
    assert churn.deadlocks(admin_conn) - before == 0
    assert errors == []


def test_staging_skips_the_pieces_a_writer_holds_and_the_flip_reports_them_pending(
    app_url: str, sessions: Callable[[], Session]
) -> None:
    """A piece being replaced right now (its turn's put_turns not yet committed) is skipped, not
    waited for; the writer rolls back, the piece stays, and reembed_flip reports it pending, so
    the model change stages it on its next pass."""
    emb = HashEmbedder()
    scope = "stage-skip"
    with connect(app_url) as c:
        ingest_turns(c, [make_turn(scope, "t", i, f"first words {i} about ledgers") for i in range(4)], emb)
        with c.transaction():
            c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
            rows = c.execute(
                "SELECT piece_id, turn_index FROM pgmem.piece WHERE scope_id = %s ORDER BY piece_id", (scope,)
            ).fetchall()
    ids = [int(str(r[0])) for r in rows]
    held = [i for i, r in zip(ids, rows, strict=True) if r[1] == 0]
    assert held and len(rows) > len(held)
    writer, stager = sessions(), sessions()
    writer.begin(scope)
    writer.do(lambda c: ingest_turns(c, [make_turn(scope, "t", 0, "other words entirely")], emb, bulk=True))
    vector = "[" + ",".join(["0"] * (DIMS - 1) + ["1"]) + "]"
    stager.begin(scope)
    staged = stager.do(  # returns at once: on the code before 0078 it waited for the writer
        lambda c: c.execute(
            "SELECT pgmem.stage_vectors(%s, 'bench:other-model', %s, %s::vector[])",
            (scope, ids, [vector] * len(ids)),
        ).fetchone()
    )
    assert staged == (len(rows) - len(held),)
    stager.commit()
    writer.do(lambda c: c.execute("ROLLBACK"))
    with connect(app_url) as c, c.transaction():
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        flip = c.execute(
            "SELECT flipped, pending FROM pgmem.reembed_flip(%s, 'bench:other-model', %s)", (scope, DIMS)
        ).fetchone()
    assert flip == (False, len(held))
