"""Retention (issue 15 item 2): a per-scope setting written by the app inside its scope
(pgmem.set_retention, read back with pgmem.get_retention) and applied to every scope by one
maintenance call, pgmem.apply_retention(), run as the migrating login (a member of
pgmem_owner) or a superuser, through the forget path (pieces, facts and recall-log rows go
with their turns), with the recall log bounded by age and rows."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from pgmem import server
from tests.lifecycle_helpers import Conn, in_scope, put_turn, vec
from tests.security_helpers import READER_LOGIN, connect_as, ensure_login_roles, role_url

#: A LOGIN member of pgmem_owner: the role that migrates pgmem and runs maintenance.
OWNER_LOGIN = "pgmem_test_maint"


@pytest.fixture
def owner(admin_conn: Conn, db_url: str) -> Iterator[Conn]:
    ensure_login_roles(admin_conn)
    with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        admin_conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(
                sql.Identifier(OWNER_LOGIN)
            )
        )
    admin_conn.execute(sql.SQL("GRANT pgmem_owner TO {}").format(sql.Identifier(OWNER_LOGIN)))
    c = connect_as(db_url, OWNER_LOGIN)
    yield c
    c.close()


def _ago(days: int) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def _set(conn: Conn, scope: str, **kw: object) -> tuple[object, ...]:
    args = "".join(f", {k} => %({k})s::integer" for k in kw)
    with conn.transaction():
        in_scope(conn, scope)
        row = conn.execute(
            "SELECT scope_id, keep_days, keep_turns, log_keep_days, log_keep_rows"
            f" FROM pgmem.set_retention(%(s)s{args})",
            {"s": scope, **kw},
        ).fetchone()
    assert row is not None
    return row


def test_the_setting_is_written_and_read_inside_its_scope(conn: Conn) -> None:
    assert _set(conn, "a", keep_days=30, log_keep_days=7, log_keep_rows=100) == ("a", 30, None, 7, 100)
    assert _set(conn, "a", keep_turns=5) == ("a", None, 5, None, None)  # a call states the whole setting
    with conn.transaction():
        in_scope(conn, "a")
        row = conn.execute("SELECT keep_days, keep_turns, applied_at FROM pgmem.get_retention('a')").fetchall()
    assert row == [(None, 5, None)]
    # Wrong scope, no scope: 42501 for the write and the read.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot write into scope a"), conn.transaction():
        in_scope(conn, "b")
        conn.execute("SELECT pgmem.set_retention('a', keep_days => 1)")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="no scope is set"):
        conn.execute("SELECT pgmem.set_retention('a', keep_days => 1)")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"SET LOCAL pgmem\.scope"):
        conn.execute("SELECT * FROM pgmem.get_retention('a')")
    # Bad values: a clear error, the stored setting kept.
    for kw in (
        {"keep_days": 0},
        {"keep_days": -3},
        {"keep_days": 40000},
        {"keep_turns": 0},
        {"log_keep_rows": -1},
        {"log_keep_days": 0},
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="set_retention: "):
            _set(conn, "a", **kw)
    for kw2 in ({"keep_days": "ten"}, {"keep_days": 2**40}, {"keep_turns": "5\x00"}):
        with pytest.raises(psycopg.DataError):
            _set(conn, "a", **kw2)
    with pytest.raises(psycopg.errors.NullValueNotAllowed):
        conn.execute("SELECT pgmem.set_retention(NULL, keep_days => 1)")
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire), conn.transaction():
        conn.execute("SELECT pgmem.set_retention(convert_from('\\xc328'::bytea, 'UTF8'))")
    with conn.transaction():
        in_scope(conn, "a")
        assert conn.execute("SELECT keep_turns FROM pgmem.get_retention('a')").fetchall() == [(5,)]
    # All NULL: the setting goes (the scope keeps everything).
    assert _set(conn, "a") == (None, None, None, None, None)
    with conn.transaction():
        in_scope(conn, "a")
        assert conn.execute("SELECT * FROM pgmem.get_retention('a')").fetchall() == []


@pytest.fixture
def aged(conn: Conn, admin_conn: Conn) -> Conn:
    """Scope r1 (keep 30 days, recall log 10 days): turns from 60, 31, 29 and 1 days ago, and
    two without turn_time (one stored now, one whose ingested_at is 40 days old). Scope r2
    (keep the last 2 turns of each thread, recall log 2 rows). Scope r3: no setting."""
    with conn.transaction():
        in_scope(conn, "r1")
        for i, days in enumerate((60, 31, 29, 1)):
            put_turn(conn, "r1", "t", i, [f"r1 turn {i}"], turn_time=_ago(days))
        put_turn(conn, "r1", "t", 4, ["r1 turn 4 (no time, new)"])
        put_turn(conn, "r1", "t", 5, ["r1 turn 5 (no time, old)"])
        put_turn(conn, "r1", "old", 0, ["r1 old thread"], turn_time=_ago(90))
        conn.execute(
            "SELECT pgmem.add_facts('r1', 'test:hash', ARRAY['about turn 0', 'about the thread'],"
            " ARRAY[%s::vector, %s::vector], ARRAY['t', 't'], ARRAY[0, NULL])",
            (vec("f0"), vec("f1")),
        )
        pid = conn.execute("SELECT piece_id FROM pgmem.piece WHERE turn_index = 0 AND thread_id = 't'").fetchone()
        assert pid is not None
        for results in (f'[{{"piece_id": {pid[0]}}}]', "[]", "[]"):
            conn.execute(
                "SELECT pgmem.log_recall('r1', 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, NULL, 'vector',"
                " %s::jsonb)",
                (vec("q"), results),
            )
        conn.execute("SELECT pgmem.set_retention('r1', keep_days => 30, log_keep_days => 10)")
    with conn.transaction():
        in_scope(conn, "r2")
        for i in range(5):
            put_turn(conn, "r2", "a", i, [f"r2 a {i}"], turn_time=_ago(400))
        put_turn(conn, "r2", "b", 7, ["r2 b 7"], turn_time=_ago(400))
        for _ in range(5):
            conn.execute(
                "SELECT pgmem.log_recall('r2', 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, NULL, 'vector',"
                " '[]')",
                (vec("q"),),
            )
        conn.execute("SELECT pgmem.set_retention('r2', keep_turns => 2, log_keep_rows => 2)")
    with conn.transaction():
        in_scope(conn, "r3")
        put_turn(conn, "r3", "t", 0, ["r3 ancient"], turn_time=_ago(3000))
    # What only time could do: a turn stored 40 days ago without a turn_time, an old log row.
    admin_conn.execute(
        "UPDATE pgmem.turn SET ingested_at = now() - interval '40 days' WHERE scope_id = 'r1' AND turn_index = 5"
    )
    admin_conn.execute(
        "UPDATE pgmem.recall_log SET created_at = now() - interval '11 days'"
        " WHERE scope_id = 'r1' AND recall_id = (SELECT max(recall_id) FROM pgmem.recall_log WHERE scope_id = 'r1')"
    )
    return conn


def _turns(admin: Conn, scope: str) -> list[tuple[str, int]]:
    rows = admin.execute(
        "SELECT thread_id, turn_index FROM pgmem.turn WHERE scope_id = %s ORDER BY 1, 2", (scope,)
    ).fetchall()
    return [(str(t), int(str(i))) for t, i in rows]


def _count(admin: Conn, table: str, scope: str) -> int:
    row = admin.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE scope_id = %s").format(sql.Identifier("pgmem", table)), (scope,)
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_apply_retention_as_the_migrating_login(aged: Conn, owner: Conn, admin_conn: Conn) -> None:
    notices: list[str] = []
    owner.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    r2_logs = [
        r[0] for r in admin_conn.execute("SELECT recall_id FROM pgmem.recall_log WHERE scope_id = 'r2' ORDER BY 1")
    ]
    rows = owner.execute(
        "SELECT scope_id, turns, pieces, facts, threads, recall_logs FROM pgmem.apply_retention()"
    ).fetchall()
    # turn 0 (60 days), 1 (31 days), 5 (no turn_time, stored 40 days ago) and the 90-day thread;
    # turn 2 (29 days) stays on the near side of the boundary. Fact 'about turn 0' goes with its
    # turn; the log row that returned turn 0's piece goes with it, the 11-day-old one by age.
    assert rows == [("r1", 4, 4, 1, 1, 2), ("r2", 3, 3, 0, 0, 3)]
    assert _turns(admin_conn, "r1") == [("t", 2), ("t", 3), ("t", 4)]
    assert _turns(admin_conn, "r2") == [("a", 3), ("a", 4), ("b", 7)]
    assert _turns(admin_conn, "r3") == [("t", 0)]  # no setting: nothing removed
    assert _count(admin_conn, "fact", "r1") == 1
    assert _count(admin_conn, "recall_log", "r1") == 1
    # The newest 2 stay (one transaction wrote all 5: the later ids are the newer).
    kept = [r[0] for r in admin_conn.execute("SELECT recall_id FROM pgmem.recall_log WHERE scope_id = 'r2' ORDER BY 1")]
    assert kept == r2_logs[-2:]
    assert _count(admin_conn, "piece", "r1") == 3
    assert any("2 scopes have a retention setting" in n for n in notices), notices
    assert any("scope r2: 3 turns, 3 pieces" in n for n in notices), notices
    # Recall never returns what retention removed.
    with aged.transaction():
        in_scope(aged, "r1")
        bodies = {
            str(r[0])
            for r in aged.execute(
                "SELECT body FROM pgmem.memory_recall('r1', ARRAY[%s::vector], x => 50, floor => -1)", (vec("q"),)
            )
        }
        assert bodies == {"r1 turn 2", "r1 turn 3", "r1 turn 4 (no time, new)"}
        applied = aged.execute("SELECT applied_at IS NOT NULL FROM pgmem.get_retention('r1')").fetchone()
        assert applied == (True,)
    # Again: nothing left to remove; one row per scope all the same.
    again = owner.execute("SELECT scope_id, turns, pieces, facts, threads, recall_logs FROM pgmem.apply_retention()")
    assert again.fetchall() == [("r1", 0, 0, 0, 0, 0), ("r2", 0, 0, 0, 0, 0)]
    # A superuser may run it too, and the owner's transaction setting is put back.
    assert len(admin_conn.execute("SELECT * FROM pgmem.apply_retention()").fetchall()) == 2
    with owner.transaction():
        in_scope(owner, "r2")
        owner.execute("SELECT * FROM pgmem.apply_retention()")
        assert owner.execute("SELECT current_setting('pgmem.scope')").fetchone() == ("r2",)


def test_apply_retention_as_documented_from_psql(aged: Conn, owner: Conn, db_url: str, admin_conn: Conn) -> None:
    """The cron line of docs/operations.md, literally (as the migrating login)."""
    psql = server.bin_dir() / "psql"
    proc = subprocess.run(
        [
            str(psql),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            role_url(db_url, OWNER_LOGIN),
            "-c",
            "SELECT * FROM pgmem.apply_retention()",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "apply_retention: scope r2: 3 turns" in proc.stderr
    assert _turns(admin_conn, "r2") == [("a", 3), ("a", 4), ("b", 7)]


def test_apply_retention_refuses_who_sees_one_scope(aged: Conn, admin_conn: Conn, db_url: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="retention must see every scope") as err:
        aged.execute("SELECT * FROM pgmem.apply_retention()")
    assert "pgmem_owner" in (err.value.diag.message_hint or "")
    with aged.transaction():  # with a scope set, the same
        in_scope(aged, "r1")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            aged.execute("SELECT * FROM pgmem.apply_retention()")
    ensure_login_roles(admin_conn)
    reader = connect_as(db_url, READER_LOGIN)
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("SELECT * FROM pgmem.apply_retention()")
    finally:
        reader.close()
    assert len(_turns(admin_conn, "r2")) == 6  # nothing removed


def test_forget_scope_takes_its_setting(aged: Conn, admin_conn: Conn) -> None:
    with aged.transaction():
        in_scope(aged, "r2")
        aged.execute("SELECT * FROM pgmem.forget_scope('r2')")
    assert admin_conn.execute("SELECT scope_id FROM pgmem.retention ORDER BY 1").fetchall() == [("r1",)]


def test_apply_retention_reads_the_recall_log_once_a_scope(conn: Conn, admin_conn: Conn) -> None:
    """Each expired turn went through forget_turn, whose last step read the scope's whole recall
    log for the rows that returned it: expired turns times log rows (2,000 turns and 1,600 log
    rows took 20 s, 2,000 and 3,200 took 42 s). The log is now read once a scope, and the same
    rows go: those naming an expired turn's piece, its fact or the turn itself."""
    with conn.transaction():
        in_scope(conn, "big")
        for i in range(60):
            put_turn(conn, "big", f"t{i % 3}", i // 3, [f"big turn {i}"])
        conn.execute(
            "SELECT pgmem.add_facts('big', 'test:hash', ARRAY['about t1/0'], ARRAY[%s::vector], ARRAY['t1'], ARRAY[0])",
            (vec("f"),),
        )
        ids = conn.execute(
            "SELECT (SELECT piece_id FROM pgmem.piece WHERE thread_id = 't0' AND turn_index = 3),"
            " (SELECT fact_id FROM pgmem.fact WHERE thread_id = 't1')"
        ).fetchone()
        assert ids is not None
        named = [
            f'[{{"piece_id": {ids[0]}}}]',  # an expired turn's piece
            f'[{{"fact_id": {ids[1]}}}]',  # the fact of an expired turn (fact plane)
            '[{"thread_id": "t2", "turn_index": 7}]',  # an expired turn
            '[{"thread_id": "t2", "turn_index": 19}]',  # a kept turn: stays
        ]
        for i, results in enumerate(named + ["[]"] * 40):
            plane = "fact" if i == 1 else "memory"
            conn.execute(
                "SELECT pgmem.log_recall('big', %s, 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, NULL, 'vector',"
                " %s::jsonb)",
                (plane, vec("q"), results),
            )
        conn.execute("SELECT pgmem.set_retention('big', keep_turns => 1)")
    with admin_conn.transaction():
        rows = admin_conn.execute(
            "SELECT scope_id, turns, pieces, facts, threads, recall_logs FROM pgmem.apply_retention()"
        ).fetchall()
        read = admin_conn.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE relid = 'pgmem.recall_log'::regclass"
        ).fetchone()
    assert rows == [("big", 57, 57, 1, 0, 3)]
    assert _turns(admin_conn, "big") == [("t0", 19), ("t1", 19), ("t2", 19)]
    assert _count(admin_conn, "recall_log", "big") == 41
    # 44 log rows: read once (and once more by the delete), not once for each of the 57 turns.
    assert read is not None and int(str(read[0])) <= 4 * 44, read


def test_a_turn_and_a_log_row_exactly_at_their_age_bound_stay(conn: Conn, admin_conn: Conn) -> None:
    """keep_days and log_keep_days remove what is older than the bound, not what is exactly that
    old: a turn stored 30 days ago to the microsecond stays under keep_days => 30, one a second
    older goes; the same for the recall log under log_keep_days => 10. The ages are set and
    retention applied in one transaction, so now() is the same instant for both."""
    with conn.transaction():
        in_scope(conn, "edge")
        put_turn(conn, "edge", "t", 0, ["edge turn 0, exactly 30 days old"])
        put_turn(conn, "edge", "t", 1, ["edge turn 1, a second older"])
        for _ in range(2):
            conn.execute(
                "SELECT pgmem.log_recall('edge', 'memory', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, NULL, 'vector',"
                " '[]')",
                (vec("q"),),
            )
        conn.execute("SELECT pgmem.set_retention('edge', keep_days => 30, log_keep_days => 10)")
    with admin_conn.transaction():
        admin_conn.execute(
            "UPDATE pgmem.turn SET turn_time = now() - interval '30 days' - make_interval(secs => turn_index)"
            " WHERE scope_id = 'edge'"
        )
        admin_conn.execute(
            "UPDATE pgmem.recall_log SET created_at = now() - interval '10 days'"
            " - make_interval(secs => recall_id"
            "                         - (SELECT min(recall_id) FROM pgmem.recall_log WHERE scope_id = 'edge'))"
            " WHERE scope_id = 'edge'"
        )
        rows = admin_conn.execute(
            "SELECT scope_id, turns, pieces, facts, threads, recall_logs FROM pgmem.apply_retention()"
        ).fetchall()
        kept_log = admin_conn.execute(
            "SELECT created_at = now() - interval '10 days' FROM pgmem.recall_log WHERE scope_id = 'edge'"
        ).fetchall()
    assert rows == [("edge", 1, 1, 0, 0, 1)]
    assert _turns(admin_conn, "edge") == [("t", 0)]
    assert kept_log == [(True,)]


def test_keep_days_removes_store_items_not_put_again_and_keep_turns_never_does(conn: Conn, admin_conn: Conn) -> None:
    """A LangGraph store item is its thread's turn 0, timed at its last put (docs/operations.md,
    Retention): keep_days removes an item not put again within that many days, as a delete
    would, and leaves the others; keep_turns keeps every item (each is its thread's only turn)."""
    from pgmem.integrations.langgraph import PgmemStore, item_thread, namespace_scope
    from tests.security_helpers import HashEmbedder

    ns = ("users", "u1")
    store = PgmemStore(conn, embedder=HashEmbedder(), floor=-1)
    store.put(ns, "old", {"text": "the spare key is under the blue flowerpot"})
    store.put(ns, "new", {"text": "the ferry leaves at nine"})
    scope = namespace_scope(ns)
    _set(conn, scope, keep_turns=1)
    admin_conn.execute("SELECT * FROM pgmem.apply_retention()").fetchall()
    assert store.get(ns, "old") is not None and store.get(ns, "new") is not None
    backdate = "UPDATE pgmem.turn SET turn_time = now() - interval '40 days' WHERE scope_id = %s AND thread_id = %s"
    admin_conn.execute(backdate, (scope, item_thread("old")))
    admin_conn.execute(backdate, (scope, item_thread("new")))
    # The items' own rows as old as their turns (retention ages an item by its last put, 0089).
    admin_conn.execute(
        "UPDATE pgmem.store_item SET created_at = now() - interval '40 days', updated_at = now() - interval '40 days'"
        " WHERE scope_id = %s",
        (scope,),
    )
    store.put(ns, "new", {"text": "the ferry leaves at ten"})  # put again: its clock restarts
    _set(conn, scope, keep_days=30)
    rows = admin_conn.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall()
    assert (scope, 1) in rows
    assert store.get(ns, "old") is None and store.get(ns, "new") is not None
    assert [i.key for i in store.search(ns)] == ["new"]
    assert store.list_namespaces() == [ns]


@pytest.mark.parametrize("again", ["changed", "unchanged"])
def test_keep_days_keeps_a_store_item_put_again_within_them_whenever_it_was_created(
    conn: Conn, admin_conn: Conn, again: str
) -> None:
    """Two items put 40 days ago (their rows and turns dated then, as they would be); one is put
    again now, with a changed or the same value. keep_days => 30 must remove only the other
    (docs/operations.md: an item is timed at its last put). The item's turn is timed at the
    item's created_at, which a put again keeps, so the item put again now was removed as well:
    its turn still said 40 days (with a changed value its turn was even replaced, and stored
    with that old time again)."""
    from pgmem.integrations.langgraph import PgmemStore, namespace_scope
    from tests.security_helpers import HashEmbedder

    ns = ("users", "u2")
    store = PgmemStore(conn, embedder=HashEmbedder(), floor=-1)
    store.put(ns, "old", {"text": "the spare key is under the blue flowerpot"})
    store.put(ns, "new", {"text": "the ferry leaves at nine"})
    scope = namespace_scope(ns)
    admin_conn.execute(
        "UPDATE pgmem.store_item SET created_at = now() - interval '40 days', updated_at = now() - interval '40 days'"
        " WHERE scope_id = %s",
        (scope,),
    )
    admin_conn.execute("UPDATE pgmem.turn SET turn_time = now() - interval '40 days' WHERE scope_id = %s", (scope,))
    text = "the ferry leaves at ten" if again == "changed" else "the ferry leaves at nine"
    store.put(ns, "new", {"text": text})
    _set(conn, scope, keep_days=30)
    rows = admin_conn.execute("SELECT scope_id, turns FROM pgmem.apply_retention()").fetchall()
    assert (scope, 1) in rows
    assert store.get(ns, "old") is None
    got = store.get(ns, "new")
    assert got is not None and got.value == {"text": text}
    assert [i.key for i in store.search(ns, query="ferry")] == ["new"]


def test_keep_days_removes_store_items_without_a_turn_not_put_again(conn: Conn, admin_conn: Conn) -> None:
    """keep_days removes the store items not put again within that many days
    (docs/operations.md), and an item without a turn is one too: a plain key-value item
    (put with index=False) and one a store with its own embed indexes with field vectors.
    Until rt60 retention aged turns only, and those items (their values, and their field
    vectors) outlived every keep_days, while an indexed item of the same age went."""
    from pgmem.integrations.langgraph import PgmemStore, namespace_scope
    from tests.security_helpers import HashEmbedder

    def axis(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0, 0.0] if "ferry" in t else [0.0, 1.0, 0.0, 0.0] for t in texts]

    plain, vectors = ("users", "u3"), ("users", "u4")
    store = PgmemStore(conn, embedder=HashEmbedder(), floor=-1, directory="ret")
    store.put(plain, "old", {"text": "the spare key is under the blue flowerpot"}, index=False)
    store.put(plain, "new", {"text": "the ferry leaves at nine"}, index=False)
    fields = PgmemStore(conn, index={"dims": 4, "embed": axis, "fields": ["text"]}, directory="ret")
    fields.put(vectors, "old", {"text": "the ferry leaves at nine"})
    forty = "now() - interval '40 days'"
    backdate = f"UPDATE pgmem.store_item SET created_at = {forty}, updated_at = {forty} WHERE scope_id = %s"
    for ns in (plain, vectors):
        admin_conn.execute(backdate, (namespace_scope(ns),))
        _set(conn, namespace_scope(ns), keep_days=30)
    store.put(plain, "new", {"text": "the ferry leaves at ten"}, index=False)  # put again: its clock restarts
    admin_conn.execute("SELECT * FROM pgmem.apply_retention()").fetchall()
    assert store.get(plain, "old") is None and store.get(plain, "new") is not None
    assert fields.get(vectors, "old") is None and fields.search(vectors, query="ferry") == []
    assert _count(admin_conn, "store_vector", namespace_scope(vectors)) == 0
    # Remembered as deleted (an import of an older copy does not bring them back), and a
    # namespace left without items leaves the directory.
    assert _count(admin_conn, "store_tombstone", namespace_scope(plain)) == 1
    assert _count(admin_conn, "store_tombstone", namespace_scope(vectors)) == 1
    assert store.list_namespaces() == [plain]


def test_keep_days_removes_the_facts_whose_turn_is_not_stored_but_not_a_stored_document_s(
    conn: Conn, admin_conn: Conn
) -> None:
    """keep_days removed a turn's facts with the turn, and nothing else of the fact plane: a fact
    tied to a thread only, to no thread, or to a turn that never came outlived every keep_days
    (0117). They go by when they were stored, as forget_fact removes them (the recall-log rows
    that returned them, and a thread left with nothing); a fact about a stored document stays
    with it, and a fact stored within keep_days stays."""
    bodies = ["thread only", "no thread", "turn never came", "about the handbook", "about a gone doc", "recent"]
    with conn.transaction():
        in_scope(conn, "rf")
        put_turn(conn, "rf", "kept", 0, ["a recent turn"], turn_time=_ago(1))
        conn.execute(
            """SELECT pgmem.put_document('rf', 'handbook', 'Handbook', 'b', '\\x00', 'test:hash', '[["H"]]'::jsonb,
                   ARRAY['# H'], ARRAY[0], ARRAY['heading'], ARRAY[0], ARRAY[0], ARRAY[3],
                   ARRAY['H'], ARRAY['H'], ARRAY[%s]::vector[])""",
            (vec("h"),),
        )
        conn.execute(
            "SELECT pgmem.add_facts('rf', 'test:hash', %s, %s::vector[], %s, %s, %s)",
            (
                bodies,
                [vec(b) for b in bodies],
                ["lonely", None, "kept", None, None, "lonely"],
                [None, None, 7, None, None, None],
                [None, None, None, "handbook#intro", "gone#x", None],
            ),
        )
        conn.execute("SELECT pgmem.set_retention('rf', keep_days => 30)")
    ids = {
        str(b): int(str(i)) for b, i in admin_conn.execute("SELECT body, fact_id FROM pgmem.fact WHERE scope_id = 'rf'")
    }
    with conn.transaction():
        in_scope(conn, "rf")
        conn.execute(
            "SELECT pgmem.log_recall('rf', 'fact', 'q', ARRAY['q'], ARRAY[%s::vector], 5, 0.2, NULL, 'vector',"
            " %s::jsonb)",
            (vec("q"), f'[{{"fact_id": {ids["no thread"]}}}]'),
        )
    admin_conn.execute(
        "UPDATE pgmem.fact SET created_at = now() - interval '40 days' WHERE scope_id = 'rf' AND body <> 'recent'"
    )
    rows = admin_conn.execute(
        "SELECT scope_id, turns, pieces, facts, threads, recall_logs FROM pgmem.apply_retention()"
    )
    # Three facts without a stored turn and one about a document the scope does not hold; thread
    # "lonely" keeps its recent fact, so no thread goes; the log row that returned one goes.
    assert rows.fetchall() == [("rf", 0, 0, 4, 0, 1)]
    left = {str(r[0]) for r in admin_conn.execute("SELECT body FROM pgmem.fact WHERE scope_id = 'rf'")}
    assert left == {"recent", "about the handbook"}
    assert admin_conn.execute("SELECT count(*) FROM pgmem.recall_log WHERE scope_id = 'rf'").fetchone() == (0,)
    # Its last fact gone as well, thread "lonely" goes with it; the turn's thread stays.
    admin_conn.execute("UPDATE pgmem.fact SET created_at = now() - interval '40 days' WHERE scope_id = 'rf'")
    rows = admin_conn.execute(
        "SELECT scope_id, turns, pieces, facts, threads, recall_logs FROM pgmem.apply_retention()"
    )
    assert rows.fetchall() == [("rf", 0, 0, 1, 1, 0)]
    threads = admin_conn.execute("SELECT thread_id FROM pgmem.thread WHERE scope_id = 'rf' ORDER BY 1").fetchall()
    assert threads == [("kept",)]
    assert _count(admin_conn, "fact", "rf") == 1  # the stored document's


def test_apply_retention_removes_the_store_s_delete_records_after_their_30_days(
    conn: Conn, owner: Conn, admin_conn: Conn
) -> None:
    """The sha256 of a deleted store key (pgmem.store_tombstone) and of a forgotten scope
    (pgmem.forgotten_scope) are kept 30 days (docs/security.md), but only the next delete,
    expiry or forget of the same kind pruned them: a namespace whose last delete was 40 days ago,
    or a database where no scope was forgotten since, kept them for ever. apply_retention, the
    scheduled maintenance, now removes every scope's records older than 30 days (those of
    scopes without a retention setting too), and keeps the younger ones."""
    from pgmem.forget import forget_scope
    from pgmem.integrations.langgraph import PgmemStore, namespace_scope
    from tests.security_helpers import HashEmbedder

    store = PgmemStore(conn, embedder=HashEmbedder(), directory="ret")
    old, young = ("users", "gone-long-ago"), ("users", "gone-yesterday")
    for ns in (old, young):
        store.put(ns, "k1", {"text": "a note"}, index=False)
        store.put(ns, "k2", {"text": "another note"}, index=False)
        store.delete(ns, "k1")
    store.put(("users", "left"), "k", {"text": "a note"}, index=False)
    forget_scope(conn, namespace_scope(("users", "left")))
    admin_conn.execute(
        "UPDATE pgmem.store_tombstone SET deleted_at = now() - interval '40 days' WHERE scope_id = %s",
        (namespace_scope(old),),
    )
    admin_conn.execute("UPDATE pgmem.forgotten_scope SET forgotten_at = now() - interval '40 days'")
    assert _count(admin_conn, "store_tombstone", namespace_scope(old)) == 1
    owner.execute("SELECT * FROM pgmem.apply_retention()").fetchall()
    assert _count(admin_conn, "store_tombstone", namespace_scope(old)) == 0
    assert _count(admin_conn, "store_tombstone", namespace_scope(young)) == 1
    assert admin_conn.execute("SELECT count(*) FROM pgmem.forgotten_scope").fetchone() == (0,)
    # Nothing else went: the items left, and a younger forgotten scope's record.
    assert store.get(old, "k2") is not None and store.get(young, "k2") is not None
    store.put(("users", "left2"), "k", {"text": "a note"}, index=False)
    forget_scope(conn, namespace_scope(("users", "left2")))
    owner.execute("SELECT * FROM pgmem.apply_retention()").fetchall()
    assert admin_conn.execute("SELECT count(*) FROM pgmem.forgotten_scope").fetchone() == (1,)
