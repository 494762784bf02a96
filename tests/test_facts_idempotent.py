"""Fact writes are idempotent by content (issue 12, item 12), and bad fact input is one clear
error (item 8's facts inputs), run as the app's login.

Same fact = same scope and the same body, thread, turn and section, compared exactly."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.errors import InputError
from pgmem.facts import Fact, add_facts, fact_recall, read_facts
from tests.lifecycle_helpers import until_waiting
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, app_conn, ensure_login_roles, role_url

__all__ = ["app_conn"]


def _count(conn: Conn, scope: str) -> int:
    with scoped(conn, scope):
        row = conn.execute("SELECT count(*) FROM pgmem.fact").fetchone()
    assert row is not None
    return int(str(row[0]))


FACTS = [
    Fact("The user's dog is called Rex."),
    Fact("The user moved to Lisbon.", thread="t1", turn_index=3),
    Fact("The export ran at 2 PM.", section="logistics"),
]


def test_adding_the_same_facts_again_stores_nothing(app_conn: Conn) -> None:
    embedder = HashEmbedder()
    first = add_facts(app_conn, "s", FACTS, embedder)
    assert len(first) == 3
    assert add_facts(app_conn, "s", FACTS, embedder) == []
    assert _count(app_conn, "s") == 3
    # Repeated within one call: stored once.
    again = [Fact("The user likes tea."), Fact("The user likes tea.")]
    assert len(add_facts(app_conn, "s", again, embedder)) == 1
    assert _count(app_conn, "s") == 4
    # Each field is part of the content: another thread, turn, section (or none) is another fact.
    variants = [
        Fact("The user moved to Lisbon."),
        Fact("The user moved to Lisbon.", thread="t2", turn_index=3),
        Fact("The user moved to Lisbon.", thread="t1", turn_index=4),
        Fact("The user moved to Lisbon.", section="t1"),
        Fact("the user moved to Lisbon.", thread="t1", turn_index=3),
    ]
    assert len(add_facts(app_conn, "s", variants, embedder)) == 5
    # Another scope holding the same facts is not affected.
    assert len(add_facts(app_conn, "other", FACTS, embedder)) == 3
    assert _count(app_conn, "s") == 9
    # Search returns each fact once (a part's hits: fact body, thread, turn, section in label).
    hits = fact_recall(app_conn, "s", "What is the dog called?", embedder, floor=-1.0, x=10)
    assert hits.groups and all(len(g.hits) == 9 for g in hits.groups)
    for g in hits.groups:
        content = [(h.body, h.thread_id, h.turn_index, h.label) for h in g.hits]
        assert len(content) == len(set(content))


def test_add_facts_in_sql_is_idempotent(app_conn: Conn) -> None:
    from tests.security_helpers import hash_vector

    call = (
        "SELECT count(*) FROM pgmem.add_facts('q', 'test:hash', %s, %s::vector[], thread_ids => %s,"
        " turn_indexes => %s, sections => %s)"
    )
    args = (["a", "b", "a"], [hash_vector(x) for x in "aba"], [None, "t", None], [None, 1, None], [None, None, None])
    with scoped(app_conn, "q"):
        assert app_conn.execute(call, args).fetchone() == (2,)
    with scoped(app_conn, "q"):
        assert app_conn.execute(call, args).fetchone() == (0,)
    assert _count(app_conn, "q") == 2


def test_facts_add_cli_twice_stores_each_fact_once(
    admin_conn: Conn, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    ensure_login_roles(admin_conn)
    monkeypatch.setenv("DATABASE_URL", role_url(db_url, APP_LOGIN))
    path = tmp_path / "facts.jsonl"
    path.write_text(
        '{"body": "The user\'s dog is called Rex."}\n'
        '{"body": "The user moved to Lisbon.", "thread": "t1", "turn": 3}\n'
        '{"body": "The user\'s dog is called Rex."}\n',
        encoding="utf-8",
    )
    assert main(["facts", "add", str(path), "--scope", "cli"]) == 0
    assert "added 2 facts (1 already stored)" in capsys.readouterr().out
    assert main(["facts", "add", str(path), "--scope", "cli"]) == 0
    assert "added 0 facts (3 already stored)" in capsys.readouterr().out
    with admin_conn.transaction():
        admin_conn.execute("SET LOCAL pgmem.scope = 'cli'")
        assert admin_conn.execute("SELECT count(*) FROM pgmem.fact").fetchone() == (2,)


BAD_LINES = {
    "nul": (b'{"body": "a NUL \\u0000 here"}\n', "NUL"),
    "invalid utf-8": (b'{"body": "dog\xffs"}\n', "invalid UTF-8"),
    "turn not a number": (b'{"body": "x", "turn": "abc"}\n', "turn must be an integer"),
    "negative turn": (b'{"body": "x", "turn": -1}\n', "turn must be an integer"),
    "huge turn": (b'{"body": "x", "turn": ' + b"9" * 5000 + b"}\n", "not valid JSON"),
    "turn without its thread": (b'{"body": "x", "turn": 3}\n', "turn 3 needs its thread"),
    "empty body": (b'{"body": "  "}\n', "body must be a non-empty string"),
    # An object without a body was told it was not an object ("expected an object {"body": ...}").
    "no body": (b'{"text": "x"}\n', 'a fact line needs "body" (its text); it has text'),
    "not an object": (b'["x"]\n', 'expected an object {"body"'),
    "thread not a string": (b'{"body": "x", "thread": 5}\n', "thread must be a non-empty string"),
    "not json": (b"{body}\n", "not valid JSON"),
    "misspelt key": (b'{"body": "x", "theard": "t"}\n', "unknown key 'theard'"),
    "huge body": (b'{"body": "' + b"x" * 1_000_000 + b'"}\n', "body is 1,000,000 bytes; at most 8,000"),
    "huge section": (b'{"body": "x", "section": "' + b"s" * 100_000 + b'"}\n', "section is 100,000 bytes"),
    "thread twice": (b'{"body": "x", "thread": "t", "thread_id": "u"}\n', "give thread or thread_id, not both"),
    "turn twice": (b'{"body": "x", "thread": "t", "turn": 1, "turn_index": 1}\n', "give turn or turn_index"),
}


def test_a_fact_line_names_its_thread_and_turn_as_a_turn_line_does(tmp_path: Path) -> None:
    """A turn's JSONL line takes thread or thread_id, turn or turn_index; a fact's took thread and
    turn only and dropped thread_id and turn_index without a word (the names fact_recall's hits and
    `pgmem facts search --json` use): the fact was stored tied to nothing, out of reach of
    forget_turn and forget_thread. Both names are read now, as for a turn."""
    path = tmp_path / "facts.jsonl"
    path.write_text(
        '{"body": "the ferry leaves at nine", "thread_id": "trip", "turn_index": 2}\n'
        '{"body": "the bus is late", "thread_id": "trip", "section": "bus.md"}\n',
        encoding="utf-8",
    )
    assert read_facts(path) == [
        Fact("the ferry leaves at nine", "trip", 2),
        Fact("the bus is late", "trip", section="bus.md"),
    ]


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_bad_fact_lines_are_one_clear_error(
    case: str,
    admin_conn: Conn,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pgmem.cli import main

    raw, reason = BAD_LINES[case]
    path = tmp_path / "facts.jsonl"
    path.write_bytes(b'{"body": "a good fact"}\n' + raw)
    with pytest.raises(InputError, match=rf"facts\.jsonl:2\b.*{re.escape(reason)}"):
        read_facts(path)
    ensure_login_roles(admin_conn)
    monkeypatch.setenv("DATABASE_URL", role_url(db_url, APP_LOGIN))
    assert main(["facts", "add", str(path), "--scope", "bad"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "facts.jsonl:2" in err and "Traceback" not in err
    # nothing of the file was stored
    with admin_conn.transaction():
        admin_conn.execute("SET LOCAL pgmem.scope = 'bad'")
        assert admin_conn.execute("SELECT count(*) FROM pgmem.fact").fetchone() == (0,)


@pytest.mark.parametrize(
    "fact",
    [
        Fact("nul \x00 inside"),
        Fact("lone surrogate \udcff"),
        Fact("x", turn_index="abc"),  # type: ignore[arg-type]
        Fact("x", turn_index=True),
        Fact("x", turn_index=2**31),
        Fact("x", turn_index=3),
        Fact("x", thread="t\x00"),
        Fact("x", section="\udc80"),
        Fact(""),
    ],
)
def test_bad_facts_through_python_are_input_errors(app_conn: Conn, fact: Fact) -> None:
    embedder = HashEmbedder()
    with pytest.raises(InputError, match=r"facts\[1\]"):
        add_facts(app_conn, "py", [Fact("fine"), fact], embedder)
    assert embedder.calls == 0
    for scope in ("", "s\x00", "\udcff"):
        with pytest.raises(InputError, match="scope"):
            add_facts(app_conn, scope, [Fact("fine")], embedder)
    assert _count(app_conn, "py") == 0


def test_cli_scope_that_postgres_cannot_store(
    admin_conn: Conn, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    ensure_login_roles(admin_conn)
    monkeypatch.setenv("DATABASE_URL", role_url(db_url, APP_LOGIN))
    path = tmp_path / "facts.jsonl"
    path.write_text('{"body": "fine"}\n', encoding="utf-8")
    assert main(["facts", "add", str(path), "--scope", "\udcff"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--scope" in err


def test_sql_add_facts_names_an_empty_body(app_conn: Conn) -> None:
    """The SQL function refuses an empty body with a message naming it (22023), not a bare
    check-constraint violation."""
    from tests.security_helpers import hash_vector

    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"bodies\[2\] is empty"), scoped(app_conn, "e"):
        app_conn.execute(
            "SELECT * FROM pgmem.add_facts('e', 'test:hash', %s, %s::vector[])",
            (["ok", ""], [hash_vector("a"), hash_vector("b")]),
        )


@pytest.mark.parametrize(
    ("bodies", "threads", "turns", "words"),
    [
        (["ok", " \t\n\u00a0"], ["t", "t"], [1, 2], r"bodies\[2\] is empty \(or only whitespace\)"),
        (["ok", "also ok"], ["t", "t"], [0, -3], r"turn_indexes\[2\] must be >= 0, got -3"),
        # A turn is a thread's: forget_turn could never reach a fact with a turn and no thread.
        (["ok", "also ok"], ["t", None], [0, 4], r"turn_indexes\[2\] needs its thread"),
        (["ok", "also ok"], None, [None, 4], r"turn_indexes\[2\] needs its thread"),
    ],
)
def test_sql_add_facts_keeps_python_rules(
    app_conn: Conn, bodies: list[str], threads: list[str | None] | None, turns: list[int | None], words: str
) -> None:
    """SQL holds the rules Python's check_fact applies: a blank body, a negative turn index or a
    turn index without its thread is one 22023 naming the entry, and nothing of the call is stored."""
    from tests.security_helpers import hash_vector

    with pytest.raises(psycopg.errors.InvalidParameterValue, match=words), scoped(app_conn, "e2"):
        app_conn.execute(
            "SELECT * FROM pgmem.add_facts('e2', 'test:hash', %s, %s::vector[], %s, %s)",
            (bodies, [hash_vector("a"), hash_vector("b")], threads, turns),
        )
    app_conn.rollback()
    with scoped(app_conn, "e2"):
        assert app_conn.execute("SELECT count(*) FROM pgmem.fact").fetchone() == (0,)


@pytest.mark.parametrize(
    ("threads", "turns", "sections", "words"),
    [
        ("[0:1]={ta,tb}", None, None, "thread_ids"),  # stored fact 1 under tb, fact 2 under none
        ("{{ta,tb},{tc,td}}", None, None, "thread_ids"),  # facts under no thread, four threads made
        ("{t,t}", "[2:3]={0,1}", None, "turn_indexes"),
        (None, None, "[0:1]={a.md,b.md}", "sections"),
        (None, None, "{{a.md},{b.md}}", "sections"),
    ],
)
def test_sql_add_facts_refuses_an_array_that_is_no_list_from_1(
    app_conn: Conn, admin_conn: Conn, threads: str | None, turns: str | None, sections: str | None, words: str
) -> None:
    """add_facts read its optional arrays by position from 1: one with other bounds or more
    dimensions, of the right length, tied each fact to another's thread, turn or section (or to
    none), and made thread rows no fact named. It is refused (22023 naming the argument), and
    nothing of the call is stored."""
    from tests.security_helpers import hash_vector

    with pytest.raises(psycopg.errors.InvalidParameterValue, match=words), scoped(app_conn, "shape"):
        app_conn.execute(
            "SELECT * FROM pgmem.add_facts('shape', 'test:hash', ARRAY['one', 'two'], %s::vector[],"
            " %s::text[], %s::integer[], %s::text[])",
            ([hash_vector("a"), hash_vector("b")], threads, turns, sections),
        )
    app_conn.rollback()
    for table in ("fact", "thread"):
        assert admin_conn.execute(f"SELECT count(*) FROM pgmem.{table}").fetchone() == (0,), table


def test_a_numpy_turn_index_is_an_integer_like_any_other(app_conn: Conn) -> None:
    """Every integer argument takes numpy's integers (a turn index read from a DataFrame); a
    fact's turn index was refused as "not an integer"."""
    import numpy as np

    fact = Fact("The user moved to Porto.", thread="t1", turn_index=np.int64(3))  # type: ignore[arg-type]
    add_facts(app_conn, "np", [fact], HashEmbedder())
    with scoped(app_conn, "np"):
        assert app_conn.execute("SELECT thread_id, turn_index FROM pgmem.fact").fetchall() == [("t1", 3)]


def test_two_calls_adding_the_same_facts_in_other_orders_do_not_deadlock(app_url: str) -> None:
    """add_facts inserted its facts in the call's order, each waiting on the unique key for one
    another call had just inserted: two calls adding the same facts in two orders (the same
    extraction run twice at once) deadlocked (40P01 in 11 of 20 rounds of 200 facts; here 6 rounds of 400). They are
    inserted by content hash now; the ids still come back in the call's order."""
    import threading

    from pgvector.psycopg import register_vector

    from tests.security_helpers import hash_vector

    scope, rounds, n = "fact-orders", 6, 400
    vector = hash_vector("one vector for every fact")
    barrier = threading.Barrier(2)
    errors: list[str] = []
    returned: list[tuple[list[str], list[int]]] = []

    def add(reverse: bool) -> None:
        with psycopg.connect(app_url, autocommit=True) as c:
            register_vector(c)
            for k in range(rounds):
                bodies = [f"round {k}: fact {i}" for i in range(n)][:: -1 if reverse else 1]
                vectors = [vector] * n
                barrier.wait()
                try:
                    with c.transaction():
                        c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
                        rows = c.execute(
                            "SELECT * FROM pgmem.add_facts(%s, 'test:hash', %s, %b::vector[])", (scope, bodies, vectors)
                        ).fetchall()
                    returned.append((bodies, [int(str(r[0])) for r in rows]))
                except psycopg.Error as exc:
                    errors.append(f"{exc.sqlstate}: {exc}")

    workers = [threading.Thread(target=add, args=(reverse,)) for reverse in (False, True)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    with psycopg.connect(app_url, autocommit=True) as c, c.transaction():
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        assert c.execute("SELECT count(*) FROM pgmem.fact").fetchone() == (rounds * n,)
        body = {int(str(i)): str(b) for i, b in c.execute("SELECT fact_id, body FROM pgmem.fact").fetchall()}
    # Each call's ids are those of the facts it stored, ascending, in the order it gave them.
    assert sum(len(ids) for _, ids in returned) == rounds * n
    for bodies, ids in returned:
        assert ids == sorted(ids) and [body[i] for i in ids] == [b for b in bodies if b in {body[i] for i in ids}]


def test_another_models_facts_are_refused_without_sending_the_caller_to_reembed(app_conn: Conn) -> None:
    # pgmem reembed moves a scope's pieces, not its facts: after it, a fact write or recall with
    # the new model was refused with a hint to run pgmem reembed, which changes nothing (rt74).
    from pgmem.errors import ModelRefusedError

    add_facts(app_conn, "fm", [Fact("The user's dog is called Rex.")], HashEmbedder())
    other = HashEmbedder(model_id="test:other")
    for call in (
        lambda: add_facts(app_conn, "fm", [Fact("The user moved to Lisbon.")], other),
        lambda: fact_recall(app_conn, "fm", "dog", other),
    ):
        with pytest.raises(ModelRefusedError, match="stores fact vectors from model test:hash") as err:
            call()
        assert err.value.hint and "reembed --to" not in err.value.hint
        assert "not its facts, which keep the model they were stored with" in err.value.hint
    assert _count(app_conn, "fm") == 1


def test_a_thread_gone_while_add_facts_locked_its_threads_is_no_deadlock(app_url: str, admin_conn: Conn) -> None:
    """add_facts inserted its threads as a set, then locked them; a thread forgotten in between
    was inserted again while the call held a later thread it had created, which another
    add_facts, having created the forgotten thread meanwhile, waited for: a deadlock (40P01,
    rt74). One thread at a time now, inserted then locked, in key order."""
    import threading
    import time

    from pgvector.psycopg import register_vector

    from tests.security_helpers import hash_vector

    scope, vec = "fact-gone-thread", hash_vector("a fact")
    add_sql = "SELECT pgmem.add_facts(%s, 'test:hash', %s, %s::vector[], %s)"

    def app() -> Conn:
        c = psycopg.connect(app_url, autocommit=True)
        register_vector(c)
        return c

    def add(c: Conn, threads: list[str], errors: list[str]) -> None:
        try:
            with c.transaction(), scoped(c, scope):
                c.execute(add_sql, (scope, [f"fact on {t}" for t in threads], [vec] * len(threads), threads)).fetchall()
        except psycopg.Error as exc:
            errors.append(f"{exc.sqlstate}: {exc}")

    def blocked(c: Conn) -> None:
        until_waiting(admin_conn, c.info.backend_pid)

    setup, a, b = app(), app(), app()
    holder = psycopg.connect(admin_conn.info.dsn, password=admin_conn.info.password)
    errors: list[str] = []
    try:
        add(setup, ["tb", "td"], errors)
        # The first thread held: call A inserts its new thread tf, then waits to lock tb.
        holder.execute("SELECT 1 FROM pgmem.thread WHERE scope_id = %s AND thread_id = 'tb' FOR UPDATE", (scope,))
        first = threading.Thread(target=add, args=(a, ["tb", "td", "tf"], errors))
        first.start()
        blocked(a)
        # td forgotten before A locks it; call B creates it again, then waits for A's tf.
        with setup.transaction(), scoped(setup, scope):
            setup.execute("SELECT * FROM pgmem.forget_thread(%s, 'td')", (scope,))
        second = threading.Thread(target=add, args=(b, ["td", "tf"], errors))
        second.start()
        time.sleep(0.2)
        holder.rollback()  # A goes on: td is gone for it, so it inserts it again
        first.join(10)
        second.join(10)
    finally:
        holder.close()
        for c in (setup, a, b):
            c.close()
    assert errors == []
    with scoped(admin_conn, scope):
        rows = admin_conn.execute("SELECT thread_id, body FROM pgmem.fact WHERE scope_id = %s ORDER BY 1, 2", (scope,))
        assert {r[0] for r in rows.fetchall()} == {"tb", "td", "tf"}


def test_a_fact_body_or_section_over_8000_bytes_is_refused_and_nothing_of_the_call_stored(
    app_conn: Conn, admin_conn: Conn
) -> None:
    """add_facts stored a body of 10 MB and a section of 100 kB (the client embedded the whole
    body first). Either over 8,000 bytes (UTF-8) is one 22023 naming the entry now, in SQL and in
    Python (before anything is embedded), and nothing of the call is stored; 8,000 bytes are taken."""
    from tests.security_helpers import hash_vector

    embedder = HashEmbedder()
    assert len(add_facts(app_conn, "big", [Fact("kept")], embedder)) == 1
    edge = "\U0001f600" * 2000  # 8,000 bytes in 2,000 characters
    call = "SELECT count(*) FROM pgmem.add_facts('big', 'test:hash', %s, %s::vector[], sections => %s)"
    vecs = [hash_vector("a"), hash_vector("b")]
    for bodies, sections, words in [
        (["ok", "x" * 1_000_000], None, r"bodies\[2\] is 1000000 bytes; at most 8,000"),
        (["ok", edge + "x"], None, r"bodies\[2\] is 8001 bytes; at most 8,000"),
        (["ok", "fine"], [None, "s" * 100_000], r"sections\[2\] is 100000 bytes; at most 8,000"),
    ]:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=words), scoped(app_conn, "big"):
            app_conn.execute(call, (bodies, vecs, sections))
        app_conn.rollback()
    with scoped(app_conn, "big"):
        assert app_conn.execute(call, ([edge, "fine"], vecs, [edge, None])).fetchone() == (2,)
    for fact, words in [
        (Fact("x" * 10_000_000), r"facts\[1\]: body is 10,000,000 bytes; at most 8,000"),
        (Fact("fine", section="s" * 100_000), r"facts\[1\]: section is 100,000 bytes; at most 8,000"),
    ]:
        with pytest.raises(InputError, match=words):
            add_facts(app_conn, "big", [Fact("not stored"), fact], embedder)
    assert embedder.calls == 1
    with scoped(app_conn, "big"):
        assert app_conn.execute("SELECT body FROM pgmem.fact ORDER BY fact_id").fetchall() == [
            ("kept",),
            (edge,),
            ("fine",),
        ]


def test_an_empty_or_blank_section_is_no_section(app_conn: Conn, admin_conn: Conn) -> None:
    """section "" and section None were stored as two facts (two rows where a user meant one).
    An empty or blank section is none now (stored NULL, in SQL), so either writes one fact, again
    and again (a row stored before 0118 with section '' stays apart)."""
    from tests.security_helpers import hash_vector

    embedder = HashEmbedder()
    assert len(add_facts(app_conn, "sec", [Fact("a", section=""), Fact("a")], embedder)) == 1
    assert add_facts(app_conn, "sec", [Fact("a", section=" \t"), Fact("a", section="")], embedder) == []
    call = "SELECT count(*) FROM pgmem.add_facts('sec', 'test:hash', %s, %s::vector[], sections => %s)"
    with scoped(app_conn, "sec"):
        assert app_conn.execute(call, (["a", "b", "b"], [hash_vector("a")] * 3, ["", "\u3000", None])).fetchone() == (
            1,
        )
        rows = app_conn.execute("SELECT body, section FROM pgmem.fact ORDER BY body").fetchall()
    assert rows == [("a", None), ("b", None)]
    # A row stored with section '' before the rule (0118) stays apart: a write of the same fact
    # stores it with no section beside it (looked up on every call, such rows cost a scan).
    admin_conn.execute(
        "UPDATE pgmem.fact SET section = '', content_hash = pgmem._fact_hash(thread_id, turn_index, '', body)"
        " WHERE scope_id = 'sec' AND body = 'b'"
    )
    assert len(add_facts(app_conn, "sec", [Fact("b"), Fact("b", section="")], embedder)) == 1
    # Recall shows a fact of no section with no label; a section is still a section.
    assert len(add_facts(app_conn, "sec", [Fact("a", section="guide.md")], embedder)) == 1
    hits = fact_recall(app_conn, "sec", "a", embedder, floor=-1.0, x=10).groups[0].hits
    assert sorted((h.body, h.label) for h in hits) == [
        ("a", ""),
        ("a", "guide.md"),
        ("b", ""),
        ("b", ""),
    ]  # the old row too
