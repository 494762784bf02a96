"""Each piece's words as one text of lexemes (issue 26): a stripped tsvector keeps a 4-byte entry
beside every lexeme, and nothing reads a tsvector operator; the word index's keys, the sample's
counts and a thread's words all unnest the lexemes. The same lexemes, so the same pieces are
found and scored, in a word side about a sixth smaller.

Table changes are sql/incremental/020_piece_word_lexemes.sql: writes to pgmem.piece wait from its
start (SHARE ROW EXCLUSIVE), pgmem.piece_word is rewritten and its word index rebuilt (ACCESS
EXCLUSIVE on it: the word side of recall waits too; docs/operations.md's lock table). The rule
for new pieces (pgmem.piece_lexemes) and the readers are sql/idempotent (020_ingest.sql,
030_recall.sql), applied in this revision's transaction.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/020_piece_word_lexemes.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/020_piece_word_lexemes.sql")
