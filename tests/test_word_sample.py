"""The word side's stored sample (pgmem.word_sample, migration 0026): index maintenance stores the
lexeme counts of a scope's first 1,000 pieces (a row of pgmem.scope_index_plan, running
pgmem.refresh_word_sample), the word side reads them while they are still those pieces', and
counts them itself otherwise. Either way it searches the same words."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import psycopg
import pytest

from pgmem.db import scoped
from pgmem.ingest import ingest_turns
from tests.security_helpers import (
    APP_LOGIN,
    Conn,
    HashEmbedder,
    app_conn,
    connect_as,
    graded_texts,
    maintenance_login,
    make_turn,
)

__all__ = ["app_conn"]

MODEL = "test:hash"
BIG = "sampled"
SMALL = "unsampled"
#: A LOGIN member of pgmem_owner: the login that migrates pgmem and runs index maintenance.
OWNER_LOGIN = "pgmem_test_sample_maint"
VOCAB = [f"s{i:03d}q" for i in range(80)]
PLAN = "SELECT scope_id, plane, action, ddl FROM pgmem.scope_index_plan() WHERE plane = 'words' AND action = 'sample'"


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    return graded_texts(rng, VOCAB, n)


def _message(rng: np.random.Generator) -> list[str]:
    return [" ".join(rng.choice(VOCAB, size=12, replace=False)) for _ in range(4)]


@pytest.fixture
def owner(admin_conn: Conn, db_url: str) -> Iterator[Conn]:
    c = maintenance_login(admin_conn, db_url, OWNER_LOGIN)
    yield c
    c.close()


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    """BIG: 1,150 memory pieces in 5 threads (one piece a turn); SMALL: 40."""
    rng = np.random.default_rng(26)
    turns = [make_turn(BIG, f"t{i % 5}", i // 5, t) for i, t in enumerate(_texts(rng, 1150))]
    turns += [make_turn(SMALL, "t", i, t) for i, t in enumerate(_texts(rng, 40))]
    assert not ingest_turns(app_conn, turns, HashEmbedder(model_id=MODEL), bulk=True).failed
    return app_conn


def _words(conn: Conn, scope: str, messages: list[list[str]]) -> list[list[tuple[object, ...]]]:
    out = []
    with scoped(conn, scope):
        for m in messages:
            out.append(conn.execute("SELECT * FROM pgmem.message_words(%s, %s)", (scope, m)).fetchall())
            out.append(conn.execute("SELECT * FROM pgmem.word_candidates(%s, %s, 10)", (scope, m)).fetchall())
    return out


def _run_plan(owner: Conn) -> list[str]:
    done = []
    for scope, _plane, _action, ddl in owner.execute(PLAN).fetchall():
        owner.execute(str(ddl))
        done.append(str(scope))
    return done


def _sample_reads(admin_conn: Conn) -> int:
    row = admin_conn.execute(
        "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables"
        " WHERE relid = 'pgmem.word_sample'::regclass"
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_the_plan_stores_the_sample_and_the_word_side_reads_it(store: Conn, owner: Conn, admin_conn: Conn) -> None:
    rng = np.random.default_rng(1)
    messages = [_message(rng) for _ in range(6)]
    counted = _words(store, BIG, messages)
    plan = owner.execute(PLAN).fetchall()
    assert [(s, a, d) for s, _, a, d in plan] == [
        (BIG, "sample", f"SELECT pgmem.refresh_word_sample('{BIG}', 'memory')")
    ]  # SMALL has 40 pieces: no sample
    assert _run_plan(owner) == [BIG]
    assert owner.execute(PLAN).fetchall() == []
    # What is stored: the lexemes in more than 3 of the first 1,000 pieces by id, with their counts.
    with scoped(store, BIG):
        first = store.execute(
            "SELECT string_to_array(lexemes, ' ') FROM pgmem.piece_word"
            " WHERE scope_id = %s ORDER BY piece_id LIMIT 1000",
            (BIG,),
        ).fetchall()
        stored = store.execute(
            "SELECT pieces, lexemes, counts FROM pgmem.word_sample WHERE scope_id = %s AND kind = 'memory'", (BIG,)
        ).fetchone()
    counts: dict[str, int] = {}
    for (lexemes,) in first:
        for lx in lexemes:  # type: ignore[attr-defined]
            counts[lx] = counts.get(lx, 0) + 1
    assert stored is not None and stored[0] == 1000
    assert dict(zip(stored[1], stored[2], strict=True)) == {k: v for k, v in counts.items() if v > 3}  # type: ignore[call-overload]
    # The word side reads it, as the service's login, and finds the same words and pieces.
    before = _sample_reads(admin_conn)
    assert _words(store, BIG, messages) == counted
    with scoped(store, BIG):
        store.execute("SELECT pg_stat_force_next_flush()")
    store.execute("SELECT 1")
    deadline = time.monotonic() + 10
    while _sample_reads(admin_conn) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sample_reads(admin_conn) > before
    # Only its own scope's sample is visible to the login.
    with scoped(store, SMALL):
        assert store.execute("SELECT count(*) FROM pgmem.word_sample").fetchone() == (0,)


def test_a_forgotten_piece_of_the_sample_makes_it_stale(store: Conn, owner: Conn) -> None:
    rng = np.random.default_rng(2)
    messages = [_message(rng) for _ in range(6)]
    _run_plan(owner)
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_turn(%s, 't0', 0)", (BIG,))
    # Stale: the word side counts the sample itself (the first 1,000 pieces now end one later),
    # and the plan stores it again; the words are the same before and after.
    stale = _words(store, BIG, messages)
    assert [a for _, _, a, _ in owner.execute(PLAN).fetchall()] == ["sample"]
    assert _run_plan(owner) == [BIG]
    assert _words(store, BIG, messages) == stale
    # Later pieces do not change the first 1,000: the sample stays valid.
    rng2 = np.random.default_rng(3)
    more = [make_turn(BIG, "t9", i, t) for i, t in enumerate(_texts(rng2, 30))]
    assert not ingest_turns(store, more, HashEmbedder(model_id=MODEL)).failed
    assert owner.execute(PLAN).fetchall() == []
    # Forgetting the scope takes its sample with it.
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_scope(%s)", (BIG,))
    assert owner.execute("SELECT count(*) FROM pgmem.word_sample").fetchone() == (0,)


def test_the_word_side_never_scans_the_word_table(store: Conn) -> None:
    """Each word is read through the word index, whatever the planner expects of the table: a
    word's read stops after share of the searched pieces, and for a small scope the planner
    found a scan cheaper, then computed every row's word keys for every word (3.5 s a question
    on a 120-piece scope among 690 evaluation scopes). Counted in the call's own transaction."""
    rng = np.random.default_rng(5)
    for scope, thread in ((SMALL, None), (SMALL, "t"), (BIG, None), (BIG, "t1")):
        with scoped(store, scope):
            hits = store.execute(
                "SELECT count(*) FROM pgmem.word_candidates(%s, %s, 10, %s)", (scope, _message(rng), thread)
            ).fetchone()
            scans = store.execute(
                "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'pgmem.piece_word'::regclass"
            ).fetchone()
        assert hits is not None and int(str(hits[0])) > 0, (scope, thread)
        assert scans == (0,), (scope, thread)


def test_refresh_is_maintenance_and_refuses_bad_arguments_in_one_line(store: Conn, owner: Conn) -> None:
    with scoped(store, BIG), pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        store.execute("SELECT pgmem.refresh_word_sample(%s)", (BIG,))
    primary = e.value.diag.message_primary or ""
    assert "index maintenance" in primary and "\n" not in primary
    for args, code in (
        ((None, "memory"), psycopg.errors.NullValueNotAllowed),
        ((BIG, "facts"), psycopg.errors.InvalidParameterValue),
        ((BIG, None), psycopg.errors.InvalidParameterValue),
        ((BIG, "memory\x01"), psycopg.errors.InvalidParameterValue),
    ):
        with pytest.raises(code) as err:
            owner.execute("SELECT pgmem.refresh_word_sample(%s, %s)", args)
        assert err.value.diag.message_primary and "\n" not in err.value.diag.message_primary
    with pytest.raises(psycopg.DataError):
        owner.execute("SELECT pgmem.refresh_word_sample(%s, 'memory')", ("bad\x00scope",))
    with pytest.raises(psycopg.errors.UndefinedFunction):
        owner.execute("SELECT pgmem.refresh_word_sample(%s)", (5,))
    assert owner.execute("SELECT pgmem.refresh_word_sample(%s)", ("x" * 1_000_000,)).fetchone() == (0,)
    # A set of 1,000 pieces or fewer has no sample; a scope that does not exist has none either.
    assert owner.execute("SELECT pgmem.refresh_word_sample(%s)", (SMALL,)).fetchone() == (0,)
    assert owner.execute("SELECT pgmem.refresh_word_sample(%s)", ("nobody",)).fetchone() == (0,)
    assert owner.execute("SELECT pgmem.refresh_word_sample(%s, 'document')", (BIG,)).fetchone() == (0,)
    assert owner.execute("SELECT scope_id, kind FROM pgmem.word_sample").fetchall() == []
    # The maintenance login's scope setting is left as it was.
    assert owner.execute("SELECT pgmem.refresh_word_sample(%s)", (BIG,)).fetchone() != (0,)
    assert owner.execute("SELECT coalesce(current_setting('pgmem.scope', true), '')").fetchone() == ("",)


def test_refresh_beside_writers_and_forgets(store: Conn, owner: Conn, db_url: str) -> None:
    """A writer adds turns, a forgetter forgets early turns (pieces of the sample) and the plan's
    refresh runs again and again, side by side: no error, no wait in a cycle, and whatever is
    stored at the end gives the words the word side counts itself."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        rng = np.random.default_rng(7)
        with connect_as(db_url, APP_LOGIN) as c:
            for i in range(40):
                turns = [make_turn(BIG, "w", i, t) for t in _texts(rng, 1)]
                if ingest_turns(c, turns, HashEmbedder(model_id=MODEL)).failed:
                    errors.append(RuntimeError("write failed"))

    def forgetter() -> None:
        with connect_as(db_url, APP_LOGIN) as c:
            for i in range(1, 30):
                with scoped(c, BIG):
                    c.execute("SELECT * FROM pgmem.forget_turn(%s, %s, %s)", (BIG, f"t{i % 5}", i // 5))

    def refresher() -> None:
        with connect_as(db_url, OWNER_LOGIN) as c:
            while not stop.is_set():
                c.execute("SELECT pgmem.refresh_word_sample(%s)", (BIG,))

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guard(f)) for f in (writer, forgetter)]
    refresh = threading.Thread(target=guard(refresher))
    for t in (*threads, refresh):
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    refresh.join(60)
    assert not errors, errors
    rng = np.random.default_rng(4)
    messages = [_message(rng) for _ in range(4)]
    as_stored = _words(store, BIG, messages)
    _run_plan(owner)
    refreshed = _words(store, BIG, messages)
    with owner.transaction():
        owner.execute("SELECT set_config('pgmem.scope', %s, true)", (BIG,))
        owner.execute("DELETE FROM pgmem.word_sample")
    assert as_stored == refreshed == _words(store, BIG, messages)


def test_the_sample_check_holds_whichever_kind_comes_first(store: Conn, owner: Conn) -> None:
    # BIG's 1,150 memory pieces come first by id, then two documents' units. The memory sample is
    # checked by reading the scope's first pieces in id order; the documents' sample ends past
    # more than twice its size of the scope's pieces, so its units are counted by kind instead.
    # Either way a stored sample is valid until a piece of it goes.
    from pgmem.documents.store import Document, add_documents

    sections = "\n\n".join(
        f"## Part {i}\n\nThe {VOCAB[i % 80]} crate {i} sits by the {VOCAB[i * 7 % 80]}." for i in range(1100)
    )
    tail = "\n\n".join(f"## Extra {i}\n\nA {VOCAB[i]} note." for i in range(10))
    embedder = HashEmbedder(model_id=MODEL)
    add_documents(store, BIG, [Document("a.md", sections)], embedder)
    add_documents(store, BIG, [Document("b.md", tail)], embedder)

    def valid(kind: str) -> bool:  # the plan's check, as index maintenance runs it
        with scoped(owner, BIG):
            row = owner.execute("SELECT pgmem._word_sample_valid(%s, %s)", (BIG, kind)).fetchone()
        assert row is not None
        return bool(row[0])

    with scoped(store, BIG):
        units = store.execute(
            "SELECT count(*) FROM pgmem.piece WHERE scope_id = %s AND kind = 'document'", (BIG,)
        ).fetchone()
    assert units is not None and int(str(units[0])) > 1000
    for kind in ("memory", "document"):
        assert not valid(kind)  # none stored yet
        owner.execute("SELECT pgmem.refresh_word_sample(%s, %s)", (BIG, kind))
        assert valid(kind)
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_document(%s, 'b.md')", (BIG,))  # after both samples
    assert valid("memory") and valid("document")
    with scoped(store, BIG):
        store.execute("SELECT * FROM pgmem.forget_document(%s, 'a.md')", (BIG,))
        store.execute("SELECT * FROM pgmem.forget_turn(%s, 't1', 0)", (BIG,))
    assert not valid("document") and not valid("memory")
