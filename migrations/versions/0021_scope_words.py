"""The word index keyed by scope (issue 26): piece_scope_words_idx on pgmem.scope_words(scope_no,
kind, tsv) replaces piece_tsv_idx, so a word search reads only its own scope's postings.

Table changes are sql/incremental/014_scope_words.sql. The index is built in the migration's
transaction (a SHARE lock on pgmem.piece: writes wait, reads go on; about 23 s for 120,000
pieces here), then the old index is dropped (ACCESS EXCLUSIVE from there to commit: reads wait
that short while; docs/operations.md's lock table). The functions reading it are sql/idempotent/030_recall.sql.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/014_scope_words.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/014_scope_words.sql")
