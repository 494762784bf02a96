"""pgmem.index_large_scopes (scope_index_plan applied in one transaction) beside a writer of the
scope. Its builds hold pgmem.piece (or pgmem.fact) against writers to the commit, and its word
fold (refresh_word_fold) waited for the scope's writers in flight, which hold the scope row from
before their first piece: a writer that had bound its model when a build began waited for the
maintenance at its insert while the fold waited for the writer, a deadlock (40P01) that rolled
back every index the run had built, or the writer's transaction."""

from __future__ import annotations

import threading
import time

import psycopg

from pgmem.db import connect
from pgmem.ingest import ingest_turns
from tests.conftest import MAINTENANCE_LOGIN
from tests.security_helpers import Conn, HashEmbedder, connect_as, make_turn

SCOPE = "maintained"
EMB = HashEmbedder()


def test_index_large_scopes_and_a_writer_in_flight_do_not_deadlock(
    app_url: str, db_url: str, owner: Conn, admin_conn: Conn
) -> None:
    with connect(app_url) as c:
        turns = [make_turn(SCOPE, f"t{i % 8}", i // 8, f"note {i} about the ferry") for i in range(1001)]
        assert ingest_turns(c, turns, EMB, bulk=True).inserted == 1001  # over the fold's 1,000 pieces
    writer = connect(app_url)
    writer.autocommit = False
    # The writer's transaction binds its model (the scope row FOR SHARE) before its first piece.
    writer.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
    writer.execute("SELECT pgmem.bind_scope_model(%s, %s, %s)", (SCOPE, EMB.model_id, EMB.dims))
    done: dict[str, object] = {}

    def maintain() -> None:
        with connect_as(db_url, MAINTENANCE_LOGIN, autocommit=False) as m:
            try:
                rows = m.execute(
                    "SELECT plane, action FROM pgmem.index_large_scopes(min_pieces => 100, method => 'ivfflat')"
                ).fetchall()
                m.commit()
                done["actions"] = sorted((str(p), str(a)) for p, a in rows)
            except psycopg.Error as exc:
                done["error"] = exc

    maintenance = threading.Thread(target=maintain)
    maintenance.start()
    time.sleep(0.5)  # the build holds pgmem.piece; the fold is next
    try:
        report = ingest_turns(writer, [make_turn(SCOPE, "late", 0, "written while the index is built")], EMB)
        writer.commit()
    except psycopg.Error as exc:
        writer.rollback()
        done["writer"] = exc
    finally:
        writer.close()
        maintenance.join(30)
    assert "error" not in done and "writer" not in done, done
    assert done["actions"] == [("piece", "create"), ("words", "postings")]
    assert report.inserted == 1
    assert admin_conn.execute("SELECT count(*) FROM pgmem.word_fold_head WHERE scope_id = %s", (SCOPE,)).fetchone() == (
        1,
    )
    assert admin_conn.execute(
        "SELECT count(*) FROM pgmem.turn WHERE scope_id = %s AND thread_id = 'late'", (SCOPE,)
    ).fetchone() == (1,)
