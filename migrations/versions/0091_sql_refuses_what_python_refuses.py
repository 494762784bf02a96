"""The SQL write functions refuse what Python refuses before calling them (functions only).

pgmem.put_turn, called directly by a service in another language (docs/sql.md), took turns
Python's check_messages and check_name refuse: a blank (whitespace-only) thread, a message that
is no object or has no string role, content a number, tool_calls of another shape, a message or
metadata nested more than 64 levels, a number beyond the largest double. Such a turn could not be
read back by Python: a rebuild reported it failed, or (nested thousands deep, a number of 5,000
digits) crashed reading the scope. pgmem.put_item took what PgmemStore refuses first: a key over
1,000 characters (a 23514 of the table), a value nested deeper than 64 levels or holding such a
number (every read of the item failed), a blank thread. And a blank name elsewhere: a fact's
thread (add_facts), a document id (put_document; a too long one was a 23514 of the table), a
scope created or written by put_turns, add_facts, put_document, bind_scope_model, open_scope,
put_item, set_retention or log_recall. Each is refused now with a 22023 of one line; put_turns
reports it for the turn (pgmem._turn_problem). The whitespace rule is one function
(pgmem._blank), which add_facts' body check uses too. Stored rows are not touched and no table
constraint is added: rows stored before stay readable through SQL and can be forgotten (the
forget functions and the reads take any name). tests/test_sql_write_rules.py.

Only re-runnable definitions change (sql/idempotent: 005_scope, 010_vectors, 020_ingest,
030_recall, 040_documents, 075_retention, 080_store). Python's check_messages, check_metadata and
PgmemStore's check_value refuse a number beyond the largest double too (it was stored, as an int).

Revision ID: 0091
Revises: 0090
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0091"
down_revision = "0090"
upgrade, downgrade = functions_only(revision)
