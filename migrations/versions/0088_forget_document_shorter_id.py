"""forget_document of an id the scope lacks keeps the facts of a shorter stored id (functions only).

pgmem._document_fact took a fact to be about a document when its section was the id or id#anchor,
unless the scope held a longer id (one holding '#') that the section named. A fact whose section
names a shorter id the scope holds is that document's (its anchor), yet with 'guide.md' stored and
'guide.md#v2' not, forget_document(scope, 'guide.md#v2') and remove_document deleted the facts
'guide.md#v2' and 'guide.md#v2#intro', leaving guide.md stored without them, through Python and SQL
alike. Found probing the names forget_document takes after 0086; tests/test_forget_document_names.py
replays it (before: 2 of guide.md's 3 facts deleted, after: none; forgetting guide.md takes all 3).

Only re-runnable definitions change (sql/idempotent/070_forget.sql).

Revision ID: 0088
Revises: 0087
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0088"
down_revision = "0087"
upgrade, downgrade = functions_only(revision)
