"""The concurrency stress test (issue 27): several clients for tens of seconds, random ingest,
re-ingest, forget (turn, thread, store item's thread, document), store puts and deletes,
document puts, logged recalls and retention on a few threads of one scope, as the application
login (retention applied as a member of pgmem_owner). The workload and its checks are
pgmem.lab.bench.churn's, which the soak benchmark runs for minutes."""

from __future__ import annotations

import pytest

from pgmem.lab.bench import churn
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, role_url

OWNER_LOGIN = "pgmem_test_churn_owner"


@pytest.mark.long
def test_concurrent_writers_forgetting_and_retention_keep_every_rule(db_url: str, admin_conn: Conn) -> None:
    churn.ensure_logins(admin_conn, APP_LOGIN, OWNER_LOGIN)
    emb = HashEmbedder()
    log = churn.run(role_url(db_url, APP_LOGIN), role_url(db_url, OWNER_LOGIN), emb, seconds=12, clients=4, seed=1)
    kinds = {op.kind for op in log.ops}
    # The run exercised every write path at least once (else the checks prove little).
    assert {"ingest", "forget_turn", "forget_thread", "put_item", "put_document", "recall", "apply_retention"} <= kinds
    assert churn.check(admin_conn, log, emb) == []


def test_the_checks_catch_a_turn_that_outlives_its_forget(db_url: str, admin_conn: Conn) -> None:
    """The checks can fail: a turn written before a forget, put back behind the forget's back
    (as a superuser, bypassing pgmem), is reported, and so are an orphan piece and a piece
    without its words."""
    churn.ensure_logins(admin_conn, APP_LOGIN, OWNER_LOGIN)
    emb = HashEmbedder()
    log = churn.Log()
    from pgmem.db import connect
    from pgmem.forget import forget_turn
    from pgmem.ingest import ingest_turns

    c = connect(role_url(db_url, APP_LOGIN))
    try:
        log.run("ingest", ("t0", "1"), ingest_turns, c, [churn.turn_version("t0", 1, 0)], emb, version=0)
        admin_conn.execute("CREATE TEMP TABLE keep AS SELECT * FROM pgmem.turn WHERE scope_id = 'churn'")
        log.run("forget_turn", ("t0", "1"), forget_turn, c, churn.SCOPE, "t0", 1)
        assert churn.check(admin_conn, log, emb) == []
        admin_conn.execute("INSERT INTO pgmem.thread (scope_id, thread_id) VALUES ('churn', 't0')")
        admin_conn.execute("INSERT INTO pgmem.turn SELECT * FROM keep")
        assert "turn t0/1: stored, but forgotten after every write of its text" in churn.check(admin_conn, log, emb)
        # A piece whose turn went without it (foreign keys switched off, as a bad restore would).
        ingest_turns(c, [churn.turn_version("t1", 0, 0)], emb)
        admin_conn.execute("SET session_replication_role = replica")
        admin_conn.execute("DELETE FROM pgmem.turn WHERE scope_id = 'churn' AND thread_id = 't1'")
        admin_conn.execute("SET session_replication_role = DEFAULT")
        assert "memory piece without its turn: 1 rows" in churn.check(admin_conn, log, emb)
        # A piece whose words are gone (the word side would never find it).
        admin_conn.execute("DELETE FROM pgmem.piece_word WHERE scope_id = 'churn' AND thread_id = 't1'")
        assert "piece without its words: 1 rows" in churn.check(admin_conn, log, emb)
        # A directory entry left by two deletes of the namespace's last items at once is the
        # sweep's to remove (the checks run it): one it leaves behind would be reported.
        admin_conn.execute(
            "INSERT INTO pgmem.store_namespace (directory, namespace, scope_name) VALUES ('default', '{gone}', 'gone')"
        )
        assert not any(p.startswith("store directory entry") for p in churn.check(admin_conn, log, emb))
        assert admin_conn.execute(
            "SELECT count(*) FROM pgmem.store_namespace WHERE scope_name = 'gone'"
        ).fetchone() == (0,)
    finally:
        c.close()


def test_a_failed_operation_is_reported(admin_conn: Conn) -> None:
    log = churn.Log()

    def boom() -> None:
        raise RuntimeError("deadlock detected")

    log.run("ingest", ("t0", "0"), boom, version=0)
    assert churn.check(admin_conn, log, HashEmbedder())[0] == "ingest ('t0', '0'): RuntimeError: deadlock detected"
