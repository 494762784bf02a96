"""The word index in its own table (issue 26): pgmem.piece_word holds each piece's words and the
GIN index keyed by scope, with row-level security enabled but not forced, so the word side
(pgmem._word_postings, SECURITY DEFINER) reads the index for every role. On pgmem.piece, under
row-level security, no GIN operator (none is leakproof) could use it: as a login of pgmem_app
each word read the scope's every piece.

Table changes are sql/incremental/017_piece_words.sql: writes to pgmem.piece wait from its start
(SHARE ROW EXCLUSIVE: no piece may be written while the words are copied), the new table is
filled from pgmem.piece, its indexes built, then the old index and the tsv column dropped
(ACCESS EXCLUSIVE on pgmem.piece from there to commit; the drop is a catalog change, no rewrite;
docs/operations.md's lock table). The trigger that writes every new piece's words
(pgmem._piece_words) is sql/idempotent/020_ingest.sql, the reader (pgmem._word_postings)
030_recall.sql; both are applied in this revision's transaction.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/017_piece_words.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/017_piece_words.sql")
