"""The word side's sample, stored (issue 26): the counts of the lexemes of a scope's first 1,000
pieces, which the word side of hybrid recall and document search took most of its time to
count on small scopes. Index maintenance stores them (a row of pgmem.scope_index_plan, running
pgmem.refresh_word_sample); the word side reads them while they are still those pieces', and
counts them itself otherwise, so the words searched are the same either way.

Table changes are sql/incremental/019_word_sample.sql (a new table); the functions are
sql/idempotent/030_recall.sql (the sample, its refresh and its check) and 060_indexes.sql (the
plan's row), applied in this revision's transaction.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-04
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/019_word_sample.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/019_word_sample.sql")
