"""A forget of a document beside a writer creating the document: no deadlock (0083).

forget_document locks the document row FOR UPDATE before it deletes anything (the lock order:
scope row, store item or document, thread, turn, pieces and facts; the recall-log lock last). A
SELECT ... FOR UPDATE does not see a row another transaction is inserting, so a forget that
started while a put_document created the document locked nothing and returned at once, holding
the scope's recall-log lock; once the writer had committed, a second forget locked the committed
row and waited for that lock, while the first forget's transaction, putting the document again,
waited for the second's row: a deadlock (40P01). The same held for a scope row being inserted.
forget_document now inserts a row it does not find, as pgmem._lock_thread does since 0082,
which waits for the writer's insert, and deletes it again when there was none.

Run as the application login, with sessions whose steps run on threads of their own."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial

import psycopg
import pytest

from pgmem import forget_document
from pgmem.documents.store import Document, DocumentReport, add_documents, remove_document
from pgmem.facts import Fact, add_facts
from pgmem.forget import Forgotten
from pgmem.lab.bench.churn import deadlocks
from tests.test_lock_order import EMB, Session, deadlocks_now, first_line, outcome, stress, waits_for_lock

Conn = psycopg.Connection[tuple[object, ...]]
#: 1,000 characters (3,000 bytes) that do not compress: too long for the document key's index (54000).
WIDE_ID = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(1000))


def _count(admin: Conn, query: str, params: tuple[object, ...]) -> int:
    row = admin.execute(query, params).fetchone()
    assert row is not None
    return int(str(row[0]))


def _put(scope: str, doc_id: str, text: str) -> Callable[[Conn], DocumentReport]:
    return lambda c: add_documents(c, scope, [Document(doc_id, text)], EMB)


@pytest.mark.parametrize("scope_exists", [True, False], ids=["new document", "new scope"])
def test_a_forget_of_a_document_being_created_waits_for_its_writer_so_a_second_forget_cannot_meet_it_halfway(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session], scope_exists: bool
) -> None:
    """A writer creates document d.md (and, in the second case, its scope) in an open
    transaction. Forget A of d.md starts, in a transaction that then puts the document anew (a
    re-import: forget it, add it). Before 0083 A saw no row, locked nothing and returned at once,
    holding the scope's recall-log lock; after the writer's commit forget B locked the document,
    deleted its units and waited for that lock, while A's put of the document waited for B's
    delete: a deadlock (40P01). Now A waits for the writer and forgets its document; B waits for
    A, then forgets A's new version."""
    scope = f"lock-doc-{uuid.uuid4().hex[:8]}"
    if scope_exists:
        assert (
            add_documents(conn, scope, [Document("other.md", "# Other\n\nalpha about the harbour\n")], EMB).inserted
            == 1
        )
    before = deadlocks(admin_conn)
    writer, a, b = sessions(), sessions(), sessions()

    writer.begin(scope)
    assert writer.do(_put(scope, "d.md", "# D\n\nbravo, the document's first version\n")).inserted == 1
    a.begin(scope)
    first = a.start(lambda c: forget_document(c, scope, "d.md"))
    a_waited = waits_for_lock(admin_conn, first, a.pid)  # for the writer's insert of the row
    writer.commit()
    first_forgot = outcome(first)
    second = b.start(lambda c: forget_document(c, scope, "d.md"))
    b_waited = waits_for_lock(admin_conn, second, b.pid)
    rewritten = outcome(a.start(_put(scope, "d.md", "# D\n\ncharlie, written anew\n")))
    if isinstance(rewritten, DocumentReport):
        a.commit()
    second_forgot = outcome(second)
    # B forgets in a transaction of its own: the library runs it again after a deadlock, which
    # only the server's count shows.
    assert deadlocks_now(admin_conn) - before == 0

    assert isinstance(rewritten, DocumentReport), f"A's put after its forget: {rewritten!r}"
    assert isinstance(second_forgot, Forgotten), f"forget B: {second_forgot!r}"
    assert a_waited, "forget A did not wait for the writer creating the document"
    assert isinstance(first_forgot, Forgotten), f"forget A: {first_forgot!r}"
    assert first_forgot.documents == 1 and first_forgot.pieces > 0  # the writer's, committed first
    assert b_waited
    assert (rewritten.inserted, rewritten.failed) == (1, [])
    assert second_forgot.documents == 1 and second_forgot.pieces > 0  # A's, committed before B ran
    for table in ("document", "chunk"):
        assert (
            _count(
                admin_conn, f"SELECT count(*) FROM pgmem.{table} WHERE scope_id = %s AND document_id = 'd.md'", (scope,)
            )
            == 0
        )
    orphans = (
        "SELECT count(*) FROM pgmem.piece p WHERE p.scope_id = %s AND p.kind = 'document' AND NOT EXISTS ("
        " SELECT 1 FROM pgmem.chunk c WHERE c.scope_id = p.scope_id AND c.chunk_id = p.chunk_id"
        " AND c.document_id = 'other.md')"
    )
    assert _count(admin_conn, orphans, (scope,)) == 0  # no unit of d.md is left


@pytest.mark.parametrize("call", ["forget_document", "remove_document"])
def test_a_forget_of_a_document_waits_for_a_writer_creating_it(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session], call: str
) -> None:
    """Begun while a writer creates the document, forget_document waits for the writer's commit
    and forgets the document (before 0083 it returned at once, forgetting nothing, and the
    document was stored after it). remove_document, which looks for the document under the same
    locks first (0097), waits the same and removes it."""
    scope = f"lock-doc1-{uuid.uuid4().hex[:8]}"
    assert add_documents(conn, scope, [Document("other.md", "# Other\n\nalpha about the harbour\n")], EMB).inserted == 1
    writer, forgetter = sessions(), sessions()
    writer.begin(scope)
    assert writer.do(_put(scope, "n.md", "# N\n\ndelta, a new document\n")).inserted == 1

    def gone_call(c: Conn) -> Forgotten | bool:
        if call == "forget_document":
            return forget_document(c, scope, "n.md")
        return remove_document(c, scope, "n.md")

    gone = forgetter.start(gone_call)
    assert waits_for_lock(admin_conn, gone, forgetter.pid)
    writer.commit()
    forgot = outcome(gone)
    if call == "forget_document":
        assert isinstance(forgot, Forgotten), f"the forget: {forgot!r}"
        assert forgot.documents == 1
    else:
        assert forgot is True, f"the remove: {forgot!r}"
    assert (
        _count(admin_conn, "SELECT count(*) FROM pgmem.document WHERE scope_id = %s AND document_id = 'n.md'", (scope,))
        == 0
    )


def test_a_remove_waiting_for_a_forget_of_the_document_removes_nothing_when_it_is_gone(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """A forgets d.md and, in the same transaction, notes a fact about it (a section may name a
    document that is not stored). B's remove_document of d.md, begun meanwhile, waits for A's lock
    on the document row; once A commits there is no document to remove: B returns False and the
    fact stays. Before 0097 B went through forget_document whole, which, with no document left,
    took the facts that name its id: A's new fact was deleted by a remove that answered False."""
    scope = f"lock-doc-rm-{uuid.uuid4().hex[:8]}"
    assert add_documents(conn, scope, [Document("d.md", "# D\n\nhotel, the first version\n")], EMB).inserted == 1
    a, b = sessions(), sessions()
    a.begin(scope)
    assert a.do(lambda c: forget_document(c, scope, "d.md")).documents == 1
    assert len(a.do(lambda c: add_facts(c, scope, [Fact("d.md is to be rewritten", section="d.md")], EMB))) == 1
    removed = b.start(lambda c: remove_document(c, scope, "d.md"))
    assert waits_for_lock(admin_conn, removed, b.pid)
    a.commit()
    assert outcome(removed) is False
    sections = admin_conn.execute("SELECT section FROM pgmem.fact WHERE scope_id = %s", (scope,)).fetchall()
    assert sections == [("d.md",)]


@pytest.mark.parametrize(
    "scope_name, doc_id",
    [
        ("exists", "never-written.md"),
        ("never-written", "d.md"),
        ("exists", "x" * 1001),
        ("exists", "\U0001f600" * 1000),
        ("exists", WIDE_ID),
        ("exists", "a\x00b"),
        ("exists", ""),
        ("exists", " "),
        ("exists", None),
    ],
)
def test_a_forget_of_a_document_or_scope_that_does_not_exist_leaves_no_row_and_answers_in_one_line(
    conn: Conn, admin_conn: Conn, scope_name: str, doc_id: str | None
) -> None:
    """forget_document inserts a row it does not find and deletes it again (0083): forgetting
    what was never written forgets nothing, leaves no document or scope row behind, and a name
    the tables cannot hold is refused in one line (a PgmemError) or forgets nothing. What is
    stored stays, and the document can be written afterwards."""
    from pgmem.errors import PgmemError

    base = f"lock-doc-none-{uuid.uuid4().hex[:8]}"
    scope = base if scope_name == "exists" else f"{base}-never"
    assert add_documents(conn, base, [Document("kept.md", "# Kept\n\necho about the harbour\n")], EMB).inserted == 1
    scopes = admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone()
    try:
        gone = forget_document(conn, scope, doc_id)  # type: ignore[arg-type]
    except PgmemError as exc:
        assert "\n" not in str(exc) and "Traceback" not in str(exc)
    else:
        assert (gone.documents, gone.pieces) == (0, 0)
    # The SQL function itself, past the Python checks: a name the table refuses, or NULL.
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (base,))
        for name in ("", "y" * 1001, "\U0001f600" * 1000, "\U0001f600" * 999 + "y", WIDE_ID):
            row = conn.execute("SELECT documents, pieces FROM pgmem.forget_document(%s, %s)", (base, name)).fetchone()
            assert row == (0, 0)
    with pytest.raises(psycopg.errors.NullValueNotAllowed), conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (base,))
        conn.execute("SELECT * FROM pgmem.forget_document(%s, NULL)", (base,))
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope").fetchone() == scopes
    assert admin_conn.execute("SELECT document_id FROM pgmem.document WHERE scope_id = %s", (base,)).fetchall() == [
        ("kept.md",)
    ]
    assert _count(admin_conn, "SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (f"{base}-never",)) == 0
    if doc_id == WIDE_ID:  # a document the index cannot hold: the writer is refused too
        assert [
            e.split(":")[0] for _, e in add_documents(conn, base, [Document(doc_id, "# W\n\nwide\n")], EMB).failed
        ] == ["54000"]
    if scope_name == "exists" and doc_id == "never-written.md":
        assert add_documents(conn, scope, [Document(doc_id, "# N\n\nfoxtrot, written after\n")], EMB).inserted == 1


@pytest.mark.parametrize("who", ["app", "superuser", "maintenance login"])
@pytest.mark.parametrize("what", ["document", "scope"])
def test_a_forget_of_a_document_never_written_leaves_no_row_under_every_role(
    conn: Conn, admin_conn: Conn, owner: Conn, who: str, what: str
) -> None:
    """forget_document inserts the document (or scope) row it does not find and deletes it again
    (0083): as the app login, a superuser (no scope set) and the maintenance login (row-level
    security is forced on pgmem_owner, which the function runs as), it forgets nothing, leaves
    no row, and a document stored beside it stays."""
    base = f"lock-doc-role-{uuid.uuid4().hex[:8]}"
    assert add_documents(conn, base, [Document("kept.md", "# Kept\n\ngolf about the harbour\n")], EMB).inserted == 1
    scope = base if what == "document" else f"{base}-never"
    caller = {"app": conn, "superuser": admin_conn, "maintenance login": owner}[who]
    with caller.transaction():
        if who != "superuser":
            caller.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        row = caller.execute("SELECT documents, pieces FROM pgmem.forget_document(%s, 'never.md')", (scope,)).fetchone()
    assert row == (0, 0)
    assert _count(admin_conn, "SELECT count(*) FROM pgmem.document WHERE scope_id = %s", (base,)) == 1
    assert _count(admin_conn, "SELECT count(*) FROM pgmem.document WHERE scope_id = %s", (f"{base}-never",)) == 0
    assert _count(admin_conn, "SELECT count(*) FROM pgmem.scope WHERE scope_id = %s", (f"{base}-never",)) == 0


def test_writers_creating_documents_beside_forgets_and_reimports_of_them_never_deadlock(
    app_url: str, admin_conn: Conn
) -> None:
    """Two clients put a few documents (each created again and again), two others forget them,
    half the time in a transaction that then puts the document again (a re-import), for four
    seconds: every call must succeed and the server detect no deadlock."""
    import random
    import threading

    from pgmem.db import connect

    scope = f"lock-doc-stress-{uuid.uuid4().hex[:8]}"
    with connect(app_url) as c:  # the scope and its model first: every writer then shares them
        assert add_documents(c, scope, [Document("seed.md", "# Seed\n\nabout the quay\n")], EMB).inserted == 1
    stop = threading.Event()
    errors: list[str] = []
    done = [0, 0]

    def text(rng: random.Random) -> str:
        return f"# Doc\n\nversion {rng.randint(0, 10**6)} about the ferry\n"

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with connect(app_url) as c:
            while not stop.is_set():
                try:
                    report = add_documents(c, scope, [Document(f"d{rng.randint(0, 2)}.md", text(rng))], EMB)
                    errors.extend(f"put: {e}" for _, e in report.failed)
                    done[0] += 1
                except Exception as exc:
                    errors.append(f"put: {first_line(exc)}")

    def forgetter(seed: int) -> None:
        rng = random.Random(seed)
        with connect(app_url) as c:
            while not stop.is_set():
                doc = f"d{rng.randint(0, 2)}.md"
                try:
                    if rng.random() < 0.25:
                        forget_document(c, scope, doc)
                    elif rng.random() < 1 / 3:  # a quarter of the calls
                        remove_document(c, scope, doc)
                    else:
                        with c.transaction():
                            forget_document(c, scope, doc)
                            report = add_documents(c, scope, [Document(doc, text(rng))], EMB)
                            errors.extend(f"reimport: {e}" for _, e in report.failed)
                    done[1] += 1
                except Exception as exc:
                    errors.append(f"forget: {first_line(exc)}")

    clients = [partial(writer, i) for i in range(2)] + [partial(forgetter, 10 + i) for i in range(2)]
    detected = stress(admin_conn, stop, clients)
    assert errors == []
    assert done[0] > 10 and done[1] > 10  # both kinds ran
    assert detected == 0


def _blocked_by(admin: Conn, pid: int, blocker: int) -> bool:
    """True once backend `pid` waits for a lock `blocker` holds (pg_blocking_pids)."""
    import time

    for _ in range(500):
        row = admin.execute("SELECT %s = ANY (pg_blocking_pids(%s))", (blocker, pid)).fetchone()
        if row == (True,):
            return True
        time.sleep(0.01)
    return False


def test_a_thread_gone_while_forget_document_locked_its_facts_threads_is_waited_for_not_met_halfway(
    conn: Conn, admin_conn: Conn, sessions: Callable[[], Session]
) -> None:
    """forget_document locked the threads of the facts about the document with a plain SELECT ...
    FOR UPDATE: a thread whose row a forget_thread deleted meanwhile was locked by nobody, so an
    add_facts created it again and added a fact about the document on it, and another add_facts
    locked it (KEY SHARE), then waited for a later thread the forget held; the forget, having
    deleted that fact, went on to drop the thread, now empty, and waited for the second writer: a
    deadlock (40P01, rt78). The forget now holds a thread it does not find as pgmem._lock_thread
    does (insert, delete again: a writer creating it waits), and deletes no fact of a thread it
    does not hold: one a writer added meanwhile stays, with its thread."""
    from pgmem.db import scoped
    from tests.security_helpers import hash_vector

    scope = f"lock-doc-facts-{uuid.uuid4().hex[:8]}"
    vec = hash_vector("a fact").tolist()

    def add(threads: list[str], bodies: list[str]) -> Callable[[Conn], object]:
        def go(c: Conn) -> object:
            try:
                with c.transaction(), scoped(c, scope):
                    return c.execute(
                        "SELECT pgmem.add_facts(%s, 'test:hash', %s, %s::vector[], %s, NULL, %s)",
                        (scope, bodies, [str(vec)] * len(bodies), threads, ["d.md"] * len(bodies)),
                    ).fetchall()
            except psycopg.Error as exc:
                return exc

        return go

    def forget_d(c: Conn) -> object:
        try:
            with c.transaction(), scoped(c, scope):
                return c.execute("SELECT * FROM pgmem.forget_document(%s, 'd.md')", (scope,)).fetchall()
        except psycopg.Error as exc:
            return exc

    assert add_documents(conn, scope, [Document("d.md", "# D\n\nindia about the harbour\n")], EMB).inserted == 1
    about_d = [Fact("ta: about d", "ta", section="d.md"), Fact("tb: about d", "tb", section="d.md")]
    assert len(add_facts(conn, scope, about_d, EMB)) == 2
    thread_forget, forgetter, first, second, third = (sessions() for _ in range(5))
    holder = psycopg.connect(admin_conn.info.dsn, password=admin_conn.info.password)
    try:
        # forget_thread(ta) in flight: the forget of d.md counts ta among its facts' threads and waits for it.
        thread_forget.begin(scope)
        assert not isinstance(
            thread_forget.do(lambda c: c.execute("SELECT * FROM pgmem.forget_thread(%s, 'ta')", (scope,)).fetchall()),
            Exception,
        )
        # A unit of d.md held: the forget stops at its delete of the units, past its thread locks.
        holder.execute("SELECT 1 FROM pgmem.piece WHERE scope_id = %s AND kind = 'document' FOR UPDATE", (scope,))
        gone = forgetter.start(forget_d)
        assert _blocked_by(admin_conn, forgetter.pid, thread_forget.pid)
        thread_forget.commit()
        assert _blocked_by(admin_conn, forgetter.pid, holder.info.backend_pid)
        # A fact about d.md on a thread the forget does not hold lands after it: it stays, and so
        # does its thread (before, the forget deleted the fact and left the thread without one).
        assert not isinstance(third.do(add(["tc"], ["tc: about d"])), Exception)
        # ta is gone: the first writer creates it again with a fact about d.md (before: at once),
        # the second holds it and waits for tb.
        added = first.start(add(["ta"], ["ta again: about d"]))
        first_waited = waits_for_lock(admin_conn, added, first.pid)
        if not first_waited:
            assert not isinstance(outcome(added), Exception)
        later = second.start(add(["ta", "tb"], ["ta later: about d", "tb later: about d"]))
        assert waits_for_lock(admin_conn, later, second.pid)
        holder.rollback()
        results = [outcome(gone), outcome(later), outcome(added)]
    finally:
        holder.close()
    errors = [first_line(r) for r in results if isinstance(r, BaseException)]
    assert errors == []
    assert first_waited  # for the forget, which holds ta's key
    facts = admin_conn.execute("SELECT thread_id, body FROM pgmem.fact WHERE scope_id = %s ORDER BY 1, 2", (scope,))
    assert facts.fetchall() == [
        ("ta", "ta again: about d"),
        ("ta", "ta later: about d"),
        ("tb", "tb later: about d"),
        ("tc", "tc: about d"),
    ]
    threads = admin_conn.execute("SELECT thread_id FROM pgmem.thread WHERE scope_id = %s ORDER BY 1", (scope,))
    assert threads.fetchall() == [("ta",), ("tb",), ("tc",)]
