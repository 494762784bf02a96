"""A piece's words written once a statement (issue 26): the trigger piece_words_on_insert runs
pgmem._piece_words once for each insert into pgmem.piece, with the statement's new pieces as a
transition table, and writes their pgmem.piece_word rows in one insert. Once a row, each piece cost
a PL/pgSQL call and an insert of its own: a bulk put_turns of 400 turns (2,400 pieces) spent
about 60 us more a piece (docs/bench/write-ab-0037.txt). The same rows.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql: the trigger and its function);
no table changes. Replacing the trigger takes SHARE ROW EXCLUSIVE on pgmem.piece, as every run of
the re-runnable set does.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0037"
down_revision = "0036"
upgrade, downgrade = functions_only(revision)
