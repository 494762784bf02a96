"""A model change's flip (pgmem.reembed_flip) waits for the scope's writers in flight, then counts
the pieces still without a staged vector: READ COMMITTED only. Under REPEATABLE READ or
SERIALIZABLE (a database or login whose default_transaction_isolation says so) its snapshot
predated that wait, so a writer of the old model that committed meanwhile had its pieces neither
counted nor moved, and the scope was bound to the new model with them left on the old one."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from pgmem.db import connect
from pgmem.errors import PgmemError
from pgmem.ingest import ingest_turns
from pgmem.reembed import reembed
from tests.security_helpers import Conn, HashEmbedder, make_turn

SCOPE = "flip-isolation"
OLD, NEW = HashEmbedder(model_id="test:old"), HashEmbedder(model_id="test:new")


def piece_models(admin: Conn) -> set[object]:
    rows = admin.execute(
        """SELECT DISTINCT m.model_id FROM pgmem.piece p JOIN pgmem.embedding_model m USING (model_key)
            WHERE p.scope_id = %s""",
        (SCOPE,),
    ).fetchall()
    return {r[0] for r in rows}


def scope_model(admin: Conn) -> object:
    row = admin.execute(
        """SELECT m.model_id FROM pgmem.scope s JOIN pgmem.embedding_model m ON m.model_key = s.piece_model_key
            WHERE s.scope_id = %s""",
        (SCOPE,),
    ).fetchone()
    return None if row is None else row[0]


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_flip_under_a_stricter_isolation_leaves_no_piece_of_the_old_model(
    app_url: str, admin_conn: Conn, isolation: str
) -> None:
    with connect(app_url) as c:
        ingest_turns(c, [make_turn(SCOPE, "t", i, f"note {i} about the ferry") for i in range(2)], OLD)
        assert not reembed(c, SCOPE, NEW, flip=False).flipped
    # A writer of the old model, its transaction open: it holds the scope row FOR SHARE.
    writer = connect(app_url)
    writer.autocommit = False
    writer.execute("SELECT 1")
    assert ingest_turns(writer, [make_turn(SCOPE, "t", 2, "note 2 about the harbour")], OLD).inserted == 1
    outcome: dict[str, object] = {}

    def flip() -> None:
        with psycopg.connect(app_url) as f:
            try:
                f.execute(f"BEGIN ISOLATION LEVEL {isolation}")
                f.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
                outcome["row"] = f.execute(
                    "SELECT flipped, pending FROM pgmem.reembed_flip(%s, %s, %s)", (SCOPE, NEW.model_id, NEW.dims)
                ).fetchone()
                f.commit()
            except psycopg.Error as exc:
                outcome["error"] = exc

    flipper = threading.Thread(target=flip)
    flipper.start()
    time.sleep(0.3)  # the flip waits for the writer (or was refused at once)
    writer.commit()
    writer.close()
    flipper.join(10)
    # Never two models in the scope: the flip was refused and the scope serves the old one.
    assert piece_models(admin_conn) == {scope_model(admin_conn)}, outcome
    error = outcome.get("error")
    assert isinstance(error, psycopg.Error) and error.sqlstate == "25000", outcome
    assert "READ COMMITTED" in str(error) and scope_model(admin_conn) == OLD.model_id


def test_the_model_change_says_so_in_one_line_on_a_repeatable_read_login(app_url: str, admin_conn: Conn) -> None:
    """reembed's flip is sent at READ COMMITTED in its own transaction whatever the login's
    default (Query.read_committed); inside the caller's REPEATABLE READ transaction it is refused
    in one line (a PgmemError, 25000)."""
    with connect(app_url) as c:
        ingest_turns(c, [make_turn(SCOPE, "t", 0, "note about the ferry")], OLD)
        c.execute("SET default_transaction_isolation = 'repeatable read'")
        refused = "must run in a READ COMMITTED transaction, not REPEATABLE READ"
        with pytest.raises(PgmemError, match=refused) as err, c.transaction():
            reembed(c, SCOPE, NEW)
        assert "\n" not in str(err.value)
        assert reembed(c, SCOPE, NEW).flipped  # what it staged stays staged: nothing embedded twice
    assert piece_models(admin_conn) == {NEW.model_id} == {scope_model(admin_conn)}
