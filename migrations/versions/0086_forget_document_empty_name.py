"""forget_document of the empty name forgets no fact: it matched every section starting with '#' (functions only).

pgmem._document_fact took a fact to be about a document when its section was the id, or the id
followed by '#' and an anchor. The empty name is no document's id (the table's check: 1 to 1,000
characters), yet forget_document(scope, '') and remove_document(scope, ''), called through SQL
(Python's check_name refuses the name first), deleted every fact of the scope whose section
started with '#' or was empty. Found reading _document_fact while probing the names forget_document
takes; tests/test_forget_document_names.py replays it (before: 3 of 5 facts deleted, after: none).

Only re-runnable definitions change (sql/idempotent/070_forget.sql).

Revision ID: 0086
Revises: 0085
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0086"
down_revision = "0085"
upgrade, downgrade = functions_only(revision)
