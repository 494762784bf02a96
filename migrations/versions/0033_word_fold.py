"""The word side's postings, folded (issue 26): scope-wide, hybrid recall and document search
read each word's pieces from one row a lexeme (pgmem.word_fold) instead of one heap row a piece
through the word index, while the fold still holds every piece of the scope up to its last id;
the pieces written since are read directly. Index maintenance folds them (a row of
pgmem.scope_index_plan, running pgmem.refresh_word_fold); a forget of a folded piece deletes
the fold (trigger piece_word_fold_on_delete). The same words and pieces either way.

Table changes are sql/incremental/021_word_fold.sql (two new tables); the functions and the
trigger are sql/idempotent/030_recall.sql and 060_indexes.sql (the plan's row), applied in this
revision's transaction.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-05
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/021_word_fold.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/021_word_fold.sql")
