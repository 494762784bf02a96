"""A logged recall replayed after a model change. The recall log kept a recall's query vectors
but not their model, so after `pgmem reembed` flipped the scope to another model,
explain_logged_recall and replay_logged_recall ranked the new model's pieces with the old
model's query vectors: results without meaning, and no word of it. Since 0116 log_recall keeps
the model in recall_log.settings (under 'model', no setting's name) and both replays refuse a
recall logged under another model in one line; a row logged before 0116 replays as before."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgmem.calls import Call, Query, run
from pgmem.db import scoped
from pgmem.errors import ModelRefusedError
from pgmem.ingest import ingest_turns
from pgmem.recall import recall
from pgmem.reembed import reembed
from tests.security_helpers import Conn, HashEmbedder, make_turn

SCOPE = "replay-move"
OLD, NEW = HashEmbedder(model_id="test:old"), HashEmbedder(model_id="test:new")
REPLAYS = ("explain_logged_recall", "replay_logged_recall")


def logged(conn: Conn, embedder: HashEmbedder) -> int:
    rid = recall(conn, SCOPE, "the ferry", embedder, floor=-1.0, log=True).recall_id
    assert rid is not None
    return rid


def replayed(conn: Conn, function: str, recall_id: int) -> list[tuple[Any, ...]]:
    with scoped(conn, SCOPE):
        return conn.execute(f"SELECT piece_id FROM pgmem.{function}(%s, %s)", (SCOPE, recall_id)).fetchall()


def through_pgmem(function: str, recall_id: int) -> Call[object]:
    """The replay sent as every pgmem call sends SQL, so a refusal becomes a PgmemError."""
    rows = yield Query(SCOPE, f"SELECT * FROM pgmem.{function}(%s, %s)", (SCOPE, recall_id))
    return rows


def test_a_recall_logged_before_a_model_change_is_refused_in_one_line(conn: Conn, admin_conn: Conn) -> None:
    ingest_turns(conn, [make_turn(SCOPE, "t", i, f"note {i} about the ferry") for i in range(2)], OLD)
    before = logged(conn, OLD)
    for function in REPLAYS:  # the same model: replayed
        assert len(replayed(conn, function, before)) == 2
    assert reembed(conn, SCOPE, NEW).flipped
    after = logged(conn, NEW)
    message = (
        f"recall {before} was logged under model test:old ({OLD.dims} dimensions); scope {SCOPE} now uses model"
        f" test:new ({NEW.dims} dimensions): its logged query vectors cannot search the new model's pieces"
    )
    for function in REPLAYS:
        with pytest.raises(psycopg.errors.DataException) as err:
            replayed(conn, function, before)
        assert err.value.sqlstate == "22000" and err.value.diag.message_primary == message
        hint = err.value.diag.message_hint or ""
        assert "pgmem reembed" in hint and "pgmem recall --log" in hint and "\n" not in hint
        # From Python: a ModelRefusedError (a PgmemError) of one line.
        with pytest.raises(ModelRefusedError) as refused:
            run(conn, through_pgmem(function, before))
        assert refused.value.sqlstate == "22000" and str(refused.value).startswith(message)
        assert "\n" not in str(refused.value)
        # A recall logged under the scope's model now is replayed.
        assert len(replayed(conn, function, after)) == 2
    # The read-only role (psql for debugging) is refused alike, and replays the recall logged after.
    with admin_conn.transaction():
        admin_conn.execute("SET LOCAL ROLE pgmem_reader")
        admin_conn.execute("SELECT set_config('pgmem.scope', %s, true)", (SCOPE,))
        with (
            pytest.raises(psycopg.errors.DataException, match="was logged under model test:old"),
            admin_conn.transaction(),
        ):
            admin_conn.execute("SELECT * FROM pgmem.replay_logged_recall(%s, %s)", (SCOPE, before))
        assert (
            len(admin_conn.execute("SELECT * FROM pgmem.replay_logged_recall(%s, %s)", (SCOPE, after)).fetchall()) == 2
        )
    # Where the model is kept: the settings, under a key no replay applies as a setting.
    models = admin_conn.execute(
        "SELECT settings -> 'model' FROM pgmem.recall_log WHERE recall_id IN (%s, %s) ORDER BY recall_id",
        (before, after),
    ).fetchall()
    assert models == [({"model_id": "test:old", "dims": OLD.dims},), ({"model_id": "test:new", "dims": NEW.dims},)]


def test_a_recall_logged_before_0117_replays_as_before(conn: Conn, admin_conn: Conn) -> None:
    """A row logged with no model (before 0116, or its settings unknown: NULL, or a 'model'
    that is no object) cannot be told apart, and is run as before."""
    ingest_turns(conn, [make_turn(SCOPE, "t", i, f"note {i} about the ferry") for i in range(2)], OLD)
    rows = [logged(conn, OLD) for _ in range(3)]
    assert reembed(conn, SCOPE, NEW).flipped
    for rid, settings in zip(rows, ["{}", None, '{"model": "test:old"}'], strict=True):
        admin_conn.execute("UPDATE pgmem.recall_log SET settings = %s WHERE recall_id = %s", (settings, rid))
        for function in REPLAYS:
            assert len(replayed(conn, function, rid)) == 2
    assert admin_conn.execute("SELECT 'model' <> ALL (pgmem._recall_setting_names())").fetchone() == (True,)
