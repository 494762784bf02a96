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
