"""The word side's sample moves into its fold's head (issue 26): pgmem.refresh_word_fold stores
the lexemes in more than 3 of a set's first 1,000 pieces with the fold (word_fold_head.sample, a
JSON object from lexeme to count, stored uncompressed), and the word side reads them whenever the
head exists (which already holds while no piece up to its last id is deleted and no lower id
commits later) and looks each word up by key, instead of checking a separate stored sample
against the set's first pieces on every hybrid recall (pgmem._word_sample_valid) and unnesting it
whole. pgmem.word_sample, refresh_word_sample and the plan's 'sample' rows go: one maintenance
call a set. pgmem._word_postings is planned once a connection scope-wide (with each call's values
in a thread, as before).

Table changes are sql/incremental/022_word_sample_in_fold.sql (existing heads get their samples);
the functions are sql/idempotent/030_recall.sql and 060_indexes.sql.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-05
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/022_word_sample_in_fold.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/022_word_sample_in_fold.sql")
    # pgmem.word_sample as 0026 created it, empty.
    apply(op, "incremental/019_word_sample.sql")
