"""forget_document (and remove_document) of a name no document can have forgets no fact.

A fact is about a document when its section is the document's id, or id#anchor
(pgmem._document_fact). A document id is 1 to 1,000 characters (the table's check): the empty
name names no document, yet as a prefix it matched every section starting with '#' (the empty
id followed by '#'), and as an id every empty section, so a forget of the document '' called
through the SQL API (a service in another language; Python's check_name refuses it first)
deleted those facts of the scope. Run as the application login."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from pgmem.facts import Fact, add_facts
from tests.security_helpers import HashEmbedder

Conn = psycopg.Connection[tuple[object, ...]]
EMB = HashEmbedder()


def _sections(admin: Conn, scope: str) -> list[str]:
    rows = admin.execute(
        "SELECT section FROM pgmem.fact WHERE scope_id = %s AND section IS NOT NULL ORDER BY 1", (scope,)
    ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize("call", ["forget_document", "remove_document"])
def test_a_forget_of_the_empty_document_name_keeps_the_facts_whose_section_starts_with_a_hash(
    conn: Conn, admin_conn: Conn, call: str
) -> None:
    """Facts with sections '#setup', '#' and '' (an anchor of no document, an empty section) and
    one about guide.md. Forgetting the document '' (no document can have that id) forgets
    nothing: before the fix it deleted the first three (their sections are '' or '' + '#...')."""
    scope = f"doc-names-{uuid.uuid4().hex[:8]}"
    facts = [
        Fact("the setup anchor", section="#setup"),
        Fact("a bare hash", section="#"),
        Fact("of the guide", section="guide.md"),
        Fact("no section at all"),
    ]
    assert len(add_facts(conn, scope, facts, EMB)) == 4
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        conn.execute(
            "SELECT * FROM pgmem.add_facts(%s, %s, ARRAY['an empty section'], ARRAY[%s::vector],"
            " sections => ARRAY[''])",
            (scope, EMB.model_id, EMB.embed(["an empty section"])[0].tolist()),
        )
    # add_facts stores an empty section as none (0118): the '' a row stored before kept, made here.
    admin_conn.execute(
        "UPDATE pgmem.fact SET section = '', content_hash = pgmem._fact_hash(thread_id, turn_index, '', body)"
        " WHERE scope_id = %s AND body = 'an empty section'",
        (scope,),
    )
    before = _sections(admin_conn, scope)
    assert before == ["", "#", "#setup", "guide.md"]
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        if call == "forget_document":
            row = conn.execute("SELECT facts, documents FROM pgmem.forget_document(%s, '')", (scope,)).fetchone()
            assert row == (0, 0)
        else:
            row = conn.execute("SELECT pgmem.remove_document(%s, '')", (scope,)).fetchone()
            assert row == (False,)
    assert _sections(admin_conn, scope) == before
    assert admin_conn.execute("SELECT count(*) FROM pgmem.fact WHERE scope_id = %s", (scope,)).fetchone() == (5,)


@pytest.mark.parametrize("call", ["forget_document", "remove_document"])
def test_a_forget_of_a_document_the_scope_lacks_keeps_the_facts_of_the_shorter_id_it_extends(
    conn: Conn, admin_conn: Conn, call: str
) -> None:
    """The scope holds guide.md and not guide.md#v2. A fact whose section is 'guide.md#v2' or
    'guide.md#v2#intro' is about guide.md then (the longest id of the scope's documents that the
    section names: pgmem._document_fact's rule, an anchor 'v2' of guide.md), as forgetting guide.md
    shows. Forgetting the document guide.md#v2, which the scope does not hold, must not take them:
    it took the id as a prefix and deleted both, leaving guide.md stored without its facts
    (through Python and SQL alike: the id is a valid name)."""
    from pgmem import forget_document
    from pgmem.documents.store import Document, add_documents, remove_document

    scope = f"doc-names-{uuid.uuid4().hex[:8]}"
    add_documents(conn, scope, [Document("guide.md", "# Guide\n\nthe guide")], EMB)
    facts = [
        Fact("of guide", section="guide.md"),
        Fact("of guide's v2 anchor", section="guide.md#v2"),
        Fact("of guide's v2#intro anchor", section="guide.md#v2#intro"),
    ]
    assert len(add_facts(conn, scope, facts, EMB)) == 3
    before = _sections(admin_conn, scope)
    if call == "forget_document":
        done = forget_document(conn, scope, "guide.md#v2")
        assert (done.documents, done.facts) == (0, 0)
    else:
        assert remove_document(conn, scope, "guide.md#v2") is False
    assert _sections(admin_conn, scope) == before
    # They are guide.md's: its forget takes them.
    done = forget_document(conn, scope, "guide.md")
    assert (done.documents, done.facts) == (1, 3)
    assert _sections(admin_conn, scope) == []


def test_a_forget_of_an_id_no_document_has_still_takes_the_facts_no_stored_document_claims(
    conn: Conn, admin_conn: Conn
) -> None:
    """Facts may name a document before it is stored (or with none stored): forgetting that id
    takes them, anchors included, while no stored document claims them; a fact of another,
    stored document (notes.md#x is notes.md's) is left."""
    from pgmem import forget_document
    from pgmem.documents.store import Document, add_documents

    scope = f"doc-names-{uuid.uuid4().hex[:8]}"
    add_documents(conn, scope, [Document("notes.md", "# Notes\n\nsome notes")], EMB)
    facts = [
        Fact("of the plan", section="plan.md"),
        Fact("of the plan's step", section="plan.md#step"),
        Fact("of the plan's step#two", section="plan.md#step#two"),
        Fact("of notes' anchor", section="notes.md#x"),
    ]
    assert len(add_facts(conn, scope, facts, EMB)) == 4
    done = forget_document(conn, scope, "plan.md")
    assert (done.documents, done.facts) == (0, 3)
    assert _sections(admin_conn, scope) == ["notes.md#x"]
    done = forget_document(conn, scope, "plan.md#step")
    assert (done.documents, done.facts) == (0, 0)
    assert _sections(admin_conn, scope) == ["notes.md#x"]


def test_a_forget_of_an_id_between_two_stored_ids_takes_neither_ones_facts(conn: Conn, admin_conn: Conn) -> None:
    """Stored: a.md and a.md#b#c; not a.md#b. A fact 'a.md#b#c#d' is a.md#b#c's (the longest
    stored id it names), 'a.md#b#x' is a.md's: forgetting a.md#b takes neither; forgetting each
    stored document takes its own."""
    from pgmem import forget_document
    from pgmem.documents.store import Document, add_documents

    scope = f"doc-names-{uuid.uuid4().hex[:8]}"
    add_documents(conn, scope, [Document("a.md", "# A\n\na"), Document("a.md#b#c", "# C\n\nc")], EMB)
    facts = [Fact("of c's anchor d", section="a.md#b#c#d"), Fact("of a's anchor b#x", section="a.md#b#x")]
    assert len(add_facts(conn, scope, facts, EMB)) == 2
    assert forget_document(conn, scope, "a.md#b").facts == 0
    assert _sections(admin_conn, scope) == ["a.md#b#c#d", "a.md#b#x"]
    assert forget_document(conn, scope, "a.md").facts == 1
    assert _sections(admin_conn, scope) == ["a.md#b#c#d"]
    assert forget_document(conn, scope, "a.md#b#c").facts == 1
    assert _sections(admin_conn, scope) == []


def test_remove_document_of_an_id_the_scope_lacks_removes_nothing_and_says_so(
    conn: Conn, admin_conn: Conn, app_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """remove_document (`pgmem docs rm`) removes a stored document. Of an id the scope holds no
    document of, it returned False and the CLI said "no document" (exit 1), yet it had deleted
    the facts whose section names the id, a conversation's among them (a thread's fact, and the
    thread row with its last fact): rows gone while the answer said nothing was there. Now it
    removes nothing and says so; `pgmem forget document` is what forgets facts about an id no
    document has (they may name a document before it is stored), and its counts say so."""
    from pgmem import forget_document
    from pgmem.cli import main
    from pgmem.documents.store import remove_document

    scope = f"doc-names-{uuid.uuid4().hex[:8]}"
    facts = [
        Fact("the plan ships on Friday", section="plan.md"),
        Fact("the plan's first step", section="plan.md#step-1", thread="chat", turn_index=0),
    ]
    assert len(add_facts(conn, scope, facts, EMB)) == 2
    threads = "SELECT count(*) FROM pgmem.thread WHERE scope_id = %s"
    assert admin_conn.execute(threads, (scope,)).fetchone() == (1,)
    assert remove_document(conn, scope, "plan.md") is False
    assert _sections(admin_conn, scope) == ["plan.md", "plan.md#step-1"]
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        assert conn.execute("SELECT pgmem.remove_document(%s, 'plan.md')", (scope,)).fetchone() == (False,)
    monkeypatch.setenv("DATABASE_URL", app_url)
    assert main(["docs", "rm", "plan.md", "--scope", scope]) == 1
    err = capsys.readouterr().err
    assert f"no document 'plan.md' in scope {scope!r}: nothing removed" in err, err
    assert _sections(admin_conn, scope) == ["plan.md", "plan.md#step-1"]
    assert admin_conn.execute(threads, (scope,)).fetchone() == (1,)
    # The forget of the id takes them, and counts them.
    done = forget_document(conn, scope, "plan.md")
    assert (done.documents, done.facts, done.threads) == (0, 2, 1)
    assert _sections(admin_conn, scope) == []
