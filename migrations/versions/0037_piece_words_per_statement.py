"""A piece's words written once a statement (issue 26): the trigger piece_words_on_insert runs
pgmem._piece_words once for each insert into pgmem.piece, with the statement's new pieces as a
transition table, and writes their pgmem.piece_word rows in one insert. Once a row, each piece cost
a PL/pgSQL call and an insert of its own. Side by side on copies of the 100k bench store
(python -m pgmem.lab.bench.write_ab, docs/bench/write-ab-0037.txt, three runs), database side:
one put_turns call of 400 turns 1.10-1.27 times as fast, put_turn 1.11-1.15; the same rows.

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
